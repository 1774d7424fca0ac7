"""The seams between semcache's parts. Each backend implements one of these protocols."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np

from .entries import CacheEntry, EntryQuery, NegativeFeedback, RemovedEntry


class Embedder(Protocol):
    """Turns texts into unit-length float32 vectors. Blocking; callers run it in a worker thread."""

    name: str
    dimension: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Return an array of shape (len(texts), dimension), each row L2-normalised."""
        ...


class EntryReader(Protocol):
    """What the tiers read: an entry by id or by exact key."""

    async def get(self, entry_id: int) -> CacheEntry | None: ...

    async def get_by_exact_key(self, exact_key: str) -> CacheEntry | None: ...


class AnswerStore(EntryReader, Protocol):
    """What the request path writes: answers, and what clients and the judge found wrong.

    Contract: once ``put`` returns, the entry survives a crash of this process.
    """

    async def put(self, entry: CacheEntry) -> tuple[int, list[RemovedEntry]]:
        """Store ``entry``, replacing any entry with the same exact key. Returns the new id and
        what was replaced."""
        ...

    async def delete(self, entry_ids: Iterable[int]) -> list[RemovedEntry]: ...

    async def add_negative_feedback(self, feedback: NegativeFeedback, raise_min_similarity_to: float | None) -> None:
        """Record that an entry was wrong for a query; optionally raise the entry's own threshold."""
        ...

    async def raise_min_similarity(self, entry_id: int, to: float) -> None:
        """Raise the entry's own threshold to at least ``to`` (its answer was judged wrong below it)."""
        ...


class SweptStore(Protocol):
    """What the sweeper needs: recency, expiry and the size bound."""

    async def touch(self, accesses: dict[int, float]) -> None:
        """Record hits: entry id to the time of its latest access."""
        ...

    async def delete_expired(self, now: float) -> list[RemovedEntry]: ...

    async def evict_fairly(self, keep: int) -> list[RemovedEntry]:
        """Remove entries until ``keep`` remain, each from the namespace holding the most at the time,
        its least recently used (``semcache.fairness.fair_cuts``): a namespace holding no more than
        ``keep`` divided by the namespaces holding entries loses none."""
        ...


class IndexSource(Protocol):
    """What the FAISS index is rebuilt and reconciled from."""

    async def stored_ids(self) -> set[int]:
        """The ids of every stored entry, to reconcile the index with."""
        ...

    async def vectors_for(self, entry_ids: list[int]) -> tuple[list[int], list[str], np.ndarray]:
        """The stored vectors of those entries that still exist: (ids, scopes, matrix)."""
        ...


class OperatorStore(EntryReader, IndexSource, Protocol):
    """What operators' work on entries needs (semcache.management): scans, imports, deletes."""

    async def put_many(self, entries: Sequence[CacheEntry]) -> list[tuple[int, list[RemovedEntry]]]:
        """``put`` for a batch (an import), in fewer round trips; results in the order given."""
        ...

    async def delete(self, entry_ids: Iterable[int]) -> list[RemovedEntry]: ...

    async def count(self) -> int: ...

    def entries(
        self, query: EntryQuery, *, after_id: int = 0, batch_size: int = ..., with_vectors: bool = False
    ) -> AsyncIterator[list[CacheEntry]]:
        """The stored entries that ``query`` matches, in id order from after ``after_id``, in
        batches of at most ``batch_size`` (possibly fewer). Expired entries not yet swept are
        included; vectors are read only ``with_vectors``. For operators, not the request path."""
        ...


class SettingsStore(Protocol):
    """What the service keeps besides entries: namespace settings and negative feedback."""

    async def namespace_configs(self) -> dict[str, dict[str, Any]]: ...

    async def set_namespace_config(self, namespace: str, config: dict[str, Any]) -> None: ...

    async def negative_feedback(self) -> list[NegativeFeedback]: ...


class EmbeddingStore(Protocol):
    """Where the embeddings route keeps its vectors (semcache.embedding_cache): float32 bytes by the
    digest of one input and everything that shapes its vector (``keys.embedding_key``).

    Contract: once ``put_embeddings`` returns, the vectors survive a crash of this process. An
    entry past its ``expires_at`` is never returned, swept or not.
    """

    async def get_embeddings(self, keys: Sequence[str], now: float) -> dict[str, bytes]:
        """The live vectors of those keys that are stored; each found one counts as used at ``now``."""
        ...

    async def put_embeddings(
        self, namespace: str, items: dict[str, bytes], now: float, expires_at: float | None
    ) -> None:
        """Store (or replace) these vectors of ``namespace``, last used at ``now``; ``expires_at``
        None: never."""
        ...

    async def delete_expired_embeddings(self, now: float) -> int:
        """Remove the vectors whose time is up; returns how many."""
        ...

    async def evict_embeddings(self, keep: int) -> int:
        """Remove vectors until ``keep`` remain, one at a time the least recently used of the
        namespace holding the most (``fairness.fair_cuts``); returns how many."""
        ...

    async def count_embeddings(self) -> int: ...


class Store(AnswerStore, SweptStore, OperatorStore, SettingsStore, EmbeddingStore, Protocol):
    """Durable home of cache entries, every role together: what the app factory opens and hands
    out, each part seeing only its role. The FAISS index is derived from it and rebuilt from it."""

    async def close(self) -> None: ...


class ReembeddableStore(IndexSource, Protocol):
    """What a start on the embedded store needs when the embedding models changed: the model the
    vectors were made with, the prompts to embed again, and the evidence that no longer holds."""

    async def get_meta(self, key: str) -> str | None: ...

    async def set_meta(self, key: str, value: str) -> None: ...

    async def prompts(self) -> list[tuple[int, str, str]]:
        """(id, namespace, prompt) of every entry."""
        ...

    async def set_vectors(self, entry_ids: list[int], vectors: np.ndarray) -> None: ...

    async def clear_evidence(self, namespace: str | None) -> None: ...


class EvidenceStore(Protocol):
    """Where the error budgets' counters live (semcache.decision.budget): added to, never overwritten, so
    that replicas sharing one store add up their evidence."""

    async def add_evidence(self, batch_id: str, deltas: dict[tuple[str, str], dict[str, int]]) -> None:
        """Add these counts, per (namespace, script), to the stored totals, once per ``batch_id``:
        a batch sent again (after a timeout or a cancellation) adds nothing."""
        ...

    async def evidence(self) -> dict[tuple[str, str], dict[str, int]]:
        """The stored totals, per (namespace, script)."""
        ...

    async def clear_evidence(self, namespace: str | None) -> None:
        """Drop a namespace's evidence, or every namespace's."""
        ...


@dataclass(frozen=True)
class RelayRequest:
    """A request semcache passes on untouched: the path below ``/v1``, query, body and its type."""

    method: str
    path: str  # e.g. "/moderations"; checked by the route to stay below /v1
    query: str
    body: bytes
    content_type: str | None


@dataclass(frozen=True)
class Relayed:
    """The upstream's answer to a relayed request: status, the headers worth passing on, and the
    body as it arrives; ``close`` ends it (also when the client goes away)."""

    status: int
    headers: dict[str, str]
    body: AsyncIterator[bytes]
    close: Callable[[], Awaitable[None]]


# The OpenAI APIs whose answers semcache caches: Chat Completions, the legacy Completions, Responses.
UpstreamApi = Literal["chat", "completions", "responses"]


class Upstream(Protocol):
    """An OpenAI-compatible model. Errors surface as ``semcache.errors.UpstreamError``."""

    async def complete(
        self, body: dict[str, Any], headers: dict[str, str], api: UpstreamApi = "chat"
    ) -> dict[str, Any]:
        """A non-streamed answer of ``api`` (a chat completion unless said otherwise)."""
        ...

    def stream(
        self, body: dict[str, Any], headers: dict[str, str], api: UpstreamApi = "chat"
    ) -> AsyncIterator[dict[str, Any]]:
        """The events of a streamed answer of ``api``. Ends normally only after ``[DONE]`` (or, for
        the Responses API, its final ``response.*`` event); a stream cut off or malformed raises
        ``UpstreamError``."""
        ...

    async def embed(self, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        """An embeddings request (``POST /v1/embeddings``): the answer as a JSON object, which the
        caller checks. A backend that has no embeddings raises ``NotFound``."""
        ...

    async def list_models(self, headers: dict[str, str]) -> dict[str, Any]: ...

    async def relay(self, request: RelayRequest, headers: dict[str, str]) -> Relayed:
        """Pass any other request on as it is and hand back the answer as it comes: the ``/v1``
        routes semcache does not cache. An HTTP error is raised as a scrubbed ``UpstreamStatusError``."""
        ...

    async def close(self) -> None: ...
