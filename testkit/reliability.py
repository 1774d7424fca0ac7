"""Short or full runs of the reliability suites (load, faults, fuzzing, probes)."""

from __future__ import annotations

import os


def full_mode() -> bool:
    """True when ``SEMCACHE_RELIABILITY=full``: more examples and longer load; else the short CI mode."""
    return os.environ.get("SEMCACHE_RELIABILITY", "").strip().lower() == "full"
