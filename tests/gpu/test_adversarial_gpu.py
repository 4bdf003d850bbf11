"""The adversarial suite on a real GPU: every kernel of tests/adversarial/cases.json gets its
expected verdict through each way a kernel reaches kernelopt:

1. one kernelopt-mcp session over stdio (validate / benchmark tools); after each bad kernel the
   same server must still pass the workload's good starting kernel;
2. `kernelopt evaluate WORKLOAD K1.cu K2.cu ...`: one CLI session per (workload, tool) group,
   each kernel with its launch in <name>.launch.json beside it;
3. `kernelopt optimize --workload W`: one run per workload whose scripted model (tests/
   scripted_model.py) proposes that workload's kernels, one per iteration; each candidate's
   verdict is read from history.json (the sanitizer tier is not part of optimize's loop, so the
   kernels only it catches are left out there).

A kernel with `no_faster_than: "initial"` (the memoizers: with fresh inputs per timed launch
their cache never hits) may be `ok`, but then its score must not beat the workload's starting
kernel, timed in the same session, by more than NO_GAIN_MARGIN.

Timing is FAST (1 warm-up, 5 measured launches), except for the memoizers, timed with the seed's
10 + 100 (SEED): with KERNELOPT_FRESH_LAUNCHES=16 (a redraw before 16 hidden measured launches, the
others reusing the last draw) 5 launches would all be redrawn and their caches never tried. The
servers run with a short kernel timeout (20 s) and compile limit (10 s), so the infinite loop and
the compile bomb end quickly.
KERNELOPT_ADVERSARIAL_ONLY=a.cu,b.cu re-runs a few kernels. If KERNELOPT_ADVERSARIAL_REPORT is
set, each path adds its column to a markdown table written there (kernel, trick, expected
verdict, the verdict of each path that ran, message), for docs/adversarial.md.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import anyio
import pytest
from fakegpu import stdio_server
from fakegpu import tool_text as text

from kernelopt_mcp.config import Settings, find_workload
from kernelopt_mcp.launch import LaunchSpec

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[2]
ADVERSARIAL = REPO / "tests" / "adversarial"
CASES: list[dict[str, Any]] = json.loads((ADVERSARIAL / "cases.json").read_text())
FAST = {"warmup": 1, "iterations": 5}
SEED = {"warmup": 10, "iterations": 100}
KERNEL_TIMEOUT_S = 20
COMPILE_TIMEOUT_S = 10
NO_GAIN_MARGIN = 0.10  # an ok memoizer's score must be >= 0.9 x its base kernel's


def timing_of(cases: list[dict[str, Any]]) -> dict[str, int]:
    """FAST, or SEED where a memoizer is among ``cases``: its cache can only pay on launches that
    reuse inputs, which a fresh_launches subset leaves only among many measured launches."""
    return SEED if any(c.get("no_faster_than") for c in cases) else FAST
PATHS = {"mcp": "MCP session", "evaluate": "kernelopt evaluate", "optimize": "kernelopt optimize"}
ENV = {"KERNELOPT_TIMEOUT": str(KERNEL_TIMEOUT_S), "KERNELOPT_COMPILE_TIMEOUT": str(COMPILE_TIMEOUT_S)}


def selected() -> list[dict[str, Any]]:
    only = {f for f in os.environ.get("KERNELOPT_ADVERSARIAL_ONLY", "").split(",") if f}
    return [c for c in CASES if not only or c["file"] in only]


def initial_launch(workload: str) -> dict[str, Any]:
    spec = find_workload(workload, Settings()).spec
    assert spec.initial is not None
    return spec.initial.launch.model_dump(mode="json", exclude_none=True)


def launch_of(case: dict[str, Any]) -> dict[str, Any]:
    return case["launch"] or initial_launch(case["workload"])


def judge(case: dict[str, Any], observed: str, rendered: str, score: float | None, base: float | None,
          path: str, failures: list[str]) -> None:
    """Record a failure when ``observed`` is not an expected verdict, or an ok memoizer gained."""
    if observed.startswith("skipped"):
        return
    where = f"{PATHS[path]}: {case['file']}"
    if observed not in case["expected"]:
        failures.append(f"{where}: expected {case['expected']}, got {observed}: {rendered[:600]}")
    elif case.get("message_contains") and case["message_contains"] not in rendered:
        failures.append(f"{where}: {case['message_contains']!r} not in the result: {rendered[:600]}")
    elif observed == "ok" and case.get("no_faster_than"):
        if not score or not base:
            failures.append(f"{where}: ok but no score to compare with the base kernel ({score}, {base})")
        elif score < base * (1 - NO_GAIN_MARGIN):
            failures.append(f"{where}: ok and faster than the kernel it is built on ({score:.4g} ms vs {base:.4g} ms): "
                            "the cheat paid")


# --- the report ----------------------------------------------------------------------------


def _one_line(s: str, limit: int = 160) -> str:
    s = " ".join(s.split()).replace("|", "\\|")
    return s if len(s) <= limit else s[: limit - 1] + "…"


def record(path: str, rows: dict[str, dict[str, str]]) -> None:
    """Keep one path's verdicts beside the report and re-render the table from every path that ran."""
    report = os.environ.get("KERNELOPT_ADVERSARIAL_REPORT")
    if not report or not rows:
        return
    out = Path(report)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_name(out.name + f".{path}.json").write_text(json.dumps(rows, indent=1))
    seen = {p: json.loads(f.read_text()) for p in PATHS if (f := out.with_name(out.name + f".{p}.json")).is_file()}
    lines = [
        "| kernel | trick | expected verdict | " + " | ".join(PATHS[p] for p in seen) + " | message |",
        "| --- | --- | --- | " + " | ".join("---" for _ in seen) + " | --- |",
    ]
    for case in CASES:
        got = [seen[p].get(case["file"]) for p in seen]
        if not any(got):
            continue
        message = next((g["message"] for g in got if g and g.get("message")), "")
        lines.append(
            f"| `{case['file']}` | {_one_line(case['trick'], 90)} | {' or '.join(case['expected'])} | "
            + " | ".join(g["observed"] if g else "-" for g in got) + f" | {_one_line(message)} |"
        )
    out.write_text("\n".join(lines) + "\n")


# --- 1. one MCP session ----------------------------------------------------------------------


def server(harness: Path, workspace: Path) -> AbstractAsyncContextManager[Any]:
    return stdio_server(
        "--harness", str(harness), "--workspace", str(workspace), "--root", str(ADVERSARIAL), env=ENV,
        read_timeout_s=900,
    )


def test_every_adversarial_kernel_gets_its_verdict_and_the_server_keeps_answering(
    harness_binary: Path, tmp_path: Path
) -> None:
    rows: dict[str, dict[str, str]] = {}
    failures: list[str] = []
    cases = selected()

    async def session() -> None:
        async with server(harness_binary, tmp_path / "ws") as client:
            good: dict[str, dict[str, Any]] = {}
            base_score: dict[str, float | None] = {}
            for case in cases:
                wl = case["workload"]
                if wl not in good:
                    d = (await client.call_tool("describe_workload", {"name": wl})).structured_content
                    good[wl] = {"workload": wl, "source": d["initial_cu"], "launch": d["initial_launch"]}
                args: dict[str, Any] = {
                    "workload": wl, "path": str(ADVERSARIAL / case["file"]),
                    "launch": case["launch"] or good[wl]["launch"],
                }
                if case.get("compile_options"):
                    args["compile_options"] = case["compile_options"]
                if case["tool"] == "benchmark":
                    args.update(timing_of([case]))
                if case["sanitize"]:
                    args["sanitize"] = True
                r = await client.call_tool(case["tool"], args)
                rendered = text(r)
                score = None
                if r.is_error:
                    observed, message = "tool error", rendered
                    if case["sanitize"] and ("compute-sanitizer" in rendered or "sanitizer" in rendered):
                        observed = "skipped (no usable compute-sanitizer)"
                else:
                    observed, message = r.structured_content["status"], r.structured_content["message"]
                    score = r.structured_content.get("score_ms")
                base = None
                if case.get("no_faster_than") and observed == "ok":
                    if wl not in base_score:  # the starting kernel, timed the same way in this session
                        b = await client.call_tool("benchmark", {**good[wl], **timing_of([case])})
                        base_score[wl] = None if b.is_error else b.structured_content.get("score_ms")
                    base = base_score[wl]
                rows[case["file"]] = {"observed": observed, "message": message}
                judge(case, observed, rendered, score, base, "mcp", failures)
                # the server must still answer, and still pass a good kernel on the same workload
                ok = await client.call_tool("validate", good[wl])
                if ok.is_error or ok.structured_content["status"] != "ok":
                    failures.append(f"after {case['file']}: the good {wl} kernel got {text(ok)[:600]}")

    try:
        anyio.run(session)
    finally:
        record("mcp", rows)
    assert len(rows) == len(cases)
    assert not failures, "\n".join(failures)


# --- 2. kernelopt evaluate, several kernels per session ---------------------------------------


def kernelopt(*args: str, timeout_s: float = 900) -> subprocess.CompletedProcess[str]:
    """The `kernelopt` command of this checkout, as a user runs it."""
    cmd = [sys.executable, "-c", "import sys; from kernelopt_mcp.cli import main; sys.exit(main())", *args]
    env = {**os.environ, **ENV, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env, cwd=REPO)


BASE = "base_initial"  # the workload's starting kernel, evaluated beside the memoizers


def test_every_adversarial_kernel_through_kernelopt_evaluate(harness_binary: Path, tmp_path: Path) -> None:
    rows: dict[str, dict[str, str]] = {}
    failures: list[str] = []
    groups: dict[tuple[str, str, bool, bool], list[dict[str, Any]]] = {}
    for case in selected():
        key = (case["workload"], case["tool"], case["sanitize"], bool(case.get("no_faster_than")))
        groups.setdefault(key, []).append(case)
    try:
        for (wl, tool, sanitize, memo), cases in groups.items():
            folder = tmp_path / f"{wl}-{tool}{'-sanitize' if sanitize else ''}{'-memo' if memo else ''}"
            folder.mkdir()
            kernels = []
            for case in cases:
                shutil.copy(ADVERSARIAL / case["file"], folder / case["file"])
                beside = {"launch": launch_of(case), "compile_options": case.get("compile_options", [])}
                (folder / case["file"]).with_suffix(".launch.json").write_text(json.dumps(beside))
                kernels.append(str(folder / case["file"]))
            if any(c.get("no_faster_than") for c in cases):
                shutil.copy(find_workload(wl, Settings()).root / "initial.cu", folder / f"{BASE}.cu")
                kernels.append(str(folder / f"{BASE}.cu"))
            args = [wl, *kernels, "--harness", str(harness_binary), "--timeout", str(KERNEL_TIMEOUT_S), "--json"]
            timing = timing_of(cases)
            args += (["--warmup", str(timing["warmup"]), "--iterations", str(timing["iterations"])]
                     if tool == "benchmark" else ["--no-benchmark"])
            if sanitize:
                args.append("--sanitize")
            proc = kernelopt("evaluate", *args)
            if proc.returncode == 2 and sanitize and "sanitizer" in proc.stderr:
                for case in cases:
                    rows[case["file"]] = {"observed": "skipped (no usable compute-sanitizer)",
                                          "message": proc.stderr[-300:]}
                continue
            if proc.returncode not in (0, 1):
                failures.append(f"kernelopt evaluate {wl} ({tool}) exited {proc.returncode}: {proc.stderr[-1500:]}")
                continue
            payload = json.loads(proc.stdout)
            results = {r["candidate"]: r for r in (payload if isinstance(payload, list) else [payload])}
            base = results.get(BASE, {}).get("score_ms")
            for case in cases:
                r = results.get(Path(case["file"]).stem)
                if r is None:
                    failures.append(f"kernelopt evaluate: no result for {case['file']}")
                    continue
                rows[case["file"]] = {"observed": r["status"], "message": r.get("sanitizer_message") or r["message"]}
                rendered = "\n".join([r["message"], r.get("sanitizer_message") or "",
                                      *(c.get("message") or "" for c in r["cases"])])
                judge(case, r["status"], rendered, r.get("score_ms"), base, "evaluate", failures)
    finally:
        record("evaluate", rows)
    assert len(rows) == len(selected())
    assert not failures, "\n".join(failures)


# --- 3. kernelopt optimize with a scripted model ---------------------------------------------


def proposal(case: dict[str, Any]) -> dict[str, Any]:
    """The model's answer proposing ``case``'s kernel, in the proposal schema's launch form."""
    spec = LaunchSpec.model_validate(launch_of(case)).model_dump(mode="json", exclude_none=True)

    def config(c: dict[str, Any]) -> dict[str, Any]:
        return {"grid": [str(g) for g in c["grid"]], "block": [str(b) for b in c["block"]],
                "shared_bytes": str(c.get("shared_bytes", 0))}

    launch = {"default": config(spec["default"]) if spec.get("default") else None,
              "cases": [{"case": name, **config(c)} for name, c in (spec.get("cases") or {}).items()]}
    return {"content": json.dumps({
        "rationale": case["trick"], "source": (ADVERSARIAL / case["file"]).read_text(),
        "launch": launch, "compile_options": case.get("compile_options", []), "tunables": None,
    })}


def test_every_adversarial_kernel_through_kernelopt_optimize(
    harness_binary: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from scripted_model import ScriptedModel

    from kernelopt_agent.cli import main as agent_main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-scripted")
    monkeypatch.setenv("KERNELOPT_DOCS_OFFLINE", "1")
    monkeypatch.setenv("PYTHONPATH",
                       os.pathsep.join(filter(None, [str(REPO), str(REPO / "clients"), os.environ.get("PYTHONPATH")])))
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)  # the server optimize starts inherits them
    rows: dict[str, dict[str, str]] = {}
    failures: list[str] = []
    by_workload: dict[str, list[dict[str, Any]]] = {}
    for case in selected():
        if not case["sanitize"]:  # only the sanitizer tier catches those; optimize does not run it
            by_workload.setdefault(case["workload"], []).append(case)
    try:
        for wl, cases in by_workload.items():
            results = tmp_path / "results" / wl
            with ScriptedModel([proposal(c) for c in cases]) as model:
                code = agent_main([
                    "optimize", "--workload", wl, "--max-iterations", str(len(cases)), "--base-url", model.url,
                    "--harness", str(harness_binary), "--workspace", str(tmp_path / "ws"),
                    "--results-dir", str(results),
                    "--warmup", str(timing_of(cases)["warmup"]), "--iterations",
                    str(timing_of(cases)["iterations"]), "--quiet",
                ])
            run = results / "run-001"
            summary = json.loads((run / "summary.json").read_text())
            if code != 0 or model.steps or model.exhausted:
                failures.append(f"optimize {wl}: exit {code}, {len(model.steps)} proposals unused: "
                                f"{summary.get('error')}")
                continue
            history = json.loads((run / "history.json").read_text())
            if any(h["event"] == "no_proposal" for h in history):
                failures.append(f"optimize {wl}: a proposal was not evaluated: "
                                f"{[h for h in history if h['event'] == 'no_proposal']}")
            records = [h for h in history if h["event"] == "candidate"]
            base = next((h["score_ms"] for h in records if h["kind"] == "initial"), None)
            proposed = [h for h in records if h["kind"] in ("proposal", "repair")]
            # the hidden check is real inside optimize: the frozen inputs can be redrawn, and the result says so
            frozen = json.loads((run / "workload" / wl / "workload.json").read_text())
            undrawable = [n for c in frozen["cases"] for n, g in c["inputs"].items()
                          if g["generator"] == "file" and not g.get("drawn_from")]
            if undrawable:
                failures.append(f"optimize {wl}: frozen inputs without drawn_from: {undrawable}")
            initial_checks: list[str] = next((h["checks"] for h in records if h["kind"] == "initial"), [])
            if not any(("hidden" in c or "timed launch" in c) and "not possible" not in c for c in initial_checks):
                failures.append(f"optimize {wl}: the initial kernel's checks name no hidden-input check: "
                                f"{initial_checks}")
            for case, h in zip(cases, proposed, strict=False):
                rows[case["file"]] = {"observed": h["status"], "message": h.get("message", "")}
                judge(case, h["status"], json.dumps(h)[:4000], h.get("score_ms"), base, "optimize", failures)
            if len(proposed) != len(cases):
                failures.append(f"optimize {wl}: {len(proposed)} candidates for {len(cases)} proposals")
    finally:
        record("optimize", rows)
    assert not failures, "\n".join(failures)
