"""A run's data: what reproduces its inputs is kept, their bytes are not (unless ``--keep-data``).

The server's ``freeze_workload`` writes every drawn input under ``inputs/`` and the oracle's
float64 expected outputs under ``expected/``: for sgemm that is hundreds of MB per run, all of it
drawn from a generator and a seed that ``input_cases.json`` and the recorded freeze call already
hold. When a run ends, :func:`drop_data` removes

- every input file that records its generator (``drawn_from``): the recorded seed draws the
  same bytes again, and ``input_cases.json`` keeps each file's sha256 to prove it;
- every expected output above :data:`EXPECTED_KEEP_BYTES`: the oracle recomputes it from the
  restored inputs (small ones stay, so a person can read a tiny case's answer without Python);
- a file the user supplied (no generator) only above :data:`SUPPLIED_KEEP_BYTES`: it cannot be
  drawn again, so ``data.json`` names the original file and its sha256, and the restore reads it
  from there (and fails if it changed).

:func:`restore` puts the bytes back by calling ``freeze_workload`` again with the recorded
arguments and seed (as ``--resume`` does), then checks that ``input_cases.json`` is unchanged and
that every input file's sha256 matches it; after that, ``kernelopt-harness run replay/<case>.json``
replays the best kernel on exactly the recorded inputs. The server's hidden data sets are never
written to the run: they are drawn afresh from a seed nobody sees, with or without this.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from .rundir import RunDir, read_json

DATA_RECORD = "data.json"
EXPECTED_KEEP_BYTES = 1 << 20  # an expected output of at most 1 MiB stays in the run
SUPPLIED_KEEP_BYTES = 16 << 20  # a user's data file of at most 16 MiB is kept (copied) in the run


class RestoreError(RuntimeError):
    """The run's data cannot be drawn again as recorded; the message says why and what to do."""


def _inputs(manifest: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(case, buffer, generator) of every input file ``input_cases.json`` names."""
    return [(str(case.get("name")), buf, gen) for case in manifest.get("cases") or []
            for buf, gen in (case.get("inputs") or {}).items()
            if isinstance(gen, dict) and gen.get("generator") == "file" and isinstance(gen.get("path"), str)]


def _inside(run: Path, relative: str) -> Path | None:
    path = (run / relative).resolve()
    return path if path.is_relative_to(run.resolve()) else None


def drop_data(run: RunDir, *, keep: bool = False, supplied: dict[str, str] | None = None) -> dict[str, Any]:
    """Remove the regenerable data files of ``run`` (none with ``keep``) and write ``data.json``.

    ``supplied`` maps ``"<case>.<buffer>"`` to the path of the user's file it was copied from.
    Returns data.json's content: the bytes removed and kept, and how to get them back.
    """
    record: dict[str, Any] = {"kept_all": keep, "removed_bytes": 0, "kept_bytes": 0, "regenerable": [],
                              "supplied": {}, "expected_removed": [], "restore": f"kernelopt runs restore {run.path}"}
    try:
        manifest = read_json(run.path / "input_cases.json")
    except (OSError, ValueError):
        return record
    for case, buf, gen in _inputs(manifest):
        path = _inside(run.path, gen["path"])
        if path is None or not path.is_file():
            continue
        size = path.stat().st_size
        drawn = gen.get("drawn_from") is not None
        if not drawn:
            source = (supplied or {}).get(f"{case}.{buf}")
            record["supplied"][gen["path"]] = {"source": source, "sha256": gen.get("sha256"), "bytes": size,
                                               "copied": keep or size <= SUPPLIED_KEEP_BYTES}
        if keep or (not drawn and size <= SUPPLIED_KEEP_BYTES):
            record["kept_bytes"] += size
            continue
        if drawn:
            record["regenerable"].append(gen["path"])
        path.unlink()
        record["removed_bytes"] += size
    for entry in _expected(run.path):
        path = _inside(run.path, entry)
        if path is None or not path.is_file():
            continue
        size = path.stat().st_size
        if keep or size <= EXPECTED_KEEP_BYTES:
            record["kept_bytes"] += size
            continue
        path.unlink()
        record["expected_removed"].append(entry)
        record["removed_bytes"] += size
    run.write_json(DATA_RECORD, record)
    return record


def _expected(run: Path) -> list[str]:
    try:
        manifest = read_json(run / "expected" / "manifest.json")
    except (OSError, ValueError):
        return []
    return [str(o["path"]) for outs in manifest.values() if isinstance(outs, dict)
            for o in outs.values() if isinstance(o, dict) and isinstance(o.get("path"), str)]


def recorded_spec(run: Path) -> dict[str, Any]:
    """The workload spec of the run's last successful freeze_workload call (tools/NNNN-freeze_workload.json)."""
    for call in sorted((run / "tools").glob("*-freeze_workload.json"), reverse=True):
        try:
            data = read_json(call)
        except (OSError, ValueError):
            continue
        spec = (data.get("arguments") or {}).get("spec") if not data.get("is_error") else None
        if isinstance(spec, dict):
            return spec
    return {}


def supplied_sources(spec: dict[str, Any]) -> dict[str, str]:
    """``"<case>.<buffer>" -> path`` of the user's data files a workload spec names (a case's own
    input, else the workload-wide one)."""
    out: dict[str, str] = {}
    common = spec.get("inputs") or {}
    for case in spec.get("cases") or []:
        if not isinstance(case, dict):
            continue
        for buf, gen in {**common, **(case.get("inputs") or {})}.items():
            if isinstance(gen, dict) and gen.get("generator") == "file" and gen.get("path"):
                out[f"{case.get('name')}.{buf}"] = str(gen["path"])
    return out


def missing_inputs(run: Path) -> list[str]:
    """The input files ``input_cases.json`` names that are not in the run directory."""
    try:
        manifest = read_json(run / "input_cases.json")
    except (OSError, ValueError):
        return []
    return [gen["path"] for _, _, gen in _inputs(manifest) if not (run / gen["path"]).is_file()]


def check_hashes(run: Path) -> list[str]:
    """The input files whose bytes differ from the sha256 ``input_cases.json`` records (or are missing)."""
    manifest = read_json(run / "input_cases.json")
    bad = []
    for _, _, gen in _inputs(manifest):
        path = _inside(run, gen["path"])
        if path is None or not path.is_file():
            bad.append(f"{gen['path']}: missing")
        elif gen.get("sha256") and _sha256(path) != gen["sha256"]:
            bad.append(f"{gen['path']}: sha256 differs from input_cases.json")
    return bad


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


async def restore(run: RunDir, opts: Any, freeze_args: dict[str, Any], seed: int) -> dict[str, Any]:
    """Draw the run's inputs (and the oracle's expected outputs) again into its directory, through the
    server's ``freeze_workload`` with the recorded arguments and seed, and check them.

    Raises:
        RestoreError: the server refused, or what it drew differs from the record.
    """
    from .toolbox import Toolbox

    before = (run.path / "input_cases.json").read_bytes()
    dirs = list(dict.fromkeys(Path(p).resolve().parent
                              for p in supplied_sources(freeze_args.get("spec") or {}).values()))
    async with Toolbox.start(opts, run, dirs) as tools:
        result = await tools.call("freeze_workload", {**freeze_args, "seed": seed, "directory": str(run.path)})
    if result.is_error:
        raise RestoreError(f"kernelopt-mcp could not draw {run.name}'s inputs again: {result.text}")
    if (run.path / "input_cases.json").read_bytes() != before:
        (run.path / "input_cases.json").write_bytes(before)
        raise RestoreError(f"{run.name}'s workload, drawn again from its seed, differs from input_cases.json (another "
                           "kernelopt-mcp version, or a supplied data file that changed); "
                           "its replays would not be the run's")
    bad = check_hashes(run.path)
    if bad:
        raise RestoreError(f"{run.name}: restored inputs do not match input_cases.json: " + "; ".join(bad))
    restored = json.loads(before)
    return {"run": str(run.path), "inputs": len(_inputs(restored)),
            "expected_cases": (result.structured.get("expected_cases") or [])}
