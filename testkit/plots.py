"""matplotlib without a display, for the plots the benchmarks and the reliability suites draw."""

from __future__ import annotations

import sys
from typing import Any


def pyplot() -> Any | None:
    """matplotlib's pyplot without a display, or None (with a note) when it is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot written", file=sys.stderr)
        return None
    return plt
