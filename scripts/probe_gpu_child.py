"""Diagnostic for the GPU machine: which part of the confined child breaks CUDA in torch (error 304,
"OS call failed or operation not supported on this OS", seen on the H200 in the timing child)?
Each variant runs in a fresh process: apply one confinement part, then torch.cuda.device_count()
and a small matmul. Prints one JSON line per variant."""
import json
import subprocess
import sys

VARIANT = r'''
import glob, json, os, resource, sys
sys.path.insert(0, os.environ["KO_PKG_PARENT"])
from kernelopt_mcp import sandbox, _confined_child as cc
part = sys.argv[1]
applied = []

def install(prog):  # no_new_privs, then the classic-BPF seccomp program
    import ctypes
    f = (sandbox._SockFilter * len(prog))(*(sandbox._SockFilter(*x) for x in prog))
    fp = sandbox._SockFprog(len(prog), f)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(38, 1, 0, 0, 0)
    assert libc.prctl(22, 2, ctypes.byref(fp), 0, 0) == 0, ctypes.get_errno()
try:
    if part in ("cgroup", "all"):  # the tree's memory bound: a cgroup of its own, entered first (cgroups.make)
        from kernelopt_mcp import cgroups
        group = cgroups.make(mem_mb := os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2 >> 20)
        if isinstance(group, str):
            applied.append(f"no cgroup: {group}")
        else:
            group.enter()
            applied.append(f"{group.describe()} at {group.path}")
    if part in ("tasks", "all"):  # RLIMIT_NPROC, for root under a uid of its own with root's file access only
        applied.append(sandbox.limit_tasks(512))
    if part.startswith("landlock") or part == "all":
        # landlock_abi4: no ioctl-on-device right and no scoping handled; _rootread: every file readable;
        # _shm: /dev/shm writable; _rootwrite: everything writable (only the scoping and TCP rules left)
        if part == "landlock_abi4":
            sandbox.landlock_abi = lambda: 4
        if part == "landlock_abi5":
            sandbox.landlock_abi = lambda: 5
        read = [*cc._installation(), *sandbox.mapped_library_dirs(), *cc.SYSTEM_READ, *cc.GPU_READ, os.environ["KO_PKG_PARENT"]]
        write = ["/dev/null", "/tmp", *sorted(glob.glob(cc.GPU_DEVICE_FILES))]
        if part == "landlock_rootread":
            read.append("/")
        if part == "landlock_shm":
            write.append("/dev/shm")
        if part == "landlock_rootwrite":
            write.append("/")
        done = sandbox.restrict(read=read, write=write, execute=[], list_only=[])
        applied.append(done.describe())
    if part in ("seccomp", "all"):
        applied.append(sandbox.restrict_syscalls())
    if part.startswith("ll:"):  # ll:r=/,w=/dev/shm,x=/usr: the base read/write lists plus these
        read = [*cc._installation(), *sandbox.mapped_library_dirs(), *cc.SYSTEM_READ, *cc.GPU_READ, os.environ["KO_PKG_PARENT"]]
        write = ["/dev/null", "/tmp", *sorted(glob.glob(cc.GPU_DEVICE_FILES))]
        execute = []
        for token in part[3:].split(","):
            if token == "@libcuda":  # mapped before confining: its directory joins the mapped ones
                import ctypes
                ctypes.CDLL("libcuda.so.1")
                read += sandbox.mapped_library_dirs()
            elif token:
                kind, _, path = token.partition("=")
                {"r": read, "w": write, "x": execute}[kind].append(path)
        done = sandbox.restrict(read=read, write=write, execute=execute, list_only=[])
        applied.append(done.describe() + " " + part)
    if part.startswith("sock:"):  # sock:allow=1 (AF_UNIX allowed, others EPERM) or sock:errno=13 (every socket that errno)
        import ctypes, errno as E
        how, _, value = part[5:].partition("=")
        err = int(value) if how == "errno" else E.EPERM
        prog = [(0x20, 0, 0, 0), (0x15, 0, 3, 41)]  # nr == socket? else allow
        if how == "allow":
            prog += [(0x20, 0, 0, 16), (0x15, 1, 0, int(value))]  # args[0] == family: allow
        else:
            prog += [(0x05, 0, 0, 0), (0x05, 0, 0, 0)]  # two no-op jumps keep the offsets
        prog += [(0x06, 0, 0, 0x00050000 | err), (0x06, 0, 0, 0x7FFF0000)]
        prog[1] = (0x15, 0, len(prog) - 3, 41)
        install(prog)
        applied.append(part)
    if part.startswith("unix:"):  # unix:42=2,44=1: socket() for AF_UNIX only; each NR=ERRNO denied with that errno
        import ctypes
        denies = [tuple(int(x) for x in t.split("=")) for t in part[5:].split(",") if t]
        prog = [(0x20, 0, 0, 0)]  # ld nr
        for nr, err in denies:
            prog += [(0x15, 0, 1, nr), (0x06, 0, 0, 0x00050000 | err)]
        prog += [(0x15, 0, 3, 41), (0x20, 0, 0, 16), (0x15, 1, 0, 1), (0x06, 0, 0, 0x00050000 | 1), (0x06, 0, 0, 0x7FFF0000)]
        install(prog)
        applied.append(part)
    if part.startswith("bpf_"):  # one rule at a time: which blocked syscall breaks cuInit?
        import ctypes, errno as E
        block = {"bpf_socket": [41], "bpf_socketpair": [53], "bpf_tkill": [200], "bpf_none": []}[part]
        prog = [(0x20, 0, 0, 0)]
        for i, nr in enumerate(block):
            prog.append((0x15, len(block) - i, 0, nr))
        prog += [(0x06, 0, 0, 0x7FFF0000), (0x06, 0, 0, 0x00050000 | E.EPERM)]
        install(prog)
        applied.append(part)
    if part in ("nonewprivs",):
        import ctypes
        ctypes.CDLL(None).prctl(38, 1, 0, 0, 0)
        applied.append("no_new_privs")
    if part in ("rlimits", "all"):
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
        sandbox.set_rlimit(resource.RLIMIT_DATA, mem)
        applied.append(f"RLIMIT_DATA {mem >> 20} MiB")
    import torch
    try:
        import ctypes
        cu = ctypes.CDLL("libcuda.so.1")
        applied.append(f"cuInit={cu.cuInit(0)}")
    except OSError as e:
        applied.append(f"libcuda: {e}")
    n = torch.cuda.device_count()
    x = torch.ones(256, 256, device="cuda")
    ok = float((x @ x).sum().item())
    print(json.dumps({"part": part, "applied": applied, "devices": n, "matmul": ok}))
except BaseException as exc:
    print(json.dumps({"part": part, "applied": applied, "error": f"{type(exc).__name__}: {str(exc)[:400]}"}))
'''  # noqa: E501
import os
from pathlib import Path

import kernelopt_mcp

env = {**os.environ, "KO_PKG_PARENT": str(Path(kernelopt_mcp.__file__).resolve().parents[1])}
PARTS = sys.argv[1:] or ["none", "rlimits", "nonewprivs", "seccomp", "bpf_none", "bpf_socket", "bpf_socketpair",
                         "bpf_tkill", "landlock", "landlock_abi4", "landlock_abi5", "landlock_rootread", "landlock_shm",
                         "landlock_rootwrite", "all"]
for part in PARTS:
    r = subprocess.run([sys.executable, "-c", VARIANT, part], capture_output=True, text=True, timeout=120, env=env)
    print(r.stdout.strip() or json.dumps({"part": part, "rc": r.returncode, "stderr": r.stderr[-600:]}), flush=True)
