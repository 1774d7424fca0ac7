"""Remembering which responses were served from the cache, so clients can report wrong ones, and
which queries each entry was reported wrong for."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from .entries import NegativeFeedback

# A new query this close to one reported wrong for an entry counts as the same query.
SAME_QUERY_COSINE = 0.98


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


class WrongAnswers:
    """The queries each entry was reported wrong for: it is never served to them again. Loaded from
    the store at start, added to by feedback here and, with Redis, by the other replicas' feedback."""

    def __init__(self) -> None:
        self._by_entry: dict[int, list[NegativeFeedback]] = {}

    def load(self, negatives: list[NegativeFeedback]) -> None:
        by_entry: dict[int, list[NegativeFeedback]] = {}
        for negative in negatives:
            by_entry.setdefault(negative.entry_id, []).append(negative)
        self._by_entry = by_entry

    def add(self, negative: NegativeFeedback) -> None:
        self._by_entry.setdefault(negative.entry_id, []).append(negative)

    def reported_wrong(self, entry_id: int, query_key: str, vector: np.ndarray) -> bool:
        """Whether the entry was reported wrong for this query (its exact key, or a vector this close)."""
        for negative in self._by_entry.get(entry_id, []):
            if negative.query_key == query_key:
                return True
            if negative.vector is not None and float(negative.vector @ vector) >= SAME_QUERY_COSINE:
                return True
        return False
