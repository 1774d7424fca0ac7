"""What the request path tells about itself: one narrow seam with a silent default.

The pipeline, the tiers, the upstream wrapper, the embedder and the web layer's timer call these
hooks, once per event. ``semcache.stats.Stats`` (``/stats``) and ``semcache.metrics.Metrics``
(Prometheus) each implement them, and the app hands the parts one ``FanOut`` of both. Nothing here
knows about either, and every hook must be cheap and must never raise: it runs on the request path.
"""

from __future__ import annotations

import time
from typing import Literal, Protocol

from .stats import LatencyPath, Outcome

# Timed steps of a request. The store steps: the exact-key lookup, reading a semantic candidate,
# and writing a new entry.
Stage = Literal[
    "index_search", "guards", "store_lookup", "store_read", "store_write", "upstream_first_byte", "upstream_total"
]
# "status": the upstream answered with an HTTP error; "unavailable": unreachable, timed out, or broken.
UpstreamErrorKind = Literal["status", "unavailable"]


class Observer(Protocol):
    def request(self, namespace: str, outcome: Outcome, tier: str | None, route: str = "chat") -> None:
        """A request was answered (or failed): counted once, when its outcome is known. ``route``:
        ``chat``, ``cache_api``, or the /v1 route passed on (``embeddings``, ``completions``, ...)."""
        ...

    def stage(self, stage: Stage, seconds: float) -> None: ...

    def upstream_error(self, status: int, kind: UpstreamErrorKind) -> None:
        """One failed upstream attempt; retried attempts count one each."""
        ...

    def saved(self, namespace: str, prompt_tokens: int, completion_tokens: int, cost_usd: float | None) -> None:
        """A request answered without calling the upstream; ``cost_usd`` is None for a model with no price."""
        ...

    def coalesced(self) -> None:
        """A request answered from another request's upstream call."""
        ...

    def feedback(self, namespace: str, correct: bool) -> None:
        """A client's verdict on a served hit."""
        ...

    def request_duration(self, path: LatencyPath, seconds: float) -> None:
        """A whole request, first byte in to last byte out, by the path it took."""
        ...

    def embedded(self, batch_size: int, seconds: float) -> None:
        """One embedding model call."""
        ...

    def embeddings(self, namespace: str, inputs: int, from_cache: int, asked: int, tokens_saved: int) -> None:
        """One answered ``/v1/embeddings`` request: its inputs, those served from the cache, those
        asked of the upstream (each once), and the upstream tokens the cached ones avoided."""
        ...

    def verified(
        self,
        namespace: str,
        verdict: str,
        seconds: float,
        prompt_tokens: int,
        completion_tokens: int,
        cost_usd: float | None,
    ) -> None:
        """One verification asked of the upstream: its verdict ('yes', 'no', 'failed'), how long it
        took, its tokens and their price (None for a model with no price)."""
        ...


class NullObserver:
    """Hears everything and keeps nothing: the default where no one listens."""

    def request(self, namespace: str, outcome: Outcome, tier: str | None, route: str = "chat") -> None:
        pass

    def stage(self, stage: Stage, seconds: float) -> None:
        pass

    def upstream_error(self, status: int, kind: UpstreamErrorKind) -> None:
        pass

    def saved(self, namespace: str, prompt_tokens: int, completion_tokens: int, cost_usd: float | None) -> None:
        pass

    def coalesced(self) -> None:
        pass

    def feedback(self, namespace: str, correct: bool) -> None:
        pass

    def request_duration(self, path: LatencyPath, seconds: float) -> None:
        pass

    def embedded(self, batch_size: int, seconds: float) -> None:
        pass

    def embeddings(self, namespace: str, inputs: int, from_cache: int, asked: int, tokens_saved: int) -> None:
        pass

    def verified(
        self,
        namespace: str,
        verdict: str,
        seconds: float,
        prompt_tokens: int,
        completion_tokens: int,
        cost_usd: float | None,
    ) -> None:
        pass


class FanOut:
    """Tells every event to each of its observers, in order: ``/stats``'s and Prometheus's."""

    def __init__(self, *observers: Observer) -> None:
        self.observers = observers

    def request(self, namespace: str, outcome: Outcome, tier: str | None, route: str = "chat") -> None:
        for observer in self.observers:
            observer.request(namespace, outcome, tier, route)

    def stage(self, stage: Stage, seconds: float) -> None:
        for observer in self.observers:
            observer.stage(stage, seconds)

    def upstream_error(self, status: int, kind: UpstreamErrorKind) -> None:
        for observer in self.observers:
            observer.upstream_error(status, kind)

    def saved(self, namespace: str, prompt_tokens: int, completion_tokens: int, cost_usd: float | None) -> None:
        for observer in self.observers:
            observer.saved(namespace, prompt_tokens, completion_tokens, cost_usd)

    def coalesced(self) -> None:
        for observer in self.observers:
            observer.coalesced()

    def feedback(self, namespace: str, correct: bool) -> None:
        for observer in self.observers:
            observer.feedback(namespace, correct)

    def request_duration(self, path: LatencyPath, seconds: float) -> None:
        for observer in self.observers:
            observer.request_duration(path, seconds)

    def embedded(self, batch_size: int, seconds: float) -> None:
        for observer in self.observers:
            observer.embedded(batch_size, seconds)

    def embeddings(self, namespace: str, inputs: int, from_cache: int, asked: int, tokens_saved: int) -> None:
        for observer in self.observers:
            observer.embeddings(namespace, inputs, from_cache, asked, tokens_saved)

    def verified(
        self,
        namespace: str,
        verdict: str,
        seconds: float,
        prompt_tokens: int,
        completion_tokens: int,
        cost_usd: float | None,
    ) -> None:
        for observer in self.observers:
            observer.verified(namespace, verdict, seconds, prompt_tokens, completion_tokens, cost_usd)


class timed:  # lower case: it reads as a function, `with timed(observer, "index_search"):`
    """Time the block, failures included: a slow failure is as slow as a slow success.

    A class, not a ``contextmanager`` generator: four blocks a semantic hit, at a third of the cost."""

    __slots__ = ("_observer", "_stage", "_started")

    def __init__(self, observer: Observer, stage: Stage) -> None:
        self._observer = observer
        self._stage: Stage = stage
        self._started = 0.0

    def __enter__(self) -> None:
        self._started = time.perf_counter()

    def __exit__(self, *exc_info: object) -> None:
        self._observer.stage(self._stage, time.perf_counter() - self._started)
