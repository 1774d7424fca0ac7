"""Keeping the index and the store in step: restoring at start-up, and the background sweeper.

The SQLite store is the source of truth; the FAISS index is derived from it. At start-up the last
snapshot is loaded and reconciled with the store (entries added or removed since the snapshot),
so a restart neither re-embeds nor rebuilds what is already current.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .decision.budget import ErrorBudgets, share_evidence
from .embedders import BatchingEmbedder
from .embedders.routing import EmbeddingRoutes
from .entries import PendingAccesses
from .errors import StoreUnavailable
from .index import ScopedVectorIndex, Snapshot, read_snapshot
from .language import detect_script
from .protocols import EmbeddingStore, EvidenceStore, IndexSource, ReembeddableStore, SweptStore

log = logging.getLogger("semcache.maintenance")

_MODEL_META_KEY = "embedding_model"


async def restore_index(
    store: ReembeddableStore,
    index: ScopedVectorIndex,
    embedder: BatchingEmbedder,
    snapshot_dir: Path,
    snapshot: Awaitable[Snapshot | None] | None = None,
    stored_ids: Awaitable[set[int]] | None = None,
) -> dict[str, Any]:
    """Bring ``index`` up to date with the embedded store; returns what it did, for the logs.
    ``snapshot``: the saved index, being read already (``read_snapshot_soon``), else read here;
    ``stored_ids``: the store's ids, being read already, else read here."""
    started = time.monotonic()
    model = embedder.embedder.name
    previous = await store.get_meta(_MODEL_META_KEY)
    if previous not in (None, model):
        await _reembed_changed(store, embedder, EmbeddingRoutes.parse(previous))
        # Cosines of another model mean something else: what the error budgets learned goes too.
        await store.clear_evidence(None)
        log.warning("embedding models changed: the error budgets start again from the threshold")
    await store.set_meta(_MODEL_META_KEY, model)
    if snapshot is None:
        loaded = await load_snapshot(index, snapshot_dir, model) is not None
    else:
        loaded = index.install(await snapshot, embedding_model=model) is not None
    report: dict[str, Any] = {"snapshot_loaded": loaded, **await reconcile_index(store, index, stored_ids)}
    report["seconds"] = round(time.monotonic() - started, 3)
    log.info("index restored", extra=report)  # fields, not a dict in the message
    return report


async def load_snapshot(index: ScopedVectorIndex, snapshot_dir: Path, model: str) -> dict[str, Any] | None:
    """Load the saved index if there is one for this model; returns its metadata, or None."""
    try:
        return await asyncio.to_thread(index.load, snapshot_dir, embedding_model=model)
    except Exception:  # a damaged snapshot only costs time: the store has everything
        log.exception("could not load the index snapshot; rebuilding the index from the store")
        return None


def read_snapshot_soon(snapshot_dir: Path) -> asyncio.Task[Snapshot | None]:
    """Start reading the saved index in a worker thread, for ``restore_index``: the longest part
    of a start on a large cache, it needs no model, so it runs while the model loads."""

    async def read() -> Snapshot | None:
        try:
            return await asyncio.to_thread(read_snapshot, snapshot_dir)
        except Exception:  # a damaged snapshot only costs time: the store has everything
            log.exception("could not load the index snapshot; rebuilding the index from the store")
            return None

    return asyncio.create_task(read(), name="semcache-read-snapshot")


async def reconcile_index(
    store: IndexSource, index: ScopedVectorIndex, stored_ids: Awaitable[set[int]] | None = None
) -> dict[str, int]:
    """Drop from ``index`` what the store no longer has, and add what it lacks from the stored
    vectors (nothing is re-embedded). ``stored_ids``: the store's ids, if being read already."""
    stored = await (stored_ids if stored_ids is not None else store.stored_ids())
    stale, missing = await asyncio.to_thread(_differences, stored, index)  # a million ids take a while
    if stale:
        await asyncio.to_thread(index.remove, stale)
    for start in range(0, len(missing), 10_000):
        ids, scopes, vectors = await store.vectors_for(missing[start : start + 10_000])
        await asyncio.to_thread(_add_grouped, index, ids, scopes, vectors)
        if len(missing) > 10_000:
            log.info("indexed %d/%d stored entries", min(start + 10_000, len(missing)), len(missing))
    return {"entries": len(stored), "added": len(missing), "removed": len(stale)}


def _differences(stored: set[int], index: ScopedVectorIndex) -> tuple[list[int], list[int]]:
    """(indexed but not stored, stored but not indexed, in order)."""
    indexed = index.ids()
    return list(indexed - stored), sorted(stored - indexed)


def _add_grouped(index: ScopedVectorIndex, ids: list[int], scopes: list[str], vectors: np.ndarray) -> None:
    by_scope: dict[str, list[int]] = {}
    for row, scope in enumerate(scopes):
        by_scope.setdefault(scope, []).append(row)
    for scope, rows in by_scope.items():
        index.add(scope, np.asarray([ids[r] for r in rows]), vectors[rows])


async def _reembed_changed(store: ReembeddableStore, embedder: BatchingEmbedder, previous: EmbeddingRoutes) -> None:
    """Re-embed the stored prompts whose model changed: adding a model for Chinese leaves the
    English entries' vectors as they are."""
    routes = embedder.router.routes
    resized = await _stored_dimension(store) not in (None, embedder.dimension)  # every vector must change size
    changed = [
        (entry_id, prompt, model)
        for entry_id, namespace, prompt in await store.prompts()
        if (model := routes.model_for(namespace, script := detect_script(prompt)))
        != previous.model_for(namespace, script)
        or resized
    ]
    log.warning("embedding models changed: re-embedding %d stored prompts", len(changed))
    for start in range(0, len(changed), 1024):
        batch = changed[start : start + 1024]
        by_model: dict[str, list[int]] = {}
        for row, (_, _, model) in enumerate(batch):
            by_model.setdefault(model, []).append(row)
        vectors = np.zeros((len(batch), embedder.dimension), dtype=np.float32)
        for model, rows in by_model.items():
            vectors[rows] = await embedder.embed_many([batch[row][1] for row in rows], model)
        await store.set_vectors([entry_id for entry_id, _, _ in batch], vectors)
        log.info("re-embedded %d/%d prompts", start + len(batch), len(changed))


async def _stored_dimension(store: ReembeddableStore) -> int | None:
    ids = await store.stored_ids()
    if not ids:
        return None
    _, _, vectors = await store.vectors_for([min(ids)])
    return int(vectors.shape[1]) if len(vectors) else None


@dataclass
class Maintenance:
    """The background sweeper: expiry, the size bound, index rebuilds and snapshots."""

    accesses: PendingAccesses
    store: SweptStore
    index: ScopedVectorIndex
    snapshot_dir: Path
    max_entries: int
    sweep_interval_s: float
    snapshot_interval_s: float
    embedding_model: str
    # What the snapshot must remember besides the index (the shared store's feed offset).
    snapshot_metadata: Callable[[], dict[str, Any]] = dict
    # The error budgets' evidence is shared through the store on every pass.
    budgets: ErrorBudgets | None = None
    evidence_store: EvidenceStore | None = None
    # The /v1/embeddings cache's vectors: expired and bounded like answers.
    embedding_store: EmbeddingStore | None = None
    max_embedding_entries: int = 1_000_000
    clock: Callable[[], float] = time.time
    expired: int = 0
    evicted: int = 0
    expired_embeddings: int = 0
    evicted_embeddings: int = 0
    last_snapshot: float = 0.0

    async def run_forever(self) -> None:
        self.last_snapshot = time.monotonic()
        while True:
            await asyncio.sleep(self.sweep_interval_s)
            try:
                await self.sweep()
                if time.monotonic() - self.last_snapshot >= self.snapshot_interval_s:
                    await self.snapshot()
            except StoreUnavailable as exc:
                log.warning("maintenance pass skipped: %s", exc.message)
            except Exception:  # keep sweeping: one failed pass must not stop expiry for good
                log.exception("maintenance pass failed")

    async def sweep(self) -> None:
        touches = self.accesses.take()
        try:
            await self.store.touch(touches)
        except Exception:  # keep the recency for the next pass (a full disk, Redis away)
            self.accesses.give_back(touches)
            raise
        if self.budgets is not None and self.evidence_store is not None:
            await share_evidence(self.budgets, self.evidence_store)
        expired = await self.store.delete_expired(self.clock())
        evicted = await self.store.evict_fairly(self.max_entries)
        if expired or evicted:
            await asyncio.to_thread(self.index.remove, [r.id for r in expired + evicted])
        self.expired += len(expired)
        self.evicted += len(evicted)
        if self.embedding_store is not None:
            self.expired_embeddings += await self.embedding_store.delete_expired_embeddings(self.clock())
            self.evicted_embeddings += await self.embedding_store.evict_embeddings(self.max_embedding_entries)
        for scope in self.index.scopes_needing_rebuild():
            log.info("rebuilding the index of one scope in the background")
            await asyncio.to_thread(self.index.rebuild, scope)

    async def snapshot(self) -> None:
        metadata = self.snapshot_metadata()  # read before the index: replaying from it is idempotent
        saved = await asyncio.to_thread(
            self.index.save, self.snapshot_dir, embedding_model=self.embedding_model, metadata=metadata
        )
        self.last_snapshot = time.monotonic()
        log.info("index snapshot saved", extra={"entries": saved})
