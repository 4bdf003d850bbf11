"""Search strategies: which configuration to measure next (ask) and what it scored (tell).

- ``exhaustive``: every configuration of the product in order (small spaces);
- ``random``: the product in a seeded random order, without repeats;
- ``tpe``: optuna's Tree-structured Parzen Estimator (model-based; large spaces). optuna is
  imported only when this strategy is built, so ``import kernelopt_mcp`` stays light;
- ``auto``: exhaustive when every valid configuration fits the budget, else tpe.

Strategies propose configurations of the whole product; the tuner skips (and counts) those that
break a constraint and tells the strategy so (score None), and never measures one twice.
"""

from __future__ import annotations

import math
import random
import warnings
from collections import deque
from collections.abc import Iterator
from typing import Any, Protocol

from .space import Config, Space, config_key

STRATEGIES = ("auto", "exhaustive", "random", "tpe")
AUTO_EXHAUSTIVE_LIMIT = 256  # with no evaluation budget, auto enumerates spaces up to this many valid configurations
SHUFFLE_LIMIT = 1_000_000


class Strategy(Protocol):
    name: str

    def ask(self) -> Config | None:
        """The next configuration to try, or None when the strategy has nothing left."""

    def tell(self, config: Config, score_ms: float | None) -> None:
        """The outcome of ``config``: its score, or None (constraint broken, invalid, failed)."""


class _Ordered:
    """A fixed order: what comes next is known before it is asked for (:meth:`peek`), so the
    tuner can compile it while the GPU measures the current one."""

    def __init__(self, order: Iterator[int], space: Space, name: str) -> None:
        self._order = order
        self._ahead: deque[int] = deque()
        self.space = space
        self.name = name

    def ask(self) -> Config | None:
        index = self._ahead.popleft() if self._ahead else next(self._order, None)
        return None if index is None else self.space.at(index)

    def peek(self, count: int) -> list[Config]:
        """The next ``count`` configurations :meth:`ask` will give (fewer at the end), not consumed."""
        while len(self._ahead) < count:
            index = next(self._order, None)
            if index is None:
                break
            self._ahead.append(index)
        return [self.space.at(i) for i in list(self._ahead)[:count]]

    def tell(self, config: Config, score_ms: float | None) -> None:
        pass


def exhaustive(space: Space) -> Strategy:
    return _Ordered(iter(range(space.size)), space, "exhaustive")


def random_search(space: Space, seed: int = 0) -> Strategy:
    rng = random.Random(seed)
    if space.size <= SHUFFLE_LIMIT:
        order = list(range(space.size))
        rng.shuffle(order)
        return _Ordered(iter(order), space, "random")

    def draws() -> Iterator[int]:
        seen: set[int] = set()
        while len(seen) < space.size:
            i = rng.randrange(space.size)
            if i not in seen:
                seen.add(i)
                yield i

    return _Ordered(draws(), space, "random")


class TPE:
    """optuna's TPE sampler through its ask-and-tell interface; invalid configurations get a
    penalty (10x the worst score seen) so the model learns to avoid them."""

    name = "tpe"

    def __init__(self, space: Space, seed: int = 0, startup: int = 8) -> None:
        try:
            import optuna  # lazy: a heavy import that only this strategy needs
        except ImportError as exc:
            raise ValueError(
                f"the tpe strategy needs optuna ({exc}); install it (`pip install optuna`, a kernelopt dependency) or "
                "use the random strategy"
            ) from None

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self._optuna = optuna
        self.space = space
        self.distributions: dict[str, optuna.distributions.BaseDistribution] = {
            n: optuna.distributions.CategoricalDistribution(v) for n, v in zip(space.names, space.values, strict=True)
        }
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, multivariate=True, group=True)
        self.study = optuna.create_study(direction="minimize", sampler=sampler)
        self._pending: dict[str, Any] = {}
        self._worst = 0.0

    def ask(self) -> Config | None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", self._optuna.exceptions.ExperimentalWarning)
            trial = self.study.ask(self.distributions)
        config = {n: trial.params[n] for n in self.space.names}
        key = config_key(config)
        if key in self._pending:  # asked twice before an answer: close the older trial
            self.study.tell(self._pending.pop(key), state=self._optuna.trial.TrialState.FAIL)
        self._pending[key] = trial
        return config

    def tell(self, config: Config, score_ms: float | None) -> None:
        if score_ms is not None and math.isfinite(score_ms):
            self._worst = max(self._worst, score_ms)
        value = score_ms if score_ms is not None else (self._worst * 10 if self._worst else 1e9)
        trial = self._pending.pop(config_key(config), None)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", self._optuna.exceptions.ExperimentalWarning)
            if trial is not None:
                self.study.tell(trial, value)
            else:  # measured outside the sampler (the defaults, first): teach it anyway
                self.study.add_trial(self._optuna.trial.create_trial(
                    params=dict(config), distributions=self.distributions, value=value,
                ))


def make_strategy(name: str, space: Space, *, seed: int = 0, budget_evals: int | None = None) -> Strategy:
    """Build a strategy by name (``auto`` picks one; see the module docstring).

    Raises:
        ValueError: an unknown name.
    """
    if name not in STRATEGIES:
        raise ValueError(f"unknown strategy {name!r}; choose one of {', '.join(STRATEGIES)}")
    if name == "auto":
        name = auto_choice(space, budget_evals)
    if name == "exhaustive":
        return exhaustive(space)
    if name == "random":
        return random_search(space, seed)
    return TPE(space, seed)


def auto_choice(space: Space, budget_evals: int | None) -> str:
    limit = budget_evals if budget_evals is not None else AUTO_EXHAUSTIVE_LIMIT
    if space.enumerable and len(space.valid()) <= limit:
        return "exhaustive"
    return "tpe"
