"""Diagnostic for the GPU machine: can a second process (driver API only, as the harness)
open a CUDA IPC handle of a torch tensor on this machine, read it and write it?"""
import json
import subprocess
import sys
import time

CHILD = r'''
import sys, json
from cuda.bindings import driver as d
handle, offset, n = bytes.fromhex(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
def ok(r, what):
    err, *rest = r if isinstance(r, tuple) else (r,)
    if err != d.CUresult.CUDA_SUCCESS: raise SystemExit(f"{what}: {d.cuGetErrorName(err)[1]}")
    return rest[0] if len(rest) == 1 else rest
ok(d.cuInit(0), "cuInit"); dev = ok(d.cuDeviceGet(0), "dev"); ctx = ok(d.cuDevicePrimaryCtxRetain(dev), "ctx"); ok(d.cuCtxSetCurrent(ctx), "set")
h = d.CUipcMemHandle(); h.reserved = handle
base = ok(d.cuIpcOpenMemHandle(h, d.CUipcMem_flags.CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), "cuIpcOpenMemHandle")
import numpy as np
buf = np.empty(n, np.float32)
ok(d.cuMemcpyDtoH(buf.ctypes.data, int(base) + offset, n * 4), "DtoH")
out = np.arange(n, dtype=np.float32) * 2
ok(d.cuMemcpyHtoD(int(base) + offset, out.ctypes.data, n * 4), "HtoD")
ok(d.cuCtxSynchronize(), "sync")
ok(d.cuIpcCloseMemHandle(base), "close")
print(json.dumps({"read_ok": bool((buf == np.arange(n, dtype=np.float32)).all()), "first": float(buf[1])}))
'''  # noqa: E501

import torch

n = 1 << 20
x = torch.arange(n, dtype=torch.float32, device="cuda")
y = torch.empty(17, device="cuda")  # another block of the same segment: offsets matter
z = torch.arange(n, dtype=torch.float32, device="cuda")
torch.cuda.synchronize()
info = {}
for name, t in (("x", x), ("z", z)):
    share = t.untyped_storage()._share_cuda_()
    handle, offset = share[1], share[3]
    info[name + "_handle_head"] = share[1][:4].hex() + f" len {len(share[1])}"
    handle = handle[-64:]  # torch prefixes its handle (66 bytes on the H200): the driver handle is the last 64
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", CHILD, handle.hex(), str(offset), str(n)], capture_output=True,
                       text=True, timeout=120)
    torch.cuda.synchronize()
    info[name] = {"rc": r.returncode, "out": r.stdout.strip()[-300:], "err": r.stderr.strip()[-300:], "offset": offset,
                  "written_back": bool((t == torch.arange(n, dtype=torch.float32, device="cuda") * 2).all().item()),
                  "s": round(time.perf_counter() - t0, 3)}
print(json.dumps(info))
