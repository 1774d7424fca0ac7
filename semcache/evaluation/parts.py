"""What an evaluation measures with: the parts ``semcache serve`` would build from the same settings."""

from __future__ import annotations

from ..embedders import load_configured_embedder, load_routed
from ..protocols import Verifier
from ..quality import QualityPolicy, default_policy
from ..settings import Settings
from ..verifiers import load_verifier
from .embedding_cache import CachedEmbedder


def load_evaluation_parts(settings: Settings) -> tuple[CachedEmbedder, Verifier | None, QualityPolicy]:
    """The embedder (each script's model, on the configured backend, from the same exports), the
    verifier and the default quality policy, as the service loads them. Raises OSError or
    ValueError when a model or the verifier cannot be loaded."""
    routed = load_routed(
        settings.embedding_model,
        settings.multilingual_embedding_model,
        {},  # labelled data has no namespaces: every text goes to its script's model
        lambda name: load_configured_embedder(name, settings),
        settings.embed_threads,
    )
    return CachedEmbedder(routed), load_verifier(settings), default_policy(settings)
