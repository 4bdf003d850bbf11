"""torch_fill's key derivation and fill arguments, on the CPU: SipHash-2-4 gives the reference
vectors of its paper, ``draw_key`` gives what native_harness/src/draw_key.hpp gives (compiled
here with the C++ compiler), and the fill arguments follow the harness's parse of ``fresh``.
The fill itself needs a GPU: tests/gpu/test_torch_fill_gpu.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from kernelopt_mcp.evaluation.protocol import FreshSpec
from kernelopt_mcp.torch_fill import FILL_KINDS, FillArgs, draw_key, fill_args, siphash24

REPO = Path(__file__).resolve().parents[2]
KEY = bytes(range(16))
#: SipHash-2-4 of bytes(range(n)) under the key 00 01 .. 0f (the paper's Appendix A and its
#: reference implementation's vectors.h), as little-endian 64-bit words
VECTORS = {0: 0x726FDB47DD0E0E31, 1: 0x74F839C593DC67FD, 7: 0xAB0200F58B01D137, 8: 0x93F5F5799A932462,
           15: 0xA129CA6149BE45E5}


@pytest.mark.parametrize("n", sorted(VECTORS))
def test_siphash_reference_vectors(n: int) -> None:
    k0, k1 = int.from_bytes(KEY[:8], "little"), int.from_bytes(KEY[8:], "little")
    assert siphash24(k0, k1, bytes(range(n))) == VECTORS[n]


@pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler")
def test_draw_key_is_the_harness_draw_key(tmp_path: Path) -> None:
    cases = [(0, 0, 0), (1, 0, 0), (0x9E3779B97F4A7C15, 3, 7), (2**64 - 1, 2**40 + 5, 2**32 - 1), (12345, 99, 2)]
    program = tmp_path / "keys.cpp"
    program.write_text(
        '#include <cstdio>\n#include "draw_key.hpp"\nint main() {\n'
        + "".join(f'  std::printf("%llu\\n", (unsigned long long)kernelopt::draw_key({s}ull, {d}ull, {b}u));\n'
                  for s, d, b in cases)
        + "}\n"
    )
    binary = tmp_path / "keys"
    subprocess.run(["g++", "-std=c++17", "-I", str(REPO / "native_harness" / "src"), str(program), "-o", str(binary)],
                   check=True, timeout=120)
    theirs = [int(line)
              for line in subprocess.run([str(binary)], check=True, capture_output=True, text=True).stdout.split()]
    assert [draw_key(s, d, b) for s, d, b in cases] == theirs
    assert len(set(theirs)) == len(theirs)


def test_fill_arguments_follow_the_harness() -> None:
    assert fill_args(FreshSpec(kind="uniform", low=-1, high=2)) == FillArgs(FILL_KINDS["uniform"], a=-1.0, b=2.0)
    assert fill_args(FreshSpec(kind="normal", mean=0.5, std=3)) == FillArgs(FILL_KINDS["normal"], a=0.5, b=3.0)
    assert fill_args(FreshSpec(kind="randint", low=-5, high=10)) == FillArgs(FILL_KINDS["randint"], low=-5, range=15)
    # high is exclusive: the widest int64 range holds 2^64 - 1 values
    widest = fill_args(FreshSpec(kind="randint", low=-(2**63), high=2**63 - 1))
    assert widest.range == 2**64 - 1
    for bad in (FreshSpec(kind="randint", low=3, high=3), FreshSpec(kind="normal", mean=0, std=-1),
                FreshSpec(kind="uniform", low=0)):
        with pytest.raises(ValueError):
            fill_args(bad)
