"""The fast path: speed-only pieces that lean on FastAPI's, uvicorn's and CPython's machinery
beyond their ordinary use, all behind the one ``fast_path`` setting.

- ``DirectRoute`` (``direct.py``): valid chat requests answered before FastAPI's stack, which
  ``SemcacheApp.build_middleware_stack`` puts in front of it.
- ``with_coalesced_writes`` (``writes.py``): each response's head and body in one write, layered on
  the bounded protocol (``server/protocol.py``, a subclass of uvicorn's private httptools protocol).
- ``shorten_gil_switch_interval`` (``gil.py``): the GIL handed to the embedding thread sooner.

With ``fast_path`` off, FastAPI's own routing serves every request on the bounded protocol alone,
answering with the same status codes, headers and bodies. The head bounds and read deadlines are
security, not speed: they stay on either way.
"""

from .direct import DirectRoute
from .gil import GIL_SWITCH_INTERVAL_S, shorten_gil_switch_interval
from .writes import CoalescedWrites, with_coalesced_writes

__all__ = [
    "GIL_SWITCH_INTERVAL_S",
    "CoalescedWrites",
    "DirectRoute",
    "shorten_gil_switch_interval",
    "with_coalesced_writes",
]
