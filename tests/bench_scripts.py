"""bench/'s scripts imported as modules by the tests (bench/ is a folder of scripts, not a package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parent.parent / "bench"


def load_bench_script(file: str) -> ModuleType:
    """``bench/<file>`` executed as the module ``kernelopt_bench_<stem>`` (registered in
    sys.modules first: dataclasses look their module up)."""
    name = f"kernelopt_bench_{Path(file).stem}"
    spec = importlib.util.spec_from_file_location(name, BENCH / file)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
