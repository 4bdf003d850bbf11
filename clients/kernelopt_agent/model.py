"""The model: Chat Completions through the official ``openai`` SDK (any compatible server).

Every request and response is written to the run directory before anything else happens with
it; token usage is counted per call and in total, priced where the model's price is known.
The SDK retries connection errors, 429 and 5xx itself (``max_retries``); what is left becomes a
:class:`ModelError` whose message says what to do.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import openai

from .options import OptimizeOptions, redact_url
from .rundir import RunDir

# USD per million tokens (input, cached input, output), from OpenAI's public price list.
PRICES_PER_M: dict[str, tuple[float, float, float]] = {
    "gpt-5": (1.25, 0.125, 10.0),
    "gpt-5-mini": (0.25, 0.025, 2.0),
    "gpt-5-nano": (0.05, 0.005, 0.40),
    "gpt-4.1": (2.0, 0.5, 8.0),
    "gpt-4.1-mini": (0.40, 0.10, 1.60),
    "gpt-4.1-nano": (0.10, 0.025, 0.40),
    "gpt-4o": (2.50, 1.25, 10.0),
    "gpt-4o-mini": (0.15, 0.075, 0.60),
    "o4-mini": (1.10, 0.275, 4.40),
    "o3": (2.0, 0.5, 8.0),
}


# Every keyword argument chat() ever passes to ``chat.completions.create``; pyproject's openai floor
# (1.58: the first release whose create() takes reasoning_effort) must accept all of them, which
# tests/test_optimize_sdk.py checks against the installed SDK's signature.
SENT_PARAMETERS = ("model", "messages", "tools", "reasoning_effort", "response_format")


class ModelError(RuntimeError):
    """The model could not be asked (after the SDK's retries); the message says why and what to do."""


def check_key(opts: OptimizeOptions) -> str:
    """The API key to send ("no-key" for a local server given by --base-url).

    Raises:
        ModelError: no key and no --base-url (checked before a run directory is made).
    """
    if opts.api_key:
        return opts.api_key
    if not opts.base_url:
        raise ModelError(
            "OPENAI_API_KEY is not set: export it, or put `OPENAI_API_KEY=...` in a .env file in the "
            "working directory (for a local OpenAI-compatible server, pass --base-url instead)"
        )
    return "no-key"  # local servers (vLLM, Ollama) ignore it; the SDK requires one


class BudgetExhausted(RuntimeError):
    """--max-tokens or --max-cost is reached: the loop stops cleanly."""


@dataclass
class Usage:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    cached_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def add(self, usage: Any) -> dict[str, int]:
        """Add one response's usage (an SDK object or None); returns this call's numbers."""
        if usage is None:
            return {}
        prompt = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion = int(getattr(usage, "completion_tokens", 0) or 0)
        details = getattr(usage, "completion_tokens_details", None)
        reasoning = int(getattr(details, "reasoning_tokens", 0) or 0) if details else 0
        pdetails = getattr(usage, "prompt_tokens_details", None)
        cached = int(getattr(pdetails, "cached_tokens", 0) or 0) if pdetails else 0
        self.prompt_tokens += prompt
        self.completion_tokens += completion
        self.reasoning_tokens += reasoning
        self.cached_tokens += cached
        return {"prompt_tokens": prompt, "completion_tokens": completion, "reasoning_tokens": reasoning,
                "cached_tokens": cached, "total_tokens": prompt + completion}

    def cost_usd(self, model: str) -> float | None:
        price = price_for(model)
        if price is None:
            return None
        inp, cached, out = price
        fresh = self.prompt_tokens - self.cached_tokens
        return (fresh * inp + self.cached_tokens * cached + self.completion_tokens * out) / 1e6

    def as_json(self, model: str) -> dict[str, Any]:
        cost = self.cost_usd(model)
        return {
            "calls": self.calls, "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
            "reasoning_tokens": self.reasoning_tokens, "cached_tokens": self.cached_tokens,
            "total_tokens": self.total_tokens,
            "cost_usd": round(cost, 6) if cost is not None else None,
            "cost_note": "estimate from list prices" if cost is not None else f"no price known for {model!r}",
        }


def price_for(model: str) -> tuple[float, float, float] | None:
    """The longest known model name that ``model`` starts with (dated snapshots share prices)."""
    for name in sorted(PRICES_PER_M, key=len, reverse=True):
        if model == name or model.startswith(name + "-20") or model.startswith(name + "-2"):
            return PRICES_PER_M[name]
    return None


@dataclass
class ModelReply:
    message: Any  # openai ChatCompletionMessage
    usage: dict[str, int]
    number: int
    finish_reason: str | None = None

    @property
    def content(self) -> str:
        return self.message.content or ""

    @property
    def refusal(self) -> str | None:
        return getattr(self.message, "refusal", None)

    @property
    def tool_calls(self) -> list[Any]:
        return list(self.message.tool_calls or [])


@dataclass
class ModelClient:
    opts: OptimizeOptions
    run: RunDir
    usage: Usage = field(default_factory=Usage)
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)  # per call: number, purpose, tokens, seconds
    _response_format: str = "json_schema"  # json_schema -> json_object -> none, as the server allows
    _send_effort: bool = True

    def __post_init__(self) -> None:
        key = check_key(self.opts)
        self._send_effort = self.opts.reasoning_effort != "off"
        self.client = openai.AsyncOpenAI(
            api_key=key, base_url=self.opts.base_url, max_retries=self.opts.max_retries,
            timeout=self.opts.request_timeout_s,
        )

    @property
    def endpoint(self) -> str:
        return redact_url(self.opts.base_url) or "the OpenAI API"

    def check_budget(self) -> None:
        if self.opts.max_tokens is not None and self.usage.total_tokens >= self.opts.max_tokens:
            raise BudgetExhausted(f"--max-tokens {self.opts.max_tokens} reached ({self.usage.total_tokens} tokens used)")
        cost = self.usage.cost_usd(self.opts.model)
        if self.opts.max_cost is not None and cost is not None and cost >= self.opts.max_cost:
            raise BudgetExhausted(f"--max-cost {self.opts.max_cost} USD reached ({cost:.4f} USD estimated)")

    async def chat(
        self, messages: list[dict[str, Any]], *, purpose: str, tools: list[dict[str, Any]] | None = None,
        schema: dict[str, Any] | None = None,
    ) -> ModelReply:
        """One Chat Completions call, recorded; raises ModelError or BudgetExhausted."""
        self.check_budget()
        number = self.run.next_number("model")
        while True:
            params: dict[str, Any] = {"model": self.opts.model, "messages": messages}
            if tools:
                params["tools"] = tools
            if self._send_effort:
                params["reasoning_effort"] = self.opts.reasoning_effort
            if schema is not None and self._response_format == "json_schema":
                params["response_format"] = {"type": "json_schema", "json_schema": schema}
            elif schema is not None and self._response_format == "json_object":
                params["response_format"] = {"type": "json_object"}
            self.run.write_json(f"model/{number:04d}-request.json", {
                "number": number, "purpose": purpose, "endpoint": self.endpoint,
                **{k: v for k, v in params.items() if k != "tools"},
                "tools": [t["function"]["name"] for t in tools or []],
            })
            start = time.monotonic()
            try:
                response = await self.client.chat.completions.create(**params)
            except openai.BadRequestError as exc:
                self._record_error(number, exc, time.monotonic() - start)
                if self._downgrade(exc, params):
                    number = self.run.next_number("model")  # the retry is a request of its own
                    continue
                raise ModelError(f"{self.endpoint} refused the request (400): {_detail(exc)}") from None
            except openai.APIError as exc:
                self._record_error(number, exc, time.monotonic() - start)
                raise ModelError(self._explain(exc)) from None
            elapsed = time.monotonic() - start
            self.seconds += elapsed
            self.usage.calls += 1
            used = self.usage.add(response.usage)
            self.calls.append({"number": number, "purpose": purpose, "seconds": round(elapsed, 3), **used})
            self.run.write_json(f"model/{number:04d}-response.json", {
                "number": number, "purpose": purpose, "seconds": round(elapsed, 3), "usage": used,
                "total_tokens_so_far": self.usage.total_tokens, "response": response.model_dump(mode="json"),
            })
            if not response.choices:
                raise ModelError(f"{self.endpoint} answered with no choices (response model/{number:04d}-response.json)")
            choice = response.choices[0]
            return ModelReply(choice.message, used, number, choice.finish_reason)

    def _downgrade(self, exc: openai.BadRequestError, params: dict[str, Any]) -> bool:
        """Retry without what the server refused: structured output, then reasoning effort."""
        text = _detail(exc).lower()
        if "response_format" in params and ("response_format" in text or "json_schema" in text or "structured output" in text):
            old = self._response_format
            self._response_format = "json_object" if old == "json_schema" else "none"
            self.notes.append(f"{self.endpoint} refused response_format {old}; using {self._response_format}")
            return True
        if "reasoning_effort" in params and ("reasoning" in text or "effort" in text):
            self._send_effort = False
            self.notes.append(f"{self.endpoint} refused reasoning_effort; sent without it")
            return True
        return False

    def _record_error(self, number: int, exc: Exception, seconds: float) -> None:
        self.run.write_json(f"model/{number:04d}-error.json", {
            "number": number, "seconds": round(seconds, 3), "error": type(exc).__name__, "message": _detail(exc),
            "status_code": getattr(exc, "status_code", None),
        })

    def _explain(self, exc: openai.APIError) -> str:
        where = self.endpoint
        if isinstance(exc, openai.AuthenticationError):
            return f"{where} refused the API key (401): check OPENAI_API_KEY (environment or .env)"
        if isinstance(exc, openai.PermissionDeniedError):
            return f"{where} denied access (403): {_detail(exc)}"
        if isinstance(exc, openai.NotFoundError):
            return f"{where}: model {self.opts.model!r} or the endpoint was not found (404): {_detail(exc)}; check --model and --base-url"
        if isinstance(exc, openai.RateLimitError):
            return f"{where}: rate limit or quota exceeded after {self.opts.max_retries} retries (429): {_detail(exc)}"
        if isinstance(exc, openai.APITimeoutError):
            return f"{where} did not answer within {self.opts.request_timeout_s:.0f} s (after {self.opts.max_retries} retries)"
        if isinstance(exc, openai.APIConnectionError):
            return (
                f"cannot reach {where} (after {self.opts.max_retries} retries): {exc.__cause__ or exc}; "
                "check --base-url / OPENAI_BASE_URL and the network"
            )
        if isinstance(exc, openai.APIStatusError):
            return f"{where} answered {exc.status_code} (after retries): {_detail(exc)}"
        return f"{where}: {type(exc).__name__}: {_detail(exc)}"


def _detail(exc: Exception) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:500]
    return str(exc)[:500]
