"""Finding cuBLAS and the baseline request/answer shapes (CPU only; the GPU run is in tests/gpu)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kernelopt_mcp import baselines
from kernelopt_mcp.baselines import (
    baseline_result,
    cublas_sgemm_request,
    find_cublas,
    run_cublas_sgemm,
)
from kernelopt_mcp.config import Settings
from kernelopt_mcp.errors import HarnessError, ToolchainNotFound
from kernelopt_mcp.evaluation.harness import HarnessReply
from kernelopt_mcp.evaluation.protocol import BaselineAnswer, BaselineRequest, TimingRequest, parse_answer, request_json


@pytest.fixture
def nowhere(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No pip package, no CUDA_HOME, an empty system dir and an empty linker cache."""
    monkeypatch.setattr(baselines, "_pip_lib_dirs", list)
    monkeypatch.setattr(baselines, "_ldconfig_paths", dict)
    system = tmp_path / "system"
    system.mkdir()
    monkeypatch.setattr(baselines, "SYSTEM_CUDA_LIB_DIRS", (system,))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    return system


def _lib(directory: Path, name: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_bytes(b"\x7fELF")
    return directory / name


def test_find_cublas_none_anywhere(nowhere: Path) -> None:
    assert find_cublas() is None


def test_find_cublas_prefers_pip_then_cuda_home_then_system(
    nowhere: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    system_lib = _lib(nowhere, "libcublas.so.12")
    assert find_cublas() == system_lib
    home_lib = _lib(tmp_path / "cuda" / "lib64", "libcublas.so.13")
    cuda_home = Settings.from_env({"CUDA_HOME": str(tmp_path / "cuda")}).cuda_home  # read at the entry point
    assert find_cublas(cuda_home) == home_lib
    assert Settings.from_env({"CUDA_PATH": str(tmp_path / "cuda")}).cuda_home == cuda_home
    pip_lib = _lib(tmp_path / "site" / "nvidia" / "cu13" / "lib", "libcublas.so.13")
    monkeypatch.setattr(baselines, "_pip_lib_dirs", lambda: [pip_lib.parent])
    assert find_cublas(cuda_home) == pip_lib


def test_find_cublas_prefers_13_over_12_in_one_dir(nowhere: Path) -> None:
    _lib(nowhere, "libcublas.so.12")
    thirteen = _lib(nowhere, "libcublas.so.13")
    assert find_cublas() == thirteen


def test_find_cublas_falls_back_to_the_linker_cache(
    nowhere: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    lib = _lib(tmp_path / "ld", "libcublas.so.12")
    monkeypatch.setattr(baselines, "_ldconfig_paths", lambda: {"libcublas.so.12": lib, "libfoo.so.1": tmp_path / "x"})
    assert find_cublas() == lib
    # a stale cache entry (file gone) is not a library
    monkeypatch.setattr(baselines, "_ldconfig_paths", lambda: {"libcublas.so.13": tmp_path / "gone.so"})
    assert find_cublas() is None


def test_ldconfig_output_is_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    class Done:
        stdout = (
            "3 libs found in cache `/etc/ld.so.cache'\n"
            "\tlibcublas.so.12 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcublas.so.12\n"
            "\tlibc.so.6 (libc6,x86-64, OS ABI: Linux 3.2.0) => /lib/x86_64-linux-gnu/libc.so.6\n"
        )

    monkeypatch.setattr(baselines.shutil, "which", lambda name: "/sbin/ldconfig")
    monkeypatch.setattr(baselines.subprocess, "run", lambda *a, **k: Done())
    paths = baselines._ldconfig_paths()
    assert paths["libcublas.so.12"] == Path("/usr/lib/x86_64-linux-gnu/libcublas.so.12")
    assert paths["libc.so.6"] == Path("/lib/x86_64-linux-gnu/libc.so.6")


def test_request_shape(tmp_path: Path) -> None:
    lib = _lib(tmp_path, "libcublas.so.13")
    timing = {"warmup": 5, "iterations": 50, "adaptive": {"target_rse": 0.005}}
    req = cublas_sgemm_request(4096, 2048, 1024, timing, 1, library_path=lib, support_module=tmp_path / "s.cubin")
    assert request_json(req) == {
        "protocol": 2, "op": "baseline", "device": 1, "library": "cublas", "library_path": str(lib),
        "routine": "sgemm", "m": 4096, "n": 2048, "k": 1024, "flush_l2": True, "timing": timing,
        "support_module": str(tmp_path / "s.cubin"),
    }
    default = cublas_sgemm_request(8, 8, 8, library_path=lib, flush_l2=False)
    assert request_json(default)["timing"] == {"warmup": 10, "iterations": 100} and default.flush_l2 is False
    assert "support_module" not in request_json(default)
    # a typed timing object is copied: the request never shares the caller's (nor the default's)
    typed = TimingRequest(iterations=20)
    shared = cublas_sgemm_request(8, 8, 8, typed, library_path=lib)
    assert shared.timing == typed and shared.timing is not typed
    assert request_json(shared)["timing"] == {"iterations": 20}  # warmup omitted: the harness's 0
    default.timing.iterations = 1
    assert request_json(cublas_sgemm_request(8, 8, 8, library_path=lib))["timing"]["iterations"] == 100


def test_request_refuses_a_field_the_protocol_does_not_have(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="warmups"):
        cublas_sgemm_request(8, 8, 8, {"warmups": 5, "iterations": 10}, library_path=tmp_path / "lib.so")


@pytest.mark.parametrize("bad", [0, -4, 2.0, True, "8"])
def test_request_refuses_bad_dimensions(bad: Any, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="k must be a positive integer"):
        cublas_sgemm_request(8, 8, bad, library_path=tmp_path / "lib.so")


def test_request_without_a_library_says_how_to_install(nowhere: Path) -> None:
    with pytest.raises(ToolchainNotFound, match="pip install nvidia-cublas"):
        cublas_sgemm_request(8, 8, 8)


class _Proc:
    """Stands in for a HarnessProcess (the harness needs a GPU to run cuBLAS): one canned reply."""

    device = 0

    def __init__(self, reply: HarnessReply) -> None:
        self.reply = reply
        self.sent: list[BaselineRequest] = []

    def request(self, payload: BaselineRequest, timeout_s: float) -> HarnessReply:
        self.sent.append(payload)
        return self.reply


def _ok_answer(median_ms: float) -> dict[str, Any]:
    return {
        "protocol": 2, "status": "ok", "error": None, "op": "baseline", "library": "cublas", "routine": "sgemm",
        "library_version": 130100, "m": 4096, "n": 4096, "k": 4096, "result_ok": True,
        "timing": {"median_ms": median_ms, "q1_ms": median_ms * 0.99, "q3_ms": median_ms * 1.01,
                   "launch_overhead_ms": 0.002, "times_ms": [median_ms]},
    }


def test_result_tflops_from_the_median(tmp_path: Path) -> None:
    proc = _Proc(HarnessReply(_ok_answer(2.5)))
    result = run_cublas_sgemm(proc, 4096, 4096, 4096, library_path=_lib(tmp_path, "libcublas.so.13"))  # type: ignore[arg-type]
    assert result.tflops == pytest.approx(2 * 4096**3 / 2.5e-3 / 1e12)
    assert result.median_ms == 2.5 and result.library_version == 130100 and result.result_ok is True
    assert result.launch_overhead_ms == 0.002
    assert request_json(proc.sent[0])["op"] == "baseline"
    assert result.timing["median_ms"] == 2.5 and result.timing["times_ms"] == [2.5]  # the harness's timing object
    assert baseline_result(parse_answer(_ok_answer(0.0), BaselineAnswer)).tflops == 0.0


@pytest.mark.parametrize("missing", ["m", "library", "timing"])
def test_an_ok_answer_lacking_a_needed_field_is_a_harness_error_naming_it(tmp_path: Path, missing: str) -> None:
    answer = _ok_answer(2.5)
    del answer[missing]
    with pytest.raises(HarnessError, match=rf"\({missing}: Field required"):
        run_cublas_sgemm(_Proc(HarnessReply(answer, 0)), 8, 8, 8, library_path=_lib(tmp_path, "libcublas.so.13"))  # type: ignore[arg-type]
    no_median = _ok_answer(2.5)
    del no_median["timing"]["median_ms"]
    with pytest.raises(HarnessError, match=r"timing\.median_ms: Field required"):
        run_cublas_sgemm(_Proc(HarnessReply(no_median, 0)), 8, 8, 8, library_path=_lib(tmp_path, "libcublas.so.13"))  # type: ignore[arg-type]


def test_library_unavailable_and_library_error_answers(tmp_path: Path) -> None:
    lib = _lib(tmp_path, "libcublas.so.13")
    missing = {"protocol": 2, "status": "error", "op": "baseline", "timing": None,
               "error": {"kind": "library_unavailable", "message": "/x/libcublas.so.13 could not be loaded"}}
    with pytest.raises(ToolchainNotFound, match="could not be loaded"):
        run_cublas_sgemm(_Proc(HarnessReply(missing, 0)), 8, 8, 8, library_path=lib)  # type: ignore[arg-type]
    failed = dict(missing, error={"kind": "library_error", "message": "cublasSgemm_v2 returned cuBLAS status 7"})
    with pytest.raises(HarnessError, match="library_error: cublasSgemm_v2"):
        run_cublas_sgemm(_Proc(HarnessReply(failed, 0)), 8, 8, 8, library_path=lib)  # type: ignore[arg-type]
    with pytest.raises(HarnessError, match="did not finish within"):
        run_cublas_sgemm(_Proc(HarnessReply(None, None, timed_out=True)), 8, 8, 8, library_path=lib)  # type: ignore[arg-type]
