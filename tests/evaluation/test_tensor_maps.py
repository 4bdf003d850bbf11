"""TMA tensor maps on the Python side: the launch spec's model, its resolution per case, the
checks before a request (buffer, element type, reach within the buffer, a harness that has the
feature), the request's ``tensor_maps`` and a whole evaluation on the fake harness."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fakegpu import TINY_SPEC, write_harness, write_tiny_workload
from pydantic import ValidationError

from kernelopt_mcp import Candidate, HarnessProcess, LaunchSpec, Session, Settings
from kernelopt_mcp.config import find_workload
from kernelopt_mcp.errors import LaunchConfigError
from kernelopt_mcp.evaluation import build as build_mod
from kernelopt_mcp.evaluation.candidate import EvaluateOptions
from kernelopt_mcp.evaluation.device import device_info
from kernelopt_mcp.evaluation.evaluate import evaluate
from kernelopt_mcp.evaluation.tensor_maps import (
    check_tensor_maps,
    packed_strides,
    reach,
    store_tail_hint,
    tensor_map_requests,
)
from kernelopt_mcp.launch import DeviceLimits, LaunchConfig, ResolvedLaunch, ResolvedTensorMap, TensorMapSpec, resolve
from kernelopt_mcp.tune.spec import substitute_launch
from kernelopt_mcp.workload import Workload

LIMITS = DeviceLimits()

# vector_add with one CUtensorMap per map after the signature's parameters (the fake harness
# computes c = a + b whatever the kernel does; NVRTC checks the parameters)
TMA_KERNEL = """\
struct alignas(64) TensorMap {{ unsigned long long opaque[16]; }};
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n{maps}) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}}
"""


def tma_kernel(maps: int) -> str:
    return TMA_KERNEL.format(maps="".join(f", const __grid_constant__ TensorMap tm{j}" for j in range(maps)))


def launch(*maps: dict[str, Any]) -> LaunchSpec:
    return LaunchSpec.model_validate({"grid": ["ceil_div(n, 256)"], "block": [256], "tensor_maps": list(maps)})


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> Workload:
    return find_workload(write_tiny_workload(tmp_path_factory.mktemp("wl")) / "tiny_add", Settings())


# --- the model ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"buffer": "a", "dims": [64, 64], "box": [64]}, "box has 1 entries but dims has 2"),
        ({"buffer": "a", "dims": [64, 64], "box": [64, 8], "strides": [256, 256]}, "a rank-2 map takes 1"),
        ({"buffer": "a", "dims": [64], "box": [64], "strides": [256]}, "a rank-1 map takes 0"),
        ({"buffer": "a", "dims": [64, 2], "box": [64, 2], "element_strides": [1]}, "element_strides has 1 entries"),
        ({"buffer": "a", "dims": [2] * 6, "box": [2] * 6}, "at most 5 items"),
        ({"buffer": "a", "dims": [], "box": []}, "at least 1 item"),
        ({"buffer": "a", "dims": [64], "box": [0]}, "must be an integer >= 1"),
        ({"buffer": "a", "dims": [64, 64], "box": [64, 1], "strides": [8]}, "must be an integer >= 16"),
        ({"buffer": "a", "dims": ["n +"], "box": [64]}, "n +"),
        ({"buffer": "a", "dims": [64], "box": [64], "swizzle": "256B"}, "'none', '32B', '64B' or '128B'"),
        ({"buffer": "a", "dims": [64], "box": [64], "interleave": "none"}, "Extra inputs are not permitted"),
    ],
)
def test_the_model_refuses_inconsistent_shapes(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message.replace("+", r"\+")):
        TensorMapSpec.model_validate(spec)


def test_a_config_without_maps_dumps_as_before() -> None:
    plain = LaunchConfig.model_validate({"grid": [1], "block": [32]})
    assert plain.model_dump() == {"grid": [1], "block": [32], "shared_bytes": 0}  # cache keys, files
    assert resolve(plain, {}, LIMITS, "c").as_json() == {"grid": [1, 1, 1], "block": [32, 1, 1], "shared_bytes": 0}
    mapped = LaunchConfig.model_validate({"grid": [1], "block": [32],
                                          "tensor_maps": [{"buffer": "a", "dims": [8], "box": [8]}]})
    assert mapped.model_dump()["tensor_maps"][0]["buffer"] == "a"
    # the schema of what is dumped lists the fields (not the serializer's dict)
    assert "tensor_maps" in LaunchSpec.model_json_schema(mode="serialization")["$defs"]["LaunchConfig"]["properties"]


# --- resolving ------------------------------------------------------------------------------


def test_expressions_resolve_with_scalars_tunable_parameters_and_sm_count() -> None:
    config = LaunchConfig.model_validate({"grid": ["SM_COUNT"], "block": [128], "tensor_maps": [
        {"buffer": "A", "dims": ["K", "M"], "box": ["BK", "BM"], "strides": ["round_up(K * 2, 16)"],
         "element_strides": [1, "min(2, SM_COUNT)"], "swizzle": "128B", "l2_promotion": "256B", "oob_fill": "nan"},
    ]})
    r = resolve(config, {"K": 100, "M": 30, "BK": 64, "BM": 16}, DeviceLimits(sm_count=1), "c")
    assert r.tensor_maps == (ResolvedTensorMap("A", (100, 30), (64, 16), (208,), (1, 1), "128B", "256B", "nan"),)
    assert r.as_json()["tensor_maps"] == [{"buffer": "A", "dims": [100, 30], "box": [64, 16], "strides": [208],
                                           "element_strides": [1, 1], "swizzle": "128B", "l2_promotion": "256B",
                                           "oob_fill": "nan"}]


def test_a_tunable_launch_keeps_its_maps_with_the_parameters_substituted() -> None:
    spec = launch({"buffer": "a", "dims": ["n"], "box": ["BOX"], "element_strides": ["STEP"]})
    out = substitute_launch(spec, {"BOX": 128, "STEP": 2})
    assert out.for_case("x").tensor_maps[0].box == [128]
    assert out.for_case("x").tensor_maps[0].element_strides == [2]
    assert out.for_case("x").tensor_maps[0].dims == ["n"]
    assert substitute_launch(LaunchSpec.model_validate({"grid": [1], "block": [1]}), {}).for_case("x").tensor_maps == []


@pytest.mark.parametrize(
    ("tmap", "message"),
    [
        ({"dims": ["n - 8"], "box": [8]},
         r"tensor_maps\[0\] \(over 'a'\): dims\[0\] = 0; each extent must be 1..4294967296"),
        ({"dims": ["n"], "box": [512]}, r"box\[0\] = 512; each box extent must be 1..256"),
        ({"dims": ["n", 2], "box": [8, 2], "strides": ["n * 4 + 8"]},
         r"strides\[0\] = 40 bytes is not a multiple of 16"),
        ({"dims": ["n", 2], "box": [8, 2], "strides": [2**40]}, r"strides\[0\] = 1099511627776; each byte stride"),
        ({"dims": ["n"], "box": [8], "element_strides": [9]},
         r"element_strides\[0\] = 9; each element stride must be 1..8"),
        ({"dims": ["q"], "box": [8]}, r"unknown name 'q'"),
    ],
)
def test_values_are_checked_when_resolved(tmap: dict[str, Any], message: str) -> None:
    config = LaunchConfig.model_validate({"grid": [1], "block": [32], "tensor_maps": [{"buffer": "a", **tmap}]})
    with pytest.raises(LaunchConfigError, match=message):
        resolve(config, {"n": 8}, LIMITS, "c")


# --- the checks that need the signature, and the request --------------------------------------


def _resolved(workload: Workload, case: str, *maps: dict[str, Any]) -> ResolvedLaunch:
    c = workload.spec.case(case)
    return resolve(launch(*maps).for_case(case), c.scalars, LIMITS, case)


def test_the_request_carries_the_dtype_and_explicit_strides(workload: Workload) -> None:
    r = _resolved(workload, "n_4096", {"buffer": "a", "dims": [16, "n // 16"], "box": [16, 8]},
                  {"buffer": "c", "dims": [64, 32], "strides": [512], "box": [32, 4], "swizzle": "128B"})
    check_tensor_maps(r, workload, workload.spec.case("n_4096"))
    assert [m.model_dump(mode="json", exclude_none=True) for m in tensor_map_requests(r, workload)] == [
        {"buffer": "a", "dtype": "float32", "dims": [16, 256], "strides": [64], "box": [16, 8],
         "element_strides": [1, 1], "swizzle": "none", "l2_promotion": "none", "oob_fill": "zero"},
        {"buffer": "c", "dtype": "float32", "dims": [64, 32], "strides": [512], "box": [32, 4],
         "element_strides": [1, 1], "swizzle": "128B", "l2_promotion": "none", "oob_fill": "zero"},
    ]
    assert packed_strides((3, 4, 5), 2) == (6, 24)
    m = r.tensor_maps[1]
    assert reach(m, 4) == 63 * 4 + 31 * 512 + 4 == 16128  # within the 16384 bytes of c


@pytest.mark.parametrize(
    ("tmap", "message"),
    [
        ({"buffer": "x", "dims": ["n"], "box": [8]}, r"tensor_maps\[0\]: the signature has no parameter 'x'; a tensor "
         r"map's buffer is one of a, b, c"),
        ({"buffer": "n", "dims": ["n"], "box": [8]}, r"'n' is a scalar parameter"),
        ({"buffer": "a", "dims": ["n + 1"], "box": [8]}, r"reaches 4008 bytes \(dims \[1002\]\) but the buffer has "
         r"4004 bytes \(shape \[1001\]\)"),
        ({"buffer": "a", "dims": [500, 3], "strides": [2000], "box": [8, 1]},
         r"reaches 6000 bytes \(dims \[500, 3\], strides \[2000\]\) but the buffer has 4004 bytes"),
        ({"buffer": "a", "dims": ["n"], "box": [6]}, r"box\[0\] = 6 elements is 24 bytes, not a multiple of 16; make "
         r"box\[0\] a multiple of 4"),
        ({"buffer": "a", "dims": ["n"], "box": [64], "swizzle": "64B"},
         r"with swizzle 64B, box\[0\] \* 4 bytes is at most 64"),
        ({"buffer": "a", "dims": [7, 11], "box": [4, 1]}, r"packed, dimension 1 has a stride of 28 bytes"),
        ({"buffer": "a", "dims": [4, 300], "box": [4, 1]},
         r"reaches 4800 bytes \(dims \[4, 300\], strides packed \[16\]\)"),
    ],
)
def test_a_map_is_checked_against_its_buffer(workload: Workload, tmap: dict[str, Any], message: str) -> None:
    with pytest.raises(LaunchConfigError, match=message):
        check_tensor_maps(_resolved(workload, "odd_1001", tmap), workload, workload.spec.case("odd_1001"))


def test_a_write_past_a_buffer_names_the_map_whose_rows_end_inside_a_16_byte_chunk(workload: Workload) -> None:
    # 1001 floats end 4 bytes into a chunk: a TMA store of the last tile writes the other 12 (the
    # map itself is in bounds, so it passes the checks; the guard bytes catch the store)
    c_map = {"buffer": "c", "dims": ["n"], "box": [256]}
    odd = _resolved(workload, "odd_1001", {"buffer": "a", "dims": ["n"], "box": [256]}, c_map)
    check_tensor_maps(odd, workload, workload.spec.case("odd_1001"))
    hint = store_tail_hint(odd, workload, "c")
    assert "tensor_maps[1] over 'c' has rows of 4004 bytes, which end inside a 16-byte chunk" in hint
    assert "plain stores" in hint
    # no hint for a buffer without a map, or rows of a multiple of 16 bytes
    assert store_tail_hint(odd, workload, "b") == ""
    assert store_tail_hint(_resolved(workload, "n_4096", c_map), workload, "c") == ""
    pitched = _resolved(workload, "odd_1001", {"buffer": "c", "dims": [4, 250], "strides": [16], "box": [4, 1]})
    assert store_tail_hint(pitched, workload, "c") == ""


def test_nan_fill_and_small_integers_follow_the_buffer_type(tmp_path: Path) -> None:
    spec = json.loads(json.dumps(TINY_SPEC))
    spec["signature"]["params"].insert(3, {"kind": "buffer", "name": "k", "dtype": "int32", "role": "in",
                                           "shape": ["n"]})
    spec["signature"]["params"].insert(4, {"kind": "buffer", "name": "s", "dtype": "int16", "role": "in",
                                           "shape": ["n"]})
    spec["inputs"].update({"k": {"generator": "randint"}, "s": {"generator": "randint"}})
    wl = find_workload(write_tiny_workload(tmp_path, spec) / "tiny_add", Settings())
    case = wl.spec.case("n_4096")
    with pytest.raises(LaunchConfigError, match="oob_fill 'nan' needs a float buffer"):
        check_tensor_maps(_resolved(wl, "n_4096", {"buffer": "k", "dims": ["n"], "box": [8], "oob_fill": "nan"}), wl,
                          case)
    with pytest.raises(LaunchConfigError, match="TMA has no int16 element type"):
        check_tensor_maps(_resolved(wl, "n_4096", {"buffer": "s", "dims": ["n"], "box": [8]}), wl, case)
    check_tensor_maps(_resolved(wl, "n_4096", {"buffer": "a", "dims": ["n"], "box": [8], "oob_fill": "nan"}), wl, case)


# --- on the fake harness ----------------------------------------------------------------------

OPTIONS = EvaluateOptions(warmup=1, iterations=3)
A_MAP = {"buffer": "a", "dims": ["n"], "box": [256]}


def _session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, features: str,
             wl: Workload) -> tuple[HarnessProcess, Session]:
    monkeypatch.setenv("KO_FAKE_FEATURES", features)
    harness = write_harness(tmp_path, "fake")
    proc = HarnessProcess(harness, 0)
    return proc, Session(wl, proc, device_info(harness, 0), workdir=tmp_path / "w", options=OPTIONS)


def test_a_candidate_with_maps_passes_on_the_fake_harness(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workload: Workload
) -> None:
    proc, ev = _session(tmp_path, monkeypatch, "blocking,tensor_maps", workload)
    with proc, ev:
        maps = (A_MAP, {"buffer": "b", "dims": ["n"], "box": [256]}, {"buffer": "c", "dims": ["n"], "box": [256]})
        result = evaluate(ev, Candidate(tma_kernel(3), launch(*maps), [], "tma"))
    assert result.ok, result.message
    assert all(c.launch and len(c.launch["tensor_maps"]) == 3 for c in result.cases)
    sent = [json.loads(p.read_text()) for p in sorted((tmp_path / "w" / "requests").rglob("*.json"))
            if "tma" in p.parent.name]
    assert sent and all(len(case["tensor_maps"]) == 3 for r in sent for case in r["cases"])
    one = next(case for r in sent for case in r["cases"] if case["name"] == "odd_1001")
    assert one["tensor_maps"][0] == {"buffer": "a", "dtype": "float32", "dims": [1001], "strides": [], "box": [256],
                                     "element_strides": [1], "swizzle": "none", "l2_promotion": "none",
                                     "oob_fill": "zero"}
    # the reference (no maps) sent none
    ref = [json.loads(p.read_text()) for p in (tmp_path / "w" / "requests").rglob("*.json")
           if "reference" in p.parent.name]
    assert ref and not any("tensor_maps" in case for r in ref for case in r["cases"])


def test_bad_maps_are_invalid_launches_before_anything_is_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workload: Workload,
) -> None:
    proc, ev = _session(tmp_path, monkeypatch, "tensor_maps", workload)
    with proc, ev:
        results = {
            name: evaluate(ev, Candidate(tma_kernel(1), launch(tmap), [], name), benchmark=False)
            for name, tmap in [
                ("unknown", {"buffer": "q", "dims": ["n"], "box": [256]}),
                ("scalar", {"buffer": "n", "dims": ["n"], "box": [256]}),
                ("past", {"buffer": "c", "dims": ["n + 4"], "box": [256]}),
            ]
        }
        # the kernel must take the map: one parameter fewer is refused before any launch
        short = evaluate(ev, Candidate(tma_kernel(0), launch(A_MAP), [], "short"), benchmark=False)
    for name, message in [
        ("unknown", "the signature has no parameter 'q'"), ("scalar", "'n' is a scalar parameter"),
        ("past", "tensor_maps[0] (over 'c', float32): the map reaches 4020 bytes (dims [1005]) but "
                 "the buffer has 4004 bytes"),
    ]:
        r = results[name]
        assert r.status.value == "invalid_launch", (name, r.message)
        assert all(c.status.value == "invalid_launch" for c in r.cases)
        assert any(message in (c.message or "") for c in r.cases), (name, [c.message for c in r.cases])
    assert short.status.value == "compile_error" and "then the launch passes 1 tensor map(s)" in short.message
    sent = [p.parent.name for p in (tmp_path / "w" / "requests").rglob("*.json")]
    assert not [n for n in sent if n.rsplit("-", 1)[-1] in ("unknown", "scalar", "past", "short")], sent


def test_a_harness_without_the_feature_is_too_old(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  workload: Workload) -> None:
    proc, ev = _session(tmp_path, monkeypatch, "blocking", workload)
    with proc, ev:
        result = evaluate(ev, Candidate(tma_kernel(1), launch(A_MAP), [], "tma"), benchmark=False)
        plain = evaluate(ev, Candidate(tma_kernel(0),
                                       LaunchSpec.model_validate({"grid": ["ceil_div(n, 256)"], "block": [256]}), [],
                                       "plain"), benchmark=False)
    assert result.status.value == "invalid_launch"
    assert "this kernelopt-harness is too old" in result.cases[0].message and "pip install ." in result.cases[0].message
    assert plain.ok, plain.message


def test_the_fake_harness_refuses_a_map_past_its_buffer_like_the_harness(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workload: Workload,
) -> None:
    """With the Python check out of the way, the harness's own rule holds: a bad_request naming the
    map, which the candidate's result reports as an invalid launch (not a tool error)."""
    monkeypatch.setattr(build_mod, "check_tensor_maps", lambda *args: None)
    proc, ev = _session(tmp_path, monkeypatch, "tensor_maps", workload)
    with proc, ev:
        result = evaluate(ev, Candidate(tma_kernel(1), launch({"buffer": "b", "dims": ["n + 1"], "box": [256]}), [],
                                        "past"), benchmark=False)
    assert result.status.value == "invalid_launch", result.message
    messages = [c.message for c in result.cases]
    assert ("the harness refused a tensor map: cases[0].tensor_maps[0]: reaches 8 bytes, past the 4 bytes of buffer 'b'"
            in messages)
