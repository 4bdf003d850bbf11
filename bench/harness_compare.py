"""Speed of the harness's device-side compare (needs a GPU).

Prints, per output dtype and size, the compare kernel's time (`compare_ms` of the harness's
answer) and the bandwidth it reaches over the bytes it must read (output + float64 expected),
as a fraction of the device's theoretical DRAM bandwidth. Target: a 64 MB float32 output
against 128 MB of float64 expected values well under 1 ms on an H200.

    PYTHONPATH=. python bench/harness_compare.py [--harness build/h/kernelopt-harness]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import numpy as np

from kernelopt_mcp.compiler import compile_kernel
from kernelopt_mcp.dtypes import DType
from kernelopt_mcp.evaluation.compare import thresholds
from kernelopt_mcp.evaluation.device import device_info
from kernelopt_mcp.evaluation.harness import HarnessProcess, find_harness
from kernelopt_mcp.evaluation.protocol import HarnessAnswer
from kernelopt_mcp.evaluation.support_module import support_module
from kernelopt_mcp.workload import DEFAULT_TOLERANCE, EXACT

COPY = r"""
extern "C" __global__ void copy_bytes(const unsigned char* in, unsigned char* out, unsigned long long n) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x)
        out[i] = in[i];
}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--harness", default=None)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    binary = find_harness(args.harness)
    dev = device_info(binary, 0)
    peak = dev.peak_memory_bandwidth_bytes_per_s or float("nan")
    with tempfile.TemporaryDirectory() as tmp_name, HarnessProcess(binary, 0) as proc:
        tmp = Path(tmp_name)
        compiled = compile_kernel(COPY, dev.arch)
        (tmp / "copy.cubin").write_bytes(compiled.cubin or b"")
        support = support_module(dev.arch, tmp)
        print(f"{dev.name}: theoretical DRAM bandwidth {peak / 1e9:.0f} GB/s")
        print(f"{'dtype':>9} {'elements':>10} {'MB read':>8} {'compare_ms':>10} {'GB/s':>7} {'of peak':>7}")
        for dtype, elements in [(DType.float32, 1 << 24), (DType.float16, 1 << 24), (DType.float64, 1 << 24),
                                (DType.float32, 1 << 20)]:
            expected = np.random.default_rng(0).standard_normal(elements)
            actual = expected.astype(dtype.numpy)
            (tmp / "in.bin").write_bytes(actual.tobytes())
            (tmp / "expected.bin").write_bytes(expected.astype("<f8").tobytes())
            tol = DEFAULT_TOLERANCE.get(dtype, EXACT)
            nbytes = elements * dtype.itemsize
            request = {
                "protocol": 2, "module": str(tmp / "copy.cubin"), "entry": "copy_bytes", "support_module": str(support),
                "input_cache": True, "flush_l2": False,
                "cases": [{"name": "c", "launch": {"grid": [2048, 1, 1], "block": [256, 1, 1]}, "args": [
                    {"kind": "buffer", "name": "in", "role": "in", "bytes": nbytes, "input": str(tmp / "in.bin")},
                    {"kind": "buffer", "name": "out", "role": "out", "bytes": nbytes, "output": str(tmp / "out.bin"),
                     "dtype": dtype.value, "expected": str(tmp / "expected.bin"),
                     "compare": thresholds(expected, tol).harness_compare(tol.rtol)},
                    {"kind": "scalar", "name": "n", "dtype": "uint64", "raw": nbytes.to_bytes(8, "little").hex()},
                ]}],
            }
            times = []
            for _ in range(args.repeats):
                reply = proc.request(request, timeout_s=120)
                answer = reply.parsed(HarnessAnswer)
                if answer is None or not answer.cases:
                    raise SystemExit(f"no case in the answer: {reply.answer} {reply.stderr[-500:]}")
                [c] = answer.cases[0].compares
                assert c.mismatches == 0 and c.compare_ms is not None, c
                times.append(c.compare_ms)
            ms = statistics.median(times)
            read = nbytes + 8 * elements
            rate = read / (ms * 1e-3)
            print(f"{dtype.value:>9} {elements:>10} {read / 1e6:>8.0f} {ms:>10.4f} {rate / 1e9:>7.0f} "
                  f"{rate / peak:>7.2f}")


if __name__ == "__main__":
    main()
