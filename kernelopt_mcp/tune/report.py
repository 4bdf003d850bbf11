"""What a tuning session leaves on disk: tune.json, tune.csv, best.cu, best_params.json, best.launch.json."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from ..files import write_atomic
from .spec import Tunable
from .tuner import TuneResult, table_rows


def save_tuning(result: TuneResult, tunable: Tunable, directory: Path) -> list[str]:
    """Write the result into ``directory`` (atomically, file by file); returns the names written.

    best.cu is the tunable source with the best values as ``#define`` lines in front (it compiles
    on its own), best.launch.json its launch with the values substituted: together a plain
    candidate that ``kernelopt evaluate WORKLOAD best.cu --launch best.launch.json`` re-runs.
    """
    directory.mkdir(parents=True, exist_ok=True)
    written = []

    def put(name: str, text: str) -> None:
        write_atomic(directory / name, text.encode("utf-8"))
        written.append(name)

    put("tune.json", result.model_dump_json(indent=2) + "\n")
    rows = table_rows(result)
    buf = io.StringIO()
    if rows:
        writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    put("tune.csv", buf.getvalue())
    if result.best_params is not None:
        source, launch, options = tunable.materialize(result.best_params)
        put("best.cu", source)
        put("best_params.json", json.dumps(result.best_params, indent=2) + "\n")
        put("best.launch.json", json.dumps(launch.model_dump(mode="json", exclude_none=True), indent=2) + "\n")
        if options:
            put("best.compile_options.json", json.dumps(options) + "\n")
    return written
