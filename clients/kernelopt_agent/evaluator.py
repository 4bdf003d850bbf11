"""A candidate's way through the server: benchmark it, profile it (--use-nsight), tune it (autotune),
and keep what came back: the candidate's files under ``candidates/<label>/``, its record in the run
state and its events in the history. The loop (``loop.py``) decides what to evaluate and when; the
caller holds the GPU (``Optimizer.gpu_lock``) for each of these calls.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from kernelopt_mcp.errors import KerneloptError
from kernelopt_mcp.launch import LaunchSpec
from kernelopt_mcp.result_view import EvaluationView
from kernelopt_mcp.tune.spec import Tunable, parse_tunable

from . import prompts
from .progress import Display
from .proposal import Proposal
from .records import CandidateRecord, ProfileEvent, ProfileUnavailableEvent, TuneEvent, pytorch_times
from .state import RunState
from .toolbox import ToolResult, model_text


class Evaluator:
    """Benchmarks, profiles and tunes candidates for one run, recording each in its state."""

    def __init__(self, state: RunState, display: Display) -> None:
        self.state = state
        self.display = display
        self.nsight_unusable = ""  # why ncu cannot profile on this server (found on the first try): no retries

    # --- benchmarking ----------------------------------------------------------------------

    async def evaluate(
        self, kind: str, iteration: int | None, source: str, launch: LaunchSpec | None, options: list[str],
        rationale: str, calls: list[int] | None = None, *, slot: int | None = None, step: bool | None = None,
    ) -> CandidateRecord:
        """Benchmark one candidate through the server; ``step``: record the graph's evaluate step
        (default: for the loop's own candidates, not the baseline's reference and initial kernel)."""
        st = self.state
        assert st.tools is not None and st.frozen is not None
        index = len(st.records)
        name = (kind if iteration is None
                else f"it{iteration}" + (f"-{slot}" if slot else "") + ("-repair" if kind == "repair" else ""))
        label = f"{index:03d}-{name}"
        launch_json = launch.model_dump(mode="json", exclude_none=True) if launch is not None else {}
        rec = CandidateRecord(index, label, kind, iteration, source, launch_json, list(options), rationale,
                              model_calls=list(calls or []), slot=slot)
        st.run.write_text(f"{rec.dir}/source.cu", source)
        st.run.write_json(f"{rec.dir}/launch.json", {"launch": launch_json, "compile_options": list(options)})
        # `kernelopt evaluate workload/<name> candidates/<label>/source.cu` replays it (launch beside)
        if st.frozen.torch:
            st.run.write_json(f"{rec.dir}/source.launch.json",
                              {"launch": launch_json, "compile_options": list(options)})
        args: dict[str, Any] = {"workload": st.frozen.name, "source": source, "launch": launch_json}
        if options:
            args["compile_options"] = list(options)
        args.update(st.opts.timing_args)
        st.run.write_json(f"{rec.dir}/request.json", {"tool": "benchmark", "arguments": args, "rationale": rationale})
        if step if step is not None else iteration is not None:
            st.event("evaluate", f"{label}: benchmark", lane=slot)
        start = time.monotonic()
        with self.display.activity(f"{label}: validating and timing on the GPU"):
            result = await st.tools.call("benchmark", args)
        rec.seconds = time.monotonic() - start
        rec.tool_call = result.number
        st.run.write_json(f"{rec.dir}/result.json", {"tool_call": result.number, "is_error": result.is_error,
                                                     "result": result.structured, "text": result.text})
        if result.is_error:
            rec.status, rec.message = "tool_error", result.text
        else:
            out = EvaluationView.model_validate(result.structured)
            take(rec, out)
            st.frozen.heard(out)
        rec.feedback = prompts.feedback_text(result.text, result.structured)
        st.records.append(rec)
        if rec.valid:  # replay requests of a new best (or reference), so an interrupted run has them
            await st.frozen.keep_replays(st.tools, st.best(), st.reference())
        st.record(rec.as_event())
        self.display.candidate(rec, st.best(), st.model.usage.total_tokens if st.model else 0)
        return rec

    # --- profiling -------------------------------------------------------------------------

    async def profile(self, rec: CandidateRecord, *, step: bool = True, lane: int | None = None) -> None:
        """ncu_profile of one performance case (the one furthest behind the reference); the caller holds the GPU."""
        st = self.state
        assert st.tools is not None and st.frozen is not None
        if step:  # the route is taken whether or not ncu can run here
            st.event("profile",
                     f"{rec.label}: ncu_profile" + (" skipped: ncu cannot run here" if self.nsight_unusable else ""),
                     lane=lane)
        if self.nsight_unusable:
            return  # said once already (console and summary notes); no retry per candidate
        if not st.tools.has("ncu_profile"):
            if not any("ncu_profile" in n for n in st.notes):
                st.notes.append("--use-nsight: this kernelopt-mcp has no ncu_profile tool; nothing was profiled")
                self.display.warn(st.notes[-1])
            return
        ref = st.reference()
        cases = st.frozen.performance_cases or st.frozen.case_names
        if ref is not None and rec.case_ms:
            cases = sorted(cases, key=lambda c: -(rec.case_ms.get(c, 0.0) / max(ref.case_ms.get(c, 1e-9), 1e-9)))
        case = cases[0]
        args = fit_arguments(st.tools.tools["ncu_profile"], {
            "workload": st.frozen.name, "source": rec.source, "launch": rec.launch,
            "compile_options": rec.compile_options or None, "case": case, "case_name": case,
        })
        with self.display.activity(f"{rec.label}: profiling {case} with Nsight Compute"):
            result = await st.tools.call("ncu_profile", args)
        if result.is_error and ncu_unusable(result.text):
            self.nsight_unusable = result.text
            st.notes.append("--use-nsight: nothing was profiled: Nsight Compute cannot run on the server "
                            f"({result.text[:400]})")
            self.display.warn(st.notes[-1])
            st.record(ProfileUnavailableEvent(label=rec.label, message=result.text))
            st.run.write_json(f"{rec.dir}/profile.json", {"case": case, "is_error": True, "result": result.structured,
                                                          "text": result.text})
            return
        rec.profile_case = case
        rec.profile_text = model_text(result)[:4000]
        st.run.write_json(f"{rec.dir}/profile.json", {"case": case, "is_error": result.is_error,
                                                      "result": result.structured, "text": result.text})
        for path in report_paths(result.structured):
            target = st.run.path / "profiles" / f"{rec.label}-{case}{path.suffix}"
            target.parent.mkdir(parents=True, exist_ok=True)
            st.run.write_bytes(target.relative_to(st.run.path), path.read_bytes())
            rec.profile_files.append(st.run.relative(target))
        st.record(ProfileEvent(label=rec.label, case=case, is_error=result.is_error, files=rec.profile_files))

    # --- tuning ----------------------------------------------------------------------------

    async def autotune(self, tunable: Tunable, budget_evals: int, budget_s: float | None, label: str) -> ToolResult:
        """The server's autotune tool on the frozen workload; tune.json / tune.csv kept under tuning/<label>/."""
        st = self.state
        assert st.tools is not None and st.frozen is not None
        args: dict[str, Any] = {
            "workload": st.frozen.name, "source": tunable.source, "budget_evals": budget_evals, "top": 100,
            "tunable": tunable.spec.model_dump(mode="json", exclude={"source"}),
        }
        if budget_s is not None:
            args["budget_s"] = budget_s
        args.update(st.opts.timing_args)
        with self.display.activity(f"{label}: tuning up to {budget_evals} configurations on the GPU"):
            result = await st.tools.call("autotune", args)
        st.run.write_json(f"tuning/{label}/autotune.json", {"tool_call": result.number, "is_error": result.is_error,
                                                           "result": result.structured, "text": result.text})
        saved = Path(str(result.structured.get("saved_to") or ""))
        for name in ("tune.json", "tune.csv"):
            if result.structured.get("saved_to") and (saved / name).is_file():
                st.run.write_bytes(f"tuning/{label}/{name}", (saved / name).read_bytes())
        st.record(TuneEvent(label=label, is_error=result.is_error, status=result.structured.get("status"),
                            best_params=result.structured.get("best_params"), counts=result.structured.get("counts")))
        return result

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
            result = await self.autotune(tunable, self.state.opts.tune_budget, None,
                                         f"it{iteration}" + (f"-{slot}" if slot else ""))
            out = result.structured
            best = None if result.is_error else out.get("best_params")
            source, launch, options = tunable.materialize(best if best is not None else tunable.spec.defaults)
            if best is not None:
                rec = await self.evaluate(kind, iteration, source, launch, options,
                                          f"{proposal.rationale} [tuned {out['counts']['tried']} "
                                          f"configurations: best {best}]", calls, slot=slot)
                rec.feedback += f"\nTuning of the proposal's parameters:\n{result.text[:3000]}"
                return rec
            note = f"tuning found no valid configuration, so its defaults were evaluated: {result.text[:1500]}"
        rec = await self.evaluate(kind, iteration, source, launch, options, f"{proposal.rationale} [{note[:300]}]",
                                  calls, slot=slot)
        rec.feedback += f"\n{note}"
        return rec


def take(rec: CandidateRecord, out: EvaluationView) -> None:
    """What a candidate's record keeps of the server's benchmark result."""
    rec.status, rec.message = out.status, out.message
    rec.score_ms, rec.speedup = out.score_ms, out.speedup
    rec.pytorch = pytorch_times(out.torch_baseline)
    rec.checks = list(out.checks)
    rec.host_ms = {str(k): float(v) for k, v in (out.phases or {}).items() if isinstance(v, int | float)}
    rec.device = f"{out.device_ordinal} {out.device_uuid or ''}".strip() if out.device_ordinal is not None else None
    for case in out.cases:
        rec.case_status[case.name] = case.status
        if case.timing is not None and case.timing.median_ms is not None:
            rec.case_ms[case.name] = case.timing.median_ms


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
            if (path.suffix in (".ncu-rep", ".csv", ".json", ".txt") and path.is_file()
                    and path.stat().st_size < 512 * 2**20):
                found.append(path)
    return found
