"""Autotuning: search the parameters of a tunable kernel (tunable.json) on a real workload.

    spec.py        the tunable format (pydantic), loading and checks, materializing a configuration
    space.py       the configuration space and its constraints
    strategies.py  exhaustive, random, tpe (optuna, imported lazily), auto
    cache.py       measured configurations on disk (JSON lines), so nothing is measured twice
    tuner.py       tune(session, tunable, ...) -> TuneResult
    prefetch.py, report.py, output.py: compiling ahead, the tuning run's files, the MCP tool's result

This ``__init__`` imports nothing, so importing the format (``tune.spec``, part of the data layer)
does not import the tuner and the evaluation under it.
"""
