"""tests/conftest.py skips by the `gpu` / `ncu` markers, not by keywords: a parametrize id that
happens to be "gpu" is a keyword too, and such a CPU test was silently skipped (and made
--run-gpu demand a device)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

# tests/conftest.py by its path: under xdist `import conftest` may find another conftest module
_SPEC = importlib.util.spec_from_file_location("ko_tests_conftest", Path(__file__).parents[1] / "conftest.py")
assert _SPEC is not None and _SPEC.loader is not None
conftest = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(conftest)


class _Item:
    """What the hook reads of a collected test: its keywords and markers."""

    def __init__(self, keywords: set[str], markers: set[str]) -> None:
        self.keywords = dict.fromkeys(keywords, 1)
        self.markers = set(markers)

    def get_closest_marker(self, name: str) -> Any:
        return name if name in self.markers else None

    def add_marker(self, marker: Any) -> None:
        self.markers.add(marker.name)


class _Config:
    def getoption(self, name: str) -> bool:
        assert name == "--run-gpu"
        return False


def test_a_cpu_test_with_a_gpu_parameter_id_runs_and_a_marked_one_is_skipped() -> None:
    cpu = _Item({"test_x[gpu]", "gpu", "test_conftest_markers.py"}, set())
    gpu = _Item({"test_y", "gpu"}, {"gpu"})
    ncu = _Item({"test_z"}, {"ncu"})
    conftest.pytest_collection_modifyitems(_Config(), [cpu, gpu, ncu])  # type: ignore[arg-type]
    assert "skip" not in cpu.markers
    assert "skip" in gpu.markers and "skip" in ncu.markers


@pytest.mark.parametrize("where", ["gpu"])
def test_the_id_gpu_is_collected_and_run(where: str, request: pytest.FixtureRequest) -> None:
    """The real thing: this test's id is "gpu" and it is not marked to skip."""
    assert where == "gpu" and "gpu" in request.node.keywords and request.node.get_closest_marker("skip") is None
