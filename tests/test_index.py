"""Unit tests for semcache.index.ScopedVectorIndex, with small random unit vectors."""

from __future__ import annotations

import logging
import re
import threading
import zipfile
from pathlib import Path

import faiss
import numpy as np
import pytest

from semcache.index import RebuildProgress, ScopedVectorIndex, read_snapshot

DIM = 32
MODEL = "test-model"


def unit_vectors(count: int, seed: int = 0) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((count, DIM)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def filled(
    scope: str, ids: range, *, hnsw_min_entries: int = 20_000, seed: int = 0
) -> tuple[ScopedVectorIndex, np.ndarray]:
    index = ScopedVectorIndex(DIM, hnsw_min_entries=hnsw_min_entries)
    vectors = unit_vectors(len(ids), seed)
    index.add(scope, np.array(ids), vectors)
    return index, vectors


def nearest_id(index: ScopedVectorIndex, scope: str, vector: np.ndarray) -> int | None:
    found = index.search(scope, vector, k=1)
    return found[0][0] if found else None


# -- search --------------------------------------------------------------------------------------


def test_search_finds_the_nearest_within_the_scope() -> None:
    index, vectors = filled("a", range(1, 21))
    found = index.search("a", vectors[4], k=3)
    assert found[0][0] == 5
    assert found[0][1] == pytest.approx(1.0, abs=1e-5)
    assert len(found) == 3
    assert [s for _, s in found] == sorted((s for _, s in found), reverse=True)


def test_search_finds_a_near_neighbour_not_only_itself() -> None:
    index, vectors = filled("a", range(1, 21))
    nudged = vectors[7] + 0.05 * unit_vectors(1, seed=99)[0]
    nudged /= np.linalg.norm(nudged)
    best, similarity = index.search("a", nudged, k=1)[0]
    assert best == 8
    assert 0.9 < similarity < 1.0


def test_search_never_returns_entries_of_another_scope() -> None:
    index, a_vectors = filled("a", range(1, 21))
    b_vectors = unit_vectors(20, seed=1)
    index.add("b", np.arange(101, 121), b_vectors)
    for vector in b_vectors:  # b's own vectors, searched in a
        assert all(1 <= entry_id <= 20 for entry_id, _ in index.search("a", vector, k=20))
    assert {i for i, _ in index.search("b", a_vectors[0], k=50)} == set(range(101, 121))


def test_search_in_an_unknown_scope_finds_nothing() -> None:
    index, vectors = filled("a", range(1, 6))
    assert index.search("nobody", vectors[0]) == []


def test_adding_an_existing_id_moves_it() -> None:
    index, vectors = filled("a", range(1, 6))
    index.add("b", np.array([3]), vectors[2:3])
    assert 3 not in {i for i, _ in index.search("a", vectors[2], k=5)}
    assert nearest_id(index, "b", vectors[2]) == 3
    assert len(index) == 5


# -- flat removal --------------------------------------------------------------------------------


def test_remove_from_a_flat_partition() -> None:
    index, vectors = filled("a", range(1, 11))
    index.remove([4, 7])
    assert 4 not in index and 7 not in index and 5 in index
    assert len(index) == 8
    assert {i for i, _ in index.search("a", vectors[3], k=10)} == set(range(1, 11)) - {4, 7}
    assert index.stats().tombstones == 0  # flat indexes really delete


def test_removing_every_entry_drops_the_partition() -> None:
    index, vectors = filled("a", range(1, 4))
    index.remove([1, 2, 3, 99])  # unknown ids are ignored
    assert index.search("a", vectors[0]) == []
    assert index.stats().partitions == 0


# -- HNSW, tombstones and rebuilds ---------------------------------------------------------------


def hnsw_index(count: int = 100) -> tuple[ScopedVectorIndex, np.ndarray]:
    index, vectors = filled("a", range(1, count + 1), hnsw_min_entries=50)
    assert index.scopes_needing_rebuild() == ["a"]
    assert index.rebuild("a") is True
    return index, vectors


def test_a_scope_becomes_hnsw_once_it_reaches_the_threshold() -> None:
    index, vectors = filled("a", range(1, 50), hnsw_min_entries=50)
    index.add("small", np.array([1000]), unit_vectors(1, seed=5))
    assert index.scopes_needing_rebuild() == []
    index.add("a", np.array([50]), unit_vectors(1, seed=6))
    assert index.scopes_needing_rebuild() == ["a"]

    assert index.rebuild("a") is True

    stats = index.stats()
    assert (stats.hnsw_partitions, stats.partitions, stats.rebuilds) == (1, 2, 1)
    assert index.scopes_needing_rebuild() == []
    assert all(nearest_id(index, "a", v) == i for i, v in enumerate(vectors, start=1))


def test_rebuild_of_an_unknown_scope_does_nothing() -> None:
    index, _ = filled("a", range(1, 5))
    assert index.rebuild("nobody") is False
    assert index.stats().rebuilds == 0


def test_hnsw_removals_become_tombstones_that_search_skips() -> None:
    index, vectors = hnsw_index()
    removed = [3, 10, 42]
    index.remove(removed)

    stats = index.stats()
    assert (stats.entries, stats.tombstones) == (97, 3)
    for entry_id in removed:
        assert entry_id not in index
        assert entry_id not in {i for i, _ in index.search("a", vectors[entry_id - 1], k=10)}
    assert nearest_id(index, "a", vectors[3]) == 4


def test_one_search_of_many_vectors_finds_what_a_search_of_each_finds() -> None:
    """``search_many`` serves a batch of prompts in one FAISS call; tombstones are skipped row by row."""
    index, vectors = hnsw_index()
    index.remove([3, 10, 42])
    queries = vectors[[2, 9, 41, 60]]
    assert index.search_many("a", queries, k=5) == [index.search("a", query, k=5) for query in queries]
    assert index.search_many("unknown", queries, k=5) == [[], [], [], []]


def test_a_rebuild_drops_tombstones() -> None:
    index, vectors = hnsw_index()
    removed = list(range(1, 26))  # 25 of 100: above the 20% tombstone ratio
    index.remove(removed)
    assert index.scopes_needing_rebuild() == ["a"]

    assert index.rebuild("a") is True

    stats = index.stats()
    assert (stats.entries, stats.tombstones, stats.hnsw_partitions) == (75, 0, 1)
    assert index.scopes_needing_rebuild() == []
    assert all(nearest_id(index, "a", vectors[i - 1]) == i for i in range(26, 101))
    assert not {i for i, _ in index.search("a", vectors[0], k=75)} & set(removed)


def test_a_scope_that_shrank_goes_back_to_flat() -> None:
    index, vectors = hnsw_index()
    index.remove(list(range(1, 80)))  # 21 left, below half the HNSW threshold
    assert index.scopes_needing_rebuild() == ["a"]
    index.rebuild("a")
    stats = index.stats()
    assert (stats.entries, stats.tombstones, stats.hnsw_partitions) == (21, 0, 0)
    assert nearest_id(index, "a", vectors[90]) == 91


def test_changes_made_while_a_rebuild_runs_are_not_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    index, vectors = filled("a", range(1, 61), hnsw_min_entries=50)
    building, may_finish = threading.Event(), threading.Event()
    new_index = index._new_index

    def slow_new_index(kind: str) -> faiss.IndexIDMap2:
        building.set()  # the rebuild has taken its copy and released the lock
        assert may_finish.wait(10)
        return new_index(kind)

    monkeypatch.setattr(index, "_new_index", slow_new_index)
    rebuild = threading.Thread(target=index.rebuild, args=("a",))
    rebuild.start()
    try:
        assert building.wait(10)
        assert index.stats().rebuilding == 1
        assert index.scopes_needing_rebuild() == []  # no second rebuild of the same scope
        added = unit_vectors(10, seed=7)
        index.add("a", np.arange(61, 71), added)  # new during the rebuild
        index.remove([5, 6, 65])  # two from before the rebuild, one added during it
        searchable_meanwhile = nearest_id(index, "a", added[0])
    finally:
        may_finish.set()
        rebuild.join(10)
    assert not rebuild.is_alive()

    assert searchable_meanwhile == 61
    stats = index.stats()
    assert (stats.rebuilding, stats.hnsw_partitions, stats.entries) == (0, 1, 67)
    live = set(range(1, 71)) - {5, 6, 65}
    assert index.ids() == live
    every_vector = np.vstack([vectors, added])
    for entry_id in live:
        assert nearest_id(index, "a", every_vector[entry_id - 1]) == entry_id
    for entry_id in (5, 6, 65):
        assert entry_id not in {i for i, _ in index.search("a", every_vector[entry_id - 1], k=10)}


def test_concurrent_adds_and_removes_during_rebuilds_in_threads() -> None:
    index, vectors = filled("a", range(1, 201), hnsw_min_entries=50)
    extra = unit_vectors(200, seed=3)
    removed = set(range(1, 201, 4)) | set(range(201, 401, 5))

    def writer() -> None:
        for offset in range(0, 200, 10):
            index.add("a", np.arange(201 + offset, 211 + offset), extra[offset : offset + 10])
            index.remove([i for i in range(1 + offset, 11 + offset) if i in removed])
            index.remove([i for i in range(201 + offset, 211 + offset) if i in removed])

    def rebuilder() -> None:
        for _ in range(5):
            index.rebuild("a")

    threads = [threading.Thread(target=writer), threading.Thread(target=rebuilder)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    live = set(range(1, 401)) - removed
    assert index.ids() == live
    index.rebuild("a")
    every_vector = np.vstack([vectors, extra])
    for entry_id in range(1, 401):
        ids = {i for i, _ in index.search("a", every_vector[entry_id - 1], k=5)}
        assert (entry_id in ids) == (entry_id in live)


def test_a_rebuild_adds_in_chunks_and_reports_its_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    index = ScopedVectorIndex(DIM, hnsw_min_entries=50, rebuild_chunk=40)
    vectors = unit_vectors(100)
    index.add("a", np.arange(1, 101), vectors)
    seen: list[tuple[int, list[RebuildProgress]]] = []  # (chunk size, progress just before adding it)
    new_index = index._new_index

    def observed_new_index(kind: str) -> faiss.IndexIDMap2:
        fresh = new_index(kind)
        add = fresh.add_with_ids

        def add_with_ids(chunk: np.ndarray, ids: np.ndarray) -> None:
            seen.append((len(ids), index.stats().rebuild_progress))
            add(chunk, ids)

        fresh.add_with_ids = add_with_ids
        return fresh

    monkeypatch.setattr(index, "_new_index", observed_new_index)
    assert index.rebuild("a") is True

    assert [size for size, _ in seen] == [40, 40, 20]
    assert [[(p.scope, p.kind, p.done, p.total) for p in progress] for _, progress in seen] == [
        [("a", "hnsw", done, 100)] for done in (0, 40, 80)
    ]
    assert all(p.seconds >= 0 for _, progress in seen for p in progress)
    stats = index.stats()
    assert (stats.rebuild_progress, stats.rebuilding, stats.rebuilds, stats.hnsw_partitions) == ([], 0, 1, 1)
    assert all(nearest_id(index, "a", v) == i for i, v in enumerate(vectors, start=1))


@pytest.mark.parametrize(("chunk", "logged_at"), [(1, tuple(range(10, 100, 10))), (30, (30, 60, 90)), (200, ())])
def test_a_rebuild_logs_its_start_progress_and_end(
    caplog: pytest.LogCaptureFixture, chunk: int, logged_at: tuple[int, ...]
) -> None:
    index = ScopedVectorIndex(DIM, hnsw_min_entries=50, rebuild_chunk=chunk)
    index.add("a", np.arange(1, 101), unit_vectors(100))
    with caplog.at_level(logging.INFO, logger="semcache.index"):
        index.rebuild("a")

    messages = [r.getMessage() for r in caplog.records if r.name == "semcache.index"]
    assert messages[0] == "index rebuild of scope a started: 100 vectors into hnsw"
    # about every 10%, at most once a chunk; the end line stands for 100%
    assert messages[1:-1] == [f"index rebuild of scope a: {done} of 100 vectors ({done}%)" for done in logged_at]
    assert re.fullmatch(r"index rebuild of scope a done: 100 vectors into hnsw in \d+\.\d s", messages[-1])


def test_a_failed_rebuild_leaves_no_progress_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    index, _ = filled("a", range(1, 61), hnsw_min_entries=50)

    def broken_new_index(kind: str) -> faiss.IndexIDMap2:
        raise MemoryError

    monkeypatch.setattr(index, "_new_index", broken_new_index)
    with pytest.raises(MemoryError):
        index.rebuild("a")
    stats = index.stats()
    assert (stats.rebuild_progress, stats.rebuilding, stats.rebuilds) == ([], 0, 0)
    monkeypatch.undo()
    assert index.rebuild("a") is True
    assert index.stats().hnsw_partitions == 1


# -- persistence ---------------------------------------------------------------------------------


def test_save_then_load_restores_search_results_and_tombstones(tmp_path: Path) -> None:
    index, vectors = hnsw_index()
    index.remove([2, 3])
    small = unit_vectors(5, seed=11)
    index.add("small", np.arange(501, 506), small)
    assert index.save(tmp_path, embedding_model=MODEL) == 103

    loaded = ScopedVectorIndex(DIM, hnsw_min_entries=50)
    assert loaded.load(tmp_path, embedding_model=MODEL) is not None

    before, after = index.stats(), loaded.stats()
    assert (after.entries, after.tombstones, after.partitions, after.hnsw_partitions) == (103, 2, 2, 1)
    assert (before.entries, before.tombstones, before.partitions, before.hnsw_partitions) == (103, 2, 2, 1)
    assert loaded.ids() == index.ids()
    for scope, queries in (("a", vectors[:20]), ("small", small)):
        for query in queries:
            assert loaded.search(scope, query, k=4) == index.search(scope, query, k=4)
    assert 2 not in {i for i, _ in loaded.search("a", vectors[1], k=10)}


def test_a_loaded_index_still_accepts_changes(tmp_path: Path) -> None:
    index, vectors = hnsw_index()
    index.add("small", np.arange(501, 506), unit_vectors(5, seed=11))
    index.save(tmp_path, embedding_model=MODEL)
    loaded = ScopedVectorIndex(DIM, hnsw_min_entries=50)
    loaded.load(tmp_path, embedding_model=MODEL)

    loaded.remove([1, 501])
    fresh = unit_vectors(1, seed=12)
    loaded.add("small", np.array([600]), fresh)

    assert loaded.stats().tombstones == 1  # 1 in the HNSW scope; 501 really deleted from the flat one
    assert 1 not in {i for i, _ in loaded.search("a", vectors[0], k=5)}
    assert nearest_id(loaded, "small", fresh[0]) == 600
    assert len(loaded) == 104


def test_load_without_a_snapshot(tmp_path: Path) -> None:
    assert ScopedVectorIndex(DIM).load(tmp_path, embedding_model=MODEL) is None


@pytest.mark.parametrize(("dimension", "model"), [(DIM, "another-model"), (DIM * 2, MODEL)])
def test_load_refuses_a_snapshot_of_another_model_or_dimension(tmp_path: Path, dimension: int, model: str) -> None:
    index, _ = filled("a", range(1, 11))
    index.save(tmp_path, embedding_model=MODEL)

    other = ScopedVectorIndex(dimension)
    assert other.load(tmp_path, embedding_model=model) is None
    assert len(other) == 0


def test_load_replaces_what_was_there(tmp_path: Path) -> None:
    index, vectors = filled("a", range(1, 11))
    index.save(tmp_path, embedding_model=MODEL)
    other, _ = filled("b", range(100, 105), seed=4)
    assert other.load(tmp_path, embedding_model=MODEL)
    assert other.ids() == set(range(1, 11))
    assert other.search("b", vectors[0]) == []


# -- stats ---------------------------------------------------------------------------------------


def test_stats_counts() -> None:
    index = ScopedVectorIndex(DIM, hnsw_min_entries=50)
    assert index.stats().entries == 0
    index.add("big", np.arange(1, 61), unit_vectors(60))
    index.add("x", np.arange(100, 103), unit_vectors(3, seed=1))
    index.add("y", np.arange(200, 202), unit_vectors(2, seed=2))
    index.rebuild("big")
    index.remove([1, 2, 100])

    stats = index.stats()
    assert stats.entries == len(index) == 62
    assert stats.partitions == 3
    assert stats.hnsw_partitions == 1
    assert stats.tombstones == 2
    assert stats.rebuilds == 1
    assert stats.rebuilding == 0
    assert stats.rebuild_progress == []


def test_a_search_uses_one_thread_and_leaves_the_callers_setting_alone() -> None:
    """A single query gains nothing from an OpenMP team; the thread's own setting (torch's, in the
    embedding thread) must be as it was after the search."""
    index, vectors = filled("s", range(50))
    seen: list[tuple[int, int]] = []

    def search_in_a_thread() -> None:
        faiss.omp_set_num_threads(2)
        found = index.search("s", vectors[7], 1)
        seen.append((found[0][0], faiss.omp_get_max_threads()))

    worker = threading.Thread(target=search_in_a_thread)
    worker.start()
    worker.join()
    assert seen == [(7, 2)]


def test_a_snapshot_read_straight_into_faiss_is_the_saved_index_and_a_damaged_one_is_refused(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    vectors = rng.standard_normal((300, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index = ScopedVectorIndex(8, hnsw_min_entries=100)
    index.add("big", np.arange(1, 201), vectors[:200])
    index.rebuild("big")  # HNSW
    index.add("small", np.arange(201, 301), vectors[200:])
    index.remove([5])
    index.save(tmp_path, embedding_model="m")

    loaded = ScopedVectorIndex(8, hnsw_min_entries=100)
    assert loaded.install(read_snapshot(tmp_path), embedding_model="m") is not None
    assert loaded.ids() == set(range(1, 301)) - {5}
    for row in (0, 150, 250):
        scope = "big" if row < 200 else "small"
        assert loaded.search(scope, vectors[row])[0] == index.search(scope, vectors[row])[0]

    path = tmp_path / "snapshot.npz"
    with zipfile.ZipFile(path) as archive:
        small = archive.getinfo("p1.npy")  # the flat partition: its vectors start near its beginning
    damaged = bytearray(path.read_bytes())
    damaged[small.header_offset + 1500] ^= 0xFF  # a bit of a vector, which only the CRC can tell
    path.write_bytes(bytes(damaged))
    with pytest.raises(ValueError, match="damaged"):
        read_snapshot(tmp_path)
