"""``python -m kernelopt_agent``: the ``kernelopt`` command (``entry.py``)."""

import sys

from .entry import main

sys.exit(main())
