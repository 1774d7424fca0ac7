"""The sweeper writes the hits the lookups noted, and keeps them when the store fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from semcache.entries import PendingAccesses, RemovedEntry
from semcache.errors import StoreUnavailable
from semcache.index import ScopedVectorIndex
from semcache.maintenance import Maintenance


class TouchStore:
    """The part of the store a sweep uses, failing its writes while ``down``."""

    def __init__(self) -> None:
        self.down = False
        self.touched: dict[int, float] = {}
        self.expired_at: list[float] = []

    async def touch(self, accesses: dict[int, float]) -> None:
        if self.down:
            raise StoreUnavailable("the store is away")
        self.touched.update(accesses)

    async def delete_expired(self, now: float) -> list[RemovedEntry]:
        self.expired_at.append(now)
        return []

    async def evict_fairly(self, keep: int) -> list[RemovedEntry]:
        return []


def sweeper(store: TouchStore, accesses: PendingAccesses, tmp_path: Path) -> Maintenance:
    return Maintenance(
        accesses=accesses, store=store, index=ScopedVectorIndex(4), snapshot_dir=tmp_path,
        max_entries=10, sweep_interval_s=1, snapshot_interval_s=60, embedding_model="test", clock=lambda: 1234.0,
    )  # fmt: skip


async def test_a_sweep_writes_the_noted_hits_and_expires_by_the_given_clock(tmp_path: Path) -> None:
    store, accesses = TouchStore(), PendingAccesses()
    accesses.note(1, 10.0)
    accesses.note(1, 11.0)
    accesses.note(2, 12.0)
    await sweeper(store, accesses, tmp_path).sweep()
    assert store.touched == {1: 11.0, 2: 12.0}
    assert len(accesses) == 0
    assert store.expired_at == [1234.0]


async def test_hits_the_store_could_not_take_are_kept_for_the_next_sweep(tmp_path: Path) -> None:
    store, accesses = TouchStore(), PendingAccesses()
    maintenance = sweeper(store, accesses, tmp_path)
    accesses.note(1, 10.0)
    store.down = True
    with pytest.raises(StoreUnavailable):
        await maintenance.sweep()
    accesses.note(1, 20.0)  # a hit since: newer than the one given back
    store.down = False
    await maintenance.sweep()
    assert store.touched == {1: 20.0}


class EmbeddingSweepStore:
    """The embeddings part of a store, recording what the sweeper asks of it."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, float]] = []

    async def delete_expired_embeddings(self, now: float) -> int:
        self.asked.append(("expire", now))
        return 2

    async def evict_embeddings(self, keep: int) -> int:
        self.asked.append(("evict", keep))
        return 3


async def test_a_sweep_expires_and_bounds_the_embeddings_too(tmp_path: Path) -> None:
    embeddings = EmbeddingSweepStore()
    maintenance = sweeper(TouchStore(), PendingAccesses(), tmp_path)
    maintenance.embedding_store, maintenance.max_embedding_entries = embeddings, 7  # type: ignore[assignment]
    await maintenance.sweep()
    assert embeddings.asked == [("expire", 1234.0), ("evict", 7)]
    assert (maintenance.expired_embeddings, maintenance.evicted_embeddings) == (2, 3)
