"""A shorter GIL switch interval for ``semcache serve``. The embedding thread gives up the GIL in
every call into the tokenizer, the model and FAISS, and a busy event loop keeps it for up to the
switch interval (CPython's default: 5 ms) before handing it back, which idles the model under load."""

from __future__ import annotations

import sys

GIL_SWITCH_INTERVAL_S = 0.0001


def shorten_gil_switch_interval() -> None:
    """Process-wide: call once, in the process that serves."""
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
