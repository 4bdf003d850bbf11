"""``python -m kernelopt_mcp.server``: the same as ``kernelopt-mcp``."""

from __future__ import annotations

import sys

from .entry import main

sys.exit(main())
