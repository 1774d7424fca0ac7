"""Embedding models behind the ``Embedder`` protocol, and the async micro-batcher in front of them."""

from .batching import BatchingEmbedder
from .sentence_transformer import SentenceTransformerEmbedder, load_embedder

__all__ = ["BatchingEmbedder", "SentenceTransformerEmbedder", "load_embedder"]
