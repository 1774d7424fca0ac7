"""Remembering which responses were served from the cache, so clients can report wrong ones."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass


@dataclass(frozen=True)
class ServedHit:
    namespace: str
    tier: str
    entry_id: int | None
    query_key: str
    # A semantic hit's query and the model that embedded it: a wrong hit's query is embedded again
    # when it is reported (rarely), rather than its vector (1.5 KB) kept for every hit served.
    query: str | None
    embedding_model: str | None
    similarity: float | None
    language: str | None = None  # the query's script: whose error budget the feedback is evidence for


class ServedHits:
    """The most recent ``capacity`` hits by response id (older ones can no longer get feedback)."""

    def __init__(self, capacity: int = 100_000) -> None:
        self._capacity = capacity
        self._hits: OrderedDict[str, ServedHit] = OrderedDict()
        self._lock = threading.Lock()

    def remember(self, response_id: str, hit: ServedHit) -> None:
        with self._lock:
            self._hits[response_id] = hit
            while len(self._hits) > self._capacity:
                self._hits.popitem(last=False)

    def take(self, response_id: str, namespace: str) -> ServedHit | None:
        """The hit behind ``response_id`` if it was served in ``namespace``; each id takes feedback once."""
        with self._lock:
            hit = self._hits.get(response_id)
            if hit is None or hit.namespace != namespace:
                return None
            return self._hits.pop(response_id)
