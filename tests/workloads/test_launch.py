from __future__ import annotations

import pytest

from kernelopt_mcp.errors import LaunchConfigError
from kernelopt_mcp.launch import DeviceLimits, LaunchConfig, LaunchSpec, resolve

LIMITS = DeviceLimits()


def test_expressions_resolve_per_case_and_pad_to_three_dims() -> None:
    cfg = LaunchConfig(grid=["ceil_div(N, 16)", "ceil_div(M, 16)"], block=[16, 16], shared_bytes="16*16*4*2")
    r = resolve(cfg, {"M": 33, "N": 100}, LIMITS, "c")
    assert r.grid == (7, 3, 1) and r.block == (16, 16, 1) and r.shared_bytes == 2048


def test_bare_config_is_the_default_and_cases_override() -> None:
    spec = LaunchSpec.model_validate({"grid": [1], "block": [32]})
    assert spec.for_case("any").block == [32]
    spec = LaunchSpec.model_validate({"default": {"grid": [1], "block": [32]},
                                      "cases": {"big": {"grid": [8], "block": [256]}}})
    assert spec.for_case("big").block == [256]
    assert spec.for_case("small").block == [32]
    with pytest.raises(LaunchConfigError, match="no launch configuration for case 'x'"):
        LaunchSpec.model_validate({"cases": {"y": {"grid": [1], "block": [1]}}}).for_case("x")


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        ({"grid": [1], "block": [2048]}, r"2048 threads; the device allows at most 1024 per block"),
        ({"grid": [1], "block": [32, 32, 2]}, r"2048 threads"),
        ({"grid": [1], "block": [1, 1, 128]}, r"block.z = 128 exceeds the limit 64"),
        ({"grid": [1, 70000], "block": [32]}, r"grid.y = 70000 exceeds the limit 65535"),
        ({"grid": ["n - 10"], "block": [32]}, r"grid.x = -6; every dimension must be >= 1"),
        ({"grid": [1], "block": [32], "shared_bytes": 300000}, r"at most 232448 bytes of dynamic shared memory"),
        ({"grid": ["n / 3"], "block": [32]}, r"not an integer"),
        ({"grid": ["q"], "block": [32]}, r"unknown name 'q'"),
    ],
)
def test_invalid_configs_name_the_limit(cfg: dict, message: str) -> None:
    with pytest.raises(LaunchConfigError, match=message):
        resolve(LaunchConfig.model_validate(cfg), {"n": 4}, LIMITS, "c")


def test_literal_negative_dims_are_rejected_at_parse_time() -> None:
    with pytest.raises(ValueError):
        LaunchConfig.model_validate({"grid": [-1], "block": [32]})
    with pytest.raises(ValueError):
        LaunchConfig.model_validate({"grid": [1], "block": [32], "extra": 1})


def test_sm_count_names_the_devices_multiprocessors() -> None:
    from kernelopt_mcp.launch import DeviceLimits, LaunchConfig, resolve

    config = LaunchConfig.model_validate({"grid": ["min(ceil_div(n, 256), SM_COUNT * 4)"], "block": [256]})
    assert resolve(config, {"n": 1 << 30}, DeviceLimits(sm_count=132), "big").grid == (528, 1, 1)
    assert resolve(config, {"n": 1 << 30}, DeviceLimits(sm_count=8), "big").grid == (32, 1, 1)
    assert resolve(config, {"n": 1000}, DeviceLimits(sm_count=8), "small").grid == (4, 1, 1)
    # a workload scalar of the same name wins
    assert resolve(config, {"n": 1 << 30, "SM_COUNT": 2}, DeviceLimits(sm_count=132), "big").grid == (8, 1, 1)
