"""A scripted OpenAI-compatible model on loopback: real HTTP, replayed answers.

`ScriptedModel(steps)` serves ``POST /v1/chat/completions`` on 127.0.0.1 (a free port) and
answers each request with the next step of its script, recording every request body and header.
A step is a dict (or a callable that takes the request body and returns one):

    {"content": "..."}                                   an answer
    {"tool_calls": [("compile", {"source": "..."})]}     tool calls
    {"refusal": "I can't help with that."}               a refusal
    {"status": 500, "error": "..."}                      an HTTP error
    {"sleep": 30, ...}                                   wait first (interrupt tests)
    optional "usage": {"prompt_tokens": ..., "completion_tokens": ...}

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
                if not self.path.endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                status, payload, sleep = model._answer(body, {k.lower(): v for k, v in self.headers.items()})
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

    def _answer(self, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, dict[str, Any], float]:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            n = len(self.requests)
            step: Step | None = self.steps.pop(0) if self.steps else None
        self.received.set()
        if step is None:
            self.exhausted = True
            return 500, {"error": {"message": "script exhausted", "type": "server_error"}}, 0
        if callable(step):
            step = step(body)
        if "status" in step:
            return step["status"], {"error": {"message": step.get("error", "error"), "type": "invalid_request_error"}}, step.get("sleep", 0)
        message: dict[str, Any] = {"role": "assistant", "content": step.get("content"), "refusal": step.get("refusal")}
        finish = "stop"
        if step.get("tool_calls"):
            message["tool_calls"] = [
                {"id": f"call_{n}_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
                for i, (name, args) in enumerate(step["tool_calls"])
            ]
            finish = "tool_calls"
        usage = step.get("usage") or {
            "prompt_tokens": len(json.dumps(body.get("messages", []))) // 4,
            "completion_tokens": len(json.dumps(message)) // 4 + 20,
        }
        usage = {**usage, "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"]}
        return 200, {
            "id": f"chatcmpl-{n}", "object": "chat.completion", "created": int(time.time()), "model": body.get("model"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}], "usage": usage,
        }, step.get("sleep", 0)
