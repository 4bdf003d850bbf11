"""Diagnostic for the GPU machine: how much must be read to flush L2? The harness reads a scratch
buffer of twice the L2 before every warm-up and measured launch (Session::flush_l2, ~32 us on the
H200, 110 times per timed case under the count rule); nvbench flushes with one L2's worth. This
times a read of 3/4 of the L2 (it fits) right after reading k L2s of other memory, for k from 0 to
4: where the time stops rising, the read before it evicted everything the kernel could find.
PyTorch does the reads (`sum`, a streaming read like ko_flush_l2), CUDA events time them.

    python scripts/probe_flush.py [launches]      # default 200 per size
"""

import statistics
import sys

import torch


def main() -> None:
    launches = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    props = torch.cuda.get_device_properties(0)
    l2 = props.L2_cache_size
    x = torch.rand(int(0.75 * l2) // 4, device="cuda")
    factors = (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0)
    scratch = torch.rand(int(4 * l2) // 4, device="cuda")
    times: dict[float, list[float]] = {k: [] for k in factors}
    flush_ms: dict[float, list[float]] = {k: [] for k in factors}
    events = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
    for _ in range(3):
        x.sum()
    for i in range(launches):
        for k in factors if i % 2 == 0 else factors[::-1]:  # both orders, alternating
            words = int(k * l2) // 4
            events[0].record()
            if words:
                scratch[:words].sum()
            events[1].record()
            x.sum()
            events[2].record()
            events[2].synchronize()
            flush_ms[k].append(events[0].elapsed_time(events[1]))
            times[k].append(events[1].elapsed_time(events[2]))
    print(f"{props.name}: L2 {l2 / 2**20:.0f} MiB; a read of {x.numel() * 4 / 2**20:.0f} MiB timed after reading "
          f"k L2s of other memory; medians of {launches}")
    print(f"{'k':>5s} {'flush us':>9s} {'read us':>8s} {'vs k=4':>7s}")
    cold = statistics.median(times[4.0])
    for k in factors:
        med = statistics.median(times[k])
        print(f"{k:5.2f} {1e3 * statistics.median(flush_ms[k]):9.1f} {1e3 * med:8.1f} {med / cold:7.3f}")


if __name__ == "__main__":
    main()
