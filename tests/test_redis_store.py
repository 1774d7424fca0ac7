"""The Redis store against a real redis-server on a free port: entries, native expiry, the size
bound, feedback, shared counters, the change feed, and Redis going away and coming back."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from semcache.entries import CacheEntry, EntryQuery, NegativeFeedback
from semcache.errors import StoreUnavailable
from semcache.stores.redis import RedisStore
from testkit.redis_server import RedisServer
from testkit.store_contracts import check_embedding_store, check_fair_embedding_eviction, check_fair_eviction


def entry(exact_key: str, *, scope: str = "scope-a", expires_at: float | None = None, seed: int = 0) -> CacheEntry:
    vector = np.random.default_rng(seed).standard_normal(8).astype(np.float32)
    return CacheEntry(
        namespace="default",
        scope=scope,
        exact_key=exact_key,
        model="gpt-4o-mini",
        prompt=f"prompt for {exact_key}",
        answer=f"answer for {exact_key}",
        created_at=time.time(),
        expires_at=expires_at,
        vector=vector / np.linalg.norm(vector),
        last_access=time.time(),
    )


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with RedisServer(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture
async def store(redis_server: RedisServer, request: pytest.FixtureRequest) -> AsyncIterator[RedisStore]:
    opened = RedisStore(redis_server.url, prefix=f"test-{request.node.name}", feed_max_len=1000)
    await opened.open_cache("hashing-8", 8)
    yield opened
    await opened.close()


async def test_put_get_and_exact_lookup_round_trip(store: RedisStore) -> None:
    original = entry("k1", expires_at=time.time() + 60)
    original.tool_calls = [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    entry_id, replaced = await store.put(original)
    assert replaced == []
    for found in (await store.get(entry_id), await store.get_by_exact_key("k1")):
        assert found is not None
        assert (found.id, found.prompt, found.answer, found.scope) == (
            entry_id,
            "prompt for k1",
            "answer for k1",
            "scope-a",
        )
        assert found.expires_at == pytest.approx(original.expires_at)
        assert found.tool_calls == original.tool_calls
        np.testing.assert_array_equal(found.vector, original.vector)
    assert await store.get_by_exact_key("unknown") is None
    assert await store.count() == 1


async def test_same_exact_key_replaces_the_entry_and_says_so_in_the_feed(store: RedisStore) -> None:
    first, _ = await store.put(entry("k1"))
    second, replaced = await store.put(entry("k1", seed=1))
    assert [r.id for r in replaced] == [first] and second > first
    assert await store.get(first) is None
    assert await store.count() == 1
    events = await store.read_feed("0-0")
    assert [(e.op, e.entry_id, e.replaced) for e in events] == [("put", first, None), ("put", second, first)]


async def test_entries_expire_natively_and_the_sweep_tells_the_feed(
    store: RedisStore, redis_server: RedisServer
) -> None:
    short, _ = await store.put(entry("short", expires_at=time.time() + 0.3))
    forever, _ = await store.put(entry("forever"))
    ttl_ms = redis_server.client().pttl(f"{store.prefix}:entry:{short}")
    assert 0 < ttl_ms <= 300  # Redis itself expires it: no sweep needed for it to stop being served
    await asyncio.sleep(0.4)
    assert await store.get(short) is None and await store.get_by_exact_key("short") is None
    removed = await store.delete_expired(time.time())
    assert [r.id for r in removed] == [short]
    assert (await store.get(forever)) is not None
    assert (await store.read_feed("0-0"))[-1].ids == (short,)
    assert await store.stored_ids() == {forever}


async def test_size_bound_evicts_the_least_recently_used(store: RedisStore) -> None:
    ids = [(await store.put(entry(f"k{n}")))[0] for n in range(5)]
    await store.touch({ids[0]: time.time() + 10, ids[1]: time.time() + 11})
    removed = await store.evict_fairly(keep=2)
    assert sorted(r.id for r in removed) == sorted(ids[2:])
    assert await store.stored_ids() == {ids[0], ids[1]}
    assert (await store.get(ids[0])).hits == 1  # type: ignore[union-attr]


async def test_a_touch_never_brings_a_deleted_entry_back(store: RedisStore, redis_server: RedisServer) -> None:
    entry_id, _ = await store.put(entry("k1"))
    assert [r.id for r in await store.delete([entry_id, 999_999])] == [entry_id]
    await store.touch({entry_id: time.time()})
    assert redis_server.client().exists(f"{store.prefix}:entry:{entry_id}") == 0
    assert await store.count() == 0


async def test_entries_are_listed_in_id_order_filtered_with_recency_from_the_lru(store: RedisStore) -> None:
    rows = [("support", "How do I bake Sourdough?"), ("billing", "Where is my invoice?"), ("billing", "SOURDOUGH?")]
    ids = [(await store.put(replace(entry(f"k{n}", seed=n), namespace=ns, prompt=p)))[0] for n, (ns, p) in
           enumerate(rows)]  # fmt: skip
    later = time.time() + 100
    await store.touch({ids[0]: later})

    async def found(query: EntryQuery, **kwargs: object) -> list[int]:
        return [int(e.id or 0) async for batch in store.entries(query, **kwargs) for e in batch]  # type: ignore[arg-type]

    assert await found(EntryQuery()) == ids
    assert await found(EntryQuery(namespace="billing")) == ids[1:]
    assert await found(EntryQuery(text="sourdough")) == [ids[0], ids[2]]
    assert await found(EntryQuery(text="answer for k1")) == [ids[1]]  # answers too
    assert await found(EntryQuery(), after_id=ids[0]) == ids[1:]
    assert [len(b) async for b in store.entries(EntryQuery(), batch_size=2)] == [2, 1]
    listed = [e async for batch in store.entries(EntryQuery()) for e in batch]
    assert listed[0].last_access == pytest.approx(later) and listed[0].hits == 1  # from the recency set
    assert all(e.vector is None for e in listed)
    with_vectors = [e async for batch in store.entries(EntryQuery(), with_vectors=True) for e in batch]
    np.testing.assert_array_equal(with_vectors[1].vector, entry("k1", seed=1).vector)
    await store.delete([ids[1]])
    assert await found(EntryQuery()) == [ids[0], ids[2]]


async def test_put_many_is_pipelined_and_each_entry_reaches_the_feed(store: RedisStore) -> None:
    first, _ = await store.put(entry("k1"))
    results = await store.put_many([entry("k1", seed=1), entry("k2", seed=2)])
    (replacing, replaced), (second, nothing) = results
    assert [r.id for r in replaced] == [first] and nothing == []
    assert await store.get(first) is None and await store.count() == 2
    events = await store.read_feed("0-0")
    assert [(e.op, e.entry_id, e.replaced) for e in events] == [
        ("put", first, None), ("put", replacing, first), ("put", second, None)
    ]  # fmt: skip
    assert await store.put_many([]) == []


async def test_negative_feedback_is_shared_and_raises_the_entry_threshold(store: RedisStore) -> None:
    entry_id, _ = await store.put(entry("k1"))
    feedback = NegativeFeedback(entry_id, "query-key", np.ones(8, dtype=np.float32), 0.93)
    await store.add_negative_feedback(feedback, 0.935)
    [stored] = await store.negative_feedback()
    assert (stored.entry_id, stored.query_key, stored.similarity) == (entry_id, "query-key", 0.93)
    np.testing.assert_array_equal(stored.vector, feedback.vector)
    assert (await store.get(entry_id)).min_similarity == pytest.approx(0.935)  # type: ignore[union-attr]
    shared = (await store.read_feed("0-0"))[-1].feedback
    assert shared is not None and (shared.entry_id, shared.query_key) == (entry_id, "query-key")
    await store.delete([entry_id])
    assert await store.negative_feedback() == []


async def test_a_refuted_entry_only_ever_raises_its_own_threshold(store: RedisStore) -> None:
    entry_id, _ = await store.put(entry("k1"))
    await store.raise_min_similarity(entry_id, 0.8)
    await store.raise_min_similarity(entry_id, 0.7)
    assert (await store.get(entry_id)).min_similarity == pytest.approx(0.8)  # type: ignore[union-attr]
    await store.raise_min_similarity(entry_id + 100, 0.9)
    assert await store.get(entry_id + 100) is None  # no half-made entry


async def test_counters_add_up_across_replicas(store: RedisStore, redis_server: RedisServer) -> None:
    other = RedisStore(redis_server.url, prefix=store.prefix[1:-1])
    await store.add_counts(Counter({"requests": 2, "hits": 1}))
    await other.add_counts(Counter({"requests": 3, "ns:a:b:hits": 1}))
    assert await store.counts() == Counter({"requests": 5, "hits": 1, "ns:a:b:hits": 1})
    await other.close()


async def test_a_replica_with_another_embedding_model_is_refused(store: RedisStore, redis_server: RedisServer) -> None:
    other = RedisStore(redis_server.url, prefix=store.prefix[1:-1])
    with pytest.raises(ValueError, match="same model"):
        await other.open_cache("another-model", 8)
    await other.close()


async def test_a_trimmed_feed_is_reported_as_a_gap(redis_server: RedisServer) -> None:
    store = RedisStore(redis_server.url, prefix="test-trimmed", feed_max_len=10)
    await store.open_cache("hashing-8", 8)
    await store.put(entry("first"))
    offset = await store.feed_position()
    assert not await store.feed_has_gap_after(offset)
    for n in range(300):  # approximate trimming drops whole blocks of about 100 events
        await store.put(entry(f"k{n}"))
    assert await store.feed_has_gap_after(offset)
    assert not await store.feed_has_gap_after(await store.feed_position())
    await store.close()


async def test_redis_down_fails_fast_then_recovers(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis").start()
    store = RedisStore(server.url, prefix="test-down", timeout_s=0.5)
    await store.open_cache("hashing-8", 8)
    entry_id, _ = await store.put(entry("k1"))
    server.kill()
    with pytest.raises(StoreUnavailable):
        await store.get(entry_id)
    started = time.monotonic()
    with pytest.raises(StoreUnavailable):
        await store.get_by_exact_key("k1")  # marked down: no new connection attempt
    assert time.monotonic() - started < 0.1
    assert not await store.ping()

    restarted = RedisServer(tmp_path / "redis", port=server.port).start()  # same folder: its AOF comes back
    try:
        deadline = time.monotonic() + 10
        while not await store.ping():
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
        assert (await store.get(entry_id)) is not None  # appendfsync always: the acknowledged entry survived
    finally:
        await store.close()
        restarted.stop()


async def test_embeddings_are_kept_expired_and_bounded(store: RedisStore) -> None:
    await check_embedding_store(store)
    assert await store._redis.pttl(store.key("emb", "c")) == -1  # stored again without a TTL: none


async def test_embeddings_expire_natively(store: RedisStore) -> None:
    now = time.time()
    await store.put_embeddings("default", {"k": b"\x00\x00\x80?"}, now, now + 60)
    assert 0 < await store._redis.pttl(store.key("emb", "k")) <= 60_000


async def test_the_size_bound_takes_from_the_namespace_holding_the_most(store: RedisStore) -> None:
    await check_fair_eviction(store)


async def test_the_embeddings_bound_takes_from_the_namespace_holding_the_most(store: RedisStore) -> None:
    await check_fair_embedding_eviction(store)


async def test_embeddings_stored_before_namespaces_were_kept_go_first(
    store: RedisStore, redis_server: RedisServer
) -> None:
    vector = b"\x00\x00\x80?"
    await store.put_embeddings("quiet", {"q": vector}, 1000.0, None)  # older than the old ones
    # The layout a version before fair eviction left: a vector and its place in the one recency set.
    for n in range(3):
        await store._redis.set(store.key("emb", f"old{n}"), vector)
        await store._redis.zadd(store.key("emb_lru"), {f"old{n}": 5000.0 + n})
    await store._redis.hdel(store.key("meta"), "embedding_namespaces_kept")

    reopened = RedisStore(redis_server.url, prefix=store.prefix.strip("{}"), feed_max_len=1000)
    try:
        await reopened.open_cache("hashing-8", 8)
        await reopened.put_embeddings("loud", {f"l{n}": vector for n in range(3)}, 6000.0, None)
        assert await reopened.count_embeddings() == 7
        assert await reopened.evict_embeddings(5) == 2  # the two oldest vectors of no known namespace
        assert set(await reopened.get_embeddings([f"old{n}" for n in range(3)], 0.0)) == {"old2"}
        assert await reopened.evict_embeddings(3) == 2  # the last old one, then one of loud's
        assert set(await reopened.get_embeddings(["q", "old2", "l0", "l1", "l2"], 0.0)) == {"q", "l1", "l2"}
    finally:
        await reopened.close()


async def test_entries_stored_before_namespaces_were_counted_are_counted_at_start(
    store: RedisStore, redis_server: RedisServer
) -> None:
    quiet = [(await store.put(replace(entry(f"q{n}"), namespace="quiet", last_access=1000.0 + n)))[0] for n in range(2)]
    loud = [(await store.put(replace(entry(f"l{n}"), namespace="loud", last_access=2000.0 + n)))[0] for n in range(6)]
    # The layout a version before fair eviction left: no per-namespace recency, nothing counted.
    raw = store._redis
    await raw.delete(
        store.key("entry_ns"), store.key("ns_sizes"), store.key("lru_ns", "quiet"), store.key("lru_ns", "loud")
    )
    await raw.hdel(store.key("meta"), "namespaces_counted")

    reopened = RedisStore(redis_server.url, prefix=store.prefix.strip("{}"), feed_max_len=1000)
    try:
        await reopened.open_cache("hashing-8", 8)
        removed = await reopened.evict_fairly(4)
        assert sorted(r.id for r in removed) == loud[:4]
        assert await reopened.stored_ids() == {*quiet, *loud[4:]}
    finally:
        await reopened.close()
