"""Contracts every store keeps, checked the same way on SQLite and on Redis."""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

import numpy as np

from semcache.entries import CacheEntry, EntryQuery
from semcache.protocols import AnswerStore, EmbeddingStore, OperatorStore, SweptStore


class EntryStore(AnswerStore, SweptStore, OperatorStore, Protocol):
    """What the fairness contract uses of a store."""


def _vector(seed: int) -> bytes:
    return np.random.default_rng(seed).standard_normal(8).astype(np.float32).tobytes()


async def check_embedding_store(store: EmbeddingStore) -> None:
    """Vectors come back byte for byte; expired ones never (swept or not); the sweeper removes
    them; the size bound drops the least recently used, a read counting as a use."""
    a, b, c, d, e = (_vector(seed) for seed in range(5))
    now = time.time()
    await store.put_embeddings("default", {"a": a, "b": b}, now, now + 0.5)
    await store.put_embeddings("default", {"c": c}, now, now + 0.5)
    await store.put_embeddings("default", {"c": c}, now, None)  # stored again, for good
    assert await store.get_embeddings(["a", "b", "c", "missing", "a"], now) == {"a": a, "b": b, "c": c}
    assert await store.get_embeddings([], now) == {}
    assert await store.count_embeddings() == 3

    await asyncio.sleep(0.7)
    later = time.time()
    assert await store.get_embeddings(["a", "b", "c"], later) == {"c": c}  # expired, not yet swept
    assert await store.delete_expired_embeddings(later) == 2
    assert await store.count_embeddings() == 1

    await store.put_embeddings("default", {"d": d}, later + 1, None)
    await store.put_embeddings("default", {"e": e}, later + 2, None)
    await store.get_embeddings(["c"], later + 3)  # c, stored first, was used last
    assert await store.evict_embeddings(2) == 1
    assert await store.get_embeddings(["c", "d", "e"], later + 4) == {"c": c, "e": e}
    assert await store.evict_embeddings(2) == 0
    assert await store.count_embeddings() == 2


async def _held_embeddings(store: EmbeddingStore, keys: list[str], before_all: float) -> dict[str, list[str]]:
    """The keys each namespace (a key's prefix) still holds. Read as of ``before_all``, earlier than
    every use: a read never moves recency back, so this one leaves it as it was."""
    held: dict[str, list[str]] = {}
    for key in sorted(await store.get_embeddings(keys, before_all)):
        held.setdefault(key.split("/")[0], []).append(key)
    return held


async def check_fair_embedding_eviction(store: EmbeddingStore) -> None:
    """The embeddings' size bound takes from the namespace holding the most, its least recently
    used first: a namespace within its fair share (the bound over the namespaces holding vectors)
    loses nothing, however old its vectors; a vector stored again counts once, an expired one not."""
    base = time.time() - 10_000
    keys: list[str] = []

    async def put(namespace: str, name: str, at: float, expires_at: float | None = None) -> None:
        key = f"{namespace}/{name}"
        keys.append(key)
        await store.put_embeddings(namespace, {key: _vector(len(keys))}, at, expires_at)

    # The quiet namespace's vectors are the oldest of all: a plain LRU would take them first.
    for n in range(3):
        await put("quiet", f"q{n}", base + n)
    for n in range(4):
        await put("mid", f"m{n}", base + 100 + n)
    for n in range(20):
        await put("loud", f"l{n:02d}", base + 200 + n)
    await put("loud", "l05", base + 300)  # stored again: loud still holds 20
    assert await store.get_embeddings(["loud/l00"], base + 400) != {}  # loud's oldest was used last

    assert await store.evict_embeddings(12) == 15
    held = await _held_embeddings(store, keys, base - 1)
    assert held["quiet"] == ["quiet/q0", "quiet/q1", "quiet/q2"]
    assert held["mid"] == [f"mid/m{n}" for n in range(4)]
    assert held["loud"] == ["loud/l00", "loud/l05", "loud/l17", "loud/l18", "loud/l19"]
    assert await store.evict_embeddings(12) == 0

    # Two namespaces over their share end level: loud and a new one, mid within it.
    for n in range(6):
        await put("busy", f"b{n}", base + 500 + n)
    for n in range(3):  # quiet's vectors expire and are swept: quiet no longer counts
        await put("quiet", f"q{n}", base + 500, base + 501)
    assert await store.delete_expired_embeddings(base + 502) == 3
    assert await store.evict_embeddings(12) == 3  # loud 5, busy 6, mid 4: three over 12 / 3 each
    held = await _held_embeddings(store, keys, base - 1)
    assert {namespace: len(keys) for namespace, keys in held.items()} == {"mid": 4, "loud": 4, "busy": 4}
    assert held["loud"] == ["loud/l00", "loud/l05", "loud/l18", "loud/l19"]
    assert held["busy"] == ["busy/b2", "busy/b3", "busy/b4", "busy/b5"]
    assert await store.count_embeddings() == 12

    # One namespace alone may fill the bound; a newcomer then takes its share from it.
    for n in range(30):
        await put("alone", f"a{n:02d}", base + 600 + n)
    assert await store.evict_embeddings(12) == 30
    held = await _held_embeddings(store, keys, base - 1)
    assert {namespace: len(keys) for namespace, keys in held.items()} == {"mid": 3, "loud": 3, "busy": 3, "alone": 3}
    assert held["alone"] == ["alone/a27", "alone/a28", "alone/a29"]
    assert held["mid"] == ["mid/m1", "mid/m2", "mid/m3"]
    assert await store.count_embeddings() == 12


def _entry(namespace: str, key: str, at: float) -> CacheEntry:
    vector = np.frombuffer(_vector(len(key)), dtype=np.float32)
    return CacheEntry(
        namespace=namespace,
        scope=f"scope-{namespace}",
        exact_key=f"{namespace}/{key}",
        model="gpt-4o-mini",
        prompt=f"prompt {key}",
        answer=f"answer {key}",
        created_at=at,
        expires_at=None,
        last_access=at,
        vector=vector / np.linalg.norm(vector),
    )


async def _held(store: EntryStore) -> dict[str, list[str]]:
    """The exact keys each namespace holds, by namespace."""
    held: dict[str, list[str]] = {}
    async for batch in store.entries(EntryQuery()):
        for found in batch:
            held.setdefault(found.namespace, []).append(found.exact_key)
    return {namespace: sorted(keys) for namespace, keys in held.items()}


async def check_fair_eviction(store: EntryStore) -> None:
    """The size bound takes from the namespace holding the most, its least recently used first:
    a namespace within its fair share (the bound over the namespaces holding entries) loses
    nothing, however old its entries; a replaced or deleted entry no longer counts."""
    base = time.time() - 10_000
    # The quiet namespace's entries are the oldest of all: a plain LRU would take them first.
    quiet = [(await store.put(_entry("quiet", f"q{n}", base + n)))[0] for n in range(3)]
    mid = [(await store.put(_entry("mid", f"m{n}", base + 100 + n)))[0] for n in range(4)]
    loud = [(await store.put(_entry("loud", f"l{n:02d}", base + 200 + n)))[0] for n in range(20)]
    await store.put(_entry("loud", "l05", base + 300))  # replaces l05: loud still holds 20
    await store.touch({loud[0]: base + 400})  # loud's oldest was used last

    removed = await store.evict_fairly(12)

    assert len(removed) == 15 and not {r.id for r in removed} & {*quiet, *mid, loud[0]}
    held = await _held(store)
    assert held["quiet"] == ["quiet/q0", "quiet/q1", "quiet/q2"]
    assert held["mid"] == [f"mid/m{n}" for n in range(4)]
    assert held["loud"] == ["loud/l00", "loud/l05", "loud/l17", "loud/l18", "loud/l19"]
    assert await store.evict_fairly(12) == []

    # Two namespaces over their share end level: loud and a new one, mid within it.
    for n in range(6):
        await store.put(_entry("busy", f"b{n}", base + 500 + n))
    await store.delete(quiet)  # deleted: quiet holds nothing, and no longer counts
    removed = await store.evict_fairly(12)  # loud 5, busy 6, mid 4: three over 12 / 3 each
    held = await _held(store)
    assert {namespace: len(keys) for namespace, keys in held.items()} == {"mid": 4, "loud": 4, "busy": 4}
    assert held["busy"] == ["busy/b2", "busy/b3", "busy/b4", "busy/b5"]
    assert len(removed) == 3 and await store.count() == 12

    # One namespace alone may fill the bound; a newcomer then takes its share from it.
    for n in range(30):
        await store.put(_entry("alone", f"a{n:02d}", base + 600 + n))
    await store.evict_fairly(12)
    held = await _held(store)
    assert {namespace: len(keys) for namespace, keys in held.items()} == {"mid": 3, "loud": 3, "busy": 3, "alone": 3}
    assert held["alone"] == ["alone/a27", "alone/a28", "alone/a29"]
