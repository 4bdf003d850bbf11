"""Autotuning: search the parameters of a tunable kernel (tunable.json) on a real workload.

    spec.py        the tunable format (pydantic), loading and checks, materializing a configuration
    space.py       the configuration space and its constraints
    strategies.py  exhaustive, random, tpe (optuna, imported lazily), auto
    cache.py       measured configurations on disk (JSON lines), so nothing is measured twice
    tuner.py       tune(evaluator, tunable, ...) -> TuneResult
"""

from __future__ import annotations

from .cache import TuneCache
from .space import Space, config_key
from .spec import (
    Tunable,
    TunableSpec,
    load_tunable,
    parse_tunable,
    workload_tunable_path,
)
from .strategies import STRATEGIES, make_strategy
from .tuner import TrialRow, TuneCounts, TuneResult, summary_line, table_rows, tune

__all__ = [
    "STRATEGIES", "Space", "TrialRow", "Tunable", "TunableSpec", "TuneCache", "TuneCounts", "TuneResult",
    "config_key", "load_tunable", "make_strategy", "parse_tunable", "summary_line", "table_rows", "tune",
    "workload_tunable_path",
]
