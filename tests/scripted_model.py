"""A scripted OpenAI-compatible model on loopback: real HTTP, replayed answers.

`ScriptedModel(steps)` serves ``POST /v1/chat/completions`` (Chat Completions) and ``POST
/v1/responses`` (the Responses API) on 127.0.0.1 (a free port) and answers each request, through
either endpoint, with the next step of its script in that API's wire format, recording every
request body, header and path. A step is a dict (or a callable that takes the request body and
returns one):

    {"content": "..."}                                   an answer
    {"tool_calls": [("compile", {"source": "..."})]}     tool calls
    {"refusal": "I can't help with that."}               a refusal
    {"status": 500, "error": "...", "param": "..."}      an HTTP error (param: the request field it names)
    {"sleep": 30, ...}                                   wait first (interrupt tests)
    {"incomplete": "max_output_tokens", ...}             an answer cut off (finish_reason "length")
    optional "usage": {"prompt_tokens": ..., "completion_tokens": ..., "cached_tokens": ..., "reasoning_tokens": ...}
        (input_tokens / output_tokens are accepted too; cached and reasoning tokens are parts of input and
        output, reported in the *_tokens_details of either API)

Responses requests are checked as OpenAI checks them (answered 400 otherwise): every
function_call_output follows its function_call in the same input, and every reasoning item sent back
carries encrypted content this server issued. A request that asks for reasoning gets a reasoning item
first in its output, with ``encrypted_content`` when ``include`` asks for reasoning.encrypted_content
(the issued strings are in ``issued_reasoning``).

When the script runs out, it answers 500 "script exhausted" (tests check it did not).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Step = dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]]


class ScriptedModel:
    def __init__(self, steps: list[Step]) -> None:
        self.steps = list(steps)
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.paths: list[str] = []  # the endpoint of each request: "/v1/chat/completions" or "/v1/responses"
        self.issued_reasoning: list[str] = []
        self.exhausted = False
        self.received = threading.Event()  # set on every request
        self.closing = threading.Event()  # ends a step's sleep early
        self._lock = threading.Lock()
        model = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                if not self.path.endswith(("/chat/completions", "/responses")):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                status, payload, sleep = model._answer(body, {k.lower(): v for k, v in self.headers.items()}, self.path)
                if sleep and model.closing.wait(sleep):
                    return  # the test is over: drop the connection
                self._send(status, payload)

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> ScriptedModel:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.closing.set()
        self.server.shutdown()
        self.server.server_close()

    def _answer(self, body: dict[str, Any], headers: dict[str, str], path: str = "/v1/chat/completions",
                ) -> tuple[int, dict[str, Any], float]:
        responses = path.endswith("/responses")
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            self.paths.append(path)
            n = len(self.requests)
            step: Step | None = self.steps.pop(0) if self.steps else None
        self.received.set()
        if step is None:
            self.exhausted = True
            return 500, {"error": {"message": "script exhausted", "type": "server_error"}}, 0
        if callable(step):
            step = step(body)
        if "status" in step:
            return step["status"], {"error": {"message": step.get("error", "error"), "type": "invalid_request_error",
                                              "param": step.get("param"), "code": None}}, step.get("sleep", 0)
        if responses:
            problem = self._check_input(body)
            if problem:
                return 400, {"error": {"message": problem, "type": "invalid_request_error", "param": "input",
                                       "code": None}}, 0
            return 200, self._response(body, step, n), step.get("sleep", 0)
        message: dict[str, Any] = {"role": "assistant", "content": step.get("content"), "refusal": step.get("refusal")}
        finish = "length" if step.get("incomplete") == "max_output_tokens" else "stop"
        if step.get("tool_calls"):
            message["tool_calls"] = [
                {"id": f"call_{n}_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
                for i, (name, args) in enumerate(step["tool_calls"])
            ]
            finish = "tool_calls"
        given = step.get("usage")
        usage = _usage_given(given) if given else {
            "prompt_tokens": len(json.dumps(body.get("messages", []))) // 4,
            "completion_tokens": len(json.dumps(message)) // 4 + 20,
        }
        usage = {**usage, "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"]}
        return 200, {
            "id": f"chatcmpl-{n}", "object": "chat.completion", "created": int(time.time()), "model": body.get("model"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}], "usage": usage,
        }, step.get("sleep", 0)

    def _check_input(self, body: dict[str, Any]) -> str | None:
        """What OpenAI would refuse in a Responses input (store: false, so nothing is looked up server-side)."""
        items = body.get("input")
        if isinstance(items, str):
            return None
        if not isinstance(items, list):
            return "Invalid type for 'input': expected a string or an array of input items."
        calls: set[str] = set()
        for i, item in enumerate(items):
            kind = item.get("type", "message" if "role" in item else None)
            if kind == "function_call":
                calls.add(item.get("call_id", ""))
            elif kind == "function_call_output" and item.get("call_id") not in calls:
                return f"No tool call found for function call output with call_id {item.get('call_id')}."
            elif kind == "reasoning" and item.get("encrypted_content") not in self.issued_reasoning:
                return (f"The encrypted content for item input[{i}] could not be verified. Reason: Encrypted content "
                        "could not be decrypted or parsed.")
            elif kind == "message" and item.get("role") not in ("user", "assistant", "system", "developer"):
                return f"Invalid value for 'input[{i}].role'."
        return None

    def _response(self, body: dict[str, Any], step: dict[str, Any], n: int) -> dict[str, Any]:
        """A Response object as POST /v1/responses returns it."""
        output: list[dict[str, Any]] = []
        if body.get("reasoning") is not None:
            item: dict[str, Any] = {"id": f"rs_{n:04d}", "type": "reasoning", "summary": []}
            if "reasoning.encrypted_content" in (body.get("include") or []):
                item["encrypted_content"] = f"gAAAAB-scripted-reasoning-{n:04d}"
                self.issued_reasoning.append(item["encrypted_content"])
            output.append(item)
        for i, (name, args) in enumerate(step.get("tool_calls") or []):
            output.append({"id": f"fc_{n:04d}_{i}", "type": "function_call", "status": "completed",
                           "call_id": f"call_{n}_{i}", "name": name, "arguments": json.dumps(args)})
        parts: list[dict[str, Any]] = []
        if step.get("content") is not None:
            parts.append({"type": "output_text", "text": step["content"], "annotations": [], "logprobs": []})
        if step.get("refusal") is not None:
            parts.append({"type": "refusal", "refusal": step["refusal"]})
        if parts:
            output.append({"id": f"msg_{n:04d}", "type": "message", "status": "completed", "role": "assistant",
                           "content": parts})
        given = step.get("usage")
        numbers = _usage_given(given) if given else {
            "prompt_tokens": len(json.dumps(body.get("input", []))) // 4,
            "completion_tokens": len(json.dumps(output)) // 4 + 20,
        }
        details_in = numbers.get("prompt_tokens_details", {})
        details_out = numbers.get("completion_tokens_details", {})
        usage = {
            "input_tokens": numbers["prompt_tokens"],
            "input_tokens_details": {"cached_tokens": details_in.get("cached_tokens", 0)},
            "output_tokens": numbers["completion_tokens"],
            "output_tokens_details": {"reasoning_tokens": details_out.get("reasoning_tokens", 0)},
            "total_tokens": numbers["prompt_tokens"] + numbers["completion_tokens"],
        }
        incomplete = step.get("incomplete")
        return {
            "id": f"resp_{n:04d}", "object": "response", "created_at": int(time.time()),
            "status": "incomplete" if incomplete else "completed", "error": None,
            "incomplete_details": {"reason": incomplete} if incomplete else None,
            "instructions": body.get("instructions"), "max_output_tokens": body.get("max_output_tokens"),
            "model": body.get("model"), "output": output, "parallel_tool_calls": True,
            "previous_response_id": body.get("previous_response_id"),
            "reasoning": {"effort": (body.get("reasoning") or {}).get("effort"), "summary": None},
            "store": body.get("store", True), "temperature": 1.0,
            "text": body.get("text") or {"format": {"type": "text"}}, "tool_choice": "auto",
            "tools": body.get("tools") or [], "top_p": 1.0, "truncation": "disabled", "usage": usage, "user": None,
            "metadata": {},
        }


def _usage_given(given: dict[str, Any]) -> dict[str, Any]:
    """A step's usage in Chat Completions' names; cached and reasoning tokens as the *_details both APIs report."""
    usage: dict[str, Any] = {"prompt_tokens": given.get("prompt_tokens", given.get("input_tokens", 0)),
                             "completion_tokens": given.get("completion_tokens", given.get("output_tokens", 0))}
    if "cached_tokens" in given:
        usage["prompt_tokens_details"] = {"cached_tokens": given["cached_tokens"]}
    if "reasoning_tokens" in given:
        usage["completion_tokens_details"] = {"reasoning_tokens": given["reasoning_tokens"]}
    return usage
