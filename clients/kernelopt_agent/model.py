"""The model, through the official ``openai`` SDK: the Responses API or Chat Completions.

``--api responses`` (the default on OpenAI's own endpoint) lets reasoning models keep their reasoning
between turns (encrypted reasoning items sent back, see ``responses_api.py``); ``--api chat`` serves
every other OpenAI-compatible server. The loop speaks Chat Completions' messages either way and gets
the same :class:`ModelReply`, so proposals, tool calls, retries and errors behave alike.

Every request and response is written to the run directory before anything else happens with it;
token usage is counted per call and in total and priced from ``pricing.py`` (unknown prices stay
unknown). The SDK retries connection errors, 429 and 5xx itself (``max_retries``); what is left
becomes a :class:`ModelError` whose message says what to do.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import openai

from .options import OptimizeOptions, default_api, redact_url
from .pricing import PRICES, Price, Pricing, Usage, price_for
from .responses_api import (
    ENCRYPTED_REASONING,
    RESPONSES_SENT_PARAMETERS,
    function_tools,
    parse_response,
    text_format,
    to_input,
)
from .rundir import RunDir

__all__ = [
    "PRICES",
    "RESPONSES_SENT_PARAMETERS",
    "SENT_PARAMETERS",
    "BudgetExhausted",
    "ModelClient",
    "ModelError",
    "ModelReply",
    "Price",
    "Pricing",
    "Usage",
    "check_key",
    "price_for",
]

# Every keyword argument chat() ever passes to ``chat.completions.create``; pyproject's openai floor
# (1.58: the first release whose create() takes reasoning_effort) must accept all of them, which
# tests/optimize/test_optimize_records.py checks against the installed SDK's signature. The Responses API's
# keywords are RESPONSES_SENT_PARAMETERS (tests/optimize/test_optimize_model.py).
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
class ModelReply:
    """One answer in Chat Completions' terms, whichever API gave it."""

    message: Any  # openai ChatCompletionMessage, or responses_api.AssistantMessage
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
    """Asks the model (``opts.api``: responses or chat); ``chat()`` is the one call the loop makes."""

    opts: OptimizeOptions
    run: RunDir
    usage: Usage = field(default_factory=Usage)
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)  # per call: number, purpose, tokens, seconds
    _response_format: str = "json_schema"  # json_schema -> json_object -> none, as the server allows
    _send_effort: bool = True
    _send_include: bool = True  # Responses: ask for encrypted reasoning (refused by non-reasoning models)
    _turns: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # Responses: output items per turn

    def __post_init__(self) -> None:
        key = check_key(self.opts)
        self.api = self.opts.api or default_api(self.opts.base_url)  # options resolve it; built by hand, too
        self._send_effort = self.opts.reasoning_effort != "off"
        self.usage.pricing = Pricing.resolve(self.opts.model, self.opts.price_per_mtok)
        self.client = openai.AsyncOpenAI(
            api_key=key, base_url=self.opts.base_url, max_retries=self.opts.max_retries,
            timeout=self.opts.request_timeout_s,
        )

    @property
    def endpoint(self) -> str:
        return redact_url(self.opts.base_url) or "the OpenAI API"

    def check_budget(self) -> None:
        if self.opts.max_tokens is not None and self.usage.total_tokens >= self.opts.max_tokens:
            raise BudgetExhausted(f"--max-tokens {self.opts.max_tokens} reached "
                                  f"({self.usage.total_tokens} tokens used)")
        if self.opts.max_cost is None:
            return
        cost = self.usage.cost_usd()
        if cost is None:  # options refuse this combination; never spend without a limit that can trigger
            raise BudgetExhausted(f"--max-cost {self.opts.max_cost} USD cannot be checked: "
                                  f"{self.usage.pricing.describe()}"
                                  if self.usage.pricing else "--max-cost cannot be checked: no price")
        if cost >= self.opts.max_cost:
            raise BudgetExhausted(f"--max-cost {self.opts.max_cost} USD reached ({cost:.4f} USD estimated)")

    async def chat(
        self, messages: list[dict[str, Any]], *, purpose: str, tools: list[dict[str, Any]] | None = None,
        schema: dict[str, Any] | None = None,
    ) -> ModelReply:
        """One model call, recorded; raises ModelError or BudgetExhausted.

        ``messages`` are Chat Completions messages and ``tools`` Chat Completions function tools whatever
        the API; ``schema`` is a ``json_schema`` (name, schema, strict) the answer should follow."""
        self.check_budget()
        number = self.run.next_number("model")
        while True:
            params = self._params(messages, tools, schema)
            self.run.write_json(f"model/{number:04d}-request.json", {
                "number": number, "purpose": purpose, "endpoint": self.endpoint, "api": self.api,
                **{k: v for k, v in params.items() if k != "tools"},
                "tools": [t["function"]["name"] for t in tools or []],
            })
            start = time.monotonic()
            try:
                if self.api == "responses":
                    response = await self.client.responses.create(**params)
                else:
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
            data = response.model_dump(mode="json")
            self.run.write_json(f"model/{number:04d}-response.json", {
                "number": number, "purpose": purpose, "api": self.api, "seconds": round(elapsed, 3), "usage": used,
                "total_tokens_so_far": self.usage.total_tokens, "response": data,
            })
            if self.api == "responses":
                return self._responses_reply(data, used, number)
            if not response.choices:
                raise ModelError(f"{self.endpoint} answered with no choices (response "
                                 f"model/{number:04d}-response.json)")
            choice = response.choices[0]
            return ModelReply(choice.message, used, number, choice.finish_reason)

    def _params(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                schema: dict[str, Any] | None) -> dict[str, Any]:
        params: dict[str, Any] = {"model": self.opts.model}
        if self.api == "responses":
            params["input"] = to_input(messages, self._turns)
            if tools:
                params["tools"] = function_tools(tools)
            if self._send_effort:
                params["reasoning"] = {"effort": self.opts.reasoning_effort}
            fmt = text_format(schema, self._response_format)
            if fmt is not None:
                params["text"] = fmt
            if self._send_include:
                params["include"] = [ENCRYPTED_REASONING]
            params["store"] = False  # no server-side state: the reasoning travels encrypted in the requests
            return params
        params["messages"] = messages
        if tools:
            params["tools"] = tools
        if self._send_effort:
            params["reasoning_effort"] = self.opts.reasoning_effort
        if schema is not None and self._response_format == "json_schema":
            params["response_format"] = {"type": "json_schema", "json_schema": schema}
        elif schema is not None and self._response_format == "json_object":
            params["response_format"] = {"type": "json_object"}
        return params

    def _responses_reply(self, data: dict[str, Any], used: dict[str, int], number: int) -> ModelReply:
        if data.get("status") == "failed" or data.get("error"):
            error = data.get("error") or {}
            raise ModelError(f"{self.endpoint} could not answer: {error.get('code') or 'failed'}: "
                             f"{error.get('message') or 'no message'} (response model/{number:04d}-response.json)")
        parsed = parse_response(data)
        if parsed.replay:
            self._turns[parsed.key] = parsed.replay
        return ModelReply(parsed.message, used, number, parsed.finish_reason)

    def _downgrade(self, exc: openai.BadRequestError, params: dict[str, Any]) -> bool:
        """Retry without what the server refused: encrypted reasoning (models without reasoning), structured
        output (json_schema, then json_object), then the reasoning effort. A stale encrypted reasoning item is
        dropped from what is sent back."""
        text = _detail(exc).lower()
        param = (_param(exc) or "").lower()
        if "include" in params and (param == "include" or "encrypted content is not supported" in text):
            self._send_include = False
            self.notes.append(f"{self.endpoint} refused include {ENCRYPTED_REASONING} ({_detail(exc)[:120]}); "
                              "sent without it")
            return True
        if "input" in params and "encrypted" in text and any(i.get("type") == "reasoning" for i in params["input"]):
            for key, items in self._turns.items():
                self._turns[key] = [i for i in items if i.get("type") != "reasoning"]
            self.notes.append(f"{self.endpoint} refused earlier reasoning items ({_detail(exc)[:120]}); "
                              "sent without them")
            return True
        structured = "response_format" in params or "text" in params
        if structured and any(w in text or w in param for w in ("response_format", "text.format", "json_schema",
                                                                 "json_object", "structured output")):
            old = self._response_format
            self._response_format = "json_object" if old == "json_schema" else "none"
            self.notes.append(f"{self.endpoint} refused response format {old}; using {self._response_format}")
            return True
        if ("reasoning_effort" in params or "reasoning" in params) and ("reasoning" in text or "effort" in text
                                                                         or param.startswith("reasoning")):
            self._send_effort = False
            self.notes.append(f"{self.endpoint} refused reasoning effort; sent without it")
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
            return (f"{where}: model {self.opts.model!r} or the endpoint was not found (404): {_detail(exc)}; check "
                    "--model and --base-url")
        if isinstance(exc, openai.RateLimitError):
            return f"{where}: rate limit or quota exceeded after {self.opts.max_retries} retries (429): {_detail(exc)}"
        if isinstance(exc, openai.APITimeoutError):
            return (f"{where} did not answer within {self.opts.request_timeout_s:.0f} s (after "
                    f"{self.opts.max_retries} retries)")
        if isinstance(exc, openai.APIConnectionError):
            return (
                f"cannot reach {where} (after {self.opts.max_retries} retries): {exc.__cause__ or exc}; "
                "check --base-url / OPENAI_BASE_URL and the network"
            )
        if isinstance(exc, openai.APIStatusError):
            return f"{where} answered {exc.status_code} (after retries): {_detail(exc)}"
        return f"{where}: {type(exc).__name__}: {_detail(exc)}"


def _param(exc: Exception) -> str | None:
    """The request parameter an API error names (OpenAI's error body has ``param``)."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and isinstance(err.get("param"), str):
            return err["param"]
    return None


def _detail(exc: Exception) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:500]
    return str(exc)[:500]
