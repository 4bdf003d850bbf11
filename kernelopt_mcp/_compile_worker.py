"""The NVRTC compile worker: a child process that compiles one program per request.

Run by :mod:`kernelopt_mcp.compile_pool` as ``python .../_compile_worker.py --memory-mb N``
(by path, so starting it imports only the standard library and cuda-python, ~0.3 s). It caps
its own address space first (``RLIMIT_AS``), so a compile that tries to use more memory fails
here, not in the server; the parent enforces the wall-time limit by killing it.

Protocol, one JSON object per line on stdin/stdout:

    request  {"source": str, "filename": str, "options": [str, ...]}
    answer   {"ok": bool, "log": str, "cubin": base64 | null, "ptx": str | null,
              "duration_ms": float}
          or {"failure": str}   NVRTC itself failed (out of memory, a bad call)

The worker exits at EOF on stdin. It imports nothing from kernelopt (standard library only).
"""

from __future__ import annotations

import argparse
import base64
import json
import resource
import sys
import time
from typing import Any


def _limit_memory(megabytes: int) -> None:
    if megabytes > 0:
        limit = megabytes * 2**20
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--memory-mb", type=int, default=0, help="address-space limit in MiB (0: none)")
    args = parser.parse_args(argv)
    # imported before the limit: loading the library is not the compile
    from cuda.bindings import nvrtc

    nvrtc.nvrtcVersion()
    _limit_memory(args.memory_mb)
    out = sys.stdout
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            answer = compile_one(nvrtc, json.loads(line))
        except MemoryError:
            answer = {"failure": "the compile ran out of memory (MemoryError in the worker)"}
        except Exception as exc:  # noqa: BLE001 - a malformed request or an NVRTC binding error: answer, keep serving
            answer = {"failure": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(answer) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
