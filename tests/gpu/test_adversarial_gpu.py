"""The adversarial suite on a real GPU: every kernel of tests/adversarial/cases.json through ONE
kernelopt-mcp session over stdio, each with its expected verdict, and after each bad kernel the
same server must still pass the workload's good starting kernel.

Run with --run-gpu. The server runs with a short kernel timeout (KERNELOPT_TIMEOUT=20) and compile
limit (KERNELOPT_COMPILE_TIMEOUT=10), so the infinite loop and the compile bomb end quickly. If
KERNELOPT_ADVERSARIAL_REPORT is set, a markdown table (kernel, trick, expected verdict, observed
verdict, message) is written there, for the README.
"""

from __future__ import annotations

import json
import os
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import anyio
import pytest
from fakegpu import stdio_server
from fakegpu import tool_text as text

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]
ADVERSARIAL = REPO / "tests" / "adversarial"
CASES: list[dict[str, Any]] = json.loads((ADVERSARIAL / "cases.json").read_text())
FAST = {"warmup": 1, "iterations": 5}
KERNEL_TIMEOUT_S = 20
COMPILE_TIMEOUT_S = 10



def server(harness: Path, workspace: Path) -> AbstractAsyncContextManager[Any]:
    return stdio_server(
        "--harness", str(harness), "--workspace", str(workspace), "--root", str(ADVERSARIAL),
        env={"KERNELOPT_TIMEOUT": str(KERNEL_TIMEOUT_S), "KERNELOPT_COMPILE_TIMEOUT": str(COMPILE_TIMEOUT_S)},
        read_timeout_s=900,
    )


def _one_line(s: str, limit: int = 160) -> str:
    s = " ".join(s.split()).replace("|", "\\|")
    return s if len(s) <= limit else s[: limit - 1] + "…"


def write_report(rows: list[dict[str, str]], path: Path) -> None:
    lines = [
        "| kernel | trick | expected verdict | observed verdict | message |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| `{r['file']}` | {_one_line(r['trick'], 90)} | {r['expected']} | {r['observed']} | {_one_line(r['message'])} |"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def test_every_adversarial_kernel_gets_its_verdict_and_the_server_keeps_answering(
    harness_binary: Path, tmp_path: Path
) -> None:
    rows: list[dict[str, str]] = []
    failures: list[str] = []
    # KERNELOPT_ADVERSARIAL_ONLY=a.cu,b.cu re-runs a few kernels (e.g. after fixing one)
    only = {f for f in os.environ.get("KERNELOPT_ADVERSARIAL_ONLY", "").split(",") if f}
    cases = [c for c in CASES if not only or c["file"] in only]

    async def session() -> None:
        async with server(harness_binary, tmp_path / "ws") as client:
            good: dict[str, dict[str, Any]] = {}
            for case in cases:
                wl = case["workload"]
                if wl not in good:
                    d = (await client.call_tool("describe_workload", {"name": wl})).structured_content
                    good[wl] = {"workload": wl, "source": d["initial_cu"], "launch": d["initial_launch"]}
                args: dict[str, Any] = {
                    "workload": wl, "path": str(ADVERSARIAL / case["file"]),
                    "launch": case["launch"] or good[wl]["launch"],
                }
                if case["tool"] == "benchmark":
                    args.update(FAST)
                if case["sanitize"]:
                    args["sanitize"] = True
                r = await client.call_tool(case["tool"], args)
                rendered = text(r)
                if r.is_error:
                    observed, message = "tool error", rendered
                    if case["sanitize"] and ("compute-sanitizer" in rendered or "sanitizer" in rendered):
                        observed = "skipped (no usable compute-sanitizer)"
                else:
                    observed, message = r.structured_content["status"], r.structured_content["message"]
                rows.append({**case, "expected": " or ".join(case["expected"]), "observed": observed, "message": message})
                if observed.startswith("skipped"):
                    continue
                if observed not in case["expected"]:
                    failures.append(f"{case['file']}: expected {case['expected']}, got {observed}: {rendered[:600]}")
                elif case.get("message_contains") and case["message_contains"] not in rendered:
                    failures.append(f"{case['file']}: {case['message_contains']!r} not in the result: {rendered[:600]}")
                # the server must still answer, and still pass a good kernel on the same workload
                ok = await client.call_tool("validate", good[wl])
                if ok.is_error or ok.structured_content["status"] != "ok":
                    failures.append(f"after {case['file']}: the good {wl} kernel got {text(ok)[:600]}")

    try:
        anyio.run(session)
    finally:
        report = os.environ.get("KERNELOPT_ADVERSARIAL_REPORT")
        if report and rows:
            write_report(rows, Path(report))
    assert len(rows) == len(cases)
    assert not failures, "\n".join(failures)
