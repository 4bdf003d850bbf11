"""The optimization loop (see ``graph.py`` for its routes):

1. load the workload parts, research (--nvidia-research), generate what is missing;
2. freeze the inputs (PyTorch as the reference: copy the workload), run the reference, evaluate the initial kernel;
3. each iteration: propose (the model, with the server's tools) -> evaluate (benchmark through
   kernelopt-mcp) -> profile a performance case (--use-nsight, valid candidates) -> feed back;
   an invalid candidate is repaired in the next iteration, within the budget;
4. finalize: the fastest candidate that passes every case (geometric mean), its replay requests,
   the heatmap, history.json and summary.json.

``--candidates N`` runs N lanes of step 3 at once: each lane is the sequential loop above (its
own repairs), asked for a proposal distinct from the others'; their model requests are in flight
together while the server's GPUs evaluate whatever has arrived, one candidate per GPU at a time (``gpu_lock``).
A proposal identical to an earlier one (source, launch, options) is recorded, not evaluated.

All state lives in :class:`Optimizer`, so an interrupted run is finalized with what it has.
Every event is appended to history.jsonl as it happens (records.py has the types); history.json
and summary.json are rewritten at checkpoints (after the baseline, at each iteration's end).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from kernelopt_mcp.errors import KerneloptError
from kernelopt_mcp.launch import LaunchSpec
from kernelopt_mcp.tune.spec import Tunable, load_tunable, parse_tunable

from . import prompts
from .freeze import FrozenWorkload, copy_torch_workload, freeze, shared_dirs, torch_workload
from .generate import generate_parts
from .model import BudgetExhausted, ModelClient, check_key
from .options import OptimizeOptions
from .parts import Parts, PartsError, load_parts
from .progress import Display
from .proposal import Proposal
from .proposer import ask
from .records import (
    CandidateRecord,
    DuplicateEvent,
    Event,
    NoProposalEvent,
    ProfileEvent,
    ProfileUnavailableEvent,
    StepEvent,
    StopEvent,
    TuneEvent,
    pytorch_times,
)
from .rundir import RunDir
from .toolbox import DeviceInfo, Toolbox, ToolResult, model_text

REFERENCE_REGENERATIONS = 2


class RunFailed(RuntimeError):
    """The run cannot go on (no GPU, a broken reference); the message says why."""


def needs_model(opts: OptimizeOptions, parts: Parts) -> bool:
    """A model is asked when parts are to be generated or a --strategy llm iteration is to run."""
    return bool(parts.missing()) or (opts.max_iterations > 0 and opts.strategy != "tune")


def preflight(opts: OptimizeOptions) -> Parts:
    """Everything that can be checked before a run directory is made: the parts load, a tunable
    exists for --strategy tune, omitted parts have a description to come from, a model has a key.

    Raises:
        PartsError, RunFailed, ModelError: the run cannot start (the message says what to change).
    """
    parts = load_parts(opts)
    if opts.strategy == "tune" and parts.tunable is None:
        raise RunFailed(
            f"workload {parts.name!r} has no tunable.json, which --strategy tune tunes; pick a workload with "
            "one (bundled: sgemm, softmax, reduce_sum, transpose, layernorm) or set OPENAI_API_KEY for --strategy llm"
        )
    if parts.missing() and not parts.description:
        raise PartsError(f"the parts {', '.join(parts.missing())} are missing and there is no --description to "
                         "generate them from; pass --description \"...\" or the missing files")
    if needs_model(opts, parts):
        check_key(opts)
    return parts


class Optimizer:
    def __init__(
        self, opts: OptimizeOptions, run: RunDir, display: Display, parts: Parts | None = None, *,
        summarize: Callable[[Optimizer, str], dict[str, Any]],
    ) -> None:
        """``summarize(optimizer, status)`` is summary.json's content (``finalize.summary``): the
        caller passes it, since finalize reads the optimizer and the loop stays below it."""
        self.opts = opts
        self.summarize = summarize
        self.run = run
        self.display = display
        self.started = time.time()
        self.records: list[CandidateRecord] = []
        self.history: list[Event] = []
        self.lanes: dict[int | None, str] = {None: "begin"}  # the graph node each lane is at (None: the main one)
        self.gpu_lock = anyio.Semaphore(1)  # a GPU job per server GPU at a time (read_gpu): evaluations, profiles, tuning
        self.seen: dict[str, str] = {}  # proposal key (source, launch, options) -> the label that has it
        self.pending: dict[str, anyio.Event] = {}  # proposal key -> set once its evaluation is recorded
        self.duplicates: list[DuplicateEvent] = []
        self.in_flight: dict[int, str] = {}  # --candidates lane -> the rationale of its proposal being evaluated
        self.parts: Parts | None = parts  # from preflight(), else loaded by run_loop
        self.model: ModelClient | None = None
        self.tools: Toolbox | None = None
        self.frozen: FrozenWorkload | None = None
        self.device: DeviceInfo | None = None
        self.gpu_text = ""
        self.arch = "sm_90"
        self.guidance = ""
        self.iterations_used = 0
        self.stop_reason = ""
        self.notes: list[str] = []
        self.nsight_unusable = ""  # why ncu cannot profile on this server (found on the first try): no retries
        self.first_iteration: dict[int | None, int] = {}  # lane -> its first iteration (resume.py sets it)
        self.resumes: list[dict[str, Any]] = []  # each --resume of this run (summary.json's "resumes")

    # --- the loop ------------------------------------------------------------------------

    async def run_loop(self) -> None:
        """Steps 1-3; finalize() is called by the caller whatever happens here."""
        opts = self.opts
        self.event("load", "loading the workload parts")
        if self.parts is None:
            self.parts = preflight(opts)
        tuning = opts.strategy == "tune"
        if needs_model(opts, self.parts):
            self.model = ModelClient(opts, self.run)  # fails now on a missing API key
        # a PyTorch-reference workload is copied before the server starts: it finds the copy as a configured workload
        copies = [copy_torch_workload(self.parts, self.run).parent] if self.parts.torch_reference else []
        async with Toolbox.start(opts, self.run, shared_dirs(self.parts), self.display.progress, workloads=copies) as tools:
            self.tools = tools
            await self.read_gpu()
            if opts.nvidia_research:
                await self.research()
            if self.parts.missing():
                assert self.model is not None
                self.event("generate", f"generating {', '.join(self.parts.missing())} from the description")
                with self.display.activity(f"generating {', '.join(self.parts.missing())}"):
                    self.parts = await generate_parts(self.parts, self.model, tools, gpu_summary=self.gpu_text,
                                                      guidance=self.guidance, arch=self.arch, on_retry=self.regenerating)
            await self.freeze()
            await self.baseline()
            self.checkpoint()
            if tuning:
                self.event("tune", "autotuning the workload's tunable.json")
                await self.tune_workload()
                return
            await self.run_lanes()

    async def run_lanes(self) -> None:
        """Step 3: one lane, or --candidates N lanes at once (each starts where the baseline, or a resume, left it)."""
        if self.opts.candidates == 1:
            await self.lane(None)
        else:
            for slot in range(1, self.opts.candidates + 1):
                self.lanes[slot] = self.lanes[None]
            async with anyio.create_task_group() as lanes:
                for slot in range(1, self.opts.candidates + 1):
                    lanes.start_soon(self.lane, slot)
        self.stop_reason = self.stop_reason or f"--max-iterations {self.opts.max_iterations} done"

    async def lane(self, slot: int | None) -> None:
        """Iterations first_iteration (1; a resume's next)..--max-iterations of one lane; a budget stops every lane."""
        for iteration in range(self.first_iteration.get(slot, 1), self.opts.max_iterations + 1):
            if self.stop_reason:
                return
            self.iterations_used = max(self.iterations_used, iteration)
            try:
                await self.iterate(iteration, slot)
            except BudgetExhausted as exc:
                if not self.stop_reason:
                    self.stop_reason = str(exc)
                    self.record(StopEvent(reason=str(exc)))
                    self.display.info(f"stopping: {exc}", "yellow")
                return
            finally:
                self.checkpoint()

    async def read_gpu(self) -> None:
        assert self.tools is not None
        result = await self.tools.call("gpu_properties", {})
        if result.is_error:
            raise RunFailed(f"kernelopt-mcp cannot use a GPU: {result.text}")
        self.device = DeviceInfo.model_validate(result.structured["device"])
        self.gpu_lock = anyio.Semaphore(max(1, len(result.structured.get("devices") or [])))  # --candidates N fill them
        self.arch = self.opts.arch or self.device.arch
        self.gpu_text = result.text
        self.display.info(f"GPU: {self.device.name} ({self.arch}), driver {self.device.driver_version_str}")

    async def research(self) -> None:
        assert self.tools is not None and self.parts is not None
        if not self.tools.has("docs_search"):
            self.notes.append("--nvidia-research: this kernelopt-mcp has no docs_search tool; no guidance was retrieved")
            self.display.warn(self.notes[-1])
            return
        schema = (self.tools.tools["docs_search"].input_schema or {}).get("properties", {}).get("query", {})
        query = prompts.search_query(self.parts.description or self.parts.name, int(schema.get("maxLength") or 300))
        args = fit_arguments(self.tools.tools["docs_search"], {"query": query, "arch": self.arch, "limit": 6, "top_k": 6})
        self.event("research", f"docs_search: {query}")
        with self.display.activity("retrieving NVIDIA guidance"):
            result = await self.tools.call("docs_search", args)
        if result.is_error:
            self.notes.append(f"--nvidia-research: docs_search failed: {result.text[:300]}")
            self.display.warn(self.notes[-1])
            return
        self.guidance = result.text[:6000]
        self.run.write_text("research.md", f"# docs_search: {query}\n\n{result.text}\n")

    async def freeze(self) -> None:
        """The server's freeze_workload: the parts' inputs drawn once and expected outputs, in the run directory.
        A PyTorch-reference workload is not frozen: the run's copy of it is its workload (freeze.torch_workload)."""
        assert self.parts is not None and self.tools is not None
        if self.parts.torch_reference:
            self.event("freeze", "nothing frozen: the run's copy of the workload is evaluated, PyTorch its reference")
            self.frozen = torch_workload(self.parts, self.run)
        else:
            self.event("freeze", "writing the parts, drawing inputs, computing expected outputs")
            seed = self.frozen.seed if self.frozen else None
            with self.display.activity("drawing inputs and expected outputs"):
                self.frozen = await freeze(self.parts, self.run, self.tools, seed=seed, warmup=self.opts.warmup,
                                           iterations=self.opts.iterations)
        self.display.info(f"workload {self.frozen.name}: {len(self.frozen.case_names)} cases "
                          f"({len(self.frozen.performance_cases)} timed); expected outputs: {self.frozen.expected_from}")

    async def baseline(self) -> None:
        """Run the reference (regenerating a generated one that fails; none where PyTorch is it) and the initial kernel."""
        assert self.parts is not None
        self.event("baseline", "evaluating the initial kernel" if self.parts.torch_reference else "running the reference and the initial kernel")
        for attempt in range(0 if self.parts.torch_reference else REFERENCE_REGENERATIONS + 1):
            ref = await self.evaluate("reference", None, self.parts.reference_cu or "", self.parts.reference_launch,
                                      self.parts.reference_options, "the workload's CUDA reference")
            if ref.valid:
                break
            if not self.parts.reference_generated or self.model is None or attempt == REFERENCE_REGENERATIONS:
                raise RunFailed(f"the CUDA reference fails: {ref.message}")
            self.event("generate", "regenerating the reference after it failed")
            feedback = f"the reference kernel failed: {ref.feedback}"
            self.parts.reference_cu = None
            self.parts.reference_launch = None
            self.parts = await generate_parts(self.parts, self.model, self.tools, gpu_summary=self.gpu_text,  # type: ignore[arg-type]
                                              guidance=self.guidance, feedback=feedback, arch=self.arch,
                                              on_retry=self.regenerating)
            await self.freeze()
            self.event("baseline", "running the regenerated reference")
        if self.parts.initial_cu is not None:
            init = await self.evaluate("initial", None, self.parts.initial_cu, self.parts.initial_launch,
                                       self.parts.initial_options, "the starting kernel")
            if init.valid and self.opts.use_nsight:
                await self.profile(init, step=False)

    async def iterate(self, iteration: int, slot: int | None = None) -> None:
        """One iteration of one lane: propose (or repair its last candidate), evaluate, profile."""
        assert self.model is not None
        last = self.last_candidate(slot)
        repair = last is not None and not last.valid and last.kind != "reference"
        self.model.check_budget()  # a spent budget routes to finalize before a step is taken
        where = f"iteration {iteration}" + (f" candidate {slot}" if slot else "")
        self.event("repair" if repair else "propose", where + (f": repair {last.label}" if repair and last else ""), lane=slot)
        state = self.state_text(iteration, repair, last, slot)
        asked = await ask(self, iteration, repair, slot, state)
        proposal, calls = asked.proposal, asked.calls
        if proposal is None:
            status, message = asked.problem
            self.record(NoProposalEvent(iteration=iteration, slot=slot, status=status, message=message, model_calls=calls))
            self.display.info(f"[{where}] no usable proposal: {status}: {message[:200]}", "red")
            return
        key = proposal_key(proposal)
        if key in self.pending:  # the same kernel from another lane is being evaluated: wait for its label
            await self.pending[key].wait()
        if key in self.seen:
            dup = DuplicateEvent(iteration=iteration, slot=slot, same_as=self.seen[key], model_calls=calls)
            self.duplicates.append(dup)
            self.record(dup)
            self.display.info(f"[{where}] the same kernel as {dup.same_as}: not evaluated again", "yellow")
            return
        self.pending[key] = anyio.Event()
        if slot is not None:
            self.in_flight[slot] = proposal.rationale
        kind = "repair" if repair else "proposal"
        async with self.gpu_lock:
            if proposal.tunables:
                self.event("tune", f"{where}: tuning the proposal's parameters", lane=slot)
                rec = await self.tune_proposal(kind, iteration, proposal, calls, slot)
            else:
                rec = await self.evaluate(kind, iteration, proposal.source, proposal.launch, proposal.compile_options,
                                          proposal.rationale, calls, slot=slot)
            self.seen[key] = rec.label
            self.pending.pop(key).set()
            self.in_flight.pop(slot or 0, None)
            if rec.valid and self.opts.use_nsight:
                await self.profile(rec, lane=slot)

    # --- tuning ----------------------------------------------------------------------------

    async def autotune(self, tunable: Tunable, budget_evals: int, budget_s: float | None, label: str) -> ToolResult:
        """The server's autotune tool on the frozen workload; tune.json / tune.csv kept under tuning/<label>/."""
        assert self.tools is not None and self.frozen is not None
        args: dict[str, Any] = {
            "workload": self.frozen.name, "source": tunable.source, "budget_evals": budget_evals, "top": 100,
            "tunable": tunable.spec.model_dump(mode="json", exclude={"source"}),
        }
        if budget_s is not None:
            args["budget_s"] = budget_s
        args.update(self.opts.timing_args)
        with self.display.activity(f"{label}: tuning up to {budget_evals} configurations on the GPU"):
            result = await self.tools.call("autotune", args)
        self.run.write_json(f"tuning/{label}/autotune.json", {"tool_call": result.number, "is_error": result.is_error,
                                                             "result": result.structured, "text": result.text})
        saved = Path(str(result.structured.get("saved_to") or ""))
        for name in ("tune.json", "tune.csv"):
            if result.structured.get("saved_to") and (saved / name).is_file():
                self.run.write_bytes(f"tuning/{label}/{name}", (saved / name).read_bytes())
        self.record(TuneEvent(label=label, is_error=result.is_error, status=result.structured.get("status"),
                              best_params=result.structured.get("best_params"), counts=result.structured.get("counts")))
        return result

    async def tune_workload(self) -> None:
        """--strategy tune: autotune the workload's tunable.json, then benchmark the untuned and the
        best configuration as ordinary candidates (so history, summary, best.cu and the heatmap hold them)."""
        assert self.parts is not None and self.parts.tunable is not None
        try:
            tunable = load_tunable(self.parts.tunable)
        except KerneloptError as exc:
            raise RunFailed(str(exc)) from None
        result = await self.autotune(tunable, self.opts.tune_evals, self.opts.tune_seconds, "workload")
        if result.is_error:
            raise RunFailed(f"autotune failed: {result.text}")
        out = result.structured
        for line in (result.text.splitlines()[:2] if result.text else ["tuned"]):  # the outcome; the best and untuned
            self.display.info(line)
        source, launch, options = tunable.materialize(out["untuned_params"])
        await self.evaluate("untuned", None, source, launch, options, f"tunable.json defaults {out['untuned_params']}",
                            step=True)
        if out.get("best_params") is not None and out["best_params"] != out["untuned_params"]:
            source, launch, options = tunable.materialize(out["best_params"])
            c = out["counts"]
            await self.evaluate("tuned", None, source, launch, options,
                                f"autotuned ({out['strategy']}, {c['tried']} configurations): {out['best_params']}")
        self.stop_reason = f"tuning done: {out.get('stop_reason', '')}"

    async def tune_proposal(self, kind: str, iteration: int, proposal: Proposal, calls: list[int],
                            slot: int | None = None) -> CandidateRecord:
        """A proposal with tunables: tune it (--tune-budget configurations), then evaluate its best configuration.
        If it cannot be tuned, the proposal is evaluated as written (its macros' own defaults)."""
        assert proposal.tunables is not None
        spec = {**proposal.tunables, "launch": proposal.launch_json(), "compile_options": proposal.compile_options}
        note = ""
        source, launch, options = proposal.source, proposal.launch, proposal.compile_options
        try:
            tunable = parse_tunable(spec, proposal.source, "the proposal's tunables")
        except KerneloptError as exc:
            note = f"its tunables were not tuned: {exc}"
        else:
            result = await self.autotune(tunable, self.opts.tune_budget, None, f"it{iteration}" + (f"-{slot}" if slot else ""))
            out = result.structured
            best = None if result.is_error else out.get("best_params")
            source, launch, options = tunable.materialize(best if best is not None else tunable.spec.defaults)
            if best is not None:
                rec = await self.evaluate(kind, iteration, source, launch, options,
                                          f"{proposal.rationale} [tuned {out['counts']['tried']} configurations: best "
                                          f"{best}]", calls, slot=slot)
                rec.feedback += f"\nTuning of the proposal's parameters:\n{result.text[:3000]}"
                return rec
            note = f"tuning found no valid configuration, so its defaults were evaluated: {result.text[:1500]}"
        rec = await self.evaluate(kind, iteration, source, launch, options, f"{proposal.rationale} [{note[:300]}]", calls,
                                  slot=slot)
        rec.feedback += f"\n{note}"
        return rec

    def last_candidate(self, slot: int | None = None) -> CandidateRecord | None:
        """The newest candidate (of the --candidates lane ``slot``: its own, else the baseline's newest)."""
        if slot is not None:
            own = [r for r in self.records if r.slot == slot]
            if own:
                return own[-1]
            base = [r for r in self.records if r.iteration is None]
            return base[-1] if base else None
        return self.records[-1] if self.records else None

    def best(self) -> CandidateRecord | None:
        """The fastest candidate (geometric mean) that passes every case; the reference does not compete."""
        valid = [r for r in self.records if r.valid and r.kind != "reference"]
        timed = [r for r in valid if r.score_ms]
        if timed:
            return min(timed, key=lambda r: r.score_ms or 0.0)
        return valid[0] if valid else None

    def reference(self) -> CandidateRecord | None:
        refs = [r for r in self.records if r.kind == "reference" and r.valid]
        return refs[-1] if refs else None

    # --- proposing -----------------------------------------------------------------------

    def tool_names(self) -> list[str]:
        names = ["gpu_properties", "compile"]
        if self.opts.nvidia_research:
            names.append("docs_search")
        if self.opts.use_nsight and not self.nsight_unusable:
            names.append("ncu_profile")
        return names

    def checks_in_force(self) -> list[str]:
        """The checks of the newest evaluation that reported any (what the model may be told)."""
        return next((r.checks for r in reversed(self.records) if r.checks), [])

    def workload_text(self) -> str:
        assert self.frozen is not None
        return prompts.workload_prompt(self.frozen, self.gpu_text, self.reference(), self.guidance)

    def state_text(self, iteration: int, repair: bool, last: CandidateRecord | None, slot: int | None) -> str:
        """The iteration's state prompt, fitted to what the budget leaves after the system and workload prompts."""
        assert self.frozen is not None
        parallel = ""
        if slot is not None:
            others = [f"  candidate {k}: {why[:300]}" for k, why in sorted(self.in_flight.items()) if k != slot and why]
            parallel = (f"You are candidate {slot} of {self.opts.candidates} proposals made in parallel this iteration; each "
                        "must be a different idea (an identical kernel is not evaluated again). "
                        + (f"Lean towards {prompts.DIRECTIONS[(slot - 1) % (len(prompts.DIRECTIONS) - 1) + 1]}. " if slot > 1 else "")
                        + ("The other candidates now being evaluated:\n" + "\n".join(others) if others else ""))
        dups = [f"{d.iteration}" + (f".{d.slot}" if d.slot else "") + f" repeated {d.same_as}" for d in self.duplicates[-5:]]
        room = prompts.PROMPT_BUDGET_TOKENS * prompts.CHARS_PER_TOKEN - len(prompts.system_prompt(self.tool_names())) \
            - len(self.workload_text())
        return prompts.state_prompt(
            self.records, self.best(), last, self.reference(), iteration, self.opts.max_iterations, repair,
            self.frozen.performance_cases, self.checks_in_force(), parallel=parallel, duplicates=dups, budget_chars=room)

    # --- evaluating ----------------------------------------------------------------------

    async def evaluate(
        self, kind: str, iteration: int | None, source: str, launch: LaunchSpec | None, options: list[str],
        rationale: str, calls: list[int] | None = None, *, slot: int | None = None, step: bool | None = None,
    ) -> CandidateRecord:
        """Benchmark one candidate through the server; ``step``: record the graph's evaluate step
        (default: for the loop's own candidates, not the baseline's reference and initial kernel)."""
        assert self.tools is not None and self.frozen is not None
        index = len(self.records)
        name = kind if iteration is None else f"it{iteration}" + (f"-{slot}" if slot else "") + ("-repair" if kind == "repair" else "")
        label = f"{index:03d}-{name}"
        launch_json = launch.model_dump(mode="json", exclude_none=True) if launch is not None else {}
        rec = CandidateRecord(index, label, kind, iteration, source, launch_json, list(options), rationale,
                              model_calls=list(calls or []), slot=slot)
        self.run.write_text(f"{rec.dir}/source.cu", source)
        self.run.write_json(f"{rec.dir}/launch.json", {"launch": launch_json, "compile_options": list(options)})
        if self.frozen.torch:  # `kernelopt evaluate workload/<name> candidates/<label>/source.cu` replays it (launch beside)
            self.run.write_json(f"{rec.dir}/source.launch.json", {"launch": launch_json, "compile_options": list(options)})
        args: dict[str, Any] = {"workload": self.frozen.name, "source": source, "launch": launch_json}
        if options:
            args["compile_options"] = list(options)
        args.update(self.opts.timing_args)
        self.run.write_json(f"{rec.dir}/request.json", {"tool": "benchmark", "arguments": args, "rationale": rationale})
        if step if step is not None else iteration is not None:
            self.event("evaluate", f"{label}: benchmark", lane=slot)
        start = time.monotonic()
        with self.display.activity(f"{label}: validating and timing on the GPU"):
            result = await self.tools.call("benchmark", args)
        rec.seconds = time.monotonic() - start
        rec.tool_call = result.number
        self.run.write_json(f"{rec.dir}/result.json", {"tool_call": result.number, "is_error": result.is_error,
                                                       "result": result.structured, "text": result.text})
        out = result.structured
        if result.is_error:
            rec.status, rec.message = "tool_error", result.text
        else:
            rec.status = out.get("status", "unknown")
            rec.message = out.get("message", "")
            rec.score_ms, rec.speedup = out.get("score_ms"), out.get("speedup")
            rec.pytorch = pytorch_times(out.get("torch_baseline"))
            rec.checks = [str(c) for c in out.get("checks") or []]
            rec.host_ms = {str(k): float(v) for k, v in (out.get("phases") or {}).items() if isinstance(v, int | float)}
            rec.device = f"{out['device_ordinal']} {out.get('device_uuid') or ''}".strip() if out.get("device_ordinal") is not None else None
            for case in out.get("cases", []):
                rec.case_status[case["name"]] = case["status"]
                if case.get("timing"):
                    rec.case_ms[case["name"]] = case["timing"]["median_ms"]
        rec.feedback = prompts.feedback_text(result.text, out)
        self.frozen.heard(out)
        self.records.append(rec)
        if rec.valid:  # replay requests of a new best (or reference), so an interrupted run has them
            await self.frozen.keep_replays(self.tools, self.best(), self.reference())
        self.record(rec.as_event())
        self.display.candidate(rec, self.best(), self.model.usage.total_tokens if self.model else 0)
        return rec

    async def profile(self, rec: CandidateRecord, *, step: bool = True, lane: int | None = None) -> None:
        """ncu_profile of one performance case (the one furthest behind the reference); the caller holds the GPU."""
        assert self.tools is not None and self.frozen is not None
        if step:  # the route is taken whether or not ncu can run here
            self.event("profile", f"{rec.label}: ncu_profile" + (" skipped: ncu cannot run here" if self.nsight_unusable else ""),
                       lane=lane)
        if self.nsight_unusable:
            return  # said once already (console and summary notes); no retry per candidate
        if not self.tools.has("ncu_profile"):
            if not any("ncu_profile" in n for n in self.notes):
                self.notes.append("--use-nsight: this kernelopt-mcp has no ncu_profile tool; nothing was profiled")
                self.display.warn(self.notes[-1])
            return
        ref = self.reference()
        cases = self.frozen.performance_cases or self.frozen.case_names
        if ref is not None and rec.case_ms:
            cases = sorted(cases, key=lambda c: -(rec.case_ms.get(c, 0.0) / max(ref.case_ms.get(c, 1e-9), 1e-9)))
        case = cases[0]
        args = fit_arguments(self.tools.tools["ncu_profile"], {
            "workload": self.frozen.name, "source": rec.source, "launch": rec.launch,
            "compile_options": rec.compile_options or None, "case": case, "case_name": case,
        })
        with self.display.activity(f"{rec.label}: profiling {case} with Nsight Compute"):
            result = await self.tools.call("ncu_profile", args)
        if result.is_error and ncu_unusable(result.text):
            self.nsight_unusable = result.text
            self.notes.append(f"--use-nsight: nothing was profiled: Nsight Compute cannot run on the server ({result.text[:400]})")
            self.display.warn(self.notes[-1])
            self.record(ProfileUnavailableEvent(label=rec.label, message=result.text))
            self.run.write_json(f"{rec.dir}/profile.json", {"case": case, "is_error": True, "result": result.structured,
                                                            "text": result.text})
            return
        rec.profile_case = case
        rec.profile_text = model_text(result)[:4000]
        self.run.write_json(f"{rec.dir}/profile.json", {"case": case, "is_error": result.is_error,
                                                        "result": result.structured, "text": result.text})
        for path in report_paths(result.structured):
            target = self.run.path / "profiles" / f"{rec.label}-{case}{path.suffix}"
            target.parent.mkdir(parents=True, exist_ok=True)
            self.run.write_bytes(target.relative_to(self.run.path), path.read_bytes())
            rec.profile_files.append(self.run.relative(target))
        self.record(ProfileEvent(label=rec.label, case=case, is_error=result.is_error, files=rec.profile_files))

    # --- records ---------------------------------------------------------------------------

    def record(self, event: Event) -> None:
        """Keep an event and append it to history.jsonl at once (durable before the loop goes on)."""
        self.history.append(event)
        self.run.append_jsonl("history.jsonl", event.model_dump(mode="json"))

    def event(self, node: str, message: str, *, lane: int | None = None) -> None:
        """The loop enters ``node`` of the graph; ``lane``: the --candidates lane taking the route."""
        came_from = self.lanes.get(lane, self.lanes[None])
        self.lanes[lane] = node
        if lane is not None:
            self.lanes[None] = node  # the main lane follows the newest step (finalize comes from it)
        self.record(StepEvent(node=node, came_from=came_from, message=message))

    def regenerating(self, problems: str) -> None:
        self.event("generate", f"the generated parts have problems; asking again: {problems[:300]}")

    def finishing(self, status: str) -> None:
        """The finalize step (called just before finalize.finalize writes the records): ``status`` says
        whether it came by its routes or because the run was interrupted or failed."""
        if self.history:
            self.event("finalize", status)
            self.event("done", status)

    def checkpoint(self) -> None:
        """history.json and summary.json, whole and atomically (the events are in history.jsonl already)."""
        self.run.write_json("history.json", self.history)
        self.run.write_json("summary.json", self.summarize(self, "running"))

    write_progress = checkpoint


def proposal_key(proposal: Proposal) -> str:
    """What makes two proposals the same experiment: source, launch and compile options."""
    text = json.dumps([proposal.source, proposal.launch_json(), proposal.compile_options], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def ncu_unusable(text: str) -> bool:
    """A profile error that every later candidate would get too: ncu missing, or its counters not permitted
    (the server's texts for ToolchainNotFound and ERR_NVGPUCTRPERM); a failing kernel is not one of them."""
    return "the server is missing a tool" in text or "ERR_NVGPUCTRPERM" in text


def fit_arguments(tool: Any, wanted: dict[str, Any]) -> dict[str, Any]:
    """The subset of ``wanted`` that a tool's input schema has (tools evolve; ask only what they take)."""
    props = (tool.input_schema or {}).get("properties", {})
    return {k: v for k, v in wanted.items() if k in props and v is not None}


def report_paths(structured: dict[str, Any]) -> list[Path]:
    """Existing report files a profile result names (keys mentioning 'report' or 'path')."""
    found = []
    for key, value in structured.items():
        if isinstance(value, str) and ("report" in key or key.endswith("path")):
            path = Path(value)
            if path.suffix in (".ncu-rep", ".csv", ".json", ".txt") and path.is_file() and path.stat().st_size < 512 * 2**20:
                found.append(path)
    return found

