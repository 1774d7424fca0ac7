"""Contracts every store keeps, checked the same way on SQLite and on Redis."""

from __future__ import annotations

import asyncio
import time

import numpy as np

from semcache.protocols import EmbeddingStore


def _vector(seed: int) -> bytes:
    return np.random.default_rng(seed).standard_normal(8).astype(np.float32).tobytes()


async def check_embedding_store(store: EmbeddingStore) -> None:
    """Vectors come back byte for byte; expired ones never (swept or not); the sweeper removes
    them; the size bound drops the least recently used, a read counting as a use."""
    a, b, c, d, e = (_vector(seed) for seed in range(5))
    now = time.time()
    await store.put_embeddings({"a": a, "b": b}, now, now + 0.5)
    await store.put_embeddings({"c": c}, now, now + 0.5)
    await store.put_embeddings({"c": c}, now, None)  # stored again, for good
    assert await store.get_embeddings(["a", "b", "c", "missing", "a"], now) == {"a": a, "b": b, "c": c}
    assert await store.get_embeddings([], now) == {}
    assert await store.count_embeddings() == 3

    await asyncio.sleep(0.7)
    later = time.time()
    assert await store.get_embeddings(["a", "b", "c"], later) == {"c": c}  # expired, not yet swept
    assert await store.delete_expired_embeddings(later) == 2
    assert await store.count_embeddings() == 1

    await store.put_embeddings({"d": d}, later + 1, None)
    await store.put_embeddings({"e": e}, later + 2, None)
    await store.get_embeddings(["c"], later + 3)  # c, stored first, was used last
    assert await store.evict_embeddings(2) == 1
    assert await store.get_embeddings(["c", "d", "e"], later + 4) == {"c": c, "e": e}
    assert await store.evict_embeddings(2) == 0
    assert await store.count_embeddings() == 2
