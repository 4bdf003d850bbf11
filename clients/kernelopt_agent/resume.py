"""``kernelopt optimize --resume RUN``: continue a run in its own directory from its records.

A run interrupted (Ctrl-C, SIGTERM, kill -9, a crash), stopped by a budget, or finished (with more
``--max-iterations`` asked for) goes on where its records end:

- the options are the ones it started with (``config.json``); only the limits (``--max-iterations``,
  counting the iterations done, ``--max-tokens``, ``--max-cost``) and where things are
  (``--base-url``, ``--harness``, ``--workspace``, ``--device``) may be given again; any other option
  that differs from the recorded one is refused;
- the candidates come back from ``history.jsonl`` (a last line cut short by a kill is dropped, with a
  note) and ``candidates/<label>/``: the numbering goes on, the best so far stays the best until beaten,
  each lane goes on from the iteration after its last finished one (a repair if its last candidate was
  invalid), and the prompts are rebuilt from these records as in any iteration;
- the tokens and cost come back from every recorded answer (``model/NNNN-response.json``, so also
  those after the last checkpoint of a killed run), so ``--max-tokens`` and ``--max-cost`` count what
  was spent before; record numbers (model/, tools/) go on from the highest written;
- the workload is the run's frozen one: the parts are the ones its ``freeze_workload`` call recorded
  (nothing is generated again) and the server, a new process that knows no frozen workload, is given
  them again with the recorded seed, which draws the very same inputs; ``input_cases.json`` (every
  input file's sha256) must come out unchanged, else the resume stops. The GPU must be the one the run
  was measured on. A run whose reference is PyTorch froze nothing: its workload is the copy it holds
  (``workload/<name>/``, ``freeze.torch_copy``), which the new server is configured with again, so a
  changed or removed original directory does not matter.

Each resume is a ``resume`` step in the history and an entry of summary.json's ``resumes`` (when,
from which iteration, what the run's status was, which limits changed); ``kernelopt runs show`` and the
report show them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from kernelopt_mcp.errors import KerneloptError
from kernelopt_mcp.launch import LaunchSpec
from kernelopt_mcp.workload import InputCasesFile, Signature, Workload, load_workload, parse_spec

from . import prompts
from .freeze import FrozenWorkload, shared_dirs, torch_copy, torch_workload, workload_dirs
from .loop import Optimizer, RunFailed, needs_model
from .model import ModelClient, check_key
from .options import (
    FROM_ENVIRONMENT,
    PATH_KEYS,
    OptimizeOptions,
    OptionsError,
    env_file_path,
    read_config,
    read_dotenv,
    redact_url,
)
from .parts import Parts, read_launch_beside, workload_parts
from .pricing import Pricing, Usage
from .records import (
    CandidateEvent,
    CandidateRecord,
    DuplicateEvent,
    Event,
    NoProposalEvent,
    ProfileUnavailableEvent,
    read_history,
)
from .rundir import NUMBERED_RE, RunDir, pid_alive, read_json
from .runs import resolve_run
from .toolbox import Toolbox

LIMITS = ("max_iterations", "max_tokens", "max_cost")  # may be raised (or set) on resume
# where things are on this machine, not what is measured
WHEREABOUTS = ("base_url", "harness", "workspace", "device", "devices", "ray")
DERIVED = (*FROM_ENVIRONMENT, "config_file", "strategy_defaulted")  # never taken from config.json
FINALIZE_PROBLEMS = ("replay: ", "heatmap: ")  # notes finalize adds; a resume finalizes again


class ResumeError(OptionsError):
    """The run cannot be resumed as asked; the message says why and what to do."""


@dataclass
class Resumption:
    """What a resume starts from: the run, its options as resumed, and what it recorded."""

    run: RunDir
    opts: OptimizeOptions
    summary: dict[str, Any]
    status: str  # the run's status before this resume (a dead "running" one reads "interrupted")
    records: list[CandidateRecord]
    history: list[Event]
    first_iteration: dict[int | None, int]
    usage: Usage
    model_calls: list[dict[str, Any]]
    model_seconds: float
    freeze_args: dict[str, Any]  # {} for a PyTorch-reference run (nothing was frozen)
    seed: int | None
    changed: dict[str, list[Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def done(self) -> int:
        """Iterations finished (of the lane furthest behind)."""
        return min(self.first_iteration.values()) - 1


def resume_options(flags: Mapping[str, Any], environ: Mapping[str, str] | None = None,
                   cwd: Path | None = None) -> Resumption:
    """The run named by ``flags["resume"]`` (a directory, or a run's name or number under --results-dir)
    and the options it goes on with; checks that there is something to resume before anything is written
    (except that a torn last line of history.jsonl is cut off).

    Raises:
        ResumeError: no such run, conflicting options, nothing left to do, a spent budget, a run still running.
    """
    results = Path(flags.get("results_dir") or "results")
    try:
        path = resolve_run(str(flags["resume"]), results)
    except (FileNotFoundError, ValueError) as exc:
        raise ResumeError(f"--resume: {exc}") from None
    try:
        recorded = read_json(path / "config.json")
        if not isinstance(recorded, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as exc:
        raise ResumeError(f"--resume {path}: not a run of `kernelopt optimize` (config.json: {exc})") from None
    opts, changed = run_options(flags, recorded, path, environ, cwd)
    summary = _summary(path)
    status = str(summary.get("status") or "interrupted")
    if status == "running":
        if pid_alive(summary.get("pid")) and summary.get("pid") != os.getpid():
            raise ResumeError(f"{path.name} is still running (process {summary.get('pid')}); stop it first, or wait")
        status = "interrupted"
    if opts.strategy == "tune":
        raise ResumeError(f"{path.name} is a --strategy tune run: tuning is not resumed; start a new run")
    run = RunDir.reopen(path)
    notes = []
    torn = run.drop_torn_line("history.jsonl")  # only now: a live run's last line may be being written
    if torn is not None:
        notes.append("history.jsonl's last line was cut short (the run was killed mid-write) and was dropped: "
                     f"{torn[:200]!r}")
    history = read_history(path)
    notes += [p for p in history.problems if "cut short" not in p]
    records = [_record(path, e) for e in history.candidates]
    reference = [r for r in records if r.kind == "reference" and r.valid]
    initial = any(r.kind == "initial" for r in records)
    if torch_copy(path) is not None:  # PyTorch is the reference: no freeze, no CUDA reference; the initial kernel ran
        freeze_args: dict[str, Any] = {}
        seed = None
        started = initial
    else:
        freeze_args, seed = freeze_call(path, summary)
        started = bool(reference) and (freeze_args.get("initial_cu") is None or initial)
    if not started:
        raise ResumeError(f"{path.name} ended before its baseline (the reference and the initial kernel; the initial "
                          "kernel alone where PyTorch is the reference) was evaluated: there is nothing to go on from; "
                          "start a new run")
    first = _first_iterations(history.events, opts.candidates)
    res = Resumption(run, opts, summary, status, records, list(history.events), first, *_spent(path, opts),
                     freeze_args=freeze_args, seed=seed, changed=changed, notes=notes)
    _check_work_left(res)
    check_key(opts)  # a missing API key is said now, with the run untouched
    return res


def run_options(flags: Mapping[str, Any], recorded: dict[str, Any], path: Path, environ: Mapping[str, str] | None,
             cwd: Path | None) -> tuple[OptimizeOptions, dict[str, list[Any]]]:
    """The recorded options with the limits and whereabouts given now; a conflicting option is refused."""
    given = {k: v for k, v in flags.items()
             if v is not None and k not in ("resume", "config", "results_dir", "env_file")}
    if flags.get("config"):
        given = {**read_config(Path(flags["config"])), **given}
    conflicts = [f"--{key.replace('_', '-')} {value!r} (the run has {recorded.get(key)!r})"
                 for key, value in given.items()
                 if key not in LIMITS and key not in WHEREABOUTS and not _same(value, recorded.get(key))]
    if conflicts:
        raise ResumeError(
            f"--resume {path.name}: a resumed run keeps the options it started with (its config.json); these differ: "
            + "; ".join(conflicts) + ". Only --max-iterations, --max-tokens and --max-cost (and where things are: "
            "--base-url, --harness, --workspace, --device, --devices) may change; to change the "
            "others, start a new run")
    known = {f.name for f in fields(OptimizeOptions)} - set(DERIVED)
    # where things are (the model's URL, the harness binary, devices) comes from this invocation alone,
    # never from config.json: a run directory from elsewhere must not send the API key to its URL or
    # have its harness path executed; the recorded ones describe the machine the run started on
    values = {k: v for k, v in recorded.items() if k in known and k not in WHEREABOUTS}
    values.update({k: v for k, v in given.items() if k in LIMITS or k in WHEREABOUTS})
    try:
        opts = OptimizeOptions(**values)
    except TypeError as exc:
        raise ResumeError(f"--resume {path.name}: config.json does not hold this version's options ({exc})") from None
    for key in PATH_KEYS:
        value = getattr(opts, key)
        if value is not None and not isinstance(value, Path):
            setattr(opts, key, Path(value))
    opts.results_dir = path.parent
    env = dict(os.environ if environ is None else environ)
    opts.read_environment(env, read_dotenv(env_file_path(flags.get("env_file"), cwd or Path.cwd())))
    opts.check(files=False)
    changed = {k: [recorded.get(k), redact_url(v) if k == "base_url" else str(v) if isinstance(v, Path) else v]
               for k, v in given.items() if not _same(v, recorded.get(k))}
    return opts, changed


def _same(given: Any, recorded: Any) -> bool:
    if isinstance(given, Path) or (isinstance(recorded, str) and isinstance(given, str)
                                   and ("/" in given or "/" in recorded)):
        return str(given) == str(recorded) or Path(given).resolve() == Path(str(recorded)).resolve()
    if isinstance(given, (int, float)) and isinstance(recorded, (int, float)) and not isinstance(given, bool):
        return float(given) == float(recorded)
    return bool(given == recorded)


def _summary(path: Path) -> dict[str, Any]:
    try:
        data = read_json(path / "summary.json")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _record(path: Path, e: CandidateEvent) -> CandidateRecord:
    """A candidate as the loop keeps it, from its event and its files (source, the server's result)."""
    directory = path / "candidates" / e.label
    try:
        source = (directory / "source.cu").read_text(encoding="utf-8")
    except OSError as exc:
        raise ResumeError(f"{path.name}: candidate {e.label}'s source is unreadable ({exc}); "
                          "the run cannot be resumed") from None
    try:
        result = read_json(directory / "result.json")
        feedback = prompts.feedback_text(str(result.get("text") or ""), dict(result.get("result") or {}))
    except (OSError, ValueError, AttributeError):
        feedback = e.message
    names = {f.name for f in fields(CandidateRecord)} - {"source", "feedback"}
    data = {k: v for k, v in e.model_dump().items() if k in names}
    return CandidateRecord(**data, source=source, feedback=feedback)


def freeze_call(path: Path, summary: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """The run's last successful freeze_workload call (tools/NNNN-freeze_workload.json) and its seed."""
    for call in sorted((path / "tools").glob("*-freeze_workload.json"), reverse=True):
        try:
            data = read_json(call)
        except (OSError, ValueError):
            continue
        if data.get("is_error") or not isinstance(data.get("arguments"), dict):
            continue
        seed = (data.get("structured") or {}).get("seed")
        if isinstance(seed, int):
            recorded_seed = (summary.get("workload") or {}).get("seed")
            if recorded_seed is not None and recorded_seed != seed:
                continue
            return dict(data["arguments"]), seed
    raise ResumeError(f"{path.name} has no recorded freeze of its workload (tools/*-freeze_workload.json): nothing "
                      "to measure new candidates against in the same way; start a new run")


def _first_iterations(events: list[Event], candidates: int) -> dict[int | None, int]:
    """Each lane's next iteration: the one after the last that ended (a candidate, no proposal or a duplicate)."""
    done: dict[int | None, int] = {}
    for e in events:
        if isinstance(e, (CandidateEvent, NoProposalEvent, DuplicateEvent)) and e.iteration is not None:
            done[e.slot] = max(done.get(e.slot, 0), e.iteration)
    lanes: list[int | None] = [None] if candidates == 1 else list(range(1, candidates + 1))
    return {lane: done.get(lane, 0) + 1 for lane in lanes}


def _spent(path: Path, opts: OptimizeOptions) -> tuple[Usage, list[dict[str, Any]], float]:
    """Tokens of every recorded answer (model/NNNN-response.json), priced as the run prices them."""
    usage = Usage(pricing=Pricing.resolve(opts.model, opts.price_per_mtok))
    calls: list[dict[str, Any]] = []
    seconds = 0.0
    answers = [(int(m.group(1)), p) for p in (path / "model").glob("*-response.json")
               if (m := NUMBERED_RE.match(p.name))]
    for _, answer in sorted(answers):
        try:
            data = read_json(answer)
        except (OSError, ValueError):
            continue
        used = data.get("usage") or {}
        usage.calls += 1
        seconds += float(data.get("seconds") or 0.0)
        if not used:
            usage.unreported_calls += 1
        usage.input_tokens += int(used.get("input_tokens", 0))
        usage.cached_input_tokens += int(used.get("cached_input_tokens", 0))
        usage.output_tokens += int(used.get("output_tokens", 0))
        usage.reasoning_tokens += int(used.get("reasoning_tokens", 0))
        calls.append({"number": data.get("number"), "purpose": data.get("purpose"),
                      "seconds": data.get("seconds"), **used})
    return usage, calls, seconds


def _check_work_left(res: Resumption) -> None:
    opts, name, done = res.opts, res.run.name, res.done
    if done >= opts.max_iterations:
        raise ResumeError(
            f"{name} has done {done} of its --max-iterations {opts.max_iterations} (status {res.status}); to go on, "
            f"ask for more: kernelopt optimize --resume {name} --max-iterations N, N > {done} (the total, "
            "counting those done)")
    if opts.max_tokens is not None and res.usage.total_tokens >= opts.max_tokens:
        raise ResumeError(f"{name} has used {res.usage.total_tokens:,} tokens, --max-tokens {opts.max_tokens} already: "
                          "raise it to go on (--max-tokens counts the tokens of the whole run)")
    cost = res.usage.cost_usd()
    if opts.max_cost is not None and cost is not None and cost >= opts.max_cost:
        raise ResumeError(f"{name} has spent about {cost:.4f} USD, --max-cost {opts.max_cost} already: raise it to go "
                          "on (--max-cost counts the cost of the whole run)")


def rebuild_parts(args: dict[str, Any], origin: dict[str, str]) -> Parts:
    """The parts exactly as the run froze them (its freeze_workload arguments); nothing is generated."""
    spec = args["spec"]
    try:
        ref, init = spec["reference"], spec.get("initial")
        parts = Parts(
            name=str(spec["name"]), description=str(spec.get("description") or ""),
            signature=Signature.model_validate(spec["signature"]),
            cases=InputCasesFile.model_validate({k: spec.get(k) or {} for k in ("inputs", "tolerance")}
                                                | {"cases": spec["cases"]}),
            cost=dict(spec.get("cost") or {}), deterministic=bool(spec.get("deterministic", True)),
            reference_cu=str(args["reference_cu"]), reference_launch=LaunchSpec.model_validate(ref["launch"]),
            reference_options=list(ref.get("compile_options") or []),
            oracle=Path(args["oracle_path"]) if args.get("oracle_path") else None, origin=dict(origin),
        )
        if init and args.get("initial_cu") is not None:
            parts.initial_cu, parts.initial_launch = str(args["initial_cu"]), LaunchSpec.model_validate(init["launch"])
            parts.initial_options = list(init.get("compile_options") or [])
    except (KeyError, TypeError, ValidationError) as exc:
        raise RunFailed("the run's recorded freeze_workload call is not a workload this "
                        f"version reads: {exc}") from None
    return parts


def torch_parts(run_path: Path, copy: Path, origin: dict[str, str]) -> Parts:
    """The parts of a PyTorch-reference run: its copy of the workload, and the starting kernel it recorded
    (initial.cu with initial.launch.json beside it) where the workload has none; nothing is generated."""
    try:
        parts = workload_parts(load_workload(copy), str(copy))
    except KerneloptError as exc:
        raise RunFailed(f"the run's copy of its workload ({copy}) no longer loads: {exc}") from None
    parts.origin.update(origin)
    initial = run_path / "initial.cu"
    if parts.initial_cu is None and initial.is_file():
        parts.initial_cu = initial.read_text(encoding="utf-8")
        parts.initial_launch, parts.initial_options = read_launch_beside(initial)
    return parts


class ResumedOptimizer(Optimizer):
    """The loop, started from a run's records instead of its parts (see the module docstring)."""

    def __init__(self, res: Resumption, display: Any) -> None:
        origin = (res.summary.get("workload") or {}).get("parts") or {}
        copy = torch_copy(res.run.path)
        parts = torch_parts(res.run.path, copy, origin) if copy is not None else rebuild_parts(res.freeze_args, origin)
        super().__init__(res.opts, res.run, display, parts)
        self.res = res
        self.reopened = False  # set once the server runs and the resume step is recorded
        st = self.state
        st.records = list(res.records)
        st.history = list(res.history)
        st.iterations_used = res.done
        st.started = float((res.summary.get("timings") or {}).get("started") or time.time())
        st.resumes = list(res.summary.get("resumes") or [])
        st.notes = [n for n in res.summary.get("notes") or [] if not str(n).startswith(FINALIZE_PROBLEMS)]
        st.duplicates = [e for e in res.history if isinstance(e, DuplicateEvent)]
        self.first_iteration = dict(res.first_iteration)
        unusable = [e for e in res.history if isinstance(e, ProfileUnavailableEvent)]
        self.evaluator.nsight_unusable = unusable[-1].message if unusable else ""
        for rec in st.records:  # proposals seen before are not evaluated again (loop.proposal_key's hash)
            if rec.kind in ("proposal", "repair"):
                text = json.dumps([rec.source, rec.launch, rec.compile_options], sort_keys=True)
                self.seen[hashlib.sha256(text.encode()).hexdigest()] = rec.label

    async def run_loop(self) -> None:
        res, st = self.res, self.state
        opts = st.opts
        assert st.parts is not None
        if needs_model(opts, st.parts):
            st.model = ModelClient(opts, st.run)
            st.model.usage = res.usage
            st.model.calls = list(res.model_calls)
            st.model.seconds = res.model_seconds
            st.model.notes = list((res.summary.get("model") or {}).get("notes") or [])
        async with Toolbox.start(opts, st.run, shared_dirs(st.parts), self.display.progress,
                                 workloads=workload_dirs(st.run.path)) as tools:
            st.tools = tools
            await self.read_gpu()
            self.check_device()
            self.put_aside_unfinished()
            st.resumes.append({
                "at": time.time(), "from_iteration": res.done + 1, "previous_status": res.status,
                "candidates_before": len(st.records), "pid": os.getpid(), "changed": res.changed, "notes": res.notes,
            })
            st.notes += [f"resume {len(st.resumes)}: {n}" for n in res.notes]
            st.event("resume", f"resuming {st.run.name} (was {res.status}) from iteration {res.done + 1}: "
                     f"{len(st.records)} candidates so far" + (f", best {b.label}" if (b := st.best()) else ""))
            self.reopened = True
            self.display.info(f"resuming from iteration {res.done + 1} of {opts.max_iterations} "
                              f"(was {res.status}; {len(st.records)} candidates so far)")
            await self.refreeze()
            self.checkpoint()
            await self.run_lanes()

    def check_device(self) -> None:
        """New timings must compare with the recorded ones: the same GPU model (another card of it is noted)."""
        device, name = self.state.device, self.state.run.name
        assert device is not None
        was = self.res.summary.get("provenance") or {}
        if was.get("device") and was["device"] != device.name:
            raise RunFailed(f"{name} was measured on {was['device']}; this server's GPU is {device.name}: "
                            "the timings would not compare. Resume it on the same GPU (--device), or start a new run")
        if was.get("device_uuid") and device.uuid and was["device_uuid"] != device.uuid:
            self.res.notes.append(f"resumed on another {device.name} (uuid {device.uuid}, was {was['device_uuid']})")

    def put_aside_unfinished(self) -> None:
        """A candidate directory without a recorded result (the run stopped while it was evaluated) moves to
        abandoned/, so the candidate that takes its number starts clean."""
        run = self.state.run
        labels = {r.label for r in self.state.records}
        for directory in sorted((run.path / "candidates").glob("*")):
            if directory.is_dir() and directory.name not in labels:
                target = run.path / "abandoned" / f"{directory.name}-resume{len(self.state.resumes) + 1}"
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(str(directory), str(target))
                self.res.notes.append(f"candidate {directory.name} had no result (its evaluation was cut short): "
                                      f"moved to {run.relative(target)}")

    async def refreeze(self) -> None:
        """Give the server (a new process) the run's frozen workload again: the recorded freeze_workload call
        with the recorded seed, which draws the same inputs; input_cases.json must come out unchanged. A
        PyTorch-reference run's workload is its copy, which the server was started with: nothing to give."""
        st = self.state
        assert st.tools is not None and st.parts is not None
        run = st.run
        copy = torch_copy(run.path)
        if copy is not None:
            st.frozen = torch_workload(st.parts, run)
            st.frozen.expected_from = str((self.res.summary.get("workload") or {}).get("expected_outputs")
                                          or st.frozen.expected_from)
            st.frozen.nvrtc_version = (self.res.summary.get("provenance") or {}).get("nvrtc")
            return
        before = (run.path / "input_cases.json").read_bytes() if (run.path / "input_cases.json").is_file() else None
        args = {**self.res.freeze_args, "seed": self.res.seed, "directory": str(run.path)}
        with self.display.activity("reloading the run's frozen workload"):
            result = await st.tools.call("freeze_workload", args)
        if result.is_error:
            raise RunFailed(f"kernelopt-mcp could not take the run's frozen workload again: {result.text}")
        after = (run.path / "input_cases.json").read_bytes() if (run.path / "input_cases.json").is_file() else None
        if before is not None and after != before:
            raise RunFailed("the run's workload, frozen again with its seed, drew other inputs than recorded "
                            "(input_cases.json changed: another kernelopt-mcp version?); the new candidates would not "
                            "compare with the old ones: start a new run")
        out = result.structured
        oracle = Path(args["oracle_path"]) if args.get("oracle_path") else None
        workload = Workload(spec=parse_spec(args["spec"], "the frozen workload"),
                            reference_cu=str(args["reference_cu"]), initial_cu=args.get("initial_cu"),
                            oracle_path=oracle, origin="frozen")
        ref_file = str((self.res.summary.get("workload") or {}).get("reference_file")
                       or ("reference.cu" if st.parts.reference_generated else "supplied-reference.cu"))
        st.frozen = FrozenWorkload(
            run, workload, ref_file, int(out["seed"]), str(out["expected_from"]), list(out.get("expected_cases") or []),
            nvrtc_version=out.get("nvrtc_version"), directory=Path(str(out.get("directory") or run.path)),
        )
        await st.frozen.keep_replays(st.tools, st.best(), st.reference())
