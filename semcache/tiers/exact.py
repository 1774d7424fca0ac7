"""Exact tier: the hash of scope and normalised prompt, looked up in the store."""

from __future__ import annotations

from ..keys import RequestKey
from ..observer import NullObserver, Observer, timed
from ..protocols import EntryReader
from .base import Hit


class ExactTier:
    def __init__(self, store: EntryReader, observer: Observer | None = None) -> None:
        self._store = store
        self._observer = observer or NullObserver()

    async def lookup(self, key: RequestKey, now: float) -> Hit | None:
        with timed(self._observer, "store_lookup"):
            entry = await self._store.get_by_exact_key(key.exact)
        if entry is None or entry.is_expired(now):
            return None
        return Hit(
            tier="exact", answer=entry.answer, matched_prompt=entry.prompt, entry_id=entry.id,
            tool_calls=entry.tool_calls,
        )  # fmt: skip
