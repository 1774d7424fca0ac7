"""Coalescing: concurrent requests for the same answer share one upstream call.

The first request for an exact key leads: it calls the upstream and publishes what comes back on
a ``Flight``. Requests with the same key that arrive meanwhile follow: they get the leader's chunks
as they arrive (or its whole answer), instead of calling the upstream themselves. A request that is
only a semantic match for a flight waits for the leader's finished answer, within a bound, and is
served it only if the answer is cacheable and the match passes the namespace's quality rules.

If the leader fails before a follower has received anything, that follower tries again, and the
first one to do so leads the next attempt.

A streamed answer that grows past what may be cached stops being shared: no request joins it from
then on, and its chunks are kept only until the followers already on it have read them, so that a
huge answer is never held whole.
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
    chunks: list[dict[str, Any]] = field(default_factory=list)  # from chunk number ``dropped`` on
    dropped: int = 0  # chunks every follower had read, let go once the flight stopped sharing
    sharing: bool = True  # False once its answer outgrew the cache: no one joins from then on
    response: dict[str, Any] | None = None  # the leader's whole answer, when it did not stream
    text: str = ""  # the answer's text, set at the end when it is cacheable
    cacheable: bool = False  # set at the end: the answer completed cleanly
    error: SemcacheError | None = None
    done: bool = False
    followers: int = 0
    # The leader's Authorization, where a stream is followed live only by requests sent with it.
    credential: str | None = None
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    _read: dict[object, int] = field(default_factory=dict)  # chunks each streamed follower has read

    async def publish(self, chunk: dict[str, Any]) -> None:
        async with self._changed:
            self.chunks.append(chunk)
            self._let_go_of_read_chunks()
            self._changed.notify_all()

    def stop_sharing(self) -> None:
        """No one may join from now on; chunks are kept only for the followers already on it."""
        self.sharing = False
        self._let_go_of_read_chunks()

    def _let_go_of_read_chunks(self) -> None:
        if self.sharing:
            return  # a follower may still join, and start from the first chunk
        read_by_all = min(self._read.values(), default=self.dropped + len(self.chunks))
        del self.chunks[: read_by_all - self.dropped]
        self.dropped = read_by_all

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
        assert self.sharing, "a flight that stopped sharing takes no new followers"
        reader, sent = object(), 0
        self._read[reader] = 0
        try:
            while True:
                async with self._changed:
                    await self._changed.wait_for(lambda seen=sent: self._published > seen or self.done)  # type: ignore[misc]
                    fresh, failed, done = self.chunks[sent - self.dropped :], self.error, self.done
                    sent += len(fresh)
                    self._read[reader] = sent  # this follower holds them now
                    self._let_go_of_read_chunks()
                for chunk in fresh:
                    yield chunk
                if failed is not None and sent == self._published:
                    raise failed
                if done and sent == self._published:
                    return
        finally:
            del self._read[reader]
            self._let_go_of_read_chunks()

    @property
    def _published(self) -> int:
        return self.dropped + len(self.chunks)

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
        flight = self._by_exact.get(exact_key)
        return flight if flight is not None and flight.sharing else None

    def lead(self, key: RequestKey, vector: np.ndarray | None, streamed: bool, credential: str | None = None) -> Flight:
        flight = Flight(key, vector, streamed, credential=credential)
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
            if flight.vector is None or flight.key.exact == key.exact or not flight.sharing:
                continue
            similarity = float(flight.vector @ vector)
            if best is None or similarity > best[1]:
                best = (flight, similarity)
        return best

    def __len__(self) -> int:
        return len(self._by_exact)
