"""What the request path tells about itself, for metrics: one narrow seam with a silent default.

The pipeline, the tiers and the upstream wrapper call these hooks; ``semcache.metrics.Metrics``
turns them into Prometheus series. Nothing here knows about Prometheus, and every hook must be
cheap and must never raise: it runs on the request path.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal, Protocol

from .stats import Outcome

# Timed steps of a request. The store steps: the exact-key lookup, reading a semantic candidate,
# and writing a new entry.
Stage = Literal["index_search", "store_lookup", "store_read", "store_write", "upstream_first_byte", "upstream_total"]
# "status": the upstream answered with an HTTP error; "unavailable": unreachable, timed out, or broken.
UpstreamErrorKind = Literal["status", "unavailable"]


class Observer(Protocol):
    def request(self, namespace: str, outcome: Outcome, tier: str | None) -> None:
        """A request was answered (or failed): counted once, when its outcome is known."""
        ...

    def stage(self, stage: Stage, seconds: float) -> None: ...

    def upstream_error(self, status: int, kind: UpstreamErrorKind) -> None:
        """One failed upstream attempt; retried attempts count one each."""
        ...

    def saved(self, namespace: str, prompt_tokens: int, completion_tokens: int, cost_usd: float | None) -> None:
        """A request answered without calling the upstream; ``cost_usd`` is None for a model with no price."""
        ...


class NullObserver:
    """Hears everything and keeps nothing: the default where no metrics are wanted."""

    def request(self, namespace: str, outcome: Outcome, tier: str | None) -> None:
        pass

    def stage(self, stage: Stage, seconds: float) -> None:
        pass

    def upstream_error(self, status: int, kind: UpstreamErrorKind) -> None:
        pass

    def saved(self, namespace: str, prompt_tokens: int, completion_tokens: int, cost_usd: float | None) -> None:
        pass


@contextmanager
def timed(observer: Observer, stage: Stage) -> Iterator[None]:
    """Time the block, failures included: a slow failure is as slow as a slow success."""
    started = time.perf_counter()
    try:
        yield
    finally:
        observer.stage(stage, time.perf_counter() - started)
