"""Remembering which responses were served from the cache, so clients can report wrong ones, and
which queries each entry was reported wrong for."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .entries import NegativeFeedback
from .recent import RecentById

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


class ServedHits(RecentById[ServedHit]):
    """The most recent ``capacity`` hits by response id (older ones can no longer get feedback); each
    takes feedback once (``take``), from the namespace it was served in."""

    def __init__(self, capacity: int = 100_000) -> None:
        super().__init__(capacity)


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
