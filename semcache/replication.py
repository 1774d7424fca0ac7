"""One replica of a cache shared through Redis: keeping this process in step with the others.

Every replica holds its own FAISS index in memory, derived from the entries in Redis. It follows
the store's change feed (a Redis Stream) and applies each event: new entries are indexed from
their stored vectors, deleted and expired ones are dropped, and negative feedback, namespace
settings and templates changed on another replica are picked up.

The feed offset is saved with each index snapshot, so a restart loads the snapshot and replays
only the events after it. Replaying is idempotent: an event already reflected in the index
changes nothing. A replica that finds the feed trimmed past its offset, or the cache itself gone
(Redis restarted empty), reconciles its index with the stored ids instead; neither re-embeds.

While Redis is unreachable the pipeline answers as a plain proxy (outcome ``bypass``); this
follower keeps probing, and when Redis answers again it catches up before following again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .decision.quality import NamespacePolicies
from .embedders import BatchingEmbedder
from .errors import StoreUnavailable
from .feedback import WrongAnswers
from .index import ScopedVectorIndex
from .maintenance import load_snapshot, reconcile_index
from .stats import Stats
from .stores.redis import FeedEvent, RedisStore
from .tiers import TemplateTier, parse_templates
from .tiers.template import LiveTemplates

log = logging.getLogger("semcache.replication")

_FEED_BATCH = 1000
_PROBE_INTERVAL_S = 0.5
_SHARE_STATS_EVERY_S = 0.5


@dataclass
class Replica:
    store: RedisStore
    index: ScopedVectorIndex
    embedder: BatchingEmbedder
    stats: Stats
    snapshot_dir: Path
    template_threshold: float
    # What the shared settings feed; None (a benchmark's bare replica): events only touch the index.
    policies: NamespacePolicies | None = None
    wrong_answers: WrongAnswers | None = None
    templates: LiveTemplates | None = None
    block_ms: int = 1000
    offset: str = "0-0"  # the last feed event applied
    cache_id: str | None = None
    connected: bool = False
    resyncs: int = 0
    events_applied: int = 0
    last_sync: dict[str, Any] = field(default_factory=dict)
    _snapshot_tried: bool = False
    _last_shared: float = 0.0

    @property
    def model(self) -> str:
        return self.embedder.embedder.name

    # -- joining, and rejoining after an outage ------------------------------------------------

    async def join(self) -> bool:
        """Catch up with the shared cache; False (and a plain proxy meanwhile) if Redis is down."""
        try:
            await self._sync()
        except StoreUnavailable as exc:
            self.connected = False
            log.warning("Redis is unreachable (%s); serving as a plain proxy until it is back", exc.message)
            return False
        return True

    async def _sync(self) -> None:
        started = time.monotonic()
        cache_id = await self.store.open_cache(self.model, self.embedder.embedder.dimension)
        report: dict[str, Any] = {"snapshot_loaded": False, "replayed": 0, "reconciled": False}
        if not self._snapshot_tried:
            self._snapshot_tried = True
            metadata = await load_snapshot(self.index, self.snapshot_dir, self.model)
            if metadata is not None and metadata.get("cache_id") == cache_id and metadata["complete"]:
                report["snapshot_loaded"] = True
                self.cache_id, self.offset = cache_id, str(metadata.get("feed_offset") or "0-0")
            else:
                await asyncio.to_thread(self.index.remove, list(self.index.ids()))
        if cache_id != self.cache_id or await self.store.feed_has_gap_after(self.offset):
            report.update(await self._reconcile(cache_id))
        report["replayed"] = await self.catch_up()
        await self.reload_settings()
        self.connected = True
        report["seconds"] = round(time.monotonic() - started, 3)
        self.last_sync = report
        log.info("replica in step with the shared cache", extra=report)  # fields, not a dict in the message

    async def _reconcile(self, cache_id: str) -> dict[str, Any]:
        """Rebuild what the feed can no longer tell: compare the index with the stored ids."""
        if cache_id != self.cache_id and self.cache_id is not None:
            log.warning("the shared cache was replaced (Redis lost its data?); dropping this replica's index")
            await asyncio.to_thread(self.index.remove, list(self.index.ids()))
        position = await self.store.feed_position()  # events from here on are replayed after
        report = await reconcile_index(self.store, self.index)
        self.cache_id, self.offset = cache_id, position
        self.resyncs += 1
        return {"reconciled": True, **report}

    async def catch_up(self) -> int:
        """Apply every event after the offset, without waiting for new ones."""
        applied = 0
        while events := await self.store.read_feed(self.offset, count=_FEED_BATCH):
            await self.apply(events)
            applied += len(events)
        return applied

    async def reload_settings(self) -> None:
        """Negative feedback, namespace settings and templates, as the shared store has them."""
        if self.wrong_answers is not None:
            self.wrong_answers.load(await self.store.negative_feedback())
        if self.policies is not None:
            for namespace, config in (await self.store.namespace_configs()).items():
                self.policies.set(namespace, config)
        await self.reload_templates()

    async def reload_templates(self) -> None:
        if self.templates is None:
            return
        items = await self.store.templates()
        if items is None:
            return
        tier = TemplateTier(parse_templates(items, "the shared templates"), self.template_threshold)
        if tier.phrasings:
            await tier.embed_phrasings(self.embedder)
        self.templates.swap(tier)

    # -- following -----------------------------------------------------------------------------

    async def run_forever(self) -> None:
        while True:
            try:
                if not self.connected:
                    await self._reconnect()
                    continue
                await self.share_stats()
                events = await self.store.read_feed(self.offset, block_ms=self.block_ms, count=_FEED_BATCH)
                if len(events) == _FEED_BATCH and await self.store.feed_has_gap_after(self.offset):
                    await self._sync()  # fell behind the trimmed feed
                    continue
                await self.apply(events)
            except StoreUnavailable as exc:
                if self.connected:
                    log.warning("lost Redis (%s); serving as a plain proxy until it is back", exc.message)
                self.connected = False
            except asyncio.CancelledError:
                raise
            except Exception:  # one bad event must not stop the replica from following
                log.exception("following the change feed failed; retrying")
                await asyncio.sleep(1.0)

    async def _reconnect(self) -> None:
        await asyncio.sleep(_PROBE_INTERVAL_S)
        if await self.store.ping() and await self.join():
            log.info("Redis is back; this replica caught up")

    async def apply(self, events: list[FeedEvent]) -> None:
        """Apply events in feed order; entries are indexed from their stored vectors."""
        new_ids = [e.entry_id for e in events if e.op == "put" and e.entry_id is not None]
        new_ids = [entry_id for entry_id in new_ids if entry_id not in self.index]
        ids, scopes, vectors = await self.store.vectors_for(new_ids) if new_ids else ([], [], None)
        fetched = {entry_id: row for row, entry_id in enumerate(ids)}
        for event in events:
            if event.op == "put" and event.entry_id is not None:
                stale = [event.replaced] if event.replaced is not None else []
                row = fetched.get(event.entry_id)
                if row is not None and vectors is not None:
                    await asyncio.to_thread(self._index, scopes[row], event.entry_id, vectors[row], stale)
                elif stale:
                    await asyncio.to_thread(self.index.remove, stale)
            elif event.op == "del":
                await asyncio.to_thread(self.index.remove, list(event.ids))
            elif event.origin != self.store.origin:
                await self._apply_setting(event)
            self.offset = event.offset
            self.events_applied += 1

    def _index(self, scope: str, entry_id: int, vector: Any, stale: list[int]) -> None:
        if stale:
            self.index.remove(stale)
        if entry_id not in self.index:
            self.index.add(scope, np.array([entry_id]), vector.reshape(1, -1))

    async def _apply_setting(self, event: FeedEvent) -> None:
        if event.op == "neg" and event.feedback is not None:
            if self.wrong_answers is not None:
                self.wrong_answers.add(event.feedback)
        elif event.op == "cfg" and event.namespace is not None:
            if self.policies is not None:
                self.policies.set(event.namespace, await self.store.namespace_config(event.namespace))
        elif event.op == "templates":
            await self.reload_templates()

    # -- figures of every replica together -------------------------------------------------------

    async def share_stats(self, *, now: bool = False) -> None:
        """Add this replica's new counts to the shared ones (at most every half second)."""
        if not now and time.monotonic() - self._last_shared < _SHARE_STATS_EVERY_S:
            return
        counts = self.stats.take_unshared()
        try:
            await self.store.add_counts(counts)
        except StoreUnavailable:
            self.stats.give_back_unshared(counts)
            raise
        self._last_shared = time.monotonic()

    async def cluster_stats(self) -> dict[str, Any] | None:
        """``/stats`` figures of every replica together, or None while Redis is unreachable."""
        try:
            await self.share_stats(now=True)
            return self.stats.snapshot(await self.store.counts())
        except StoreUnavailable:
            return None

    def snapshot_metadata(self) -> dict[str, Any]:
        return {"cache_id": self.cache_id, "feed_offset": self.offset}

    def status(self) -> dict[str, Any]:
        return {
            "store": "redis",
            "connected": self.connected,
            "feed_offset": self.offset,
            "events_applied": self.events_applied,
            "resyncs": self.resyncs,
            "last_sync": self.last_sync,
        }
