"""The plain data that moves between the pipeline, the tiers and the stores."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class CacheEntry:
    """One cached answer. ``id`` is assigned by the store and doubles as the vector id."""

    namespace: str
    scope: str
    exact_key: str
    model: str
    prompt: str
    answer: str
    created_at: float
    expires_at: float | None  # None: never expires
    vector: np.ndarray | None = None  # unit-length float32, or None when it was never embedded
    last_access: float = 0.0
    hits: int = 0
    id: int | None = None
    # Learned from feedback: this entry is served only at or above this cosine, if set.
    min_similarity: float | None = None
    # An answer that calls tools (cache_tool_calls): the assistant's tool_calls, served on exact matches only.
    tool_calls: list[dict[str, Any]] | None = None

    def is_expired(self, now: float) -> bool:
        return self.expires_at is not None and self.expires_at <= now


@dataclass(frozen=True)
class NegativeFeedback:
    """A query that an entry was wrongly served for: never serve that entry for it again."""

    entry_id: int
    query_key: str  # exact key of the query
    vector: np.ndarray | None
    similarity: float | None


class PendingAccesses:
    """Hits since the store last heard of them: entry id to last access time. The lookup notes
    each hit; the sweeper writes them in one batch (recency for eviction, hit counts)."""

    def __init__(self) -> None:
        self._times: dict[int, float] = {}

    def note(self, entry_id: int, at: float) -> None:
        self._times[entry_id] = at

    def take(self) -> dict[int, float]:
        taken, self._times = self._times, {}
        return taken

    def give_back(self, taken: dict[int, float]) -> None:
        """Keep what could not be written for the next pass; an access noted since is newer."""
        self._times = {**taken, **self._times}

    def __len__(self) -> int:
        return len(self._times)


@dataclass(frozen=True)
class RemovedEntry:
    """What the index must forget when the store drops an entry."""

    id: int
    scope: str


@dataclass(frozen=True)
class EntryQuery:
    """Which entries an operator means; every field given must match, and none given means all."""

    namespace: str | None = None
    text: str | None = None  # a substring of the prompt or the answer, compared case-insensitively
    created_before: float | None = None  # only entries created before this time

    def matches(self, entry: CacheEntry) -> bool:
        if self.namespace is not None and entry.namespace != self.namespace:
            return False
        if self.created_before is not None and not entry.created_at < self.created_before:
            return False
        return self.text is None or contains_text(entry.prompt, self.text) or contains_text(entry.answer, self.text)


def contains_text(haystack: str, needle: str) -> bool:
    """Case-insensitive substring test, the same in every store."""
    return needle.casefold() in haystack.casefold()
