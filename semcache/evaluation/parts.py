"""What an evaluation measures with: the parts ``semcache serve`` would build from the same settings."""

from __future__ import annotations

from ..decision.quality import QualityPolicy, default_policy
from ..embedders import load_configured_embedder, load_routed
from ..settings import Settings
from .embedding_cache import CachedEmbedder


def load_evaluation_parts(settings: Settings) -> tuple[CachedEmbedder, QualityPolicy]:
    """The embedder (each script's model, on the configured backend, from the same exports) and the
    default quality policy, as the service loads them. Raises OSError or ValueError when a model
    cannot be loaded. Replays verify with a stand-in (``evaluation.verifier``), not the upstream."""
    routed = load_routed(
        settings.embedding_model,
        settings.multilingual_embedding_model,
        {},  # labelled data has no namespaces: every text goes to its script's model
        lambda name: load_configured_embedder(name, settings),
        settings.embed_threads,
    )
    return CachedEmbedder(routed), default_policy(settings)
