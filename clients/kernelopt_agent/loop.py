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

What the run has learned lives in one :class:`~.state.RunState` (the optimizer's ``state``), which
finalize takes, so an interrupted run is finalized with what it has; the candidates are benchmarked,
profiled and tuned by ``evaluator.py``. Every event is appended to history.jsonl as it happens
(records.py has the types); history.json and summary.json are rewritten at checkpoints (after the
baseline, at each iteration's end).
"""

from __future__ import annotations

import hashlib
import json

import anyio

from kernelopt_mcp.errors import KerneloptError
from kernelopt_mcp.tune.spec import load_tunable

from . import prompts
from .evaluator import Evaluator, fit_arguments
from .finalize import summary
from .freeze import copy_torch_workload, freeze, shared_dirs, torch_workload
from .generate import generate_parts
from .model import BudgetExhausted, ModelClient, check_key
from .options import OptimizeOptions
from .parts import Parts, PartsError, load_parts
from .progress import Display
from .proposal import Proposal
from .proposer import ask
from .records import CandidateRecord, DuplicateEvent, NoProposalEvent, StopEvent
from .rundir import RunDir
from .state import RunState
from .toolbox import DeviceInfo, Toolbox

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
    """Steps 1-3 of a run: the routes of ``graph.py``, taken one lane at a time or --candidates N at once.

    What the run has learned is :attr:`state` (a :class:`RunState`: the records finalize writes);
    the candidates are benchmarked, profiled and tuned by :attr:`evaluator`. What stays here is how
    the loop goes about it: the lanes, the proposals in flight and the prompts."""

    def __init__(self, opts: OptimizeOptions, run: RunDir, display: Display, parts: Parts | None = None) -> None:
        self.state = RunState(opts, run, parts=parts)  # parts: from preflight(), else loaded by run_loop
        self.display = display
        self.evaluator = Evaluator(self.state, display)
        # a GPU job per server GPU at a time (read_gpu): evaluations, profiles, tuning
        self.gpu_lock = anyio.Semaphore(1)
        self.seen: dict[str, str] = {}  # proposal key (source, launch, options) -> the label that has it
        self.pending: dict[str, anyio.Event] = {}  # proposal key -> set once its evaluation is recorded
        self.in_flight: dict[int, str] = {}  # --candidates lane -> the rationale of its proposal being evaluated
        self.first_iteration: dict[int | None, int] = {}  # lane -> its first iteration (resume.py sets it)
        self.gpu_text = ""
        self.guidance = ""

    # --- the loop ------------------------------------------------------------------------

    async def run_loop(self) -> None:
        """Steps 1-3; finalize() is called by the caller whatever happens here."""
        st = self.state
        st.event("load", "loading the workload parts")
        if st.parts is None:
            st.parts = preflight(st.opts)
        tuning = st.opts.strategy == "tune"
        if needs_model(st.opts, st.parts):
            st.model = ModelClient(st.opts, st.run)  # fails now on a missing API key
        # a PyTorch-reference workload is copied before the server starts: it finds the copy as a configured workload
        copies = [copy_torch_workload(st.parts, st.run).parent] if st.parts.torch_reference else []
        async with Toolbox.start(st.opts, st.run, shared_dirs(st.parts), self.display.progress,
                                 workloads=copies) as tools:
            st.tools = tools
            await self.read_gpu()
            if st.opts.nvidia_research:
                await self.research()
            if st.parts.missing():
                assert st.model is not None
                st.event("generate", f"generating {', '.join(st.parts.missing())} from the description")
                with self.display.activity(f"generating {', '.join(st.parts.missing())}"):
                    st.parts = await generate_parts(st.parts, st.model, tools, gpu_summary=self.gpu_text,
                                                    guidance=self.guidance, arch=st.arch, on_retry=self.regenerating)
            await self.freeze()
            await self.baseline()
            self.checkpoint()
            if tuning:
                st.event("tune", "autotuning the workload's tunable.json")
                await self.tune_workload()
                return
            await self.run_lanes()

    async def run_lanes(self) -> None:
        """Step 3: one lane, or --candidates N lanes at once (each starts where the baseline, or a resume, left it)."""
        st = self.state
        if st.opts.candidates == 1:
            await self.lane(None)
        else:
            for slot in range(1, st.opts.candidates + 1):
                st.lanes[slot] = st.lanes[None]
            async with anyio.create_task_group() as lanes:
                for slot in range(1, st.opts.candidates + 1):
                    lanes.start_soon(self.lane, slot)
        st.stop_reason = st.stop_reason or f"--max-iterations {st.opts.max_iterations} done"

    async def lane(self, slot: int | None) -> None:
        """Iterations first_iteration (1; a resume's next)..--max-iterations of one lane; a budget stops every lane."""
        st = self.state
        for iteration in range(self.first_iteration.get(slot, 1), st.opts.max_iterations + 1):
            if st.stop_reason:
                return
            st.iterations_used = max(st.iterations_used, iteration)
            try:
                await self.iterate(iteration, slot)
            except BudgetExhausted as exc:
                if not st.stop_reason:
                    st.stop_reason = str(exc)
                    st.record(StopEvent(reason=str(exc)))
                    self.display.info(f"stopping: {exc}", "yellow")
                return
            finally:
                self.checkpoint()

    async def read_gpu(self) -> None:
        st = self.state
        assert st.tools is not None
        result = await st.tools.call("gpu_properties", {})
        if result.is_error:
            raise RunFailed(f"kernelopt-mcp cannot use a GPU: {result.text}")
        st.device = DeviceInfo.model_validate(result.structured["device"])
        self.gpu_lock = anyio.Semaphore(max(1, len(result.structured.get("devices") or [])))  # --candidates N fill them
        st.arch = st.opts.arch or st.device.arch
        self.gpu_text = result.text
        self.display.info(f"GPU: {st.device.name} ({st.arch}), driver {st.device.driver_version_str}")

    async def research(self) -> None:
        st = self.state
        assert st.tools is not None and st.parts is not None
        if not st.tools.has("docs_search"):
            st.notes.append("--nvidia-research: this kernelopt-mcp has no docs_search tool; no guidance was retrieved")
            self.display.warn(st.notes[-1])
            return
        schema = (st.tools.tools["docs_search"].input_schema or {}).get("properties", {}).get("query", {})
        query = prompts.search_query(st.parts.description or st.parts.name, int(schema.get("maxLength") or 300))
        args = fit_arguments(st.tools.tools["docs_search"], {"query": query, "arch": st.arch, "limit": 6, "top_k": 6})
        st.event("research", f"docs_search: {query}")
        with self.display.activity("retrieving NVIDIA guidance"):
            result = await st.tools.call("docs_search", args)
        if result.is_error:
            st.notes.append(f"--nvidia-research: docs_search failed: {result.text[:300]}")
            self.display.warn(st.notes[-1])
            return
        self.guidance = result.text[:6000]
        st.run.write_text("research.md", f"# docs_search: {query}\n\n{result.text}\n")

    async def freeze(self) -> None:
        """The server's freeze_workload: the parts' inputs drawn once and expected outputs, in the run directory.
        A PyTorch-reference workload is not frozen: the run's copy of it is its workload (freeze.torch_workload)."""
        st = self.state
        assert st.parts is not None and st.tools is not None
        if st.parts.torch_reference:
            st.event("freeze", "nothing frozen: the run's copy of the workload is evaluated, PyTorch its reference")
            st.frozen = torch_workload(st.parts, st.run)
        else:
            st.event("freeze", "writing the parts, drawing inputs, computing expected outputs")
            seed = st.frozen.seed if st.frozen else None
            with self.display.activity("drawing inputs and expected outputs"):
                st.frozen = await freeze(st.parts, st.run, st.tools, seed=seed, warmup=st.opts.warmup,
                                         iterations=st.opts.iterations)
        self.display.info(f"workload {st.frozen.name}: {len(st.frozen.case_names)} cases "
                          f"({len(st.frozen.performance_cases)} timed); expected outputs: {st.frozen.expected_from}")

    async def baseline(self) -> None:
        """Run the reference (regenerating a generated one that fails; none where PyTorch is it) and the initial
        kernel."""
        st, evaluate = self.state, self.evaluator.evaluate
        assert st.parts is not None
        st.event("baseline", ("evaluating the initial kernel" if st.parts.torch_reference
                              else "running the reference and the initial kernel"))
        for attempt in range(0 if st.parts.torch_reference else REFERENCE_REGENERATIONS + 1):
            ref = await evaluate("reference", None, st.parts.reference_cu or "", st.parts.reference_launch,
                                 st.parts.reference_options, "the workload's CUDA reference")
            if ref.valid:
                break
            if not st.parts.reference_generated or st.model is None or attempt == REFERENCE_REGENERATIONS:
                raise RunFailed(f"the CUDA reference fails: {ref.message}")
            st.event("generate", "regenerating the reference after it failed")
            feedback = f"the reference kernel failed: {ref.feedback}"
            st.parts.reference_cu = None
            st.parts.reference_launch = None
            st.parts = await generate_parts(st.parts, st.model, st.tools, gpu_summary=self.gpu_text,  # type: ignore[arg-type]
                                            guidance=self.guidance, feedback=feedback, arch=st.arch,
                                            on_retry=self.regenerating)
            await self.freeze()
            st.event("baseline", "running the regenerated reference")
        if st.parts.initial_cu is not None:
            init = await evaluate("initial", None, st.parts.initial_cu, st.parts.initial_launch,
                                  st.parts.initial_options, "the starting kernel")
            if init.valid and st.opts.use_nsight:
                await self.evaluator.profile(init, step=False)

    async def iterate(self, iteration: int, slot: int | None = None) -> None:
        """One iteration of one lane: propose (or repair its last candidate), evaluate, profile."""
        st = self.state
        assert st.model is not None
        last = st.last_candidate(slot)
        repair = last is not None and not last.valid and last.kind != "reference"
        st.model.check_budget()  # a spent budget routes to finalize before a step is taken
        where = f"iteration {iteration}" + (f" candidate {slot}" if slot else "")
        st.event("repair" if repair else "propose",
                 where + (f": repair {last.label}" if repair and last else ""), lane=slot)
        state = self.state_text(iteration, repair, last, slot)
        asked = await ask(self, iteration, repair, slot, state)
        proposal, calls = asked.proposal, asked.calls
        if proposal is None:
            status, message = asked.problem
            st.record(NoProposalEvent(iteration=iteration, slot=slot, status=status, message=message,
                                      model_calls=calls))
            self.display.info(f"[{where}] no usable proposal: {status}: {message[:200]}", "red")
            return
        key = proposal_key(proposal)
        if key in self.pending:  # the same kernel from another lane is being evaluated: wait for its label
            await self.pending[key].wait()
        if key in self.seen:
            dup = DuplicateEvent(iteration=iteration, slot=slot, same_as=self.seen[key], model_calls=calls)
            st.duplicates.append(dup)
            st.record(dup)
            self.display.info(f"[{where}] the same kernel as {dup.same_as}: not evaluated again", "yellow")
            return
        self.pending[key] = anyio.Event()
        if slot is not None:
            self.in_flight[slot] = proposal.rationale
        kind = "repair" if repair else "proposal"
        async with self.gpu_lock:
            if proposal.tunables:
                st.event("tune", f"{where}: tuning the proposal's parameters", lane=slot)
                rec = await self.evaluator.tune_proposal(kind, iteration, proposal, calls, slot)
            else:
                rec = await self.evaluator.evaluate(kind, iteration, proposal.source, proposal.launch,
                                                    proposal.compile_options, proposal.rationale, calls, slot=slot)
            self.seen[key] = rec.label
            self.pending.pop(key).set()
            self.in_flight.pop(slot or 0, None)
            if rec.valid and st.opts.use_nsight:
                await self.evaluator.profile(rec, lane=slot)

    async def tune_workload(self) -> None:
        """--strategy tune: autotune the workload's tunable.json, then benchmark the untuned and the
        best configuration as ordinary candidates (so history, summary, best.cu and the heatmap hold them)."""
        st, evaluate = self.state, self.evaluator.evaluate
        assert st.parts is not None and st.parts.tunable is not None
        try:
            tunable = load_tunable(st.parts.tunable)
        except KerneloptError as exc:
            raise RunFailed(str(exc)) from None
        result = await self.evaluator.autotune(tunable, st.opts.tune_evals, st.opts.tune_seconds, "workload")
        if result.is_error:
            raise RunFailed(f"autotune failed: {result.text}")
        out = result.structured
        for line in (result.text.splitlines()[:2] if result.text else ["tuned"]):  # the outcome; the best and untuned
            self.display.info(line)
        source, launch, options = tunable.materialize(out["untuned_params"])
        await evaluate("untuned", None, source, launch, options,
                       f"tunable.json defaults {out['untuned_params']}", step=True)
        if out.get("best_params") is not None and out["best_params"] != out["untuned_params"]:
            source, launch, options = tunable.materialize(out["best_params"])
            c = out["counts"]
            await evaluate("tuned", None, source, launch, options,
                           f"autotuned ({out['strategy']}, {c['tried']} configurations): {out['best_params']}")
        st.stop_reason = f"tuning done: {out.get('stop_reason', '')}"

    # --- proposing -----------------------------------------------------------------------

    def tool_names(self) -> list[str]:
        names = ["gpu_properties", "compile"]
        if self.state.opts.nvidia_research:
            names.append("docs_search")
        if self.state.opts.use_nsight and not self.evaluator.nsight_unusable:
            names.append("ncu_profile")
        return names

    def workload_text(self) -> str:
        assert self.state.frozen is not None
        return prompts.workload_prompt(self.state.frozen, self.gpu_text, self.state.reference(), self.guidance)

    def state_text(self, iteration: int, repair: bool, last: CandidateRecord | None, slot: int | None) -> str:
        """The iteration's state prompt, fitted to what the budget leaves after the system and workload prompts."""
        st = self.state
        assert st.frozen is not None
        parallel = ""
        if slot is not None:
            others = [f"  candidate {k}: {why[:300]}" for k, why in sorted(self.in_flight.items()) if k != slot and why]
            parallel = (f"You are candidate {slot} of {st.opts.candidates} proposals made in parallel this iteration; "
                        "each must be a different idea (an identical kernel is not evaluated again). "
                        + (f"Lean towards {prompts.DIRECTIONS[(slot - 1) % (len(prompts.DIRECTIONS) - 1) + 1]}. "
                           if slot > 1 else "")
                        + ("The other candidates now being evaluated:\n" + "\n".join(others) if others else ""))
        dups = [f"{d.iteration}" + (f".{d.slot}" if d.slot else "") + f" repeated {d.same_as}"
                for d in st.duplicates[-5:]]
        room = prompts.PROMPT_BUDGET_TOKENS * prompts.CHARS_PER_TOKEN - len(prompts.system_prompt(self.tool_names())) \
            - len(self.workload_text())
        return prompts.state_prompt(
            st.records, st.best(), last, st.reference(), iteration, st.opts.max_iterations, repair,
            st.frozen.performance_cases, st.checks_in_force(), parallel=parallel, duplicates=dups, budget_chars=room)

    # --- records ---------------------------------------------------------------------------

    def regenerating(self, problems: str) -> None:
        self.state.event("generate", f"the generated parts have problems; asking again: {problems[:300]}")

    def finishing(self, status: str) -> None:
        """The finalize step (called just before finalize.finalize writes the records): ``status`` says
        whether it came by its routes or because the run was interrupted or failed."""
        if self.state.history:
            self.state.event("finalize", status)
            self.state.event("done", status)

    def checkpoint(self) -> None:
        """history.json and summary.json, whole and atomically (the events are in history.jsonl already)."""
        self.state.run.write_json("history.json", self.state.history)
        self.state.run.write_json("summary.json", summary(self.state, "running"))

    write_progress = checkpoint


def proposal_key(proposal: Proposal) -> str:
    """What makes two proposals the same experiment: source, launch and compile options."""
    text = json.dumps([proposal.source, proposal.launch_json(), proposal.compile_options], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()
