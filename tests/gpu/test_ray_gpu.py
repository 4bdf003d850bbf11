"""Scale-out on the one-GPU machine: `kernelopt tune` of the same small sgemm space, the same seed,
three ways: today's path, `--devices 0` and `--ray auto` on a local Ray instance with the one GPU
(an actor with its own harness on it). All three validate every configuration and agree on the
best within timing noise; the Ray run names its actor's device.

Needs Ray in this interpreter (`pip install ".[ray]"`; on the device machine the slimmed wheel
from scripts/slim_ray_wheel.py in .whl-ray/: scripts/device_issue40.sh ray).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakegpu import local_ray
from test_tune_gpu import small_space

from kernelopt_mcp.cli import main
from kernelopt_mcp.config import Settings, find_workload

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(900)]



@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A local Ray instance with this machine's one GPU; actors import this code (the checkout
    first on PYTHONPATH, as the CPU tests do)."""
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install '.[ray]')")
    with local_ray(ray, num_gpus=1) as address:
        yield address


def test_devices_and_ray_find_the_best_configuration_todays_path_finds(
    cluster: str, harness_binary: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, space = small_space(find_workload("sgemm", Settings()), tmp_path / "space")
    results = {}
    for name, extra in (("today", []), ("devices", ["--devices", "0"]), ("ray", ["--ray", "auto"])):
        monkeypatch.setenv("KERNELOPT_CACHE", str(tmp_path / f"cache-{name}"))  # each measures everything itself
        argv = ["tune", "sgemm", str(space), "--strategy", "exhaustive", "--time-all", "--warmup", "5", "--iterations",
                "30", "--timeout", "120", "--seed", "7", "--harness", str(harness_binary), "-o", str(tmp_path / name),
                "--json", *extra]
        assert main(argv) == 0, name
        out = capsys.readouterr().out
        results[name], _ = json.JSONDecoder().raw_decode(out[out.index("{"):])  # Ray may print a line of its own
    today = results["today"]
    scores = {name: {json.dumps(r["params"], sort_keys=True): r["score_ms"] for r in res["table"] if r.get("score_ms")}
              for name, res in results.items()}
    for name, res in results.items():
        assert (res["counts"]["measured"] == today["counts"]["measured"]
                and res["counts"]["ok"] == today["counts"]["ok"]), name
        best = json.dumps(res["best_params"], sort_keys=True)
        # the same best, or one within 5% of it by today's own measurement (two tiles can tie on a GPU)
        assert (best in scores["today"]
                and scores["today"][best] <= 1.05 * min(scores["today"].values())), (name, res["best_params"])
    assert any(d.startswith("ray ") for d in results["ray"]["devices"]), results["ray"]["devices"]
    print(json.dumps({name: {"best": res["best_params"], "devices": res["devices"],
                             "per_minute": res["evals_per_min_per_device"]}
                      for name, res in results.items()}, indent=1))
