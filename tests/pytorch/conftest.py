"""What the PyTorch tests share: ``torch``, or a skip where it is not installed (CI has none; run
them with torch on PYTHONPATH)."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def torch() -> Any:
    return pytest.importorskip("torch",
                               reason="torch is not installed (pip install torch): PyTorch problems cannot be run")
