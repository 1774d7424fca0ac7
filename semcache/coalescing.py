"""Coalescing: concurrent requests for the same answer share one upstream call.

The first request for an exact key leads: it calls the upstream and publishes what comes back on
a ``Flight``. Requests with the same key that arrive meanwhile follow: they get the leader's chunks
as they arrive (or its whole answer), instead of calling the upstream themselves. A request that is
only a semantic match for a flight waits for the leader's finished answer, within a bound, and is
served it only if the answer is cacheable and the match passes the namespace's quality rules.

If the leader fails before a follower has received anything, that follower tries again, and the
first one to do so leads the next attempt.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import SemcacheError
from .keys import RequestKey


@dataclass
class Flight:
    key: RequestKey
    vector: np.ndarray | None
    streamed: bool
    chunks: list[dict[str, Any]] = field(default_factory=list)
    response: dict[str, Any] | None = None  # the leader's whole answer, when it did not stream
    text: str = ""  # the answer's text, set at the end when it is cacheable
    cacheable: bool = False  # set at the end: the answer completed cleanly
    error: SemcacheError | None = None
    done: bool = False
    followers: int = 0
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def publish(self, chunk: dict[str, Any]) -> None:
        async with self._changed:
            self.chunks.append(chunk)
            self._changed.notify_all()

    async def finish(self, *, response: dict[str, Any] | None, text: str, cacheable: bool) -> None:
        async with self._changed:
            self.response = response
            self.text = text
            self.cacheable = cacheable
            self.done = True
            self._changed.notify_all()

    async def fail(self, error: SemcacheError) -> None:
        async with self._changed:
            self.error = error
            self.done = True
            self._changed.notify_all()

    async def follow(self) -> AsyncIterator[dict[str, Any]]:
        """The leader's chunks, from the first, as they arrive; raises the leader's error."""
        sent = 0
        while True:
            async with self._changed:
                await self._changed.wait_for(lambda seen=sent: len(self.chunks) > seen or self.done)  # type: ignore[misc]
                fresh, failed, done = self.chunks[sent:], self.error, self.done
            for chunk in fresh:
                yield chunk
            sent += len(fresh)
            if failed is not None and sent == len(self.chunks):
                raise failed
            if done and sent == len(self.chunks):
                return

    async def result(self) -> Flight:
        """Wait for the end; raises the leader's error."""
        async with self._changed:
            await self._changed.wait_for(lambda: self.done)
        if self.error is not None:
            raise self.error
        return self


class InFlight:
    """The flights under way, by exact key and by scope."""

    def __init__(self) -> None:
        self._by_exact: dict[str, Flight] = {}
        self._by_scope: dict[str, list[Flight]] = {}

    def get(self, exact_key: str) -> Flight | None:
        return self._by_exact.get(exact_key)

    def lead(self, key: RequestKey, vector: np.ndarray | None, streamed: bool) -> Flight:
        flight = Flight(key, vector, streamed)
        self._by_exact[key.exact] = flight
        self._by_scope.setdefault(key.scope, []).append(flight)
        return flight

    def land(self, flight: Flight) -> None:
        if self._by_exact.get(flight.key.exact) is flight:
            del self._by_exact[flight.key.exact]
        siblings = self._by_scope.get(flight.key.scope, [])
        if flight in siblings:
            siblings.remove(flight)
        if not siblings:
            self._by_scope.pop(flight.key.scope, None)

    def nearest(self, key: RequestKey, vector: np.ndarray) -> tuple[Flight, float] | None:
        """The in-flight request of the same scope most similar to ``vector``."""
        best: tuple[Flight, float] | None = None
        for flight in self._by_scope.get(key.scope, []):
            if flight.vector is None or flight.key.exact == key.exact:
                continue
            similarity = float(flight.vector @ vector)
            if best is None or similarity > best[1]:
                best = (flight, similarity)
        return best

    def __len__(self) -> int:
        return len(self._by_exact)
