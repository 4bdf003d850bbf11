"""One cache location for the CLI and the server, bounded caches, `kernelopt cache info|clear` (issue 19)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelopt_mcp.cli import main
from kernelopt_mcp.config import Settings
from kernelopt_mcp.evaluation.outcomes import EvaluationResult, Status
from kernelopt_mcp.server import build_parser as server_parser
from kernelopt_mcp.server import config_from_args
from kernelopt_mcp.service import KerneloptService
from kernelopt_mcp.torch_baseline import CACHE_DIR
from kernelopt_mcp.tune.cache import TuneCache

REPO = Path(__file__).resolve().parents[2]


def test_the_cache_location_is_kernelopt_cache_else_xdg_else_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert Settings.from_env({}).cache_root() == tmp_path / "home" / ".cache" / "kernelopt"
    assert Settings.from_env({"XDG_CACHE_HOME": str(tmp_path / "xdg")}).cache_root() == tmp_path / "xdg" / "kernelopt"
    assert Settings.from_env({"XDG_CACHE_HOME": "relative"}).cache_root() == tmp_path / "home" / ".cache" / "kernelopt"
    assert Settings.from_env({"XDG_CACHE_HOME": str(tmp_path / "xdg"),
                              "KERNELOPT_CACHE": str(tmp_path / "k")}).cache_root() == tmp_path / "k"


def test_cli_and_server_share_the_compile_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("KERNELOPT_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    # the CLI caches compiles without KERNELOPT_CACHE being set
    assert main(["compile", str(REPO / "workloads/vector_add/initial.cu"), "--arch", "sm_90", "--json"]) == 0
    assert not json.loads(capsys.readouterr().out)["cache_hit"]
    assert len(list((tmp_path / "xdg" / "kernelopt" / "compile").glob("*.cubin"))) == 1
    # ... and the server's cache is the same directory, not one in its workspace
    args = server_parser().parse_args(["--workspace", str(tmp_path / "ws")])
    config = config_from_args(args, {"XDG_CACHE_HOME": str(tmp_path / "xdg"), "HOME": str(tmp_path / "home")})
    service = KerneloptService(config)
    assert service.state.compile_cache.directory == tmp_path / "xdg" / "kernelopt" / "compile"


def _result(i: int) -> EvaluationResult:
    return EvaluationResult(status=Status.ok, message="x" * 200, workload="w", candidate=f"c{i}", seed=1, arch="sm_90")


def test_the_tune_cache_is_bounded_and_keeps_the_newest(tmp_path: Path) -> None:
    cache = TuneCache(tmp_path, max_bytes=20_000)
    for i in range(200):
        cache.put(f"key{i}", {}, {"BM": i}, _result(i))
    path = tmp_path / "tune.jsonl"
    assert path.stat().st_size <= 20_000 and cache.evicted > 0
    again = TuneCache(tmp_path, max_bytes=20_000)
    assert again.get("key199") is not None and again.get("key0") is None
    assert 0 < len(again) < 200


def test_cache_info_and_clear(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "c"
    monkeypatch.setenv("KERNELOPT_CACHE", str(root))
    assert main(["compile", str(REPO / "workloads/vector_add/initial.cu"), "--arch", "sm_90", "--json"]) == 0
    TuneCache(root / "tune").put("k", {}, {"BM": 1}, _result(1))
    (root / "docs").mkdir()
    (root / "docs" / "page-1.json").write_text("{}")
    (root / CACHE_DIR).mkdir()
    (root / CACHE_DIR / "0123.json").write_text("{}")
    (root / "unrelated.txt").write_text("not a cache")
    capsys.readouterr()
    assert main(["cache", "info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    kinds = {k["kind"]: k for k in info["kinds"]}
    assert info["location"] == str(root)
    assert kinds["compile"]["entries"] == 1 and kinds["compile"]["bytes"] > 1000
    assert kinds["tune"]["entries"] == 1 and kinds["docs"]["entries"] == 1 and kinds["calibration"]["entries"] == 0
    assert kinds[CACHE_DIR]["entries"] == 1  # the PyTorch baselines' cache is one of the kinds
    assert main(["cache", "clear", "tune"]) == 0
    assert "cleared tune: 1 entries" in capsys.readouterr().out
    assert not (root / "tune").exists() and (root / "compile").is_dir()
    assert main(["cache", "clear"]) == 0
    assert not (root / "compile").exists() and not (root / "docs").exists() and not (root / CACHE_DIR).exists()
    assert (root / "unrelated.txt").is_file()  # only the caches' own folders go
    assert main(["cache", "info"]) == 0
    assert str(root) in " ".join(capsys.readouterr().out.split())
    with pytest.raises(SystemExit):
        main(["cache", "clear", "everything"])
