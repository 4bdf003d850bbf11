"""Step 4 and the run's records: best.cu, replay requests, the heatmap, history.json and
summary.json. Runs whatever happened before (also after Ctrl-C or a crash), with what there is."""

from __future__ import annotations

import os
import platform
import sys
import time
import traceback
from typing import TYPE_CHECKING, Any

from kernelopt_mcp import __version__

from .freeze import REPLAY, REPLAY_REFERENCE
from .options import redact_url

if TYPE_CHECKING:
    from .records import CandidateRecord
    from .state import RunState


def finalize(state: RunState, status: str, *, error: str | None = None) -> dict[str, Any]:
    """Write the final artifacts and summary.json; never raises (a failing step is noted)."""
    files: dict[str, Any] = {}
    problems: list[str] = []
    best = state.best()
    if best is not None:
        state.run.write_text("best.cu", best.source)
        state.run.write_json("best.launch.json", {"launch": best.launch, "compile_options": best.compile_options})
        files["best"] = "best.cu"
        files["best_launch"] = "best.launch.json"
    for label, step in (("replay", lambda: _replay(state, best, files)), ("heatmap", lambda: _heatmap(state, files)),
                        ("data", lambda: _data(state, files))):
        try:
            step()
        except Exception as exc:  # a broken artifact must not lose the run's records
            problems.append(f"{label}: {type(exc).__name__}: {exc}")
    state.run.write_json("history.json", state.history)
    data = summary(state, status, error=error, files=files, problems=problems)
    from .report import finish_report  # report.html from the records above (a failure is a note in data)

    finish_report(state.run.path, data)
    state.run.write_json("summary.json", data)
    return data


def _replay(state: RunState, best: CandidateRecord | None, files: dict[str, Any]) -> None:
    """The replay requests the server wrote for the best candidate and the reference (the loop asks
    for them whenever either changes, so an interrupted run has them too)."""
    frozen = state.frozen
    if frozen is None:
        return
    if frozen.torch:  # no replay requests: the harness alone cannot compute PyTorch's outputs
        _torch_replay(state, best, files)
        return
    for key, into, rec in (("replay", REPLAY, best), ("replay_reference", REPLAY_REFERENCE, state.reference())):
        if rec is not None and frozen.replay_labels.get(into) == rec.label:
            files[key] = frozen.replays[into]
    problem = frozen.replay_problems.get(REPLAY)
    if best is not None and "replay" not in files:
        raise RuntimeError(problem or f"no replay requests were written for {best.label}")


def _torch_replay(state: RunState, best: CandidateRecord | None, files: dict[str, Any]) -> None:
    """A PyTorch-reference run's replay: evaluating a candidate on the run's copy of the workload, where
    PyTorch computes the expected outputs again on fresh draws (each candidate directory has its
    source.launch.json beside source.cu, so any candidate replays the same way)."""
    assert state.frozen is not None and state.frozen.workload.root is not None
    workload = state.frozen.workload.root
    files["workload"] = state.run.relative(workload)
    if best is not None:
        files["replay_command"] = f"kernelopt evaluate {workload} {state.run.path / 'best.cu'}"


def _data(state: RunState, files: dict[str, Any]) -> None:
    """Leave what reproduces the inputs, not their bytes (rundata.py); only where the server froze the
    workload into this very directory (a remote server's files stay in its workspace)."""
    frozen = state.frozen
    if (frozen is None or frozen.torch or frozen.directory is None
            or frozen.directory.resolve() != state.run.path.resolve()):
        return  # (a PyTorch-reference run draws nothing into the run)
    from .rundata import DATA_RECORD, drop_data, recorded_spec, supplied_sources

    drop_data(state.run, keep=bool(state.opts.keep_data), supplied=supplied_sources(recorded_spec(state.run.path)))
    files["data"] = DATA_RECORD


def _heatmap(state: RunState, files: dict[str, Any]) -> None:
    frozen = state.frozen
    if frozen is None or not any(r.case_ms for r in state.records):
        return
    from .heatmap import write_heatmap

    title = f"{frozen.name} on {state.device.name if state.device else '?'} ({state.run.name})"
    if frozen.torch:  # no CUDA reference was timed: latencies relative to the initial kernel
        initial = next((r for r in state.records if r.kind == "initial" and r.valid), None)
        files["heatmap"] = write_heatmap(state.run.path, state.records, frozen.performance_cases, initial, state.best(),
                                         title, versus="the initial kernel")
        return
    files["heatmap"] = write_heatmap(state.run.path, state.records, frozen.performance_cases, state.reference(),
                                     state.best(), title)


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def summary(
    state: RunState, status: str, *, error: str | None = None, files: dict[str, Any] | None = None,
    problems: list[str] | None = None,
) -> dict[str, Any]:
    best, ref = state.best(), state.reference()
    initial = state.initial()
    parts, frozen, model = state.parts, state.frozen, state.model
    now = time.time()
    workload: dict[str, Any] = {}
    if parts is not None:
        workload = {"name": frozen.name if frozen else parts.name, "description": parts.description,
                    "parts": parts.origin, "prototype": parts.signature.c_prototype() if parts.signature else None}
        if parts.torch_reference:
            workload["reference"] = _torch_reference_note(parts.origin.get("reference"), state.records,
                                                          frozen.expected_from if frozen else None)
        else:
            workload["reference"] = _reference_note(parts.reference_generated, parts.oracle is not None,
                                                    parts.origin.get("reference"), ran=ref is not None)
    if frozen is not None:
        workload.update({
            "reference_file": frozen.reference_file, "expected_outputs": frozen.expected_from, "seed": frozen.seed,
            "cases": frozen.case_names, "performance_cases": frozen.performance_cases,
        })
    data: dict[str, Any] = {
        "run": state.run.name, "path": str(state.run.path), "status": status, "stop_reason": state.stop_reason or None,
        "strategy": state.opts.strategy,
        "error": error, "pid": os.getpid(), "updated": now,
        "workload": workload,
        # null when the run never asked a model (--strategy tune, nothing generated and no iteration)
        "model": {"name": state.opts.model, "reasoning_effort": state.opts.reasoning_effort,
                  "endpoint": redact_url(state.opts.base_url) or "api.openai.com",
                  "notes": model.notes} if model else None,
        "tokens": ({**model.usage.as_json(state.opts.model), "per_call": model.calls} if model
                   else {"calls": 0, "total_tokens": 0, "cost_usd": 0.0}),
        "iterations": {"max": state.opts.max_iterations, "used": state.iterations_used,
                       "candidates_per_iteration": state.opts.candidates},
        "devices": _devices(state.records, now - state.started),
        "candidates": {"total": len(state.records), "valid": sum(r.valid for r in state.records),
                       "invalid": [f"{r.label}: {r.status}" for r in state.records if not r.valid],
                       "duplicates": [f"iteration {d.iteration}" + (f" candidate {d.slot}" if d.slot else "")
                                      + f": the same kernel as {d.same_as}" for d in state.duplicates]},
        "best": None,
        "reference": {"label": ref.label, "score_ms": ref.score_ms, "case_ms": ref.case_ms} if ref else None,
        "initial": {"label": initial.label, "status": initial.status, "score_ms": initial.score_ms,
                    "case_ms": initial.case_ms} if initial else None,
        "timings": {"started": state.started, "ended": now if status != "running" else None,
                    "wall_s": round(now - state.started, 3), "model_s": round(model.seconds, 3) if model else 0.0,
                    "tools_s": round(state.tools.seconds, 3) if state.tools else 0.0},
        "provenance": _provenance(state),
        # each --resume: when ("at", epoch s), from which iteration, the status it resumed, limits changed
        "resumes": state.resumes,
        "notes": state.notes + (problems or []),
        "files": files or {},
    }
    if best is not None:
        data["best"] = {
            "label": best.label, "kind": best.kind, "iteration": best.iteration, "candidate": best.slot,
            "score_ms": best.score_ms,
            "speedup_vs_reference": best.speedup or _ratio(ref.score_ms if ref else None, best.score_ms),
            "speedup_vs_initial": _ratio(initial.score_ms if initial else None, best.score_ms),
            # an imported PyTorch problem: PyTorch timed beside the best on the same GPU by the same rules
            "speedup_vs_eager": (best.pytorch or {}).get("speedup_eager"),
            "speedup_vs_compile": (best.pytorch or {}).get("speedup_compile"),
            "pytorch": best.pytorch,
            "case_ms": best.case_ms, "rationale": best.rationale, "source": f"{best.dir}/source.cu",
        }
    return data


def _reference_note(generated: bool, oracle: bool, origin: str | None, *, ran: bool) -> dict[str, Any]:
    """What the reference is and what it was checked against; ``ran``: it ran and passed in this run."""
    if not ran:
        note = (("model-generated" if generated else "supplied") + " CUDA reference"
                + (" with" if oracle else " without")
                + " a NumPy oracle; it has not run successfully in this run, so nothing was checked against it")
    elif generated and not oracle:
        note = ("the CUDA reference was generated by the model and there is no NumPy oracle: it is NOT an independent "
                "correctness oracle; passing its cases shows agreement with another model-written kernel")
    elif generated:
        note = ("the CUDA reference was generated by the model and checked against the NumPy oracle on "
                "the correctness cases")
    elif oracle:
        note = "supplied CUDA reference, checked against the NumPy oracle on the correctness cases"
    else:
        note = "supplied CUDA reference without a NumPy oracle: expected outputs are not independently checked"
    return {"origin": origin, "model_generated": generated, "numpy_oracle": oracle,
            "independent_oracle": oracle, "checked": ran, "note": note}


def _torch_reference_note(origin: str | None, records: list[CandidateRecord],
                          expected_from: str | None) -> dict[str, Any]:
    """The reference of a PyTorch-reference run: the workload's module, run by the server on each
    evaluation's draws (``expected_from``: what the server's evaluations said); no CUDA reference was
    asked for. ``checked``: a candidate passed against it in this run."""
    ran = any(r.valid for r in records)
    note = ("PyTorch is the reference: the workload's module computes the expected outputs inside kernelopt-mcp on "
            "each evaluation's own draws; no CUDA reference was asked for or run"
            + ("" if ran else "; no candidate has passed against it in this run yet"))
    return {"origin": origin, "pytorch": True, "cuda_reference": False, "model_generated": False, "numpy_oracle": False,
            "independent_oracle": True, "checked": ran, "expected_from": expected_from, "note": note}


def _provenance(state: RunState) -> dict[str, Any]:
    dev = state.device
    out: dict[str, Any] = {
        "kernelopt": __version__, "python": sys.version.split()[0], "platform": platform.platform(),
        "arch": state.arch, "device": dev.name if dev else None,
        "driver": dev.driver_version_str if dev else None, "device_uuid": dev.uuid if dev else None,
    }
    # the server's NVRTC (freeze_workload says which): the one that compiled every candidate
    out["nvrtc"] = state.frozen.nvrtc_version if state.frozen is not None else None
    return out


def error_text(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()



def _devices(records: list[Any], wall_s: float) -> dict[str, Any]:
    """How many GPUs evaluated the run's candidates, and evaluations per minute of the run per GPU
    (the whole wall time: model calls and compiles included, so a figure of the whole loop)."""
    used = sorted({r.device for r in records if r.device})
    evaluated = sum(1 for r in records if r.device)
    rate = evaluated / (wall_s / 60) / len(used) if used and wall_s > 0 else None
    return {"used": len(used), "which": used, "evaluations_per_minute_per_device": round(rate, 2) if rate else None}
