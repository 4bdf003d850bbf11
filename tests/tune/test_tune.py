"""The tuning library on a simulated objective (kernel_tuner's simulation mode is the model): a
stand-in evaluator answers each configuration from a table of configuration -> status / median
latency, so strategies, budgets, the cache and the counts are checked without a GPU.

The table is a synthetic SGEMM-shaped landscape (a formula below, not measurements): a smooth
cost with an optimum inside the space, a few configurations that fail to compile, launch or
validate, and constraints as in workloads' tunable.json files.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pytest
from fakegpu import write_tiny_workload

from kernelopt_mcp import expr
from kernelopt_mcp.errors import ExpressionError, TunableError
from kernelopt_mcp.evaluation.candidate import Candidate, EvaluateOptions
from kernelopt_mcp.evaluation.outcomes import CaseResult, EvaluationResult, Status
from kernelopt_mcp.launch import DeviceLimits, LaunchSpec
from kernelopt_mcp.tune import workers as workers_module
from kernelopt_mcp.tune.cache import TuneCache
from kernelopt_mcp.tune.space import Space, config_key
from kernelopt_mcp.tune.spec import load_tunable, parse_tunable, substitute
from kernelopt_mcp.tune.strategies import make_strategy
from kernelopt_mcp.tune.tuner import tune
from kernelopt_mcp.workload import load_workload

PARAMS = {"BM": [32, 64, 128, 256], "BN": [32, 64, 128, 256], "BK": [8, 16, 32], "TM": [2, 4, 8], "TN": [2, 4, 8]}
CONSTRAINTS = ["(BM / TM) * (BN / TN) <= 1024", "(BM / TM) * (BN / TN) >= 32", "4 * BK * (BM + BN) <= 49152"]
DEFAULTS = {"BM": 32, "BN": 32, "BK": 8, "TM": 2, "TN": 2}


def simulated(config: dict[str, Any]) -> tuple[str, float | None]:
    """Status and median ms of one configuration of the synthetic landscape."""
    bm, bn, bk, tm, tn = (config[k] for k in ("BM", "BN", "BK", "TM", "TN"))
    if bm == 256 and bn == 128 and bk == 16:
        return "compile_error", None
    if bm == 128 and bn == 32 and tm == 2:
        return "invalid_launch", None
    if tm == 8 and tn == 8 and bm == 32:
        return "mismatch", None
    reuse = (bm * bn) / (bm + bn)  # arithmetic intensity of the block tile
    regs = tm * tn  # register blocking; too much spills
    ms = 10.0 / math.sqrt(reuse) * (1 + abs(math.log2(bk / 16)) * 0.15) * (1 + 0.08 * abs(math.log2(regs / 32)))
    ms *= 1 + 0.2 * ((bm * 7 + bn * 3 + bk) % 5) / 5  # deterministic "noise"
    return "ok", round(ms, 6)


def spec_dict() -> dict[str, Any]:
    return {
        "description": "synthetic sgemm", "params": PARAMS, "constraints": CONSTRAINTS, "defaults": DEFAULTS,
        "launch": {"default": {"grid": ["ceil_div(n, BM * BN)"], "block": ["(BM / TM) * (BN / TN)"]}},
    }


@dataclass
class FakeEvaluator:
    """The Session's interface as tune() uses it, answering from ``table`` (default ``simulated``)."""

    workload: Any
    device: Any = None
    arch: str = "sm_90"
    options: EvaluateOptions = field(default_factory=EvaluateOptions)
    reference_result: EvaluationResult | None = None
    limits: DeviceLimits = field(default_factory=DeviceLimits)
    calls: list[dict[str, Any]] = field(default_factory=list)
    table: Any = simulated
    compile_cache: Any = None  # nothing is compiled ahead in simulation

    @property
    def loaded(self) -> Any:  # the workload as given (a Session's may judge by widened tolerances)
        return self.workload

    def prepare(self) -> None:
        self.reference_result = EvaluationResult(status=Status.ok, message="", workload=self.workload.name,
                                                 candidate="reference", seed=1, arch=self.arch, score_ms=2.0)

    def evaluate(self, candidate: Candidate) -> EvaluationResult:
        self.calls.append(dict(candidate.params))
        status, ms = self.table(candidate.params)
        case = CaseResult(name="n_4096", kind="performance", status=Status(status))
        return EvaluationResult(status=Status(status), message=status, workload=self.workload.name,
                                candidate=candidate.name, seed=1, arch=self.arch, cases=[case], score_ms=ms)


@pytest.fixture(autouse=True)
def fake_sessions(monkeypatch: pytest.MonkeyPatch) -> None:
    """tune() prepares and evaluates through evaluation.evaluate's functions: a FakeEvaluator answers instead."""
    real_prepare, real_evaluate = workers_module.prepare, workers_module.evaluate

    def prepare(session: Any, **kwargs: Any) -> None:
        return session.prepare() if isinstance(session, FakeEvaluator) else real_prepare(session, **kwargs)

    def evaluate(session: Any, candidate: Candidate, options: Any = None, **kwargs: Any) -> EvaluationResult:
        if isinstance(session, FakeEvaluator):
            return session.evaluate(candidate)
        return real_evaluate(session, candidate, options, **kwargs)

    monkeypatch.setattr(workers_module, "prepare", prepare)  # the tuner's workers prepare and evaluate
    monkeypatch.setattr(workers_module, "evaluate", evaluate)


@pytest.fixture
def workload(tmp_path: Path) -> Any:
    return load_workload(write_tiny_workload(tmp_path / "wl") / "tiny_add")


@pytest.fixture
def tunable() -> Any:
    return parse_tunable(spec_dict(), "// no kernel needed in simulation\n", "synthetic")


def true_best(tunable: Any) -> tuple[dict[str, Any], float]:
    space = Space(tunable.spec)
    scored = [(c, simulated(c)) for c in space.valid()]
    best = min(((c, ms) for c, (st, ms) in scored if st == "ok"), key=lambda x: x[1])
    return best


# --- the space and constraints ----------------------------------------------------------------


def test_space_counts_and_constraints(tunable: Any) -> None:
    space = Space(tunable.spec)
    assert space.size == 4 * 4 * 3 * 3 * 3
    valid = space.valid()
    brute = [c for c in space if all(expr.evaluate(k, c) for k in CONSTRAINTS)]
    assert valid == brute and 0 < len(valid) < space.size
    assert space.at(0) == {"BM": 32, "BN": 32, "BK": 8, "TM": 2, "TN": 2}
    assert space.at(space.size - 1) == {"BM": 256, "BN": 256, "BK": 32, "TM": 8, "TN": 8}
    assert space.violation({"BM": 256, "BN": 256, "BK": 32, "TM": 2, "TN": 2}) == repr(CONSTRAINTS[0])


def test_constraints_with_and_or_not() -> None:
    assert expr.evaluate("BM >= 64 and not (TM == 8 or TN == 8)", {"BM": 64, "TM": 4, "TN": 4}) == 1
    assert expr.evaluate("BM >= 64 and not (TM == 8 or TN == 8)", {"BM": 64, "TM": 8, "TN": 4}) == 0
    with pytest.raises(ExpressionError):
        expr.parse("BM if TM else TN")


@pytest.mark.parametrize(("change", "message"), [
    ({"defaults": {"BM": 32, "BN": 32, "BK": 8, "TM": 2}}, "missing ['TN']"),
    ({"defaults": {**DEFAULTS, "BM": 48}}, "defaults.BM = 48 is not one of"),
    ({"defaults": {**DEFAULTS, "TM": 8, "TN": 8}}, "break the constraint"),
    ({"constraints": ["BM * Q <= 4"]}, "names ['Q'], which are not parameters"),
    ({"constraints": ["__import__('os')"]}, "tunable"),
    ({"params": {**PARAMS, "2X": [1]}}, "not a C identifier"),
    ({"params": {**PARAMS, "E": []}}, "has no values"),
    ({"params": {**PARAMS, "D": [1, 1]}}, "lists a value twice"),
    ({"compile_options": ["-rdc=true"]}, "not allowed"),
    ({"extra": 1}, "extra"),
])
def test_invalid_specs_say_what_to_fix(change: dict[str, Any], message: str) -> None:
    data = {**spec_dict(), **change}
    with pytest.raises(TunableError, match=None) as info:
        parse_tunable(data, "", "t.json")
    assert message in str(info.value) and "t.json" in str(info.value)


def test_param_named_like_a_scalar_is_an_error(workload: Any) -> None:
    data = spec_dict()
    data["params"] = {**PARAMS, "n": [1, 2]}
    data["defaults"] = {**DEFAULTS, "n": 1}
    with pytest.raises(TunableError, match=r"\['n'\] have the names of workload 'tiny_add'"):
        parse_tunable(data, "", "t.json", workload)


def test_launch_may_only_name_params_and_scalars(workload: Any) -> None:
    data = spec_dict()
    data["launch"] = {"default": {"grid": ["ceil_div(m, BM)"], "block": [128]}}
    with pytest.raises(TunableError, match=r"launch.default uses \['m'\]"):
        parse_tunable(data, "", "t.json", workload)


def test_load_tunable_reads_the_source_beside_it(tmp_path: Path) -> None:
    (tmp_path / "k.cu").write_text("// kernel\n")
    (tmp_path / "tunable.json").write_text(json.dumps({**spec_dict(), "source": "k.cu"}))
    assert load_tunable(tmp_path / "tunable.json").source == "// kernel\n"
    (tmp_path / "bad.json").write_text("{\n  oops")
    with pytest.raises(TunableError, match="line 2 column 3: invalid JSON"):
        load_tunable(tmp_path / "bad.json")
    with pytest.raises(TunableError, match="not a regular file"):  # read like workload.json: never forever
        load_tunable(Path("/dev/zero"))
    (tmp_path / "nosrc.json").write_text(json.dumps({**spec_dict(), "source": "missing.cu"}))
    with pytest.raises(TunableError, match=r"source 'missing\.cu'"):
        load_tunable(tmp_path / "nosrc.json")


# --- launch-expression substitution --------------------------------------------------------------


def test_substitution_into_launch_expressions(tunable: Any) -> None:
    assert substitute("(BM / TM) * (BN / TN)", {"BM": 64, "BN": 128, "TM": 4, "TN": 8}) == 256
    assert substitute("ceil_div(n, BM * BN)", {"BM": 64, "BN": 64}) == "ceil_div(n, 64 * 64)"
    source, launch, _ = tunable.materialize({"BM": 64, "BN": 128, "BK": 8, "TM": 4, "TN": 8})
    assert source.splitlines()[1:6] == ["#define BM 64", "#define BN 128", "#define BK 8", "#define TM 4",
                                        "#define TN 8"]
    assert launch.default is not None and launch.default.block == [256]


def test_evaluator_resolves_launch_with_params(tmp_path: Path) -> None:
    """Candidate.params join the case's scalars in launch expressions and become -D options."""
    from kernelopt_mcp.evaluation.build import resolve_launch
    from kernelopt_mcp.launch import resolve

    wl = load_workload(write_tiny_workload(tmp_path / "wl") / "tiny_add")
    cand = Candidate("", LaunchSpec.model_validate({"grid": ["ceil_div(n, BLOCK * UNROLL)"], "block": ["BLOCK"]}),
                     ["-DX=1"], "c", {"BLOCK": 128, "UNROLL": 4})
    assert cand.all_compile_options == ["-DX=1", "-DBLOCK=128", "-DUNROLL=4"]
    class Compiled:
        resources: ClassVar[dict[str, Any]] = {}

    case = wl.spec.case("n_4096")
    got = resolve_launch(cand, Compiled(), case, wl, DeviceLimits())  # type: ignore[arg-type]
    assert got.grid == (8, 1, 1) and got.block == (128, 1, 1)
    with pytest.raises(Exception, match="unknown name 'BLOCK'"):
        resolve(cand.launch.for_case("n_4096"), case.scalars, DeviceLimits(), "n_4096")


# --- strategies on the simulated objective ---------------------------------------------------------


def test_exhaustive_finds_the_true_best_and_counts(workload: Any, tunable: Any) -> None:
    ev = FakeEvaluator(workload)
    result = tune(ev, tunable, strategy="exhaustive")  # type: ignore[arg-type]
    space = Space(tunable.spec)
    best, best_ms = true_best(tunable)
    assert result.best_params == best and result.best is not None and result.best.score_ms == best_ms
    c = result.counts
    assert c.tried == len(space.valid()) == c.measured and c.cached == 0
    assert c.skipped_by_constraint == space.size - len(space.valid())
    expected = [simulated(cfg)[0] for cfg in space.valid()]
    assert c.compile_errors == expected.count("compile_error") > 0
    assert c.invalid_launches == expected.count("invalid_launch") > 0
    assert c.failures == expected.count("mismatch") > 0
    assert c.ok == expected.count("ok")
    assert ev.calls[0] == DEFAULTS and result.table[0].index == 0 and result.table[0].params == DEFAULTS
    assert len({config_key(p) for p in ev.calls}) == len(ev.calls)  # nothing measured twice
    untuned_ms = simulated(DEFAULTS)[1]
    assert result.speedup_vs_untuned == pytest.approx(untuned_ms / best_ms)
    assert result.speedup_vs_reference == pytest.approx(2.0 / best_ms)
    assert result.stop_reason == "every configuration of the space was tried"


@pytest.mark.parametrize("strategy", ["random", "tpe"])
def test_budgeted_strategies_stay_within_budget(workload: Any, tunable: Any, strategy: str) -> None:
    ev = FakeEvaluator(workload)
    result = tune(ev, tunable, strategy=strategy, budget_evals=60, seed=3)  # type: ignore[arg-type]
    assert len(ev.calls) == result.counts.tried == 60
    assert all(Space(tunable.spec).is_valid(c) for c in ev.calls)
    tried_ok = [simulated(c)[1] for c in ev.calls if simulated(c)[0] == "ok"]
    assert result.best is not None and result.best.score_ms == min(tried_ok)
    _, best_ms = true_best(tunable)
    limit = 1.25 if strategy == "random" else 1.10  # the model-based search gets closer
    assert result.best.score_ms <= best_ms * limit


def test_tpe_beats_random_on_average(workload: Any, tunable: Any) -> None:
    """Over a few seeds, TPE's best within 40 evaluations is no worse on average than random's."""
    def mean_best(strategy: str) -> float:
        scores = []
        for seed in range(4):
            r = tune(FakeEvaluator(workload), tunable, strategy=strategy, budget_evals=40, seed=seed)  # type: ignore[arg-type]
            scores.append(r.best.score_ms if r.best else math.inf)  # type: ignore[union-attr]
        return sum(scores) / len(scores)

    assert mean_best("tpe") <= mean_best("random")


def test_auto_picks_exhaustive_when_the_space_fits(workload: Any, tunable: Any) -> None:
    n = len(Space(tunable.spec).valid())
    assert tune(FakeEvaluator(workload), tunable, budget_evals=n).strategy == "exhaustive"  # type: ignore[arg-type]
    assert tune(FakeEvaluator(workload), tunable, budget_evals=5).strategy == "tpe"  # type: ignore[arg-type]


def test_time_budget_stops_the_search(workload: Any, tunable: Any) -> None:
    result = tune(FakeEvaluator(workload), tunable, strategy="random", budget_s=1e-9)  # type: ignore[arg-type]
    assert result.counts.tried == 1 and result.stop_reason.startswith("time budget")


def test_bad_strategy_and_budget(workload: Any, tunable: Any) -> None:
    with pytest.raises(ValueError, match="unknown strategy"):
        make_strategy("grid", Space(tunable.spec))
    with pytest.raises(ValueError, match="at least 1"):
        tune(FakeEvaluator(workload), tunable, budget_evals=0)  # type: ignore[arg-type]


# --- the cache ----------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["exhaustive", "random", "tpe"])
def test_cache_hits_re_measure_nothing(tmp_path: Path, workload: Any, tunable: Any, strategy: str) -> None:
    first = FakeEvaluator(workload)
    r1 = tune(first, tunable, strategy=strategy, budget_evals=30, cache=TuneCache(tmp_path / "c"))  # type: ignore[arg-type]
    assert r1.counts.measured == 30
    again = FakeEvaluator(workload)
    r2 = tune(again, tunable, strategy=strategy, budget_evals=30, cache=TuneCache(tmp_path / "c"))  # type: ignore[arg-type]
    assert again.calls == [] and r2.counts.cached == 30 and r2.counts.measured == 0
    assert r2.best_params == r1.best_params and all(row.cached for row in r2.table)
    # resumed with a larger budget: the first 30 come from the cache, only the new ones are measured
    more = FakeEvaluator(workload)
    r3 = tune(more, tunable, strategy=strategy, budget_evals=45, cache=TuneCache(tmp_path / "c"))  # type: ignore[arg-type]
    assert r3.counts.cached == 30 and r3.counts.measured == len(more.calls) == 15
    assert not {config_key(c) for c in more.calls} & {config_key(r.params) for r in r1.table}


def test_cache_key_separates_devices_and_timing(tmp_path: Path, workload: Any, tunable: Any) -> None:
    tune(FakeEvaluator(workload), tunable, strategy="random", budget_evals=5, cache=TuneCache(tmp_path / "c"))  # type: ignore[arg-type]
    other = FakeEvaluator(workload, options=EvaluateOptions(iterations=7))
    tune(other, tunable, strategy="random", budget_evals=5, cache=TuneCache(tmp_path / "c"))  # type: ignore[arg-type]
    assert len(other.calls) == 5  # other timing options: measured again
    changed = parse_tunable(spec_dict(), "// another source\n", "synthetic")
    third = FakeEvaluator(workload)
    tune(third, changed, strategy="random", budget_evals=5, cache=TuneCache(tmp_path / "c"))  # type: ignore[arg-type]
    assert len(third.calls) == 5  # another source: measured again


def test_cache_survives_a_torn_line(tmp_path: Path, workload: Any, tunable: Any) -> None:
    tune(FakeEvaluator(workload), tunable, strategy="random", budget_evals=4, cache=TuneCache(tmp_path))  # type: ignore[arg-type]
    with (tmp_path / "tune.jsonl").open("a") as f:
        f.write('{"key": "abc", "res')
    cache = TuneCache(tmp_path)
    assert len(cache) == 4
    ev = FakeEvaluator(workload)
    tune(ev, tunable, strategy="random", budget_evals=4, cache=cache)  # type: ignore[arg-type]
    assert ev.calls == []


def test_importing_the_library_does_not_import_optuna() -> None:
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    code = ("import sys, kernelopt_mcp, kernelopt_mcp.cli, kernelopt_mcp.tune, kernelopt_mcp.service; "
            "kernelopt_mcp.cli.build_parser(); sys.exit('optuna' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], cwd=repo).returncode == 0


def test_tpe_stops_when_the_valid_space_is_exhausted(workload: Any) -> None:
    small = parse_tunable({**spec_dict(), "params": {**PARAMS, "BM": [32], "BN": [32, 64], "BK": [8]}}, "", "small")
    n = len(Space(small.spec).valid())
    ev = FakeEvaluator(workload)
    result = tune(ev, small, strategy="tpe", budget_evals=n + 50)  # type: ignore[arg-type]
    assert result.counts.tried == len(ev.calls) == n
    assert result.stop_reason == "every configuration of the space was tried"


# --- replaying timings recorded on a GPU ---------------------------------------------------------
# Record one on a GPU machine:  kernelopt tune WORKLOAD --strategy exhaustive -o DIR
# and copy DIR/tune.json to tests/fixtures/tune/recorded/<workload>_<gpu>.json.

RECORDED = sorted((Path(__file__).resolve().parents[1] / "fixtures" / "tune" / "recorded").glob("*.json"))


@pytest.mark.skipif(not RECORDED, reason="no recorded tune.json under tests/fixtures/tune/recorded/")
@pytest.mark.parametrize("path", RECORDED, ids=[p.stem for p in RECORDED])
def test_strategies_on_recorded_timings(path: Path, tmp_path: Path) -> None:
    recorded = json.loads(path.read_text())
    spec = {k: v for k, v in recorded["tunable"].items() if k != "source_sha256"}
    rows = {config_key(r["params"]): (r["status"], r["score_ms"]) for r in recorded["table"]}
    tunable = parse_tunable(spec, "// replay\n", path.name)

    def table(config: dict[str, Any]) -> tuple[str, float | None]:
        return rows.get(config_key(config), ("skipped", None))  # not recorded: a failure that cannot win

    from kernelopt_mcp.config import Settings, find_workload

    wl = find_workload(recorded["workload"], Settings())  # the recording's own workload (scalars for the launch)
    best = min((s for st, s in rows.values() if st == "ok" and s), default=None)
    assert best is not None, "the recording has no valid configuration"
    exhaustive = tune(FakeEvaluator(wl, table=table), tunable, strategy="exhaustive")  # type: ignore[arg-type]
    assert exhaustive.best is not None and exhaustive.best.score_ms == best
    n = len(Space(tunable.spec).valid())
    budget = min(n, max(8, n // 3))
    tpe = tune(FakeEvaluator(wl, table=table), tunable, strategy="tpe", budget_evals=budget)  # type: ignore[arg-type]
    assert tpe.counts.tried == budget and tpe.best is not None and tpe.best.score_ms <= best * 1.15


def test_cache_identity_ignores_where_hashed_data_files_live() -> None:
    from kernelopt_mcp.tune.cache import content_identity

    def spec(path: str, sha: str | None) -> dict:
        gen = {"generator": "file", "path": path, **({"sha256": sha} if sha else {})}
        return {"inputs": {"a": {"generator": "uniform"}}, "cases": [{"name": "c", "inputs": {"x": gen}}]}

    # frozen runs name the same data in their own directories: same content, same identity
    assert content_identity(spec("/runs/run-001/inputs/c/x.bin", "ab12")) == content_identity(
        spec("/runs/run-002/inputs/c/x.bin", "ab12")
    )
    assert content_identity(spec("/a/x.bin", "ab12")) != content_identity(spec("/a/x.bin", "cd34"))
    # without a hash the path is all there is to go on
    assert content_identity(spec("/a/x.bin", None)) != content_identity(spec("/b/x.bin", None))


def test_a_bare_spec_name_is_found_beside_the_workload(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`kernelopt tune sgemm tunable_3xtf32.json`: a name that is not in the working directory
    names the workload's own spec; a file of that name in the working directory wins; a path
    with a directory is taken as it is."""
    from kernelopt_mcp.tune.spec import workload_tunable_path

    wl = load_workload(Path(__file__).resolve().parents[2] / "workloads" / "sgemm")
    monkeypatch.chdir(tmp_path)
    assert wl.root is not None
    assert workload_tunable_path(wl) == wl.root / "tunable.json"
    assert workload_tunable_path(wl, "tunable_3xtf32.json") == wl.root / "tunable_3xtf32.json"
    assert load_tunable(workload_tunable_path(wl, "tunable_3xtf32.json"), wl).spec.params
    (tmp_path / "tunable_3xtf32.json").write_text("{}")
    assert workload_tunable_path(wl, "tunable_3xtf32.json") == Path("tunable_3xtf32.json")
    assert workload_tunable_path(wl, "sub/tunable_3xtf32.json") == Path("sub/tunable_3xtf32.json")
    assert workload_tunable_path(wl, "missing.json") == Path("missing.json")
    with pytest.raises(TunableError):
        load_tunable(workload_tunable_path(wl, "missing.json"), wl)
