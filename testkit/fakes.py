"""Small fakes behind the seams, for fast unit tests."""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Sequence

import numpy as np

from semcache.errors import StoreUnavailable
from semcache.fairness import fair_cuts


class HashingEmbedder:
    """A deterministic bag-of-words embedder: texts sharing words get similar vectors.

    It also counts its calls, so tests can see how requests were batched.
    """

    def __init__(self, dimension: int = 64) -> None:
        self.name = f"hashing-{dimension}"
        self.dimension = dimension
        self.calls: list[int] = []  # batch size of each call
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            self.calls.append(len(texts))
        vectors = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                bucket = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "little")
                vectors[row, bucket % self.dimension] += 1.0
            norm = np.linalg.norm(vectors[row])
            vectors[row] = vectors[row] / norm if norm else np.eye(1, self.dimension, 0, dtype=np.float32)[0]
        return vectors


class MemoryEmbeddingStore:
    """``EmbeddingStore`` in a dictionary; while ``down``, every call fails as a store that is away."""

    def __init__(self) -> None:
        self.vectors: dict[str, tuple[bytes, float | None, float]] = {}  # key: vector, expires_at, last use
        self.namespace_of: dict[str, str] = {}
        self.down = False
        self.puts = 0

    def _check(self) -> None:
        if self.down:
            raise StoreUnavailable("the store is away")

    async def get_embeddings(self, keys: Sequence[str], now: float) -> dict[str, bytes]:
        self._check()
        found = {}
        for key in keys:
            if key not in self.vectors:
                continue
            vector, expires_at, _ = self.vectors[key]
            if expires_at is None or expires_at > now:
                self.vectors[key] = (vector, expires_at, now)
                found[key] = vector
        return found

    async def put_embeddings(
        self, namespace: str, items: dict[str, bytes], now: float, expires_at: float | None
    ) -> None:
        self._check()
        self.puts += 1
        self.vectors.update({key: (vector, expires_at, now) for key, vector in items.items()})
        self.namespace_of.update(dict.fromkeys(items, namespace))

    async def delete_expired_embeddings(self, now: float) -> int:
        self._check()
        expired = [k for k, (_, at, _) in self.vectors.items() if at is not None and at <= now]
        for key in expired:
            del self.vectors[key]
            del self.namespace_of[key]
        return len(expired)

    async def evict_embeddings(self, keep: int) -> int:
        self._check()
        by_namespace: dict[str, list[str]] = {}
        for key in sorted(self.vectors, key=lambda k: self.vectors[k][2]):
            by_namespace.setdefault(self.namespace_of[key], []).append(key)
        cuts = fair_cuts({namespace: len(keys) for namespace, keys in by_namespace.items()}, keep)
        for namespace, cut in cuts.items():
            for key in by_namespace[namespace][:cut]:
                del self.vectors[key]
                del self.namespace_of[key]
        return sum(cuts.values())

    async def count_embeddings(self) -> int:
        self._check()
        return len(self.vectors)
