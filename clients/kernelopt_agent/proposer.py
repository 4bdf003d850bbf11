"""One proposal from the model: the conversation of one iteration (or of one of its --candidates
slots), with the server's tools, kept within the context budget of ``prompts``.

The conversation is rebuilt each iteration from the run's state (``prompts``); within it the
model may call tools for up to --tool-rounds rounds, and an answer that does not parse is sent
back (FORMAT_RETRIES times). Before every request the messages are fitted to
``prompts.REQUEST_BUDGET_TOKENS``: older tool results are cut first, and once the room left is
smaller than a tool result can be, no more tools are offered.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from . import prompts
from .proposal import PROPOSAL_SCHEMA, Proposal, ProposalError, parse_proposal
from .records import UnparseableAnswerEvent
from .toolbox import MODEL_TEXT_LIMIT, model_text

if TYPE_CHECKING:
    import anyio

    from .progress import Display
    from .state import RunState


class Optimizer(Protocol):
    """What a conversation needs of the loop (loop.Optimizer; a protocol, so this module does not import it)."""

    state: RunState
    display: Display
    gpu_lock: anyio.Semaphore

    def tool_names(self) -> list[str]: ...
    def workload_text(self) -> str: ...

FORMAT_RETRIES = 2


@dataclass
class Asked:
    """What one iteration's conversation gave: a proposal, or why not (``problem``: status, message)."""

    proposal: Proposal | None
    calls: list[int] = field(default_factory=list)
    problem: tuple[str, str] = ("", "")


async def ask(opt: Optimizer, iteration: int, repair: bool, slot: int | None, state: str) -> Asked:
    """Ask the model for one proposal; ``state`` is the iteration's state prompt (prompts.state_prompt)."""
    st = opt.state
    assert st.model is not None and st.tools is not None and st.frozen is not None
    names = [n for n in opt.tool_names() if st.tools.has(n)]
    tools = st.tools.openai_tools(names)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": prompts.system_prompt(names)},
        {"role": "user", "content": opt.workload_text()},
        {"role": "user", "content": state},
    ]
    where = f"iteration {iteration}" + (f" candidate {slot}" if slot else "")
    asked = Asked(None)
    retries = 0
    rounds = 0
    while True:
        prompts.fit_request(messages)
        offer = tools if rounds < st.opts.tool_rounds and prompts.room_left(messages) > MODEL_TEXT_LIMIT else None
        with opt.display.activity(f"{where}: asking {st.opts.model}"):
            reply = await st.model.chat(messages, purpose=where + (" (repair)" if repair else ""), tools=offer,
                                         schema=PROPOSAL_SCHEMA)
        asked.calls.append(reply.number)
        opt.display.tokens = st.model.usage.total_tokens
        if reply.tool_calls and offer:
            rounds += 1
            st.event("repair" if repair else "propose", f"{where}: tool calls "
                     f"{', '.join(c.function.name for c in reply.tool_calls)}",
                      lane=slot)
            messages.append({"role": "assistant", "content": reply.message.content, "tool_calls": [
                {"id": c.id, "type": "function",
                 "function": {"name": c.function.name, "arguments": c.function.arguments}}
                for c in reply.tool_calls
            ]})
            for call in reply.tool_calls:
                messages.append({"role": "tool", "tool_call_id": call.id,
                                 "content": await model_tool(opt, call, names)})
            if rounds >= st.opts.tool_rounds or prompts.room_left(messages) <= MODEL_TEXT_LIMIT:
                messages.append({"role": "user", "content": "No more tool calls: answer now with the JSON proposal."})
            continue
        if reply.refusal:
            asked.problem = ("refused", reply.refusal)
            return asked
        try:
            asked.proposal = parse_proposal(reply.content, st.frozen.case_names)
            return asked
        except ProposalError as exc:
            if reply.finish_reason == "length":
                exc = ProposalError(f"the answer was cut off at the output limit ({exc}); answer more briefly")
            retries += 1
            st.record(UnparseableAnswerEvent(iteration=iteration, slot=slot, model_call=reply.number, message=str(exc)))
            if retries > FORMAT_RETRIES:
                asked.problem = ("unparseable", str(exc))
                return asked
            st.event("repair" if repair else "propose",
                     f"{where}: the answer could not be used; asking again", lane=slot)
            messages.append({"role": "assistant", "content": reply.content or ""})
            messages.append({"role": "user", "content": f"Your answer could not be used: {exc}. Answer with exactly "
                             "one JSON object with keys rationale, source, launch, compile_options, tunables."})


async def model_tool(opt: Optimizer, call: Any, allowed: list[str]) -> str:
    """A tool call of the model, run through the server (errors are text for the model)."""
    tools = opt.state.tools
    assert tools is not None
    name = call.function.name
    if name not in allowed:
        return f"tool error: no tool {name!r}; available: {', '.join(allowed)}"
    try:
        args = json.loads(call.function.arguments or "{}")
    except json.JSONDecodeError as exc:
        return f"tool error: the arguments are not JSON ({exc})"
    if not isinstance(args, dict):
        return "tool error: the arguments must be a JSON object"
    if name == "ncu_profile":  # the GPU: one thing at a time (timing and profiling never overlap)
        async with opt.gpu_lock:
            with opt.display.activity(f"model calls {name}"):
                result = await tools.call(name, args, caller="model")
    else:
        with opt.display.activity(f"model calls {name}"):
            result = await tools.call(name, args, caller="model")
    return model_text(result)
