"""What a run's model calls cost: the price table (data, with its source and date) and the token count.

Prices are USD per million tokens. OpenAI bills input tokens that were served from its prompt cache
at the cached-input price, and reasoning tokens as output tokens (they are part of the output count
both APIs report, never added on top). A model missing from the table has no price: its cost is
*unknown* (``None``), never 0.0, unless the user gives prices with ``--price-per-mtok``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

# Where the table's numbers come from, and when they were read. OpenAI's model pages
# (developers.openai.com/api/docs/models/<model>) list input, cached input and output per 1M tokens;
# the pricing page lists all of them. Prices change: check them, and give --price-per-mtok where they differ.
PRICE_SOURCE = "https://developers.openai.com/api/docs/pricing"
PRICES_CHECKED = "2026-12-01"


class PriceError(ValueError):
    """A price given by the user cannot be used; the message says the expected form."""


@dataclass(frozen=True)
class Price:
    """USD per million tokens. ``cached_input_per_mtok`` None: cached input is charged as input (an upper bound)."""

    input_per_mtok: float
    output_per_mtok: float
    cached_input_per_mtok: float | None = None

    def cost_usd(self, input_tokens: int, cached_input_tokens: int, output_tokens: int) -> float:
        cached_rate = self.input_per_mtok if self.cached_input_per_mtok is None else self.cached_input_per_mtok
        fresh = max(input_tokens - cached_input_tokens, 0)
        return (fresh * self.input_per_mtok + cached_input_tokens * cached_rate
                + output_tokens * self.output_per_mtok) / 1e6

    def as_json(self) -> dict[str, float | None]:
        return {"input_per_mtok": self.input_per_mtok, "cached_input_per_mtok": self.cached_input_per_mtok,
                "output_per_mtok": self.output_per_mtok}


# Price(input, output, cached input), USD per 1M tokens, standard tier. Read on PRICES_CHECKED: gpt-5-mini (the
# default model) and gpt-5-nano from their model pages, gpt-5 from the GPT-5-Codex page (same price), gpt-5.5,
# gpt-5.4 and gpt-5.4-mini from developers.openai.com/docs/models, which gives no cached-input price (None:
# cached input charged as input). The GPT-4.1, GPT-4o and o-series rows are OpenAI's list prices as this
# table carried them before (GPT-4.1's agree with GitHub's Copilot price table); not re-read on that date.
PRICES: dict[str, Price] = {
    "gpt-5.5": Price(5.00, 30.00),
    "gpt-5.4": Price(2.50, 15.00),
    "gpt-5.4-mini": Price(0.75, 4.50),
    "gpt-5": Price(1.25, 10.00, 0.125),
    "gpt-5-mini": Price(0.25, 2.00, 0.025),
    "gpt-5-nano": Price(0.05, 0.40, 0.005),
    "gpt-4.1": Price(2.00, 8.00, 0.50),
    "gpt-4.1-mini": Price(0.40, 1.60, 0.10),
    "gpt-4.1-nano": Price(0.10, 0.40, 0.025),
    "gpt-4o": Price(2.50, 10.00, 1.25),
    "gpt-4o-mini": Price(0.15, 0.60, 0.075),
    "o3": Price(2.00, 8.00, 0.50),
    "o4-mini": Price(1.10, 4.40, 0.275),
}

_SNAPSHOT = re.compile(r"-\d{4}-\d{2}-\d{2}$")  # gpt-5-mini-2025-08-07 is priced as gpt-5-mini


def price_for(model: str) -> Price | None:
    """The table's price for a model name or a dated snapshot of one; None when the table has none."""
    name = model.strip().lower()
    return PRICES.get(name) or PRICES.get(_SNAPSHOT.sub("", name))


def parse_price(value: Any) -> Price:
    """``--price-per-mtok``: "IN,OUT" or "IN,CACHED,OUT" (USD per million tokens), or a list of 2 or 3 numbers.

    Raises:
        PriceError: not 2 or 3 non-negative numbers.
    """
    parts = value if isinstance(value, (list, tuple)) else str(value).split(",")
    try:
        numbers = [float(p) for p in parts]
    except (TypeError, ValueError):
        numbers = []
    if len(numbers) not in (2, 3) or any(n < 0 or math.isnan(n) for n in numbers):
        raise PriceError(
            f"--price-per-mtok {value!r}: expected IN,OUT or IN,CACHED,OUT in USD per million tokens, "
            "e.g. --price-per-mtok 0.25,2 or 0.25,0.025,2"
        )
    if len(numbers) == 2:
        return Price(numbers[0], numbers[1])
    return Price(numbers[0], numbers[2], numbers[1])


@dataclass(frozen=True)
class Pricing:
    """The price a run uses for its model, and where it came from (said in summary.json)."""

    model: str
    price: Price | None
    source: str  # "table", "--price-per-mtok" or "none"

    @classmethod
    def resolve(cls, model: str, given: Any = None) -> Pricing:
        """--price-per-mtok wins over the table; neither: no price (cost unknown)."""
        if given is not None:
            return cls(model, parse_price(given), "--price-per-mtok")
        price = price_for(model)
        return cls(model, price, "table" if price is not None else "none")

    @property
    def known(self) -> bool:
        return self.price is not None

    def describe(self) -> str:
        if self.source == "--price-per-mtok":
            return f"prices given with --price-per-mtok for {self.model!r}"
        if self.price is not None:
            return f"OpenAI list prices for {self.model!r} from {PRICE_SOURCE} (checked {PRICES_CHECKED})"
        return (f"no price known for {self.model!r}: cost unknown (give --price-per-mtok IN,OUT; "
                f"the table has {', '.join(PRICES)})")

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"model": self.model, "source": self.source, "note": self.describe()}
        if self.price is not None:
            out.update(self.price.as_json())
        if self.source == "table":
            out.update({"url": PRICE_SOURCE, "checked": PRICES_CHECKED})
        return out


@dataclass
class Usage:
    """Tokens of every call, in the terms both APIs share.

    Chat Completions reports prompt_tokens (cached ones included, in prompt_tokens_details.cached_tokens)
    and completion_tokens (reasoning included, in completion_tokens_details.reasoning_tokens); the
    Responses API reports input_tokens / input_tokens_details.cached_tokens and output_tokens /
    output_tokens_details.reasoning_tokens. Both count into input, cached input, output and reasoning here.
    """

    pricing: Pricing | None = None
    calls: int = 0
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    unreported_calls: int = 0  # answers that carried no usage (some local servers): their tokens are not counted

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def add(self, usage: Any) -> dict[str, int]:
        """Add one answer's usage (an SDK object, a dict, or None; either API's names); returns this call's numbers."""
        if usage is None:
            self.unreported_calls += 1
            return {}
        inp = _int(usage, "input_tokens", "prompt_tokens")
        out = _int(usage, "output_tokens", "completion_tokens")
        cached = _int(_get(usage, "input_tokens_details") or _get(usage, "prompt_tokens_details"), "cached_tokens")
        reasoning = _int(_get(usage, "output_tokens_details") or _get(usage, "completion_tokens_details"),
                         "reasoning_tokens")
        self.input_tokens += inp
        self.cached_input_tokens += cached
        self.output_tokens += out
        self.reasoning_tokens += reasoning
        return {"input_tokens": inp, "cached_input_tokens": cached, "output_tokens": out, "reasoning_tokens": reasoning,
                "total_tokens": inp + out}

    def cost_usd(self, model: str | None = None) -> float | None:
        """The estimated cost; None when no price is known (unknown, not zero)."""
        pricing = self.pricing if self.pricing is not None else Pricing.resolve(model or "")
        if pricing.price is None:
            return None
        return pricing.price.cost_usd(self.input_tokens, self.cached_input_tokens, self.output_tokens)

    def as_json(self, model: str | None = None) -> dict[str, Any]:
        """summary.json's "tokens": counts, the cost (null when unknown) and where its prices came from."""
        pricing = self.pricing if self.pricing is not None else Pricing.resolve(model or "")
        cost = self.cost_usd(model)
        note = (f"estimate from {pricing.describe()}; reasoning tokens are billed as output tokens"
                if cost is not None else pricing.describe())
        if self.unreported_calls:
            note += f"; {self.unreported_calls} answers reported no usage and are not counted"
        return {
            "calls": self.calls, "input_tokens": self.input_tokens, "cached_input_tokens": self.cached_input_tokens,
            "output_tokens": self.output_tokens, "reasoning_tokens": self.reasoning_tokens,
            "total_tokens": self.total_tokens, "unreported_calls": self.unreported_calls,
            "cost_usd": round(cost, 6) if cost is not None else None, "cost_note": note, "prices": pricing.as_json(),
        }


def _get(obj: Any, name: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


def _int(obj: Any, *names: str) -> int:
    """The first of ``names`` that ``obj`` has (an SDK object, or a dict where an older SDK left extra fields raw)."""
    for name in names:
        value = _get(obj, name)
        if value is not None:
            try:
                return int(value)
            except (TypeError, ValueError):
                return 0
    return 0
