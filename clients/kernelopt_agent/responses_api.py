"""The OpenAI Responses API in the loop's terms.

The loop speaks Chat Completions: a list of messages (system, user, assistant with tool_calls, tool
results) and a reply with content, refusal, tool_calls and finish_reason. This module turns those
messages into Responses input items and a Responses answer into the same reply shape, so that
proposals, tool calls, retries and errors work the same through both APIs.

Reasoning is kept between turns without server-side state: requests go with ``store: false`` and
``include: ["reasoning.encrypted_content"]``, and every answer's output items (its encrypted reasoning
items first) are remembered by the tool-call ids or the text they carry; when the loop sends that
assistant turn back, the original items are sent instead of a rebuilt message, as OpenAI documents for
stateless use of reasoning models.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Every keyword argument ModelClient passes to ``responses.create``; openai 1.66.0 (the first release with
# client.responses) takes them all, which tests/optimize/test_optimize_model.py checks.
RESPONSES_SENT_PARAMETERS = ("model", "input", "tools", "reasoning", "text", "include", "store")
ENCRYPTED_REASONING = "reasoning.encrypted_content"


@dataclass
class Function:
    name: str
    arguments: str


@dataclass
class ToolCall:
    """A function call in Chat Completions' shape (``id`` is the Responses ``call_id``)."""

    id: str
    function: Function
    type: str = "function"


@dataclass
class AssistantMessage:
    """The parts of a Chat Completions message the loop reads."""

    content: str | None
    refusal: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    role: str = "assistant"


def function_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat Completions function tools as Responses function tools (flat; strict off, since the MCP
    tools' schemas are not written for strict mode, which the Responses API otherwise assumes)."""
    out = []
    for tool in tools:
        fn = tool.get("function", tool)
        out.append({"type": "function", "name": fn["name"], "description": fn.get("description") or "",
                    "parameters": fn.get("parameters") or {"type": "object", "properties": {}}, "strict": False})
    return out


def text_format(schema: dict[str, Any] | None, mode: str) -> dict[str, Any] | None:
    """The ``text`` parameter for a Chat Completions ``json_schema`` (name, schema, strict) and a mode:
    json_schema, json_object or none."""
    if schema is None or mode == "none":
        return None
    if mode == "json_object":
        return {"format": {"type": "json_object"}}
    fmt: dict[str, Any] = {"type": "json_schema", "name": schema.get("name", "answer"), "schema": schema["schema"]}
    if "strict" in schema:
        fmt["strict"] = schema["strict"]
    return {"format": fmt}


def turn_key(tool_call_ids: list[str], text: str | None) -> str:
    """How an assistant turn is recognised when the loop sends it back: by its tool calls, else its text."""
    return "calls:" + "|".join(tool_call_ids) if tool_call_ids else "text:" + (text or "")


def to_input(messages: list[dict[str, Any]], remembered: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Chat Completions messages as Responses input items; remembered assistant turns go back as they came."""
    items: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        content = message.get("content")
        if role == "tool":
            items.append({"type": "function_call_output", "call_id": message["tool_call_id"], "output": content or ""})
        elif role == "assistant":
            calls = message.get("tool_calls") or []
            key = turn_key([c["id"] for c in calls], content)
            if remembered.get(key):
                items.extend(remembered[key])
                continue
            if content:
                items.append({"role": "assistant", "content": content})
            for call in calls:
                items.append({"type": "function_call", "call_id": call["id"], "name": call["function"]["name"],
                              "arguments": call["function"]["arguments"]})
        else:  # system, developer, user
            items.append({"role": role, "content": content or ""})
    return items


@dataclass
class ParsedResponse:
    message: AssistantMessage
    finish_reason: str
    replay: list[dict[str, Any]]  # the output items to send back for this turn
    key: str


def parse_response(data: dict[str, Any]) -> ParsedResponse:
    """A Responses answer (``Response.model_dump()``) as a Chat-shaped message, its finish reason, and the
    items to send back when the loop returns this turn (reasoning with its encrypted content, calls, text)."""
    texts: list[str] = []
    refusal: str | None = None
    calls: list[ToolCall] = []
    replay: list[dict[str, Any]] = []
    for item in data.get("output") or []:
        kind = item.get("type")
        if kind == "reasoning":
            if item.get("encrypted_content"):  # without it (store: false) the item cannot be referred to again
                replay.append({"type": "reasoning", "id": item.get("id"), "summary": item.get("summary") or [],
                               "encrypted_content": item["encrypted_content"]})
        elif kind == "function_call":
            calls.append(ToolCall(item["call_id"], Function(item["name"], item.get("arguments") or "{}")))
            replay.append({"type": "function_call", "call_id": item["call_id"], "name": item["name"],
                           "arguments": item.get("arguments") or "{}"})
        elif kind == "message":
            parts = item.get("content") or []
            text = "".join(p.get("text") or "" for p in parts if p.get("type") == "output_text")
            refusal = refusal or next((p.get("refusal") for p in parts if p.get("type") == "refusal"), None)
            texts.append(text)
            if text or refusal:
                replay.append({"role": "assistant", "content": text or refusal})
    content = "".join(texts) if texts else None
    if data.get("status") == "incomplete":
        reason = (data.get("incomplete_details") or {}).get("reason")
        finish = "length" if reason == "max_output_tokens" else (reason or "incomplete")
    else:
        finish = "tool_calls" if calls else "stop"
    message = AssistantMessage(content, refusal, calls)
    key = turn_key([c.id for c in calls], content if content else refusal)
    return ParsedResponse(message, finish, replay, key)
