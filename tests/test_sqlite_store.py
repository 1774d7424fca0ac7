"""Unit tests for semcache.stores.SQLiteStore, on a file in a temporary folder."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import closing
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from semcache.entries import CacheEntry, EntryQuery, NegativeFeedback, RemovedEntry
from semcache.stores import SQLiteStore
from semcache.stores.sqlite import MIGRATIONS, PointReads, _m008_embedding_namespaces
from testkit.store_contracts import check_embedding_store, check_fair_embedding_eviction, check_fair_eviction


def entry(
    exact_key: str,
    *,
    scope: str = "scope-a",
    created_at: float = 1000.0,
    expires_at: float | None = None,
    vector: np.ndarray | None = None,
    answer: str = "an answer",
) -> CacheEntry:
    return CacheEntry(
        namespace="default",
        scope=scope,
        exact_key=exact_key,
        model="gpt-4o-mini",
        prompt=f"prompt for {exact_key}",
        answer=answer,
        created_at=created_at,
        expires_at=expires_at,
        vector=vector,
    )


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    opened = SQLiteStore(tmp_path / "data" / "entries.sqlite3")
    await opened.open()
    yield opened
    await opened.close()


async def test_put_then_get_round_trip(store: SQLiteStore) -> None:
    vector = np.random.default_rng(0).standard_normal(8).astype(np.float32)
    original = entry("k1", expires_at=2000.0, vector=vector)

    entry_id, replaced = await store.put(original)

    assert replaced == []
    by_id = await store.get(entry_id)
    by_key = await store.get_by_exact_key("k1")
    assert by_id is not None and by_key is not None
    assert by_id.id == by_key.id == entry_id
    for got in (by_id, by_key):
        assert (got.namespace, got.scope, got.exact_key, got.model, got.prompt, got.answer) == (
            "default",
            "scope-a",
            "k1",
            "gpt-4o-mini",
            "prompt for k1",
            "an answer",
        )
        assert (got.created_at, got.expires_at, got.last_access, got.hits) == (1000.0, 2000.0, 1000.0, 0)
        assert got.vector is not None
        assert got.vector.dtype == np.float32
        np.testing.assert_array_equal(got.vector, vector)


async def test_an_entry_without_vector_or_expiry(store: SQLiteStore) -> None:
    entry_id, _ = await store.put(entry("k1"))
    got = await store.get(entry_id)
    assert got is not None
    assert got.vector is None and got.expires_at is None


async def test_get_of_missing_entries(store: SQLiteStore) -> None:
    assert await store.get(12345) is None
    assert await store.get_by_exact_key("nope") is None


async def test_put_with_an_existing_exact_key_replaces_it(store: SQLiteStore) -> None:
    first_id, _ = await store.put(entry("k1", answer="old"))
    second_id, replaced = await store.put(entry("k1", answer="new", scope="scope-a"))

    assert replaced == [RemovedEntry(first_id, "scope-a")]
    assert second_id != first_id
    assert await store.get(first_id) is None
    current = await store.get_by_exact_key("k1")
    assert current is not None and (current.id, current.answer) == (second_id, "new")
    assert await store.count() == 1


async def test_ids_are_never_reused_after_delete(store: SQLiteStore) -> None:
    ids = [(await store.put(entry(f"k{i}")))[0] for i in range(3)]
    removed = await store.delete(ids[1:])  # including the newest, whose id SQLite would otherwise hand out again

    assert sorted(r.id for r in removed) == ids[1:]
    new_id, _ = await store.put(entry("k-new"))
    assert new_id > max(ids)


async def test_delete_of_unknown_ids(store: SQLiteStore) -> None:
    await store.put(entry("k1"))
    assert await store.delete([999]) == []
    assert await store.count() == 1


async def test_delete_many_ids(store: SQLiteStore) -> None:
    ids = [(await store.put(entry(f"k{i}")))[0] for i in range(1200)]  # more than one chunk of 500
    removed = await store.delete(ids[:1100])
    assert len(removed) == 1100
    assert await store.count() == 100


async def test_delete_expired_returns_exactly_the_expired(store: SQLiteStore) -> None:
    expired_id, _ = await store.put(entry("old", expires_at=100.0, scope="s1"))
    boundary_id, _ = await store.put(entry("boundary", expires_at=200.0, scope="s2"))
    fresh_id, _ = await store.put(entry("fresh", expires_at=300.0))
    forever_id, _ = await store.put(entry("forever", expires_at=None))

    removed = await store.delete_expired(now=200.0)

    assert sorted(removed, key=lambda r: r.id) == [RemovedEntry(expired_id, "s1"), RemovedEntry(boundary_id, "s2")]
    assert await store.get(fresh_id) is not None
    assert await store.get(forever_id) is not None
    assert await store.delete_expired(now=200.0) == []


async def test_evict_fairly_keeps_the_recently_touched(store: SQLiteStore) -> None:
    ids = [(await store.put(entry(f"k{i}", created_at=1000.0 + i)))[0] for i in range(5)]
    await store.touch({ids[0]: 5000.0, ids[1]: 5001.0})  # the two oldest were used most recently

    removed = await store.evict_fairly(keep=3)

    assert sorted(r.id for r in removed) == [ids[2], ids[3]]
    assert await store.count() == 3
    touched = await store.get(ids[0])
    assert touched is not None and (touched.last_access, touched.hits) == (5000.0, 1)


async def test_evict_does_nothing_under_the_bound(store: SQLiteStore) -> None:
    for i in range(3):
        await store.put(entry(f"k{i}"))
    assert await store.evict_fairly(keep=10) == []
    assert await store.count() == 3


async def test_touch_never_moves_last_access_back(store: SQLiteStore) -> None:
    entry_id, _ = await store.put(entry("k1"))
    await store.touch({entry_id: 5000.0})
    await store.touch({entry_id: 4000.0})  # a late-arriving, older access
    got = await store.get(entry_id)
    assert got is not None and (got.last_access, got.hits) == (5000.0, 2)


async def test_vectors_yields_all_in_batches(store: SQLiteStore) -> None:
    vectors = np.random.default_rng(1).standard_normal((7, 4)).astype(np.float32)
    ids = [(await store.put(entry(f"k{i}", scope=f"s{i % 2}", vector=vectors[i])))[0] for i in range(7)]
    await store.put(entry("no-vector"))

    batches = [batch async for batch in store.vectors(batch_size=3)]

    assert [len(batch_ids) for batch_ids, _, _ in batches] == [3, 3, 1]
    assert [i for batch_ids, _, _ in batches for i in batch_ids] == ids
    assert [s for _, scopes, _ in batches for s in scopes] == [f"s{i % 2}" for i in range(7)]
    np.testing.assert_array_equal(np.vstack([matrix for _, _, matrix in batches]), vectors)


async def test_reopening_keeps_entries_and_records_migrations_once(tmp_path: Path) -> None:
    path = tmp_path / "entries.sqlite3"
    first = SQLiteStore(path)
    await first.open()
    entry_id, _ = await first.put(entry("k1", vector=np.ones(4, dtype=np.float32)))
    await first.close()

    second = SQLiteStore(path)
    await second.open()
    try:
        got = await second.get(entry_id)
        assert got is not None and got.answer == "an answer"
        assert got.vector is not None and got.vector.tolist() == [1.0, 1.0, 1.0, 1.0]
    finally:
        await second.close()

    with closing(sqlite3.connect(path)) as db:
        names = [row[0] for row in db.execute("SELECT name FROM _migrations")]
    assert names == [migration.__name__ for migration in MIGRATIONS]


async def test_entries_filter_in_sql_in_id_order_from_after_an_id(store: SQLiteStore) -> None:
    rows = [
        ("support", "How do I bake Sourdough?", "Slowly.", 100.0),
        ("support", "What is the capital of France?", "Paris.", 200.0),
        ("billing", "Where is my invoice?", "In your SOURDOUGH account.", 300.0),
        ("billing", "Wie schreibt man Straße?", "Mit ß.", 400.0),
    ]
    ids = []
    for n, (namespace, prompt, answer, created_at) in enumerate(rows):
        made = replace(entry(f"k{n}", created_at=created_at, vector=np.full(4, n, dtype=np.float32)),
                       namespace=namespace, prompt=prompt, answer=answer)  # fmt: skip
        ids.append((await store.put(made))[0])

    async def found(query: EntryQuery, **kwargs: object) -> list[int]:
        return [int(e.id or 0) async for batch in store.entries(query, **kwargs) for e in batch]  # type: ignore[arg-type]

    assert await found(EntryQuery()) == ids
    assert await found(EntryQuery(namespace="billing")) == ids[2:]
    assert await found(EntryQuery(text="sourdough")) == [ids[0], ids[2]]  # prompt or answer, any case
    assert await found(EntryQuery(text="STRASSE")) == [ids[3]]  # full Unicode case folding, not ASCII only
    assert await found(EntryQuery(created_before=250.0)) == ids[:2]
    assert await found(EntryQuery(namespace="support", text="france")) == [ids[1]]
    assert await found(EntryQuery(), after_id=ids[1]) == ids[2:]
    batches = [batch async for batch in store.entries(EntryQuery(), batch_size=3)]
    assert [len(batch) for batch in batches] == [3, 1]
    assert all(e.vector is None for e in batches[0])  # vectors are read only when asked for
    with_vectors = [e async for batch in store.entries(EntryQuery(), with_vectors=True) for e in batch]
    assert [float(e.vector[0]) for e in with_vectors if e.vector is not None] == [0.0, 1.0, 2.0, 3.0]
    assert all(EntryQuery(namespace="billing").matches(e) for e in with_vectors[2:])


async def test_put_many_writes_a_batch_and_replaces_by_exact_key(store: SQLiteStore) -> None:
    first, _ = await store.put(entry("k1", answer="old"))
    results = await store.put_many([entry("k1", answer="new"), entry("k2"), entry("k3", scope="scope-b")])
    assert [removed for _, removed in results] == [[RemovedEntry(first, "scope-a")], [], []]
    new_ids = [entry_id for entry_id, _ in results]
    assert new_ids == sorted(new_ids) and new_ids[0] > first
    got = await store.get_by_exact_key("k1")
    assert got is not None and got.answer == "new" and await store.count() == 3
    assert await store.put_many([]) == []


async def test_meta_round_trip(store: SQLiteStore) -> None:
    assert await store.get_meta("embedding_model") is None
    await store.set_meta("embedding_model", "a")
    await store.set_meta("embedding_model", "b")
    assert await store.get_meta("embedding_model") == "b"


async def test_a_closed_store_says_so(tmp_path: Path) -> None:
    closed = SQLiteStore(tmp_path / "entries.sqlite3")
    with pytest.raises(RuntimeError, match="not open"):
        closed.db  # noqa: B018


# -- point reads kept in memory ------------------------------------------------------------------


async def test_every_write_is_seen_by_the_next_point_read(store: SQLiteStore) -> None:
    """Point reads are kept until a write ends (``PointReads``): each kind of write, made after
    the entry was read (and so kept), must show in the next read by id and by exact key."""
    vector = np.ones(4, dtype=np.float32)

    async def read(entry_id: int, exact_key: str) -> tuple[CacheEntry | None, CacheEntry | None]:
        return await store.get(entry_id), await store.get_by_exact_key(exact_key)

    first, _ = await store.put(entry("k1", answer="old", vector=vector))
    await read(first, "k1")
    second, _ = await store.put(entry("k1", answer="new", vector=vector))  # replaced
    assert await store.get(first) is None
    by_key = await store.get_by_exact_key("k1")
    assert by_key is not None and (by_key.id, by_key.answer) == (second, "new")

    [(third, _)] = await store.put_many([entry("k1", answer="newer")])
    by_id, by_key = await read(third, "k1")
    assert by_id is not None and by_key is not None and by_key.answer == "newer"
    assert await store.get(second) is None

    await store.touch({third: 5000.0})
    by_id, _ = await read(third, "k1")
    assert by_id is not None and (by_id.last_access, by_id.hits) == (5000.0, 1)

    await store.set_vectors([third], np.full((1, 4), 2.0, dtype=np.float32))
    by_id, _ = await read(third, "k1")
    assert by_id is not None and by_id.vector is not None and by_id.vector.tolist() == [2.0] * 4

    await store.add_negative_feedback(NegativeFeedback(third, "some-query", None, 0.91), raise_min_similarity_to=0.95)
    by_id, by_key = await read(third, "k1")
    assert by_id is not None and by_key is not None and by_id.min_similarity == by_key.min_similarity == 0.95
    await store.raise_min_similarity(third, 0.9)  # a lower bar never lowers the entry's own
    await store.raise_min_similarity(third + 100, 0.9)  # nor creates a missing entry
    by_id, _ = await read(third, "k1")
    assert by_id is not None and by_id.min_similarity == 0.95
    await store.raise_min_similarity(third, 0.97)
    by_id, _ = await read(third, "k1")
    assert by_id is not None and by_id.min_similarity == 0.97

    await store.delete([third])
    assert await read(third, "k1") == (None, None)

    expiring, _ = await store.put(entry("k2", expires_at=100.0))
    await read(expiring, "k2")
    await store.delete_expired(now=200.0)
    assert await read(expiring, "k2") == (None, None)

    evicted, _ = await store.put(entry("k3"))
    await read(evicted, "k3")
    await store.evict_fairly(keep=0)
    assert await read(evicted, "k3") == (None, None)

    assert await store.get_by_exact_key("k4") is None  # kept as missing, until a write adds it
    added, _ = await store.put(entry("k4"))
    got = await store.get_by_exact_key("k4")
    assert got is not None and got.id == added


async def test_point_reads_come_from_memory_until_a_write_ends(store: SQLiteStore) -> None:
    entry_id, _ = await store.put(entry("k1"))
    first = await store.get(entry_id)
    assert await store.get(entry_id) is first  # kept: no query
    await store.set_meta("any", "write")
    assert await store.get(entry_id) is not first  # read again after a write


def test_a_read_that_raced_a_write_is_not_kept() -> None:
    reads = PointReads(capacity=2)
    before = reads.generation
    reads.clear()  # a write ended while the read was on its way
    reads.keep("id", 1, None, before)
    assert reads.get("id", 1) == (False, None)
    for n in range(3):
        reads.keep("id", n, None, reads.generation)
    assert [reads.get("id", n)[0] for n in range(3)] == [False, True, True]  # the oldest made room


async def test_embeddings_are_kept_expired_and_bounded(store: SQLiteStore) -> None:
    await check_embedding_store(store)


async def test_embeddings_survive_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "entries.sqlite3"
    first = SQLiteStore(path)
    await first.open()
    await first.put_embeddings("default", {"k": b"\x00\x00\x80?"}, 1.0, None)
    await first.close()
    second = SQLiteStore(path)
    await second.open()
    assert await second.get_embeddings(["k"], 2.0) == {"k": b"\x00\x00\x80?"}
    await second.close()


async def test_the_size_bound_takes_from_the_namespace_holding_the_most(store: SQLiteStore) -> None:
    await check_fair_eviction(store)


async def test_the_embeddings_bound_takes_from_the_namespace_holding_the_most(store: SQLiteStore) -> None:
    await check_fair_embedding_eviction(store)


async def test_embeddings_stored_before_namespaces_were_kept_go_first(tmp_path: Path) -> None:
    path = tmp_path / "entries.sqlite3"
    with closing(sqlite3.connect(path, isolation_level=None)) as db:  # the layout of the version before
        db.execute("CREATE TABLE _migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
        for migration in MIGRATIONS[: MIGRATIONS.index(_m008_embedding_namespaces)]:
            migration(db)
            db.execute("INSERT INTO _migrations VALUES (?, 0)", (migration.__name__,))
        db.executemany(
            "INSERT INTO embeddings VALUES (?, ?, NULL, ?)",
            [(f"old{n}", b"\x00\x00\x80?", 5000.0 + n) for n in range(3)],
        )
    store = SQLiteStore(path)
    await store.open()
    try:
        await store.put_embeddings("quiet", {"q": b"\x00\x00\x80?"}, 1000.0, None)  # older than the old ones
        await store.put_embeddings("loud", {f"l{n}": b"\x00\x00\x80?" for n in range(3)}, 6000.0, None)
        assert await store.count_embeddings() == 7
        assert await store.evict_embeddings(5) == 2  # the two oldest vectors of no known namespace
        assert set(await store.get_embeddings([f"old{n}" for n in range(3)], 0.0)) == {"old2"}
        assert await store.evict_embeddings(3) == 2  # the last old one, then one of loud's
        assert set(await store.get_embeddings(["q", "old2", "l0", "l1", "l2"], 0.0)) == {"q", "l1", "l2"}
    finally:
        await store.close()
