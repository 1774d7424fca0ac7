"""``POST /v1/embeddings``, cached per input.

Embeddings are deterministic, so an exact cache is always right. Each input of a request is keyed
on its own (``keys.embedding_key``: the namespace, model, ``dimensions``, every other field that
shapes a vector, the upstream account, and the user with ``scope_per_user``); the upstream is asked,
in one call, only for the inputs not stored, each once. Vectors are kept and served as float32, so
a hit and a miss answer with the same numbers, in either ``encoding_format``.

An upstream answer is checked whole before anything of it is stored: one finite vector of one
dimension per input asked. Anything less is a 502, and nothing of it is cached. With the store
down, every input goes to the upstream, as a plain proxy would send it.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeGuard

import numpy as np

from .decision.quality import NamespacePolicies
from .errors import InvalidRequest, StoreUnavailable, UpstreamError, UpstreamUnavailable
from .keys import embedding_key
from .observer import NullObserver, Observer
from .pipeline import RequestControls
from .protocols import EmbeddingStore, Upstream
from .tokens import TokenCounter
from .wire import MAX_MODEL_CHARS

log = logging.getLogger("semcache.embeddings")

# OpenAI's own bound on inputs in one request.
MAX_EMBEDDING_INPUTS = 2048
# Fields that never change a vector: the inputs themselves, how vectors are written, who asked.
# The model and dimensions are keyed by name; every other field the client sent is keyed as sent.
_NOT_VECTOR_SHAPING = frozenset({"input", "encoding_format", "user", "model", "dimensions"})
# Token ids fit in 32 bits in every tokenizer OpenAI-compatible servers use.
_MAX_TOKEN_ID = 2**32 - 1
_FLOAT32_MAX = float(np.finfo(np.float32).max)
# Counting the tokens of this many characters or more runs in a worker thread.
_COUNT_OFF_LOOP_CHARS = 64 * 1024

EncodingFormat = Literal["float", "base64"]
EmbeddingInput = str | list[int]


@dataclass(frozen=True)
class EmbeddingRequest:
    """A checked ``POST /v1/embeddings`` body: its inputs one per vector, in order."""

    model: str
    inputs: list[EmbeddingInput]
    encoding_format: EncodingFormat
    dimensions: int | None
    user: str | None
    shaping: dict[str, Any]  # the other fields the client sent, passed on and keyed

    def upstream_body(self, inputs: list[EmbeddingInput]) -> dict[str, Any]:
        """The body that asks the upstream for ``inputs``, always as floats."""
        body: dict[str, Any] = {**self.shaping, "model": self.model, "input": inputs, "encoding_format": "float"}
        if self.dimensions is not None:
            body["dimensions"] = self.dimensions
        if self.user is not None:
            body["user"] = self.user
        return body


def parse_embedding_request(body: Any) -> EmbeddingRequest:
    """Check a request body as OpenAI does: ``input`` is a string, a list of strings, a list of
    token ids, or a list of lists of token ids, none empty, at most ``MAX_EMBEDDING_INPUTS``."""
    if not isinstance(body, dict):
        raise InvalidRequest("the body must be a JSON object", code="invalid_body")
    model = body.get("model")
    if not isinstance(model, str) or not 0 < len(model) <= MAX_MODEL_CHARS:
        raise InvalidRequest(f"model: a string of 1 to {MAX_MODEL_CHARS} characters is required", code="invalid_model")
    encoding_format: EncodingFormat
    if body.get("encoding_format") in (None, "float"):
        encoding_format = "float"
    elif body.get("encoding_format") == "base64":
        encoding_format = "base64"
    else:
        raise InvalidRequest("encoding_format: 'float' or 'base64'", code="invalid_encoding_format")
    dimensions = body.get("dimensions")
    if dimensions is not None and (not _is_int(dimensions) or dimensions < 1):
        raise InvalidRequest("dimensions: a whole number of at least 1", code="invalid_dimensions")
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        raise InvalidRequest("user: a string", code="invalid_user")
    shaping = {name: value for name, value in body.items() if name not in _NOT_VECTOR_SHAPING}
    return EmbeddingRequest(model, _inputs(body.get("input")), encoding_format, dimensions, user, shaping)


def _inputs(value: Any) -> list[EmbeddingInput]:
    if isinstance(value, str):
        items: list[Any] = [value]
    elif isinstance(value, list) and value and all(_is_int(item) for item in value):
        items = [value]  # one input, as token ids
    elif isinstance(value, list):
        items = value
    else:
        raise InvalidRequest("input: a string, a list of strings, or token ids", code="invalid_input")
    if not items:
        raise InvalidRequest("input: must not be empty", code="invalid_input")
    if len(items) > MAX_EMBEDDING_INPUTS:
        raise InvalidRequest(
            f"input: {len(items)} inputs, more than the {MAX_EMBEDDING_INPUTS} allowed", code="too_many_inputs"
        )
    for number, item in enumerate(items):
        if isinstance(item, str):
            if not item:
                raise InvalidRequest(f"input[{number}]: must not be an empty string", code="invalid_input")
        elif not isinstance(item, list) or not item:
            raise InvalidRequest(f"input[{number}]: a non-empty string or list of token ids", code="invalid_input")
        elif not all(_is_int(token) and 0 <= token <= _MAX_TOKEN_ID for token in item):
            raise InvalidRequest(f"input[{number}]: token ids are whole numbers from 0", code="invalid_input")
    if len({type(item) for item in items}) > 1:
        raise InvalidRequest("input: strings and token ids cannot be mixed", code="invalid_input")
    return items


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class EmbeddingAnswer:
    """Every vector of a request, in its order, and where they came from."""

    vectors: list[np.ndarray]  # float32
    model: str
    prompt_tokens: int  # what the upstream reported for the inputs it was asked; 0 when none
    from_cache: int  # inputs served from the store
    outcome: Literal["hit", "miss", "bypass"]

    def response(self, encoding_format: EncodingFormat) -> dict[str, Any]:
        """OpenAI's answer: floats, or base64 of little-endian float32 (what the openai SDK decodes)."""
        write = _as_base64 if encoding_format == "base64" else _as_floats
        data = [{"object": "embedding", "index": n, "embedding": write(v)} for n, v in enumerate(self.vectors)]
        usage = {"prompt_tokens": self.prompt_tokens, "total_tokens": self.prompt_tokens}
        return {"object": "list", "data": data, "model": self.model, "usage": usage}


def _as_base64(vector: np.ndarray) -> str:
    return base64.b64encode(vector.astype("<f4", copy=False).tobytes()).decode()


def _as_floats(vector: np.ndarray) -> list[float]:
    return [float(v) for v in vector.tolist()]


class EmbeddingCache:
    """Answers embeddings requests from the store and, for the inputs it lacks, the upstream."""

    def __init__(
        self,
        store: EmbeddingStore,
        upstream: Upstream,
        tokens: TokenCounter,
        policies: NamespacePolicies,
        *,
        default_ttl_s: float,
        observer: Observer | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.upstream = upstream
        self.tokens = tokens
        self.policies = policies
        self.default_ttl_s = default_ttl_s
        self.observer = observer or NullObserver()
        self.clock = clock

    async def embed(
        self, request: EmbeddingRequest, namespace: str, controls: RequestControls, headers: dict[str, str]
    ) -> EmbeddingAnswer:
        try:
            answer = await self._embed(request, namespace, controls, headers)
        except UpstreamError:
            self.observer.request(namespace, "error", None, "embeddings")
            raise
        self.observer.request(namespace, answer.outcome, None, "embeddings")
        return answer

    async def _embed(
        self, request: EmbeddingRequest, namespace: str, controls: RequestControls, headers: dict[str, str]
    ) -> EmbeddingAnswer:
        per_user = self.policies.for_namespace(namespace).scope_per_user
        cacheable = not per_user or controls.user is not None  # per user, with no user: nothing is shared
        scope = self._scope(request, namespace, controls, per_user)
        keys = [embedding_key(scope, item) for item in request.inputs]
        now = self.clock()
        found = await self._read(keys, now) if cacheable and controls.read_cache else {}
        store_down = found is None  # then a plain proxy: nothing read, nothing written
        stored = found or {}
        vectors = {key: np.frombuffer(blob, dtype=np.float32) for key, blob in stored.items()}
        missing = {key: item for key, item in zip(keys, request.inputs, strict=True) if key not in vectors}
        prompt_tokens = 0
        if missing:
            asked = list(missing.values())
            answer = await self.upstream.embed(request.upstream_body(asked), headers)
            fresh = await _checked(answer, len(asked), request.dimensions)
            reported = _reported_tokens(answer)
            prompt_tokens = await self._count_tokens(asked, request.model) if reported is None else reported
            vectors.update(zip(missing, fresh, strict=True))
            if cacheable and controls.store and not store_down:
                await self._write(namespace, {key: vectors[key].tobytes() for key in missing}, now, controls)
        if len({len(vector) for vector in vectors.values()}) > 1:
            # The upstream now answers this model in another dimension: what was stored is stale.
            log.warning("embeddings of %r changed dimension upstream; asking again for every input", request.model)
            return await self._embed(request, namespace, replace(controls, read_cache=False), headers)
        from_cache = sum(1 for key in keys if key in stored)
        saved = [item for key, item in zip(keys, request.inputs, strict=True) if key in stored]
        tokens_saved = await self._count_tokens(saved, request.model) if saved else 0
        self.observer.embeddings(namespace, len(keys), from_cache, len(missing), tokens_saved)
        outcome: Literal["hit", "miss", "bypass"] = "bypass" if not cacheable else "miss" if missing else "hit"
        return EmbeddingAnswer([vectors[key] for key in keys], request.model, prompt_tokens, from_cache, outcome)

    def _scope(
        self, request: EmbeddingRequest, namespace: str, controls: RequestControls, per_user: bool
    ) -> dict[str, Any]:
        scope: dict[str, Any] = {"ns": namespace, "model": request.model, "dimensions": request.dimensions}
        if request.shaping:
            scope["params"] = request.shaping
        if controls.account is not None:
            scope["account"] = controls.account
        if per_user:
            scope["user"] = controls.user
        return scope

    async def _read(self, keys: list[str], now: float) -> dict[str, bytes] | None:
        """The stored vectors; None while the store is down."""
        try:
            found = await self.store.get_embeddings(keys, now)
        except StoreUnavailable as exc:
            log.warning("embeddings answered without the store: %s", exc.message)
            return None
        # A vector that is not whole float32 values is damaged: ask for it again.
        return {key: blob for key, blob in found.items() if blob and len(blob) % 4 == 0}

    async def _write(self, namespace: str, items: dict[str, bytes], now: float, controls: RequestControls) -> None:
        ttl = controls.ttl_s if controls.ttl_s is not None else self.default_ttl_s
        try:
            await self.store.put_embeddings(namespace, items, now, now + ttl if ttl > 0 else None)
        except StoreUnavailable as exc:
            log.warning("embeddings not stored: %s", exc.message)

    async def _count_tokens(self, items: list[EmbeddingInput], model: str) -> int:
        """Tokens of these inputs as the upstream would count them: token ids count themselves."""
        chars = sum(len(item) for item in items if isinstance(item, str))

        def count() -> int:
            return sum(len(item) if isinstance(item, list) else self.tokens.count_text(item, model) for item in items)

        return await asyncio.to_thread(count) if chars >= _COUNT_OFF_LOOP_CHARS else count()


def _reported_tokens(answer: dict[str, Any]) -> int | None:
    usage = answer.get("usage")
    tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    return tokens if _is_int(tokens) and tokens >= 0 else None


async def _checked(answer: dict[str, Any], asked: int, dimensions: int | None) -> list[np.ndarray]:
    """The upstream's vectors in input order; a 502 unless it sent exactly one finite vector per
    input asked, all of one dimension (``dimensions`` when the request named it)."""
    data = answer.get("data")
    if not isinstance(data, list) or len(data) != asked:
        count = len(data) if isinstance(data, list) else "no"
        raise UpstreamUnavailable(f"the upstream sent {count} embeddings for {asked} inputs")
    if asked * len(_vector_of(data[0])) >= 64 * 1024:  # a large answer: convert it off the loop
        return await asyncio.to_thread(_ordered_vectors, data, dimensions)
    return _ordered_vectors(data, dimensions)


def _ordered_vectors(data: list[Any], dimensions: int | None) -> list[np.ndarray]:
    ordered: list[np.ndarray | None] = [None] * len(data)
    width = dimensions
    for item in data:
        index = item.get("index") if isinstance(item, dict) else None
        if not _is_int(index) or not 0 <= index < len(data) or ordered[index] is not None:
            raise UpstreamUnavailable("the upstream sent embeddings without one index per input")
        vector = _as_vector(_vector_of(item))
        width = len(vector) if width is None else width
        if len(vector) != width or not width:
            raise UpstreamUnavailable("the upstream sent embeddings of several dimensions, or not those asked")
        ordered[index] = vector
    return [vector for vector in ordered if vector is not None]


def _vector_of(item: Any) -> Any:
    embedding = item.get("embedding") if isinstance(item, dict) else None
    if not isinstance(embedding, list | str):
        raise UpstreamUnavailable("the upstream sent an embedding that is not a list of numbers")
    return embedding


def _as_vector(embedding: list[Any] | str) -> np.ndarray:
    """float32 from a list of numbers, or from base64 (an upstream that sends it whatever was asked)."""
    if isinstance(embedding, str):
        try:
            raw = base64.b64decode(embedding, validate=True)
        except ValueError as exc:
            raise UpstreamUnavailable("the upstream sent an embedding that is not base64") from exc
        if len(raw) % 4:
            raise UpstreamUnavailable("the upstream sent an embedding that is not float32")
        vector = np.frombuffer(raw, dtype="<f4").astype(np.float32)
    else:
        if not {type(value) for value in embedding} <= {float, int}:
            raise UpstreamUnavailable("the upstream sent an embedding that is not a list of numbers")
        try:
            wide = np.asarray(embedding, dtype=np.float64)
        except OverflowError as exc:  # an integer past any float
            raise UpstreamUnavailable("the upstream sent an embedding that is not finite") from exc
        if not (np.abs(wide) <= _FLOAT32_MAX).all():  # NaN too
            raise UpstreamUnavailable("the upstream sent an embedding beyond float32")
        vector = wide.astype(np.float32)
    if not np.isfinite(vector).all():
        raise UpstreamUnavailable("the upstream sent an embedding that is not finite")
    return vector
