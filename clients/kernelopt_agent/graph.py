"""The loop as a graph: nodes, plain edges and conditional routes, printed as Mermaid.

`kernelopt graph` prints it; dashed edges are conditional routes. Without --use-nsight an
evaluation routes straight to the next proposal, repair or finalize; research runs only with
--nvidia-research; generation only for parts that were not supplied. With --candidates N, N
lanes take the propose / repair / evaluate / profile routes at once (the GPU one at a time).
``--resume RUN`` starts at resume instead of load: the run's records, options and frozen workload
are read back and its lanes go on from their next iteration (``resume.py``).

The loop records every node it enters as a ``step`` event with the node it came from
(records.StepEvent), so :func:`edges_taken` reads the routes a run took from its history.
"""

from __future__ import annotations

from collections.abc import Iterable

# Node ids avoid Mermaid's reserved words (end); the text is the label.
NODES = {
    "begin": "start",
    "resume": "resume: reopen the run (--resume RUN)<br/>its records, options, frozen workload",
    "load": "load workload parts<br/>--workload / --signature / --input-cases / --reference / --initial-kernel",
    "research": "research: docs_search<br/>NVIDIA guidance",
    "generate": "generate omitted parts<br/>from --description",
    "freeze": "freeze inputs, expected outputs<br/>(PyTorch-reference workload: copy it)<br/>start kernelopt-mcp",
    "baseline": "run the CUDA reference (if any)<br/>evaluate the initial kernel",
    "propose": "propose: model + tools<br/>kernel, launch configs, rationale",
    "repair": "repair the invalid candidate",
    "evaluate": "evaluate: benchmark through kernelopt-mcp<br/>every case must pass",
    "profile": "profile a performance case<br/>ncu_profile",
    "tune": "autotune: tunable.json or the proposal's tunables<br/>autotune through kernelopt-mcp",
    "finalize": "finalize: best.cu, replay, heatmap<br/>history.json, summary.json",
    "interrupt": "Ctrl-C, SIGTERM or an error<br/>at any step",
    "done": "end",
}

# (from, to, condition or None). A condition makes the edge a conditional (dashed) route.
EDGES: list[tuple[str, str, str | None]] = [
    ("begin", "load", None),
    ("begin", "resume", "--resume RUN"),
    ("resume", "propose", "iterations left"),
    ("resume", "repair", "the last candidate is invalid"),
    ("load", "research", "--nvidia-research"),
    ("load", "generate", "parts omitted"),
    ("load", "freeze", "all parts given"),
    ("research", "generate", "parts omitted"),
    ("research", "freeze", "all parts given"),
    ("generate", "generate", "invalid parts (retry)"),
    ("generate", "freeze", None),
    ("freeze", "baseline", None),
    ("baseline", "generate", "generated reference fails"),
    ("baseline", "propose", "iterations left"),
    ("baseline", "repair", "the initial kernel is invalid"),
    ("baseline", "finalize", "--max-iterations 0"),
    ("baseline", "tune", "--strategy tune (default without an API key)"),
    ("tune", "evaluate", "untuned and best configuration"),
    ("propose", "propose", "tool calls / unparseable answer / no usable or a duplicate proposal"),
    ("propose", "evaluate", None),
    ("propose", "tune", "proposal carries tunables"),
    ("propose", "finalize", "budget spent while asking; no usable proposal in the last iteration"),
    ("repair", "repair", "tool calls / unparseable answer / no usable repair"),
    ("repair", "evaluate", None),
    ("repair", "tune", "the repair carries tunables"),
    ("repair", "finalize", "budget spent while asking; no usable repair in the last iteration"),
    ("evaluate", "profile", "valid and --use-nsight"),
    ("evaluate", "repair", "invalid, iterations left"),
    ("evaluate", "propose", "valid, iterations left"),
    ("evaluate", "finalize", "budget spent: iterations, --max-tokens, --max-cost; tuning done"),
    ("profile", "propose", "iterations left"),
    ("profile", "finalize", "budget spent"),
    ("interrupt", "finalize", "interrupted or failed: finalize what there is"),
    ("finalize", "done", None),
]
ENDED_EARLY = ("interrupted", "failed")  # finalize's statuses that come by the interrupt route


def edges_taken(steps: Iterable[tuple[str, str | None, str]]) -> set[tuple[str, str]]:
    """The routes a run took, from its step events as (node, came_from, message) in order: each step
    is the edge came_from -> node, except that finalize after an interruption or a failure (its message
    is the run's status) is the interrupt route."""
    taken = set()
    for node, came_from, message in steps:
        if came_from is None:
            continue
        if node == "finalize" and message in ENDED_EARLY:
            taken.add(("interrupt", "finalize"))
        else:
            taken.add((came_from, node))
    return taken


def mermaid(*, use_nsight: bool = True, nvidia_research: bool = True) -> str:
    """The flowchart; routes needing a flag that is off are left out."""
    skip = set()
    if not use_nsight:
        skip.add("profile")
    if not nvidia_research:
        skip.add("research")
    lines = ["flowchart TD"]
    for node, shape in NODES.items():
        if node not in skip:
            open_, close = ("([", "])") if node in ("begin", "done", "interrupt") else ("[", "]")
            lines.append(f'    {node}{open_}"{shape}"{close}')
    for src, dst, cond in EDGES:
        if src in skip or dst in skip:
            continue
        lines.append(f'    {src} -.->|"{cond}"| {dst}' if cond else f"    {src} --> {dst}")
    return "\n".join(lines) + "\n"
