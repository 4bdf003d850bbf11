"""The loop as a graph: nodes, plain edges and conditional routes, printed as Mermaid.

`kernelopt graph` prints it; dashed edges are conditional routes. Without --use-nsight an
evaluation routes straight to the next proposal, repair or finalize; research runs only with
--nvidia-research; generation only for parts that were not supplied.
"""

from __future__ import annotations

# Node ids avoid Mermaid's reserved words (end); the text is the label.
NODES = {
    "begin": "start",
    "load": "load workload parts<br/>--workload / --signature / --input-cases / --reference / --initial-kernel",
    "research": "research: docs_search<br/>NVIDIA guidance",
    "generate": "generate omitted parts<br/>from --description",
    "freeze": "freeze inputs, expected outputs<br/>start kernelopt-mcp",
    "baseline": "run the reference<br/>evaluate the initial kernel",
    "propose": "propose: model + tools<br/>kernel, launch configs, rationale",
    "repair": "repair the invalid candidate",
    "evaluate": "evaluate: benchmark through kernelopt-mcp<br/>every case must pass",
    "profile": "profile a performance case<br/>ncu_profile",
    "tune": "autotune: tunable.json or the proposal's tunables<br/>autotune through kernelopt-mcp",
    "finalize": "finalize: best.cu, replay, heatmap<br/>history.json, summary.json",
    "done": "end",
}

# (from, to, condition or None). A condition makes the edge a conditional (dashed) route.
EDGES: list[tuple[str, str, str | None]] = [
    ("begin", "load", None),
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
    ("baseline", "finalize", "--max-iterations 0"),
    ("baseline", "tune", "--strategy tune (default without an API key)"),
    ("tune", "evaluate", "untuned and best configuration"),
    ("propose", "propose", "tool calls / unparseable answer"),
    ("propose", "evaluate", None),
    ("propose", "tune", "proposal carries tunables"),
    ("repair", "evaluate", None),
    ("evaluate", "profile", "valid and --use-nsight"),
    ("evaluate", "repair", "invalid, iterations left"),
    ("evaluate", "propose", "valid, iterations left"),
    ("evaluate", "finalize", "budget spent: iterations, --max-tokens; tuning done"),
    ("profile", "propose", "iterations left"),
    ("profile", "finalize", "budget spent"),
    ("finalize", "done", None),
]


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
            open_, close = ("([", "])") if node in ("begin", "done") else ("[", "]")
            lines.append(f'    {node}{open_}"{shape}"{close}')
    for src, dst, cond in EDGES:
        if src in skip or dst in skip:
            continue
        lines.append(f'    {src} -.->|"{cond}"| {dst}' if cond else f"    {src} --> {dst}")
    return "\n".join(lines) + "\n"
