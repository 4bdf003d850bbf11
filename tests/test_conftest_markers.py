"""tests/conftest.py skips by the `gpu` / `ncu` markers, not by keywords: a parametrize id that
happens to be "gpu" is a keyword too, and such a CPU test was silently skipped."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("where", ["gpu", "cpu"])
def test_a_parameter_id_named_gpu_still_runs(where: str) -> None:
    assert where in ("gpu", "cpu")


def test_the_gpu_id_above_was_not_skipped(request: pytest.FixtureRequest) -> None:
    """Collected beside the test above: its "gpu" case is not marked skip."""
    items = [i for i in request.session.items if i.name == "test_a_parameter_id_named_gpu_still_runs[gpu]"]
    if not items:
        pytest.skip("run alone (-k): the sibling was not collected")
    assert not items[0].get_closest_marker("skip")
