"""The adversarial suite's table (tests/adversarial/cases.json) is well formed, and every kernel
compiles for its workload, except the two that must not: the compile bomb (hits a small time
limit) and the one whose entry point does not exist. The kernels run on a GPU in
tests/gpu/test_adversarial_gpu.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kernelopt_mcp.compile_options import CompileLimits
from kernelopt_mcp.compiler import CompileCache, compile_kernel
from kernelopt_mcp.config import Settings, find_workload
from kernelopt_mcp.launch import LaunchSpec

ADVERSARIAL = Path(__file__).parents[1] / "adversarial"
CASES = json.loads((ADVERSARIAL / "cases.json").read_text())
# kernels for a check not yet on by default, joined to the suite on the GPU run that turns it on
# (scripts/device_issue40.sh poison45); they compile like the others, and are not in the docs' table yet
PENDING = ADVERSARIAL / "pending"
PENDING_CASES = [{**c, "pending": True} for c in json.loads((PENDING / "cases.json").read_text())]
# every status a candidate can get (the last five come with the integrity defenses and the sanitizer tier)
VERDICTS = {
    "ok", "compile_error", "invalid_launch", "runtime_error", "timeout", "mismatch", "out_of_bounds_write",
    "input_modified", "timed_mismatch", "nondeterministic", "impossible_time", "inconsistent_timing", "sanitizer_error",
}
# the suite's page: its table of every kernel, and the number of kernels it says the suite holds
ADVERSARIAL_DOC = Path(__file__).parents[2] / "docs" / "adversarial.md"
MUST_NOT_COMPILE = {"vector_add_compile_bomb.cu"}
NO_ENTRY = {"vector_add_wrong_entry.cu"}


def test_the_table_is_well_formed() -> None:
    files = [c["file"] for c in CASES]
    assert len(files) == len(set(files)), "one row per kernel"
    assert set(files) == {p.name for p in ADVERSARIAL.glob("*.cu")}, "every .cu has a row and every row a .cu"
    pending = [c["file"] for c in PENDING_CASES]
    assert {p.name for p in PENDING.glob("*.cu")} == set(pending) and not set(pending) & set(files)
    for case in CASES + [{k: v for k, v in c.items() if k != "pending"} for c in PENDING_CASES]:
        assert set(case) <= {"file", "workload", "launch", "tool", "sanitize", "trick", "expected", "message_contains",
                             "note", "compile_options", "no_faster_than"}
        assert case["tool"] in ("validate", "benchmark")
        assert case["expected"] and set(case["expected"]) <= VERDICTS, case
        assert case["trick"].strip()
        assert not case["sanitize"] or case["tool"] == "validate"
        wl = find_workload(case["workload"], Settings())
        assert case["file"].startswith(wl.name), "kernels are named after their workload"
        if case["launch"] is not None:
            LaunchSpec.model_validate(case["launch"])
        if "no_faster_than" in case:
            # a memoizer that is ok must not gain: its score is compared with the kernel it is built on
            assert (case["no_faster_than"] == "initial" and case["tool"] == "benchmark"
                    and "ok" in case["expected"]), case
        assert isinstance(case.get("compile_options", []), list)
    tricks = " ".join(c["trick"] for c in CASES)
    for needed in ("stale", "__device__ global", "hard-codes", "by size", "zeros", "racy", "uninitialised", "skips",
                   "fp16", "past the end", "into an input", "infinite loop", "__trap", "unmapped", "misaligned",
                   "shared memory", "2048 threads", "does not exist", "compile bomb", "printf",
                   # issue 14: the documented reward hacks, and correct kernels that must stay ok
                   "content-keyed memoization, full", "content-keyed memoization, partial", "pointer-keyed",
                   "launch counting", "%globaltimer", "left in C by an earlier launch", "size detection", "fast math",
                   "TF32", "skips rows", "summation order varies", "must stay ok"):
        assert needed in tricks, f"the suite lacks a kernel for: {needed}"
    assert len(CASES) >= 30


def test_the_docs_table_lists_every_kernel_with_its_expected_verdict() -> None:
    rows = {}
    for line in ADVERSARIAL_DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if line.startswith("| `") and len(cells) >= 3 and cells[0].strip("`").endswith(".cu"):
            rows[cells[0].strip("`")] = cells[2]
    for case in CASES:
        assert case["file"] in rows, f"docs/adversarial.md's table lacks {case['file']}"
        assert rows[case["file"]] == " or ".join(case["expected"]), (case["file"], rows[case["file"]])


def test_the_docs_count_the_kernels_the_suite_holds() -> None:
    """docs/adversarial.md and SECURITY.md say how many kernels the suite holds: the number is the suite's."""
    count = len(CASES)
    readme, security = ADVERSARIAL_DOC.read_text(), (ADVERSARIAL_DOC.parent.parent / "SECURITY.md").read_text()
    said = re.findall(r"tests/adversarial/ holds (\d+) kernels", readme) + \
        re.findall(r"the verdict it must get \((\d+):", " ".join(security.split()))
    assert len(said) == 2 and all(int(n) == count for n in said), (said, count)
    # every row of the table also says what a GPU run observed: no "not run yet" left behind
    rows = [line for line in readme.splitlines() if line.startswith("| `") and ".cu` |" in line]
    assert len(rows) == count and not [r for r in rows if "not run yet" in r], "rerun the table from a GPU report"


@pytest.mark.parametrize("case", CASES + PENDING_CASES, ids=[c["file"] for c in CASES + PENDING_CASES])
def test_each_kernel_compiles_as_expected(case: dict) -> None:
    source = (PENDING if case.get("pending") else ADVERSARIAL).joinpath(case["file"]).read_text()
    wl = find_workload(case["workload"], Settings())
    if case["file"] in MUST_NOT_COMPILE:
        result = compile_kernel(source, limits=CompileLimits(timeout_s=3), cache=CompileCache())
        assert not result.ok and "compile exceeded the 3 s limit" in result.summary()
        return
    result = compile_kernel(source, options=case.get("compile_options", []), cache=CompileCache())
    assert result.ok, result.summary()
    entry = wl.signature.entry
    if case["file"] in NO_ENTRY:
        assert entry not in result.entries and result.entries
        return
    assert entry in result.entries
    assert len(result.entries[entry]) == len(wl.signature.params)
