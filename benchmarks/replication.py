"""Scale-out on Redis: cold start, memory per entry, hit latency and replication lag.

    python -m benchmarks.replication [--sizes 100000 1000000] [--requests 100] [--rounds 3]
        [--lag-entries 200] [--plot replication.png] [--json-out replication.json]

Everything runs on loopback against real ``redis-server`` processes on free ports (never the
machine's 6379), with the production classes: ``RedisStore``, ``Replica``, ``ScopedVectorIndex``.

1. Cold start, at each size N: N synthetic entries (an ~80-character prompt, a ~400-character
   answer, a 384-d unit vector drawn in clusters, the default 7-day TTL, all in one scope, so one
   HNSW partition) are bulk-loaded into a fresh Redis through the store's own Lua put script,
   pipelined. Then, each in a fresh process so that memory and timings start clean:
   * rebuild: a replica with an empty data folder joins (it reconciles from the stored vectors:
     the index comes up flat), then the scope is rebuilt as HNSW, as the sweeper would;
   * snapshot: that index is saved with the replica's snapshot metadata (cache id, feed offset),
     ``--catch-up-entries`` more entries are written, and a new replica starts from the snapshot
     and replays the feed after it.
2. Memory per entry: Redis ``used_memory`` growth over the bulk load / N (and without the change
   feed, which is trimmed at ``feed_max_len`` events), the replica's RSS growth over its join / N,
   and the snapshot's size on disk / N.
3. Hit latency: ``semcache serve`` with the embedded store and with ``--store redis`` (its own
   redis-server, append-only with fsync on every write, as for losing no acknowledged entry), side
   by side against the stand-in upstream; exact and semantic hits over HTTP, requests interleaved.
4. Replication lag: replica B follows the feed in a thread of its own; replica A writes entries
   one at a time; the time from A's write being acknowledged to the entry being in B's index.

Prints JSON; ``--json-out`` also writes it (after each part, so a long run keeps what it has).
At 1,000,000 entries a joining replica's read of every stored id takes several seconds, past the
default ``--redis-timeout-s`` of 1 s: run that size with ``--redis-timeout-s 30``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import json
import multiprocessing
import os
import queue
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import redis
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from semcache.embedders import BatchingEmbedder
from semcache.entries import CacheEntry
from semcache.index import ScopedVectorIndex
from semcache.replication import Replica
from semcache.stats import Stats
from semcache.stores.redis import RedisStore
from testkit.fakes import HashingEmbedder
from testkit.plots import pyplot
from testkit.redis_server import RedisServer
from testkit.servers import SemcacheProcess, standin_process

from .index_search import DIMENSION, synthetic
from .latency import PARAPHRASES, QUESTIONS, SUBJECTS, percentiles, timed_post

PREFIX = "bench"
# Nothing is embedded while a replica restores: the hashing embedder only names the model, and
# that name must match the one recorded in the cache's meta hash.
MODEL_NAME = HashingEmbedder(dimension=DIMENSION).name
TTL_S = 7 * 24 * 3600  # the default ttl_s
LOAD_BATCH = 1000  # put scripts per pipeline
GENERATE_BATCH = 10_000  # entries generated at once (vectors drawn per batch)
PART_NAMES = ("cold_start", "hit_latency", "replication_lag")


# -- synthetic entries ---------------------------------------------------------------------------

_VERBS = ["configure", "debug", "speed up", "migrate", "secure", "test", "deploy", "monitor", "document", "refactor"]
_THINGS = ["the billing service", "a Postgres replica", "our React front end", "the nightly export job",
           "a Kafka consumer", "the login flow", "an S3 bucket policy", "the search API", "a cron task",
           "the mobile push gateway"]  # fmt: skip
_CONTEXTS = ["on Kubernetes", "behind a load balancer", "in a monorepo", "with Terraform", "on a tight budget",
             "without downtime", "for a small team", "under heavy load"]  # fmt: skip
_WORDS = (
    "the a to of and in that is for it with as on be this are by or from at an you can which your will "
    "service request cache value config server client data first then when should need step check make "
    "sure using run set update before after each default file change version error test log user"
).split()


def _answers(rng: np.random.Generator, count: int = 256, length: int = 400) -> list[str]:
    """A pool of ~400-character answers; entries cycle through it (Redis does not deduplicate)."""
    pool = []
    for _ in range(count):
        words: list[str] = []
        while sum(len(w) + 1 for w in words) < length:
            words.append(str(rng.choice(_WORDS)))
        pool.append(" ".join(words)[:length].capitalize())
    return pool


def entry_batches(first: int, count: int, seed: int, now: float) -> Iterator[list[CacheEntry]]:
    """Entries ``first`` .. ``first + count - 1`` of one scope, in batches of ``GENERATE_BATCH``."""
    rng = np.random.default_rng(seed)
    answers = _answers(rng)
    scope = hashlib.sha256(b"bench scope: namespace default, model gpt-4o-mini, no history").hexdigest()
    for start in range(first, first + count, GENERATE_BATCH):
        size = min(GENERATE_BATCH, first + count - start)
        vectors = synthetic(size, rng)
        batch = []
        for row in range(size):
            n = start + row
            verb, thing, context = _VERBS[n % 10], _THINGS[n // 10 % 10], _CONTEXTS[n // 100 % 8]
            prompt = f"How do I {verb} {thing} {context}, step by step? (ticket {n})"
            batch.append(
                CacheEntry(
                    namespace="default",
                    scope=scope,
                    exact_key=hashlib.sha256(f"{scope}|{prompt.lower()}".encode()).hexdigest(),
                    model="gpt-4o-mini",
                    prompt=prompt,
                    answer=answers[n % len(answers)],
                    created_at=now,
                    expires_at=now + TTL_S,
                    vector=vectors[row],
                    last_access=now,
                )
            )
        yield batch


async def bulk_put(store: RedisStore, entries: list[CacheEntry]) -> None:
    """Write entries through the store's own pipelined put (same keys, same feed events as
    ``RedisStore.put``), ``LOAD_BATCH`` entries per round trip."""
    for start in range(0, len(entries), LOAD_BATCH):
        await store.put_many(entries[start : start + LOAD_BATCH])


async def load_entries(
    url: str, first: int, count: int, *, seed: int, advance: Callable[[int], None] = lambda n: None
) -> float:
    """Bulk-load ``count`` entries into the cache at ``url`` (creating it); returns seconds."""
    store = RedisStore(url, prefix=PREFIX, timeout_s=30)
    try:
        await store.open_cache(MODEL_NAME, DIMENSION)
        started = time.perf_counter()
        for batch in entry_batches(first, count, seed, time.time()):
            await bulk_put(store, batch)
            advance(len(batch))
        return time.perf_counter() - started
    finally:
        await store.close()


# -- memory ----------------------------------------------------------------------------------------


def rss_bytes() -> int:
    """This process's resident set size now (Linux), else its peak so far."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return peak_rss_bytes()


def peak_rss_bytes() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def redis_memory(client: redis.Redis) -> dict[str, int]:
    info = client.info("memory")
    return {"used_memory": int(info["used_memory"]), "used_memory_rss": int(info["used_memory_rss"])}


# -- cold start: each method in a fresh process ------------------------------------------------------


def _cold_start_worker(
    method: str, redis_url: str, data_dir: str, hnsw_min_entries: int, timeout_s: float, messages: Any
) -> None:
    """Entry point of the worker process: runs one cold start and sends back its figures."""
    try:
        result = asyncio.run(_cold_start(method, redis_url, Path(data_dir), hnsw_min_entries, timeout_s, messages))
        messages.put(("result", result))
    except BaseException:
        messages.put(("error", traceback.format_exc()))


async def _cold_start(
    method: str, redis_url: str, data_dir: Path, hnsw_min_entries: int, timeout_s: float, messages: Any
) -> dict[str, Any]:
    store = RedisStore(redis_url, prefix=PREFIX, timeout_s=timeout_s)
    batcher = BatchingEmbedder(HashingEmbedder(dimension=DIMENSION))
    index = _LoadTimedIndex(DIMENSION, hnsw_min_entries=hnsw_min_entries)
    snapshot_dir = data_dir / "faiss"
    replica = Replica(store, index, batcher, Stats(), snapshot_dir, template_threshold=0.95)
    total = await store.count()
    phase = ["join"]
    stop = threading.Event()

    def report_progress() -> None:  # what the parent's progress bar shows
        while not stop.wait(0.5):
            stats = index.stats()
            if stats.rebuild_progress:
                run = stats.rebuild_progress[0]
                messages.put(("progress", f"{method}: HNSW rebuild", run.done, run.total))
            else:
                messages.put(("progress", f"{method}: {phase[0]}", stats.entries, total))

    reporter = threading.Thread(target=report_progress, daemon=True)
    gc.collect()
    rss_before = rss_bytes()
    reporter.start()
    result: dict[str, Any] = {"stored_entries": total}
    try:
        started = time.perf_counter()
        if not await replica.join():
            raise RuntimeError(
                f"the replica could not join: a Redis call failed or took longer than {timeout_s} s "
                "(see the warning above); large caches may need a larger --redis-timeout-s"
            )
        result["join_s"] = time.perf_counter() - started
        result["last_sync"] = replica.last_sync
        result["kind_after_join"] = _kinds(index)
        if method == "rebuild":
            (scope,) = index.scopes_needing_rebuild() or [""]
            phase[0] = "HNSW rebuild"
            started = time.perf_counter()
            if not await asyncio.to_thread(index.rebuild, scope):
                raise RuntimeError("nothing to rebuild: the scope did not outgrow the flat index")
            result["hnsw_rebuild_s"] = time.perf_counter() - started
            result["total_s"] = result["join_s"] + result["hnsw_rebuild_s"]
            result["kind_after_rebuild"] = _kinds(index)
            phase[0] = "snapshot save"
            started = time.perf_counter()
            # What Maintenance.snapshot does: the metadata first, then the index.
            metadata = replica.snapshot_metadata()
            result["snapshot_entries"] = index.save(snapshot_dir, embedding_model=replica.model, metadata=metadata)
            result["snapshot_save_s"] = time.perf_counter() - started
            result["snapshot_metadata"] = metadata
            result["snapshot_bytes"] = (snapshot_dir / "snapshot.npz").stat().st_size
        else:
            result["ready_s"] = result["join_s"]
            result["snapshot_load_s"] = index.load_s
            result["replayed_events"] = replica.last_sync.get("replayed", 0)
            if not replica.last_sync.get("snapshot_loaded") or replica.last_sync.get("reconciled"):
                raise RuntimeError(f"the replica did not start from its snapshot: {replica.last_sync}")
    finally:
        stop.set()
        reporter.join()
        await store.close()
        await batcher.close()
    result["index_entries"] = len(index)
    gc.collect()
    result["rss_growth_bytes"] = rss_bytes() - rss_before
    result["rss_peak_bytes"] = peak_rss_bytes()
    return result


class _LoadTimedIndex(ScopedVectorIndex):
    """The production index, timing its snapshot load (the rest of a join is the feed catch-up)."""

    load_s = 0.0

    def load(self, folder: Path, *, embedding_model: str) -> dict[str, Any] | None:
        started = time.perf_counter()
        try:
            return super().load(folder, embedding_model=embedding_model)
        finally:
            self.load_s = time.perf_counter() - started


def _kinds(index: ScopedVectorIndex) -> str:
    stats = index.stats()
    return "hnsw" if stats.hnsw_partitions == stats.partitions and stats.partitions else "flat"


def _run_worker(
    method: str, redis_url: str, data_dir: Path, hnsw_min_entries: int, timeout_s: float, progress: Progress
) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    messages = context.Queue()
    process = context.Process(
        target=_cold_start_worker,
        args=(method, redis_url, str(data_dir), hnsw_min_entries, timeout_s, messages),
        name=f"cold-start-{method}",
    )
    task = progress.add_task(f"{method}: starting", total=None)
    process.start()
    try:
        while True:
            try:
                message = messages.get(timeout=1.0)
            except queue.Empty:
                if not process.is_alive():
                    raise RuntimeError(f"the {method} worker died (exit code {process.exitcode})") from None
                continue
            if message[0] == "progress":
                _, description, done, total = message
                progress.update(task, description=description, completed=done, total=total or None)
            elif message[0] == "error":
                raise RuntimeError(f"the {method} worker failed:\n{message[1]}")
            else:
                return dict(message[1])
    finally:
        progress.remove_task(task)
        process.join(30)
        if process.is_alive():
            process.kill()
            process.join()
        process.close()
        messages.close()
        messages.join_thread()


def cold_start(
    size: int, catch_up_entries: int, workdir: Path, progress: Progress, *, seed: int = 7, timeout_s: float = 1.0
) -> dict[str, Any]:
    """Both cold starts at ``size`` entries, with Redis and replica memory per entry."""
    hnsw_min_entries = min(10_000, max(size // 2, 1))  # the default, or half of a small (quick) run
    result: dict[str, Any] = {"entries": size, "hnsw_min_entries": hnsw_min_entries}
    sample = next(entry_batches(0, min(size, 1000), seed, time.time()))
    result["entry_shape"] = {
        "prompt_chars_mean": round(statistics.fmean(len(e.prompt) for e in sample), 1),
        "answer_chars_mean": round(statistics.fmean(len(e.answer) for e in sample), 1),
        "vector_bytes": DIMENSION * 4,
        "ttl_s": TTL_S,
        "scopes": 1,
    }
    # No append-only file here: durability does not change what the entries take in memory, and
    # this keeps gigabytes off the disk. The latency and lag parts run with it on.
    with RedisServer(workdir / "redis", appendonly=False) as server, server.client() as client:
        asyncio.run(_open_empty_cache(server.url))
        before = redis_memory(client)
        task = progress.add_task(f"bulk-loading {size:,} entries into Redis", total=size)
        seconds = asyncio.run(load_entries(server.url, 0, size, seed=seed, advance=lambda n: progress.advance(task, n)))
        progress.remove_task(task)
        progress.console.log(f"bulk-loaded {size:,} entries in {seconds:.1f} s ({size / seconds:,.0f}/s)")
        after = redis_memory(client)
        feed_bytes = int(client.memory_usage(f"{{{PREFIX}}}:feed", samples=0) or 0)
        feed_length = int(client.xlen(f"{{{PREFIX}}}:feed"))
        sample_ids = np.random.default_rng(seed).integers(1, size + 1, min(size, 200))
        entry_hash_bytes = statistics.fmean(
            int(client.memory_usage(f"{{{PREFIX}}}:entry:{i}", samples=0) or 0) for i in sample_ids
        )
        grown = after["used_memory"] - before["used_memory"]
        result["bulk_load"] = {"seconds": round(seconds, 2), "entries_per_s": round(size / seconds)}
        result["redis_memory"] = {
            "used_memory_growth_bytes": grown,
            "bytes_per_entry": round(grown / size, 1),
            "rss_bytes_per_entry": round((after["used_memory_rss"] - before["used_memory_rss"]) / size, 1),
            "feed_events_kept": feed_length,
            "feed_bytes": feed_bytes,
            "bytes_per_entry_without_feed": round((grown - feed_bytes) / size, 1),
            "entry_hash_bytes_mean": round(entry_hash_bytes, 1),
        }
        progress.console.log(f"Redis: {grown / size:,.0f} bytes per entry ({feed_length:,} feed events kept)")

        data_dir = workdir / "replica"
        rebuild = _run_worker("rebuild", server.url, data_dir, hnsw_min_entries, timeout_s, progress)
        progress.console.log(
            f"rebuild: join {rebuild['join_s']:.1f} s + HNSW {rebuild['hnsw_rebuild_s']:.1f} s "
            f"= {rebuild['total_s']:.1f} s"
        )

        task = progress.add_task(f"writing {catch_up_entries:,} entries after the snapshot", total=catch_up_entries)
        asyncio.run(
            load_entries(server.url, size, catch_up_entries, seed=seed + 1, advance=lambda n: progress.advance(task, n))
        )
        progress.remove_task(task)

        snapshot = _run_worker("snapshot", server.url, data_dir, hnsw_min_entries, timeout_s, progress)
        progress.console.log(
            f"snapshot: ready in {snapshot['ready_s']:.2f} s, {snapshot['replayed_events']} events replayed"
        )

    result["rebuild"] = {
        "join_s": round(rebuild["join_s"], 3),
        "hnsw_rebuild_s": round(rebuild["hnsw_rebuild_s"], 3),
        "total_s": round(rebuild["total_s"], 3),
        "index_after_join": rebuild["kind_after_join"],
        "index_after_rebuild": rebuild["kind_after_rebuild"],
        "entries_indexed": rebuild["index_entries"],
        "last_sync": rebuild["last_sync"],
    }
    result["snapshot"] = {
        "ready_s": round(snapshot["ready_s"], 3),
        "of_which_snapshot_load_s": round(snapshot["snapshot_load_s"], 3),
        "replayed_events": snapshot["replayed_events"],
        "index_after_load": snapshot["kind_after_join"],
        "entries_indexed": snapshot["index_entries"],
        "save_s": round(rebuild["snapshot_save_s"], 3),
        "last_sync": snapshot["last_sync"],
    }
    result["rebuild_over_snapshot"] = round(rebuild["total_s"] / snapshot["ready_s"], 1)
    result["replica_memory"] = {
        "rss_bytes_per_entry_snapshot_start": round(snapshot["rss_growth_bytes"] / snapshot["index_entries"], 1),
        "rss_bytes_per_entry_rebuild_start": round(rebuild["rss_growth_bytes"] / rebuild["index_entries"], 1),
        "peak_rss_bytes_rebuild_start": rebuild["rss_peak_bytes"],
        "peak_rss_bytes_snapshot_start": snapshot["rss_peak_bytes"],
        "snapshot_file_bytes": rebuild["snapshot_bytes"],
        "snapshot_bytes_per_entry": round(rebuild["snapshot_bytes"] / rebuild["snapshot_entries"], 1),
    }
    return result


async def _open_empty_cache(url: str) -> None:
    store = RedisStore(url, prefix=PREFIX)
    try:
        await store.open_cache(MODEL_NAME, DIMENSION)
    finally:
        await store.close()


# -- hit latency: embedded vs Redis, side by side -----------------------------------------------------


def hit_latency(requests: int, rounds: int, progress: Progress) -> dict[str, Any]:
    """p50/p99 of exact and semantic hits over HTTP, embedded store vs Redis store, interleaved."""
    prompts = [q.format(s) for s in SUBJECTS for q in QUESTIONS][:requests]
    paraphrases = [p.format(s) for s in SUBJECTS for p in PARAPHRASES][:requests]
    names = ("embedded", "redis")
    samples: dict[str, dict[str, list[float]]] = {n: {"exact_hit": [], "semantic_hit": []} for n in names}
    outcomes: dict[str, int] = {}
    with (
        tempfile.TemporaryDirectory(prefix="semcache-bench-") as folder,
        standin_process() as upstream_url,
        RedisServer(Path(folder) / "redis") as redis_server,
        httpx.Client(timeout=60) as client,
    ):
        base = Path(folder)
        task = progress.add_task("starting semcache (embedded and redis)", total=None)
        services = {
            "embedded": SemcacheProcess(
                data_dir=base / "embedded", upstream_url=upstream_url, log_path=base / "embedded.log"
            ),
            "redis": SemcacheProcess(
                "--store", "redis", "--redis-url", redis_server.url,
                data_dir=base / "redis-replica", upstream_url=upstream_url, log_path=base / "redis.log",
            ),
        }  # fmt: skip
        try:
            for service in services.values():
                service.start()
            progress.remove_task(task)
            urls = {name: f"{service.url}/v1/chat/completions" for name, service in services.items()}
            task = progress.add_task("warming both caches", total=len(prompts) * 2)
            for prompt in prompts:
                for name in names:
                    timed_post(client, urls[name], prompt)
                    progress.advance(task)
            progress.remove_task(task)
            time.sleep(0.5)  # let the last writes settle
            task = progress.add_task("measuring hits", total=rounds * len(prompts) * 4)
            for round_number in range(rounds):
                for phase, batch in (("exact_hit", prompts), ("semantic_hit", paraphrases)):
                    for number, prompt in enumerate(batch):
                        # Alternate which service goes first, so neither always meets a warmer machine.
                        order = names if (number + round_number) % 2 == 0 else names[::-1]
                        for name in order:
                            elapsed, response = timed_post(client, urls[name], prompt)
                            outcome = response.headers.get("x-semcache-tier") or response.headers.get(
                                "x-semcache", "error"
                            )
                            outcomes[f"{name}:{phase}:{outcome}"] = outcomes.get(f"{name}:{phase}:{outcome}", 0) + 1
                            if outcome == {"exact_hit": "exact", "semantic_hit": "semantic"}[phase]:
                                samples[name][phase].append(elapsed)
                            progress.advance(task)
            progress.remove_task(task)
            store_kind = client.get(f"{services['redis'].url}/stats").json().get("replica", {}).get("store")
        finally:
            for service in services.values():
                service.stop()
    result: dict[str, Any] = {
        name: {phase: percentiles(values) for phase, values in samples[name].items()} for name in names
    }
    ratios: dict[str, float] = {}
    for phase in ("exact_hit", "semantic_hit"):
        for stat in ("p50_ms", "p99_ms"):
            embedded, shared = result["embedded"][phase].get(stat), result["redis"][phase].get(stat)
            if embedded and shared:
                ratios[f"{phase}_{stat.removesuffix('_ms')}"] = round(shared / embedded, 3)
    result["redis_over_embedded"] = ratios
    result["outcomes"] = outcomes
    result["redis_replica_reported_store"] = store_kind
    result["_samples"] = samples
    return result


# -- replication lag ---------------------------------------------------------------------------------


class _TimedIndex(ScopedVectorIndex):
    """The production index, noting when each entry became searchable (its ``add`` returned)."""

    def __init__(self) -> None:
        super().__init__(DIMENSION)
        self.added_at: dict[int, float] = {}

    def add(self, scope: str, ids: np.ndarray, vectors: np.ndarray) -> None:
        super().add(scope, ids, vectors)
        now = time.perf_counter()
        for entry_id in np.asarray(ids).reshape(-1):
            self.added_at[int(entry_id)] = now


def _replica(redis_url: str, index: ScopedVectorIndex, data_dir: Path) -> Replica:
    store = RedisStore(redis_url, prefix=PREFIX)
    batcher = BatchingEmbedder(HashingEmbedder(dimension=DIMENSION))
    return Replica(store, index, batcher, Stats(), data_dir / "faiss", template_threshold=0.95)


async def _close(replica: Replica) -> None:
    await replica.store.close()
    await replica.embedder.close()


class _Follower:
    """Replica B: joins, then follows the feed in a thread with its own event loop."""

    def __init__(self, redis_url: str, data_dir: Path) -> None:
        self.index = _TimedIndex()
        self._redis_url, self._data_dir = redis_url, data_dir
        self._ready, self._stop = threading.Event(), threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="replica-b", daemon=True)

    def start(self) -> _Follower:
        self._thread.start()
        if not self._ready.wait(30) or self.error is not None:
            raise RuntimeError(f"replica B did not join: {self.error!r}")
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        try:
            asyncio.run(self._follow())
        except BaseException as exc:
            self.error = exc
            self._ready.set()

    async def _follow(self) -> None:
        replica = _replica(self._redis_url, self.index, self._data_dir)
        try:
            if not await replica.join():
                raise RuntimeError("Redis is unreachable")
            follower = asyncio.create_task(replica.run_forever())
            self._ready.set()
            await asyncio.to_thread(self._stop.wait)
            follower.cancel()
            await asyncio.gather(follower, return_exceptions=True)
        finally:
            await _close(replica)


def replication_lag(entries: int, progress: Progress, *, seed: int = 11, poll_s: float = 0.001) -> dict[str, Any]:
    """Acknowledged by replica A -> searchable in replica B's index, one entry at a time.

    ``observed``: B's index polled every ``poll_s`` from A's side, as a client would notice it (so
    quantised to the poll interval). ``indexed``: the moment B's ``index.add`` returned, noted by
    B itself (same clock, same process); it can be slightly negative when B indexes the entry
    before A has read Redis's reply.
    """
    with tempfile.TemporaryDirectory(prefix="semcache-bench-") as folder, RedisServer(Path(folder) / "redis") as server:
        follower = _Follower(server.url, Path(folder) / "b").start()
        try:
            acknowledged, observed, missed = asyncio.run(
                _write_and_watch(server.url, Path(folder) / "a", follower, entries, seed, poll_s, progress)
            )
        finally:
            follower.stop()
        if follower.error is not None:
            raise RuntimeError("replica B stopped following") from follower.error
    indexed = [
        (follower.index.added_at[entry_id] - at) * 1000
        for entry_id, at in acknowledged.items()
        if entry_id in follower.index.added_at
    ]
    result: dict[str, Any] = {"entries": entries, "missed": missed, "poll_interval_ms": poll_s * 1000}
    for name, lags in (("observed", observed), ("indexed", indexed)):
        result[name] = {**percentiles(lags), "max_ms": round(max(lags), 3) if lags else None}
    result["_samples"] = {"observed": observed, "indexed": indexed}
    return result


async def _write_and_watch(
    url: str, data_dir: Path, follower: _Follower, count: int, seed: int, poll_s: float, progress: Progress
) -> tuple[dict[int, float], list[float], int]:
    """Replica A writes entries as its pipeline does (store, then its own index) and watches B."""
    writer = _replica(url, ScopedVectorIndex(DIMENSION), data_dir)
    rng = np.random.default_rng(seed)
    acknowledged: dict[int, float] = {}
    observed: list[float] = []
    missed = 0
    task = progress.add_task("replication lag", total=count)
    try:
        if not await writer.join():
            raise RuntimeError("replica A could not reach Redis")
        for batch in entry_batches(0, count, seed, time.time()):
            for entry in batch:
                entry_id, _ = await writer.store.put(entry)
                at = acknowledged[entry_id] = time.perf_counter()
                writer.index.add(entry.scope, np.array([entry_id]), np.asarray(entry.vector).reshape(1, -1))
                while entry_id not in follower.index:
                    if time.perf_counter() - at > 5.0:
                        missed += 1
                        break
                    await asyncio.sleep(poll_s)
                else:
                    observed.append((time.perf_counter() - at) * 1000)
                progress.advance(task)
                await asyncio.sleep(float(rng.uniform(0.0, 0.01)))  # independent writes, not a burst
    finally:
        progress.remove_task(task)
        await _close(writer)
    return acknowledged, observed, missed


# -- the whole run ---------------------------------------------------------------------------------


def run(
    sizes: Sequence[int] = (100_000,),
    *,
    requests: int = 100,
    rounds: int = 3,
    lag_entries: int = 200,
    catch_up_entries: int = 1000,
    parts: Sequence[str] = PART_NAMES,
    json_out: Path | None = None,
    redis_timeout_s: float = 1.0,
) -> dict[str, Any]:
    """Run the chosen parts; quick mode is e.g. ``run([2000], requests=6, rounds=1, lag_entries=10)``.
    Raw samples come back under ``_samples`` keys (left out of the JSON)."""
    result: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "redis_server": _redis_version(), "python": sys.version.split()[0]},
        "settings": {"requests": requests, "rounds": rounds, "lag_entries": lag_entries,
                     "catch_up_entries": catch_up_entries, "redis_timeout_s": redis_timeout_s},
    }  # fmt: skip
    _note_load(result, "start")
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TimeRemainingColumn())  # fmt: skip
    # On stderr, so that stdout carries only the JSON.
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        if "hit_latency" in parts:
            result["hit_latency"] = hit_latency(requests, rounds, progress)
            _note_load(result, "hit_latency")
            _save(result, json_out)
        if "replication_lag" in parts:
            result["replication_lag"] = replication_lag(lag_entries, progress)
            _note_load(result, "replication_lag")
            _save(result, json_out)
        if "cold_start" in parts:
            result["cold_start"] = {}
            for size in sizes:
                with tempfile.TemporaryDirectory(prefix=f"semcache-bench-{size}-") as workdir:
                    result["cold_start"][str(size)] = cold_start(
                        size, catch_up_entries, Path(workdir), progress, timeout_s=redis_timeout_s
                    )
                _note_load(result, f"cold_start {size}")
                _save(result, json_out)
    return result


def _note_load(result: dict[str, Any], moment: str) -> None:
    """The machine's load average after each part: these timings mean little on a busy machine."""
    one, five, _ = os.getloadavg()
    result.setdefault("load_average", {})[moment] = {"1min": round(one, 2), "5min": round(five, 2)}


def _redis_version() -> str | None:
    binary = shutil.which("redis-server")
    if binary is None:
        return None
    import subprocess

    return subprocess.run([binary, "--version"], capture_output=True, text=True, check=False).stdout.strip()


def without_samples(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_samples(v) for k, v in value.items() if not k.startswith("_")}
    return value


def _save(result: dict[str, Any], path: Path | None) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(without_samples(result), indent=2) + "\n")


def plot(result: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    if plt is None:
        return
    panels = [name for name in ("cold_start", "hit_latency", "replication_lag") if name in result]
    figure, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.8), squeeze=False)
    for axis, name in zip(axes[0], panels, strict=True):
        if name == "cold_start":
            sizes = list(result["cold_start"])
            x = np.arange(len(sizes))
            runs = [result["cold_start"][s] for s in sizes]
            join = [r["rebuild"]["join_s"] for r in runs]
            hnsw = [r["rebuild"]["hnsw_rebuild_s"] for r in runs]
            axis.bar(x - 0.2, join, 0.4, label="rebuild: join (reconcile, flat)")
            axis.bar(x - 0.2, hnsw, 0.4, bottom=join, label="rebuild: flat -> HNSW")
            ready = [r["snapshot"]["ready_s"] for r in runs]
            axis.bar(x + 0.2, ready, 0.4, label="snapshot load + feed catch-up")
            for i, seconds in enumerate(ready):
                axis.annotate(f"{seconds:.2f} s", (x[i] + 0.2, seconds), ha="center", va="bottom")
            for i, r in enumerate(runs):
                label = f"{r['rebuild']['total_s']:.1f} s = {r['rebuild_over_snapshot']}x"
                axis.annotate(label, (x[i] - 0.2, r["rebuild"]["total_s"]), ha="center", va="bottom")
            axis.set_xticks(x, [f"{int(s):,}" for s in sizes])
            axis.set_yscale("log")
            axis.set_xlabel("entries in the shared cache")
            axis.set_ylabel("seconds to a ready replica (log)")
            axis.set_title("replica cold start")
        elif name == "hit_latency":
            samples = result["hit_latency"].get("_samples", {})
            labels, data = [], []
            for phase in ("exact_hit", "semantic_hit"):
                for store in ("embedded", "redis"):
                    values = samples.get(store, {}).get(phase, [])
                    if values:
                        labels.append(f"{phase.split('_')[0]}\n{store}")
                        data.append(values)
            if data:
                axis.boxplot(data, whis=(1, 99), showfliers=False)
                axis.set_xticks(range(1, len(labels) + 1), labels)
            axis.set_ylabel("latency through HTTP (ms), whiskers p1-p99")
            axis.set_title("hits: embedded store vs Redis store")
        else:
            lag = result["replication_lag"]
            for kind in ("observed", "indexed"):
                values = lag.get("_samples", {}).get(kind, [])
                if values:
                    axis.hist(values, bins=40, alpha=0.6, label=f"{kind} (p50 {lag[kind]['p50_ms']} ms)")
            axis.set_xlabel(f"ms from A's acknowledged write to B's index (poll every {lag['poll_interval_ms']} ms)")
            axis.set_ylabel("entries")
            axis.set_title("replication lag")
        if axis.get_legend_handles_labels()[0]:
            axis.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    print(f"plot written to {path}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000], help="cache sizes for the cold start")
    parser.add_argument("--requests", type=int, default=100, help="prompts per hit phase (at most 100)")
    parser.add_argument("--rounds", type=int, default=3, help="times each hit is repeated")
    parser.add_argument("--lag-entries", type=int, default=200, help="entries timed for replication lag")
    parser.add_argument("--catch-up-entries", type=int, default=1000, help="entries written after the snapshot")
    parser.add_argument("--parts", nargs="+", choices=PART_NAMES, default=list(PART_NAMES))
    parser.add_argument("--redis-timeout-s", type=float, default=1.0, help="the replicas' --redis-timeout-s")
    parser.add_argument("--plot", type=Path, help="write the figures to this PNG")
    parser.add_argument("--json-out", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    result = run(
        args.sizes,
        requests=args.requests,
        rounds=args.rounds,
        lag_entries=args.lag_entries,
        catch_up_entries=args.catch_up_entries,
        parts=args.parts,
        json_out=args.json_out,
        redis_timeout_s=args.redis_timeout_s,
    )
    if args.plot:
        plot(result, args.plot)
    print(json.dumps(without_samples(result), indent=2))


if __name__ == "__main__":
    main()
