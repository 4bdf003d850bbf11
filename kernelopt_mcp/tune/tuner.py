"""Tuning: measure configurations of a tunable kernel on a prepared session, best wins.

The untuned ``defaults`` are measured first (so "best vs untuned" is always reported), then the
strategy proposes configurations until it runs out or a budget (evaluations, seconds) is spent.
A configuration that breaks a constraint is skipped before compiling and counted; every other is
evaluated exactly like any candidate (validated on every case, then timed) unless the cache
already holds it. Only a configuration whose status is ``ok`` on every case may win.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field

from ..evaluation.candidate import Candidate, EvaluateOptions
from ..evaluation.outcomes import EvaluationResult
from ..evaluation.session import Session
from ..status import Status
from .cache import TuneCache, context_fields, entry_key
from .dispatch import Dispatcher, Done
from .prefetch import CompileAhead
from .space import Config, Space, Value, config_key
from .spec import Tunable
from .strategies import auto_choice, make_strategy
from .workers import LocalWorker, Worker, prepare_first, same_model

MAX_IDLE_ASKS = 500  # proposals in a row that bring nothing new: the strategy has converged

TuneProgress = Callable[[str, int, int], None]


class TrialRow(BaseModel):
    index: int = Field(description="order of measurement (0 = the untuned defaults)")
    params: dict[str, Value]
    device: str | None = Field(None, description="the worker (GPU) that measured it")
    status: str
    score_ms: float | None = None
    score_bound_ms: float | None = Field(None, description="stopped_early: the least score it could have reached")
    speedup_vs_untuned: float | None = None
    speedup_vs_reference: float | None = None
    cached: bool = False
    seconds: float = 0.0
    message: str = ""


class TuneCounts(BaseModel):
    tried: int = 0
    ok: int = 0
    measured: int = Field(0, description="evaluated on the GPU in this session")
    cached: int = Field(0, description="answered from the tuning cache, not re-measured")
    skipped_by_constraint: int = 0
    compile_errors: int = 0
    invalid_launches: int = 0
    failures: int = Field(0, description="mismatch, runtime error, timeout, out-of-bounds write, input modified")
    stopped_early: int = Field(
        0, description="passed every case, timing stopped once the configuration provably could not beat the best"
    )
    compiled_ahead: int = Field(0, description="compiles started while the GPU measured the previous configuration")


class TuneResult(BaseModel):
    workload: str
    strategy: str
    space_size: int
    valid_space_size: int | None = None
    budget_evals: int | None = None
    budget_s: float | None = None
    stop_reason: str = ""
    best_params: dict[str, Value] | None = None
    best: EvaluationResult | None = None
    untuned_params: dict[str, Value]
    untuned: EvaluationResult | None = None
    speedup_vs_untuned: float | None = None
    speedup_vs_reference: float | None = None
    reference_score_ms: float | None = None
    counts: TuneCounts = Field(default_factory=TuneCounts)
    table: list[TrialRow] = Field(default_factory=list)
    elapsed_s: float = 0.0
    tunable: dict[str, Any] = Field(default_factory=dict,
                                    description="the tuned spec (tunable.json form) and source hash")
    devices: list[str] = Field(default_factory=list,
                               description="where configurations were measured, one entry per GPU")
    evals_per_min_per_device: float | None = Field(
        None, description="configurations measured on a GPU per minute of the run, per device (cache hits not counted)"
    )
    notes: list[str] = Field(default_factory=list, description="devices left out, workers lost and jobs retried")

    def ranked(self) -> list[TrialRow]:
        """The table, fastest valid first, then the rest in measurement order."""
        ok = sorted((r for r in self.table if r.status == "ok" and r.score_ms), key=lambda r: r.score_ms or 0.0)
        return ok + [r for r in self.table if r not in ok]


def _candidate(tunable: Tunable, config: Config, label: str) -> Candidate:
    return Candidate(tunable.source, tunable.spec.launch, list(tunable.spec.compile_options), label, dict(config))


def tune(
    session: Session,
    tunable: Tunable,
    *,
    options: EvaluateOptions | None = None,
    strategy: str = "auto",
    budget_evals: int | None = None,
    budget_s: float | None = None,
    seed: int = 0,
    cache: TuneCache | None = None,
    progress: TuneProgress | None = None,
    early_stop: bool = True,
    workers: list[Worker] | None = None,
) -> TuneResult:
    """Search ``tunable``'s space on ``session``'s workload and device.

    Args:
        options: timing and checks of every measurement (default: the session's).
        strategy: auto, exhaustive, random or tpe (see :mod:`.strategies`).
        budget_evals: configurations to try at most (the defaults and cache hits included, so a
            repeated run with the same budget and seed re-measures nothing).
        budget_s: wall-clock seconds; no new configuration starts after it.
        seed: the strategy's seed (not the inputs' seed).
        cache: measured configurations to reuse and extend (default: in memory only).
        progress: ``progress(message, tried, budget_or_0)``.
        early_stop: stop timing a configuration once it provably cannot beat the best so far
            (:func:`~kernelopt_mcp.evaluation.runner.score_bound_ms`; never the untuned defaults):
            its row says ``stopped_early`` with the bound instead of a score.
        workers: the GPUs to measure on, one configuration at a time each (default: ``session``'s
            device alone). Several keep every device busy; a worker that dies is dropped and its
            configuration measured on another (said in ``notes``). Those of a model other than the
            first one's are left out.

    Raises:
        TunableError: the tunable does not fit the workload. ValueError: an unknown strategy or
        a budget below 1.
    """
    if budget_evals is not None and budget_evals < 1:
        raise ValueError("budget_evals must be at least 1 (the untuned defaults are always measured)")
    if budget_s is not None and budget_s <= 0:
        raise ValueError("budget_s must be positive")
    tunable.check(session.workload)
    opts = options or session.options
    say = progress or (lambda message, done, total: None)
    cache = cache if cache is not None else TuneCache(None)
    space = Space(tunable.spec)
    chosen = auto_choice(space, budget_evals) if strategy == "auto" else strategy
    search = make_strategy(chosen, space, seed=seed, budget_evals=budget_evals)
    context = context_fields(session, tunable, opts)
    pool, notes = same_model(workers or [LocalWorker(session)])
    ref_score, pool, lost = prepare_first(pool)  # the first device's reference: the rows' speedups are against it
    notes += lost
    out = TuneResult(
        workload=session.workload.name, strategy=chosen, space_size=space.size,
        valid_space_size=len(space.valid()) if space.enumerable else None,
        budget_evals=budget_evals, budget_s=budget_s, untuned_params=dict(tunable.spec.defaults),
        reference_score_ms=ref_score,
        tunable={**tunable.spec.model_dump(mode="json"), "source_sha256": context["source"]},
    )
    start = time.monotonic()
    seen: dict[str, float | None] = {}
    total = budget_evals or out.valid_space_size or 0

    ahead = CompileAhead(session)

    def compile_next() -> None:
        """Start compiling what an ordered strategy will ask for next (valid, new, not cached, within
        the evaluation budget: the one being measured is not counted yet)."""
        peek = getattr(search, "peek", None)
        room = ahead.lookahead if budget_evals is None else min(ahead.lookahead, budget_evals - out.counts.tried - 1)
        for upcoming in peek(room) if peek is not None and room > 0 else []:
            k = config_key(upcoming)
            if k not in seen and space.is_valid(upcoming) and cache.get(entry_key(context, upcoming)) is None:
                ahead.start(k, _candidate(tunable, upcoming, "ahead"))

    out.notes.extend(notes)
    out.devices = [f"{w.label}: {w.model}" for w in pool]
    dispatch = Dispatcher(pool, opts)

    def submit(config: Config) -> None:
        """Start measuring ``config`` (on a free worker; waits for one while all are busy), or
        record it at once from the cache."""
        index = dispatch.next_index()
        key = entry_key(context, config)
        result = cache.get(key)
        label = "untuned" if index == 0 else f"config-{index:04d}"
        if result is not None:
            record(Done(index, config, result, None, cached=True, seconds=0.0))
            return
        say(f"measuring {label} {config_key(config)}", index, total)
        ahead.wait(config_key(config))
        compile_next()  # while this one is on the GPU
        beat = out.best.score_ms if early_stop and index > 0 and out.best is not None else None
        for done in dispatch.submit(index, config, _candidate(tunable, config, label), beat):
            record(done)

    def record(done: Done) -> None:
        config, result, index = done.config, done.result, done.index
        if index == 0:
            out.untuned = result
        if not done.cached:
            if result.stopped_early is None:  # a partial timing depends on the best it was to beat
                cache.put(entry_key(context, config), context, config, result)
            out.counts.measured += 1
        else:
            out.counts.cached += 1
        out.counts.tried += 1
        if result.ok and result.stopped_early:
            out.counts.stopped_early += 1
        elif result.ok:
            out.counts.ok += 1
        elif result.status is Status.compile_error:
            out.counts.compile_errors += 1
        elif result.status is Status.invalid_launch:
            out.counts.invalid_launches += 1
        else:
            out.counts.failures += 1
        score = result.score_ms if result.ok else None
        status = "stopped_early" if result.ok and result.stopped_early else result.status.value
        out.table.append(TrialRow(
            index=index, params=dict(config), device=done.worker, status=status, score_ms=score,
            score_bound_ms=result.score_bound_ms,
            speedup_vs_reference=(ref_score / score) if ref_score and score else None,
            cached=done.cached, seconds=round(done.seconds, 3), message=(done.note + result.message)[:300],
        ))
        # the strategy learns a stopped configuration's bound: no better than the best, which is all it needs
        seen[config_key(config)] = score if score is not None else result.score_bound_ms
        search.tell(config, seen[config_key(config)])
        if score is not None and (out.best is None or score < (out.best.score_ms or float("inf"))):
            out.best, out.best_params = result, dict(config)
        label = "untuned" if index == 0 else f"config-{index:04d}"
        say(f"{label} {config_key(config)}: {status}" + (f", {score:.4g} ms" if score else "")
            + (f", >= {result.score_bound_ms:.4g} ms" if result.score_bound_ms else "")
            + (" (cached)" if done.cached else f"; {result.phases.text()}" if result.phases else ""),
            out.counts.tried, total)

    def drain() -> None:
        for done in dispatch.drain():
            record(done)

    try:
        _search(out, search, submit, drain, dispatch, seen, space, chosen, budget_evals, budget_s, start, tunable)
    finally:
        ahead.close()
        dispatch.close()
    out.notes.extend(dispatch.notes)
    out.table.sort(key=lambda row: row.index)
    out.counts.compiled_ahead = ahead.started
    out.elapsed_s = round(time.monotonic() - start, 3)
    if out.counts.measured and out.elapsed_s > 0:
        out.evals_per_min_per_device = round(out.counts.measured / (out.elapsed_s / 60) / len(pool), 2)
    untuned_score = out.untuned.score_ms if out.untuned and out.untuned.ok else None
    for row in out.table:
        if row.score_ms and untuned_score:
            row.speedup_vs_untuned = untuned_score / row.score_ms
    if out.best is not None and out.best.score_ms:
        out.speedup_vs_untuned = untuned_score / out.best.score_ms if untuned_score else None
        out.speedup_vs_reference = ref_score / out.best.score_ms if ref_score else None
    return out


def _search(
    out: TuneResult, search: Any, submit: Callable[[Config], None], drain: Callable[[], None], dispatch: Dispatcher,
    seen: dict[str, float | None], space: Space, chosen: str, budget_evals: int | None, budget_s: float | None,
    start: float, tunable: Tunable,
) -> None:
    """The untuned defaults (alone: every later row is compared with them), then the strategy's
    proposals, as many at once as there are workers, until it ends or a budget is spent; the
    configurations still being measured then finish."""
    submit(dict(tunable.spec.defaults))
    drain()
    try:
        _propose(out, search, submit, dispatch, seen, space, chosen, budget_evals, budget_s, start)
    finally:
        drain()


def _propose(
    out: TuneResult, search: Any, submit: Callable[[Config], None], dispatch: Dispatcher,
    seen: dict[str, float | None], space: Space, chosen: str, budget_evals: int | None, budget_s: float | None,
    start: float,
) -> None:
    idle = 0
    while True:
        if budget_evals is not None and out.counts.tried + dispatch.in_flight >= budget_evals:
            out.stop_reason = f"evaluation budget of {budget_evals} spent"
            break
        if budget_s is not None and time.monotonic() - start >= budget_s:
            out.stop_reason = f"time budget of {budget_s:g} s spent"
            break
        # a sampler may propose old configurations forever; the ordered strategies end by themselves
        # (and so count every configuration their order skips)
        if (chosen == "tpe" and out.valid_space_size is not None
                and out.counts.tried + dispatch.in_flight >= out.valid_space_size):
            out.stop_reason = "every configuration of the space was tried"
            break
        config = search.ask()
        if config is None:
            out.stop_reason = "every configuration of the space was tried"
            break
        key = config_key(config)
        if key in dispatch.pending:  # proposed again while being measured: its answer comes with the others
            idle += 1
            if idle >= MAX_IDLE_ASKS:
                out.stop_reason = f"the {chosen} search proposed nothing new {MAX_IDLE_ASKS} times in a row"
                break
            continue
        if key in seen:  # proposed again: the answer is known, nothing is measured or counted
            search.tell(config, seen[key])
            idle += 1
            if idle >= MAX_IDLE_ASKS:
                out.stop_reason = f"the {chosen} search proposed nothing new {MAX_IDLE_ASKS} times in a row"
                break
            continue
        if not space.is_valid(config):
            seen[key] = None
            out.counts.skipped_by_constraint += 1
            search.tell(config, None)
            idle += 1
            if idle >= MAX_IDLE_ASKS:
                out.stop_reason = f"the {chosen} search proposed nothing valid and new {MAX_IDLE_ASKS} times in a row"
                break
            continue
        idle = 0
        submit(config)


def summary_line(result: TuneResult) -> str:
    """One line: best configuration, score, speedups, counts."""
    c = result.counts
    head = (
        f"best {result.best_params}: {result.best.score_ms:.4g} ms" if result.best and result.best.score_ms
        else "no configuration passed every case"
    )
    parts = [head]
    if result.speedup_vs_untuned:
        parts.append(f"{result.speedup_vs_untuned:.2f}x vs untuned")
    if result.speedup_vs_reference:
        parts.append(f"{result.speedup_vs_reference:.2f}x vs the CUDA reference")
    parts.append(
        f"{c.tried} tried ({c.measured} measured, {c.cached} cached), {c.ok} ok"
        + (f", {c.stopped_early} stopped early (could not beat the best)" if c.stopped_early else "")
        + f", {c.skipped_by_constraint} skipped by "
        f"constraints, {c.compile_errors} compile errors, {c.invalid_launches} invalid launches, {c.failures} failures"
    )
    if result.devices:
        rate = (f", {result.evals_per_min_per_device:g} configurations per minute per device"
                if result.evals_per_min_per_device else "")
        parts.append(f"{len(result.devices)} device(s){rate}")
    return "; ".join(parts) + f" [{result.strategy}; {result.stop_reason}]"


def table_rows(result: TuneResult) -> list[dict[str, Any]]:
    """The table as flat rows (CSV): one column per parameter."""
    names = list(result.untuned_params)
    rows = []
    for r in result.table:
        rows.append({
            "index": r.index, **{n: r.params.get(n) for n in names}, "status": r.status, "score_ms": r.score_ms,
            "speedup_vs_untuned": r.speedup_vs_untuned, "speedup_vs_reference": r.speedup_vs_reference,
            "cached": r.cached, "seconds": r.seconds, "message": r.message,
        })
    return rows
