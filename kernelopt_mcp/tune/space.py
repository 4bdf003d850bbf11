"""The search space: the cartesian product of the parameters' value lists, cut by constraints.

Configurations are dicts in the spec's parameter order. The space is never materialized unless
asked (:meth:`Space.valid`): a configuration is addressed by its mixed-radix index, so random
sampling works on spaces of any size. Constraints are evaluated by :mod:`kernelopt_mcp.expr`
(arithmetic, comparisons, and/or/not, min/max/ceil_div ...), never by ``eval``.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator
from typing import Protocol

from .. import expr
from ..errors import ExpressionError

Value = int | float | str
Config = dict[str, Value]
ENUMERATION_LIMIT = 200_000  # configurations checked one by one at most (constraints are ~10 us each)


def config_key(config: Config) -> str:
    """A canonical text for a configuration (sorted keys): dictionary and cache key."""
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


class Parameters(Protocol):
    """What a space is built from: a :class:`~kernelopt_mcp.tune.spec.TunableSpec`."""

    params: dict[str, list[Value]]
    constraints: list[str]


class Space:
    def __init__(self, spec: Parameters) -> None:
        self.names = list(spec.params)
        self.values = [list(spec.params[n]) for n in self.names]
        self.constraints = list(spec.constraints)
        self._valid: list[Config] | None = None

    @property
    def size(self) -> int:
        """Configurations in the product, valid or not."""
        return math.prod(len(v) for v in self.values)

    def at(self, index: int) -> Config:
        """The ``index``-th configuration of the product (last parameter varies fastest)."""
        out: Config = {}
        for name, values in zip(reversed(self.names), reversed(self.values), strict=True):
            index, digit = divmod(index, len(values))
            out[name] = values[digit]
        return {n: out[n] for n in self.names}

    def __iter__(self) -> Iterator[Config]:
        for i in range(self.size):
            yield self.at(i)

    def violation(self, config: Config) -> str | None:
        """The first constraint ``config`` breaks (or that fails to evaluate), else None."""
        env = {k: v for k, v in config.items() if not isinstance(v, str)}
        for c in self.constraints:
            try:
                ok = expr.evaluate(c, env)
            except ExpressionError as exc:
                return f"{c!r} ({exc})"
            if not ok:
                return repr(c)
        return None

    def is_valid(self, config: Config) -> bool:
        return self.violation(config) is None

    def contains(self, config: Config) -> bool:
        return list(config) == self.names and all(config[n] in v for n, v in zip(self.names, self.values, strict=True))

    @property
    def enumerable(self) -> bool:
        return self.size <= ENUMERATION_LIMIT

    def valid(self) -> list[Config]:
        """Every configuration that satisfies the constraints (in product order; cached)."""
        if self._valid is None:
            if not self.enumerable:
                raise ValueError(f"the space has {self.size} configurations; too many to enumerate")
            self._valid = [c for c in self if self.is_valid(c)]
        return self._valid

    def sample(self, rng: random.Random) -> Config:
        """One configuration of the product, uniformly (valid or not)."""
        return self.at(rng.randrange(self.size))
