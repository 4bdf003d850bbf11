"""The harness's support kernels (kernelopt_mcp/support/*.cu) compile with NVRTC and export the
kernels native_harness looks up by name, with the parameter lists it launches them with."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelopt_mcp import compiler
from kernelopt_mcp.compiler import CompileCache, compile_kernel
from kernelopt_mcp.dtypes import DType
from kernelopt_mcp.evaluation.support_module import support_module, support_source


@pytest.fixture(scope="module")
def entries() -> dict[str, list[int]]:
    result = compile_kernel(support_source(), "sm_90", ["-std=c++17"], filename="kernelopt_support.cu")
    assert result.ok, result.summary()
    return {name: [p.size_bytes for p in params] for name, params in result.entries.items()}


@pytest.mark.parametrize("dtype", list(DType))
def test_a_compare_kernel_for_every_protocol_dtype(entries: dict[str, list[int]], dtype: DType) -> None:
    # (actual, expected, n, abs_tol, rtol, rel_floor, result): native_harness/src/support.cpp
    assert entries[f"ko_compare_{dtype.value}"] == [8] * 7


def test_bitwise_diff_kernel(entries: dict[str, list[int]]) -> None:
    # (a, b, n, result)
    assert entries["ko_bitwise_diff"] == [8] * 4


def test_support_module_is_a_cached_cubin(tmp_path: Path) -> None:
    path = support_module("sm_90", tmp_path)
    assert path.read_bytes()[:4] == b"\x7fELF"
    mtime = path.stat().st_mtime_ns
    assert support_module("sm_90", tmp_path) == path and path.stat().st_mtime_ns == mtime
    assert support_module("sm_80", tmp_path) != path


def test_a_new_session_takes_the_support_module_from_the_disk_compile_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each session writes the module into its own temporary directory; with the settings' disk
    compile cache the second one (another process: a new CompileCache on the same directory)
    copies it from there instead of compiling the ~40 kernels again."""
    first = support_module("sm_90", tmp_path / "session1", cache=CompileCache(tmp_path / "compile"))

    def no_compile(*args: object, **kwargs: object) -> None:
        raise AssertionError("compiled again: the disk cache was not used")

    monkeypatch.setattr(compiler, "default_pool", no_compile)
    second = support_module("sm_90", tmp_path / "session2", cache=CompileCache(tmp_path / "compile"))
    assert second != first and second.read_bytes() == first.read_bytes()
    with pytest.raises(AssertionError, match="compiled again"):  # the guard itself works
        support_module("sm_90", tmp_path / "session3", cache=CompileCache(tmp_path / "elsewhere"))


@pytest.mark.parametrize("dtype", list(DType))
def test_a_reference_compare_kernel_for_every_dtype(entries: dict[str, list[int]], dtype: DType) -> None:
    # (actual, reference, n, abs_tol, rtol, rel_floor, result): the checked timed launches
    assert entries[f"ko_compare_ref_{dtype.value}"] == [8] * 7


@pytest.mark.parametrize("dtype", list(DType))
def test_a_sum_of_squares_kernel_for_every_dtype(entries: dict[str, list[int]], dtype: DType) -> None:
    # (data, n, partials): the figures of an output kept on the device (native_harness/src/kept.cpp)
    assert entries[f"ko_sum_sq_{dtype.value}"] == [8] * 3


@pytest.mark.parametrize("dtype", list(DType))
def test_a_fill_kernel_for_every_dtype(entries: dict[str, list[int]], dtype: DType) -> None:
    # (out, n, seed, launch, buffer u32, kind u32, a, b, low, range): native_harness/src/fresh.cpp
    assert entries[f"ko_fill_{dtype.value}"] == [8, 8, 8, 8, 4, 4, 8, 8, 8, 8]
