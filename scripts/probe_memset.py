"""Diagnostic for the GPU machine: what one timed launch's preparation costs the GPU (issue 44's
overhead). Times, with CUDA events, the poison of an output buffer as the harness writes it
(cuMemsetD8Async) against the same bytes written as 32-bit words (cuMemsetD32Async, the byte
replicated), and a plain device-to-device copy of the same size as the bandwidth yardstick.
Prints one line per way: size, median microseconds of 20, GB/s."""

import statistics
import sys

from cuda.bindings import driver as cu


def check(result: tuple) -> object:
    err, *rest = result
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA error {err}")
    return rest[0] if len(rest) == 1 else rest


def ways(a: object, b: object, n: int, stream: object) -> dict[str, object]:
    """The three ways of writing n bytes at a (b: a copy's source), each one call on the stream."""
    return {
        "memset D8": lambda: check(cu.cuMemsetD8Async(a, 0xA5, n, stream)),
        "memset D32": lambda: check(cu.cuMemsetD32Async(a, 0xA5A5A5A5, n // 4, stream)),
        "copy DtoD": lambda: check(cu.cuMemcpyDtoDAsync(a, b, n, stream)),
    }


def main() -> None:
    check(cu.cuInit(0))
    ctx = check(cu.cuDevicePrimaryCtxRetain(check(cu.cuDeviceGet(0))))
    check(cu.cuCtxSetCurrent(ctx))
    stream = check(cu.cuStreamCreate(0))
    start, stop = check(cu.cuEventCreate(0)), check(cu.cuEventCreate(0))
    for mib in [int(a) for a in sys.argv[1:]] or [16, 128, 512]:
        n = mib << 20
        a, b = check(cu.cuMemAlloc(n)), check(cu.cuMemAlloc(n))
        for name, op in ways(a, b, n, stream).items():
            times = []
            for _ in range(23):
                check(cu.cuEventRecord(start, stream))
                op()
                check(cu.cuEventRecord(stop, stream))
                check(cu.cuEventSynchronize(stop))
                times.append(check(cu.cuEventElapsedTime(start, stop)) * 1000)
            us = statistics.median(times[3:])
            moved = n * (2 if name.startswith("copy") else 1)
            print(f"{mib:5d} MiB  {name:11s} {us:9.1f} us  {moved / us / 1e3:7.1f} GB/s", flush=True)
        check(cu.cuMemFree(a))
        check(cu.cuMemFree(b))


if __name__ == "__main__":
    main()
