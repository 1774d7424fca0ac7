"""An embedder that embeds each distinct text once, in large batches, for offline evaluation."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..protocols import Embedder


class CachedEmbedder:
    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self.name = embedder.name
        self.dimension = embedder.dimension
        self._vectors: dict[str, np.ndarray] = {}

    def warm(self, texts: Sequence[str], batch_size: int = 128, advance: Callable[[int], None] | None = None) -> None:
        todo = list(dict.fromkeys(t for t in texts if t not in self._vectors))
        for start in range(0, len(todo), batch_size):
            batch = todo[start : start + batch_size]
            for text, vector in zip(batch, self.embedder.embed(batch), strict=True):
                self._vectors[text] = vector
            if advance is not None:
                advance(len(batch))

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.warm(texts)
        return np.vstack([self._vectors[t] for t in texts]) if texts else np.zeros((0, self.dimension), np.float32)
