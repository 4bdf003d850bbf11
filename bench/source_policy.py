"""The include scanner's cost grows linearly with the source (issue 13, item 4).

    python bench/source_policy.py

A 512 KiB source of 43,600 ``#include<a>`` lines took 5.7 s of server CPU when the line of each
directive was found by counting newlines from the start (quadratic). This prints the time per
directive at 1,000 and 43,600 directives and their ratio (~1 when linear; it was ~40).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kernelopt_mcp.source_policy import include_problem


def per_directive_us(n: int, repeats: int = 3) -> float:
    source = "#include<a>\n" * n
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        include_problem(source)
        best = min(best, time.perf_counter() - start)
    return best / n * 1e6


def main() -> int:
    small, large = per_directive_us(1_000), per_directive_us(43_600)
    print(f"1,000 directives:  {small:.2f} us each")
    print(f"43,600 directives: {large:.2f} us each ({large * 43_600 / 1e6:.3f} s in all)")
    ratio = large / small
    print(f"ratio {ratio:.2f} (linear ~1; the quadratic scan was ~40): {'PASS' if ratio < 3 else 'FAIL'}")
    return 0 if ratio < 3 else 1


if __name__ == "__main__":
    sys.exit(main())
