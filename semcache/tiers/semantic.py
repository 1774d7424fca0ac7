"""Semantic tier: the nearest earlier prompt of the same scope, at or above the threshold."""

from __future__ import annotations

import asyncio

import numpy as np

from ..index import ScopedVectorIndex
from ..keys import RequestKey
from ..protocols import Store
from .base import Hit

_CANDIDATES = 4


class SemanticTier:
    def __init__(self, index: ScopedVectorIndex, store: Store, threshold: float) -> None:
        self.index = index
        self._store = store
        self.threshold = threshold

    async def lookup(self, key: RequestKey, vector: np.ndarray, now: float) -> Hit | None:
        candidates = await asyncio.to_thread(self.index.search, key.scope, vector, _CANDIDATES)
        for entry_id, similarity in candidates:
            if similarity < self.threshold:
                break
            entry = await self._store.get(entry_id)
            if entry is None or entry.is_expired(now) or entry.scope != key.scope:
                continue  # removed or expired since it was indexed; the sweeper will drop it
            return Hit(
                tier="semantic",
                answer=entry.answer,
                matched_prompt=entry.prompt,
                entry_id=entry.id,
                similarity=min(similarity, 1.0),
            )
        return None
