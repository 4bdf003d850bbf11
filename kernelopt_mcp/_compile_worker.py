"""The NVRTC compile worker: a child process that compiles one program per request.

Run by :mod:`kernelopt_mcp.compile_pool` as ``python .../_compile_worker.py --memory-mb N ...``
(by path, with an EMPTY environment, so starting it imports only the standard library and
cuda-python, ~0.3 s). Before it reads any request it

1. loads NVRTC (the library path and the directories holding cuda-python come as arguments:
   nothing is taken from the environment) and compiles a tiny kernel, so that everything NVRTC
   loads lazily (libnvrtc-builtins, ptxas's pieces) is in memory;
2. confines itself with Landlock (``--confine landlock``, :mod:`sandbox`): from then on it can
   read only the ``--read`` directories (the CUDA headers) and NVRTC's own library files (also
   mappable as code), and write only its working directory (an empty scratch directory); no TCP, no signals out.
   ``--confine none`` (only when the user accepted an unconfined compiler) skips this;
3. caps how much memory a compile may add to what it holds after the warm-up (``RLIMIT_DATA``,
   and ``RLIMIT_AS`` as a backstop), so a compile that tries to use more fails here, not in the
   server; the parent enforces the wall-time limit by killing it;
4. answers ``{"ready": true, "confinement": "landlock abi 7" | "unconfined (accepted)"}``, or
   ``{"failure": str}`` and exits 3 when it could not confine itself as asked.

Protocol, one JSON object per line on stdin/stdout:

    request  {"source": str, "filename": str, "options": [str, ...]}
    answer   {"ok": bool, "log": str, "cubin": base64 | null, "ptx": str | null,
              "duration_ms": float}
          or {"failure": str}   NVRTC itself failed (out of memory, a bad call)

The worker exits at EOF on stdin. It imports nothing from kernelopt but ``sandbox.py`` (standard
library only), loaded by path.
"""

from __future__ import annotations

import argparse
import base64
import ctypes
import importlib.util
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

WARM_UP_SOURCE = 'extern "C" __global__ void kernelopt_warm_up(float* x) { x[threadIdx.x] = 1.0f; }\n'
WARM_UP_OPTIONS = ["--gpu-architecture=sm_90", "-std=c++17", "-lineinfo", "-Xptxas=-v"]


def _limit_memory(megabytes: int, base_kib: dict[str, int]) -> None:
    """Let the compiles grow this process by at most ``megabytes`` from ``base_kib``.

    Measured from what the process already holds, not from zero: on some machines NVRTC
    reserves ~13 GB of address space when it loads (the H200 machine: VmSize 13 GB, VmRSS
    100 MB after a trivial compile), so an absolute RLIMIT_AS of 8 GiB failed every compile
    with "out of memory". RLIMIT_DATA bounds the private writable memory a compile allocates
    (what a compile bomb grows); RLIMIT_AS stays as a backstop above the reservations.
    """
    if megabytes <= 0:
        return
    extra = megabytes * 2**20
    for limit_kind, field in ((resource.RLIMIT_DATA, "VmData"), (resource.RLIMIT_AS, "VmSize")):
        limit = base_kib.get(field, 0) * 1024 + extra
        _, hard = resource.getrlimit(limit_kind)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(limit_kind, (limit, hard))


def _bytes(nvrtc: Any, prog: Any, kind: str) -> bytes:
    _, size = getattr(nvrtc, f"nvrtcGet{kind}Size")(prog)
    buf = b" " * size
    getattr(nvrtc, f"nvrtcGet{kind}")(prog, buf)
    return bytes(buf)


def compile_one(nvrtc: Any, request: dict[str, Any]) -> dict[str, Any]:
    """Compile ``request["source"]`` with NVRTC; the answer as documented above."""
    options = [o.encode() for o in request["options"]]
    start = time.perf_counter()
    err, prog = nvrtc.nvrtcCreateProgram(request["source"].encode(), request["filename"].encode(), 0, [], [])
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        return {"failure": f"nvrtcCreateProgram failed: {err}"}
    try:
        (code,) = nvrtc.nvrtcCompileProgram(prog, len(options), options)
        if code == nvrtc.nvrtcResult.NVRTC_ERROR_OUT_OF_MEMORY:
            return {"failure": "NVRTC ran out of memory (NVRTC_ERROR_OUT_OF_MEMORY)"}
        log = _bytes(nvrtc, prog, "ProgramLog").rstrip(b"\0").decode(errors="replace")
        ok = code == nvrtc.nvrtcResult.NVRTC_SUCCESS
        cubin = ptx = None
        if ok:
            cubin = base64.b64encode(_bytes(nvrtc, prog, "CUBIN")).decode()
            ptx = _bytes(nvrtc, prog, "PTX").rstrip(b"\0").decode()
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    duration_ms = (time.perf_counter() - start) * 1000
    return {"ok": ok, "log": log, "cubin": cubin, "ptx": ptx, "duration_ms": duration_ms}


def _load_sandbox() -> Any:
    path = Path(__file__).with_name("sandbox.py")
    spec = importlib.util.spec_from_file_location("kernelopt_sandbox", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _say(answer: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--memory-mb", type=int, default=0, help="address-space limit in MiB (0: none)")
    parser.add_argument("--confine", choices=("landlock", "none"), default="landlock")
    parser.add_argument("--read", action="append", default=[], help="a directory NVRTC may read (the -I directories)")
    parser.add_argument("--python-path", action="append", default=[], help="a directory holding cuda-python")
    parser.add_argument("--nvrtc-lib", default=None, help="the NVRTC shared library to load")
    args = parser.parse_args(argv)
    # the script's own directory is the package: nothing there is imported by name
    if sys.path and sys.path[0] == str(Path(__file__).parent):
        sys.path.pop(0)
    sys.path.extend(p for p in args.python_path if p not in sys.path)
    sandbox = _load_sandbox()
    lib_dirs = []
    if args.nvrtc_lib:  # loaded by path: cuda-python finds it already loaded, no search needed
        ctypes.CDLL(args.nvrtc_lib)
        lib_dirs.append(str(Path(args.nvrtc_lib).resolve().parent))
    # imported and warmed up before the sandbox and the limit: loading NVRTC is not the compile
    from cuda.bindings import nvrtc

    _, major, minor = nvrtc.nvrtcVersion()
    for lib_dir in lib_dirs:  # what cuda.pathfinder preloads; NVRTC's own lookup needs the environment
        builtins = Path(lib_dir, f"libnvrtc-builtins.so.{major}.{minor}")
        if builtins.exists():
            ctypes.CDLL(str(builtins))
    warm = compile_one(nvrtc, {"source": WARM_UP_SOURCE, "filename": "warm_up.cu", "options": WARM_UP_OPTIONS})
    if not warm.get("ok"):
        _say({"failure": f"NVRTC cannot compile a trivial kernel: {warm.get('failure') or warm.get('log')}"})
        return 3
    base_kib = sandbox.vm_kib()  # before the sandbox: /proc is closed to the worker after it
    if args.confine == "none":
        confinement = "unconfined (accepted)"
    else:
        # NVRTC's own files stay readable (and mappable): a piece loaded lazily is NVIDIA's code
        lib_files = sorted(str(p) for d in lib_dirs for p in Path(d).glob("libnvrtc*"))
        try:
            done = sandbox.restrict(read=args.read, write=[os.getcwd()], execute=lib_files)
        except OSError as exc:
            _say({"failure": f"the compile worker could not confine itself with Landlock: {exc}", "unconfined": True})
            return 3
        confinement = done.describe()
    _limit_memory(args.memory_mb, base_kib)
    _say({"ready": True, "confinement": confinement})
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            answer = compile_one(nvrtc, json.loads(line))
        except MemoryError:
            answer = {"failure": "the compile ran out of memory (MemoryError in the worker)"}
        except Exception as exc:  # noqa: BLE001 - a malformed request or an NVRTC binding error: answer, keep serving
            answer = {"failure": f"{type(exc).__name__}: {exc}"}
        _say(answer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
