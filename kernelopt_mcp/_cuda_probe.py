"""Does the CUDA driver start in a confined GPU child here? Run by
:func:`kernelopt_mcp.confined_python.gpu_child_own_uid` as the module of a confined child (``gpu``),
once under a uid of its own and, only where that fails, as root: prints one JSON line,
``{"init": cuInit's result, "devices": n}`` (``"init": null`` where no driver library loads).
Standard library only; nothing of a client's runs here."""

from __future__ import annotations

import ctypes
import json


def main() -> None:
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        print(json.dumps({"init": None, "devices": 0}))
        return
    init = int(cuda.cuInit(0))
    count = ctypes.c_int(0)
    if init == 0:
        cuda.cuDeviceGetCount(ctypes.byref(count))
    print(json.dumps({"init": init, "devices": count.value}))


if __name__ == "__main__":
    main()
