"""``python -m kernelopt_mcp``: the ``kernelopt`` command line without the orchestrator's commands
(optimize, graph, runs), so its usage lines name it as it was run."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m kernelopt_mcp"))
