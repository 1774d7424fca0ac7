"""Template tier: curated answers for high-frequency questions, loaded from a YAML or JSON file.

A template matches single-turn requests (a system prompt is allowed) whose prompt equals one of its
phrasings after normalisation, or comes within ``threshold`` cosine of one, and whose scope it
admits (``Template.admits``): its answer is plain text, written for the question asked plainly.
A chat or Responses request that asks for another kind of answer (a response format, tools, stop
sequences: any answer-shaping field but sampling ones, ``semcache.keys``), or too few tokens for
the answer, a legacy completion (a text to continue), or a cache API lookup of a scope it does not
name, is not answered by it.

File format (YAML or JSON)::

    templates:
      - id: opening-hours
        questions: ["What are your opening hours?", "When are you open?"]
        answer: "We are open from 9:00 to 17:00, Monday to Friday."
        namespaces: [support]      # optional; default: every namespace
        models: [gpt-4o-mini]      # optional; default: every model
        cache_api_scopes: [{}, {app: faq}]  # optional; default: [{}], the cache API's empty scope
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from ..embedders import BatchingEmbedder
from ..keys import RequestKey, cache_api_template_scope, normalize, template_scope
from .base import Hit

# The scopes of a plain question, in chat and in the Responses API: every template admits them.
_PLAIN_QUESTION = frozenset((template_scope("chat", {}), template_scope("responses", {})))


@dataclass(frozen=True)
class Template:
    id: str
    questions: tuple[str, ...]
    answer: str
    namespaces: frozenset[str] | None = None
    models: frozenset[str] | None = None
    # The cache API scopes (less their ``model``, which ``models`` judges) it answers; None: the empty scope.
    cache_api_scopes: tuple[Mapping[str, Any], ...] | None = None

    def as_dict(self) -> dict[str, Any]:
        """The template in its file format, for sharing it through the store."""
        item: dict[str, Any] = {"id": self.id, "questions": list(self.questions), "answer": self.answer}
        if self.namespaces is not None:
            item["namespaces"] = sorted(self.namespaces)
        if self.models is not None:
            item["models"] = sorted(self.models)
        if self.cache_api_scopes is not None:
            item["cache_api_scopes"] = [dict(scope) for scope in self.cache_api_scopes]
        return item

    @cached_property
    def scopes(self) -> frozenset[str]:
        """The template scopes (``semcache.keys.template_scope``) it admits."""
        cache_api = self.cache_api_scopes if self.cache_api_scopes is not None else ({},)
        return _PLAIN_QUESTION | {cache_api_template_scope(dict(scope)) for scope in cache_api}

    def admits(self, key: RequestKey) -> bool:
        """Whether its answer may answer this request's scope: the namespace and model, when it names
        them, and what the request asks of an answer beyond sampling, as every other tier's scope."""
        return (
            (self.namespaces is None or key.namespace in self.namespaces)
            and (self.models is None or key.model in self.models)
            and key.template_scope in self.scopes
        )


def load_templates(path: Path) -> list[Template]:
    """Parse a template file; raises ValueError naming the file and the offending item on bad input."""
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {exc}") from exc
    return parse_templates(data, str(path))


def parse_templates(data: object, source: str) -> list[Template]:
    """Templates from parsed YAML/JSON data; raises ValueError naming ``source`` and the bad item."""
    items = data.get("templates") if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise ValueError(f"{source}: expected a list of templates, or a mapping with a 'templates' list")
    try:
        return [_parse_template(item, number) for number, item in enumerate(items)]
    except ValueError as exc:
        raise ValueError(f"{source}: {exc}") from exc


def _parse_template(item: object, number: int) -> Template:
    if not isinstance(item, dict):
        raise ValueError(f"template #{number} is not a mapping")
    questions = item.get("questions") or ([item["question"]] if "question" in item else [])
    answer = item.get("answer")
    if not isinstance(questions, list) or not questions or not all(isinstance(q, str) and q.strip() for q in questions):
        raise ValueError(f"template #{number} needs 'questions', a list of non-empty strings")
    if not isinstance(answer, str) or not answer:
        raise ValueError(f"template #{number} needs 'answer', a non-empty string")
    namespaces, models = item.get("namespaces"), item.get("models")
    for name, value in (("namespaces", namespaces), ("models", models)):
        if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise ValueError(f"template #{number}: '{name}' must be a list of names")
    scopes = item.get("cache_api_scopes")
    if scopes is not None and not (isinstance(scopes, list) and all(isinstance(s, dict) for s in scopes)):
        raise ValueError(f"template #{number}: 'cache_api_scopes' must be a list of mappings (the cache API's scopes)")
    if scopes and any("model" in scope for scope in scopes):
        raise ValueError(f"template #{number}: name the models in 'models', not in 'cache_api_scopes'")
    return Template(
        id=str(item.get("id") or f"template-{number}"),
        questions=tuple(questions),
        answer=answer,
        namespaces=frozenset(namespaces) if namespaces else None,
        models=frozenset(models) if models else None,
        cache_api_scopes=None if scopes is None else tuple(scopes),
    )


class TemplateTier:
    def __init__(self, templates: list[Template], threshold: float) -> None:
        self.templates = templates
        self.threshold = threshold
        self._by_phrase: dict[str, list[tuple[Template, str]]] = {}
        self._rows: list[tuple[Template, str]] = []
        for template in templates:
            for question in template.questions:
                self._by_phrase.setdefault(_phrase_key(question), []).append((template, question))
                self._rows.append((template, question))
        # Per embedding model (None: the caller's only model): a query is compared only with the
        # phrasings as its own model embedded them.
        self._vectors: dict[str | None, np.ndarray] = {}

    @property
    def phrasings(self) -> list[str]:
        return [question for _, question in self._rows]

    def set_vectors(self, vectors: np.ndarray, model: str | None = None) -> None:
        """Embeddings of ``phrasings``, in order, by ``model`` (or by the caller's only model)."""
        self._vectors[model] = np.asarray(vectors, dtype=np.float32).reshape(len(self._rows), -1)

    async def embed_phrasings(self, embedder: BatchingEmbedder) -> None:
        """Embed every phrasing with every model a request may use, so a Chinese question can match
        an English phrasing through the multilingual model, and no vectors of two models meet."""
        if self._rows:
            for model in embedder.router.routes.models():
                self.set_vectors(await embedder.embed_many(self.phrasings, model), model)

    def lookup_exact(self, key: RequestKey, fits: Callable[[str], bool] | None = None) -> Hit | None:
        """A template that admits the request's scope with a phrasing of its prompt, whose answer
        ``fits`` (the request's token limit)."""
        if key.has_history or not self._by_phrase:
            return None
        # The key's normalized prompt: normalizing a long prompt again would hold the event loop.
        for template, question in self._by_phrase.get(_phrase_key(key.normalized, normalized=True), []):
            if template.admits(key) and (fits is None or fits(template.answer)):
                return Hit(tier="template", answer=template.answer, matched_prompt=question, similarity=1.0)
        return None

    def lookup_semantic(
        self,
        key: RequestKey,
        vector: np.ndarray,
        model: str | None = None,
        threshold: float | None = None,
        accepts: Callable[[str], bool] | None = None,
        fits: Callable[[str], bool] | None = None,
    ) -> Hit | None:
        """The nearest phrasing as ``model`` embedded it, at ``threshold`` (default: the tier's), of a
        template that admits the request's scope, that ``accepts`` lets answer the prompt (the
        guards), and whose answer ``fits`` (the request's token limit)."""
        vectors = self._vectors.get(model)
        if key.has_history or vectors is None or not self._rows:
            return None
        similarities = vectors @ np.asarray(vector, dtype=np.float32)
        for row in np.argsort(-similarities):
            similarity = float(similarities[row])
            if similarity < (self.threshold if threshold is None else threshold):
                return None
            template, question = self._rows[row]
            if not template.admits(key) or (fits is not None and not fits(template.answer)):
                continue
            if accepts is None or accepts(question):
                return Hit(
                    tier="template", answer=template.answer, matched_prompt=question, similarity=min(similarity, 1.0)
                )
        return None


def _phrase_key(text: str, *, normalized: bool = False) -> str:
    """How a prompt matches a template's phrasing exactly: as the exact tier does (``normalized``:
    ``text`` is in its form already), and also in any case and spacing. An operator wrote each
    phrasing for every spelling of that question."""
    return " ".join((text if normalized else normalize(text)).casefold().split())


class LiveTemplates:
    """The template tier in service. A reload (``semcache templates reload``, or another replica's)
    builds a whole new tier and swaps it in with one assignment, so a lookup sees the old tier or
    the new, never half of each."""

    def __init__(self, tier: TemplateTier) -> None:
        self.tier = tier

    def swap(self, tier: TemplateTier) -> None:
        self.tier = tier
