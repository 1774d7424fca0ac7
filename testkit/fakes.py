"""Small fakes behind the seams, for fast unit tests."""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Sequence

import numpy as np


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
