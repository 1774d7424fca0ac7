"""The vector index: one FAISS inner-product index per scope, over unit vectors (so IP = cosine).

Partitioning by scope means a search can only ever see entries of the request's own scope, and a
small scope (one conversation) costs a tiny exact index. A scope starts as an exact flat index and
is rebuilt as HNSW once it reaches ``hnsw_min_entries``. HNSW cannot remove vectors, so removals
there become tombstones that searches skip, and a background rebuild drops them.

FAISS does not support adding and searching at the same time: every touch of a FAISS object holds
``self._lock``. Rebuilds build the new index outside the lock, in chunks so that ``stats()`` can
report their progress, and swap it in atomically.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import faiss as _faiss
import numpy as np

from .wording import counted

# faiss's bundled type stubs describe the C++ signatures, not the numpy-friendly wrappers its
# Python layer installs (remove_ids(array), add_with_ids(array, array)); treat it as untyped.
faiss: Any = _faiss

log = logging.getLogger("semcache.index")

SNAPSHOT_VERSION = 1
_MAX_TOMBSTONE_OVERFETCH = 64
# Vectors per add during a rebuild: big enough that the per-call overhead is noise next to the
# HNSW insertions, small enough that progress moves every second or two.
REBUILD_CHUNK = 20_000


_NO_TOMBSTONES: frozenset[int] = frozenset()


@dataclass
class _Partition:
    index: faiss.IndexIDMap2
    kind: str  # "flat" or "hnsw"
    tombstones: set[int] = field(default_factory=set)
    # While a rebuild runs, changes are logged here and replayed onto the new index before the swap.
    pending: list[tuple[str, np.ndarray, np.ndarray | None]] | None = None

    @property
    def live_count(self) -> int:
        return int(self.index.ntotal) - len(self.tombstones)


@dataclass
class _Rebuild:
    kind: str
    total: int
    done: int = 0
    started_at: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class RebuildProgress:
    """One running rebuild, as of the ``stats()`` call."""

    scope: str
    kind: str  # the kind being built
    done: int  # vectors added to the new index so far
    total: int
    seconds: float  # since the rebuild started


@dataclass(frozen=True)
class IndexStats:
    entries: int
    tombstones: int
    partitions: int
    hnsw_partitions: int
    rebuilds: int
    rebuilding: int
    rebuild_progress: list[RebuildProgress] = field(default_factory=list)


class ScopedVectorIndex:
    def __init__(
        self,
        dimension: int,
        *,
        hnsw_min_entries: int = 10_000,
        hnsw_m: int = 32,
        hnsw_ef_search: int = 64,
        hnsw_ef_construction: int = 80,
        max_tombstone_ratio: float = 0.2,
        rebuild_chunk: int = REBUILD_CHUNK,
    ) -> None:
        self.dimension = dimension
        self.hnsw_min_entries = hnsw_min_entries
        self._hnsw_m = hnsw_m
        self._ef_search = hnsw_ef_search
        self._ef_construction = hnsw_ef_construction
        self._max_tombstone_ratio = max_tombstone_ratio
        self._rebuild_chunk = max(rebuild_chunk, 1)
        self._lock = threading.Lock()
        self._save_lock = threading.Lock()
        self._partitions: dict[str, _Partition] = {}
        self._scope_of: dict[int, str] = {}
        self._rebuilds = 0
        self._running: dict[str, _Rebuild] = {}  # scope -> progress of its rebuild

    # -- reads -------------------------------------------------------------------------------

    def search(self, scope: str, vector: np.ndarray, k: int = 4) -> list[tuple[int, float]]:
        """The ``k`` nearest live entries of ``scope``, as (id, cosine), best first."""
        return self.search_many(scope, np.asarray(vector).reshape(1, -1), k)[0]

    def search_many(self, scope: str, vectors: np.ndarray, k: int = 4) -> list[list[tuple[int, float]]]:
        """``search`` for each row of ``vectors`` (n, d), in one FAISS call."""
        queries = np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1, self.dimension)
        with self._lock:
            partition = self._partitions.get(scope)
            total = 0 if partition is None else int(partition.index.ntotal)
            if partition is None or total == 0:
                return [[] for _ in range(len(queries))]
            fetch = k + min(len(partition.tombstones), _MAX_TOMBSTONE_OVERFETCH)
            similarities, ids = _search_one_thread(partition.index, queries, min(fetch, total))
            tombstones = set(partition.tombstones) if partition.tombstones else _NO_TOMBSTONES
        # As Python numbers at once (tolist), not one numpy scalar at a time.
        return [
            [(i, s) for i, s in zip(row_ids, row_similarities, strict=True) if i >= 0 and i not in tombstones][:k]
            for row_ids, row_similarities in zip(ids.tolist(), similarities.tolist(), strict=True)
        ]

    def __len__(self) -> int:
        with self._lock:
            return len(self._scope_of)

    def __contains__(self, entry_id: int) -> bool:
        with self._lock:
            return entry_id in self._scope_of

    def stats(self) -> IndexStats:
        with self._lock:
            now = time.monotonic()  # under the lock: no run can have started after it
            return IndexStats(
                entries=len(self._scope_of),
                tombstones=sum(len(p.tombstones) for p in self._partitions.values()),
                partitions=len(self._partitions),
                hnsw_partitions=sum(p.kind == "hnsw" for p in self._partitions.values()),
                rebuilds=self._rebuilds,
                rebuilding=sum(p.pending is not None for p in self._partitions.values()),
                rebuild_progress=[
                    RebuildProgress(scope, run.kind, run.done, run.total, now - run.started_at)
                    for scope, run in self._running.items()
                ],
            )

    # -- writes ------------------------------------------------------------------------------

    def add(self, scope: str, ids: np.ndarray, vectors: np.ndarray) -> None:
        ids = np.ascontiguousarray(ids, dtype=np.int64).reshape(-1)
        vectors = np.ascontiguousarray(vectors, dtype=np.float32).reshape(len(ids), self.dimension)
        with self._lock:
            partition = self._partitions.get(scope)
            if partition is None:
                partition = self._partitions[scope] = _Partition(self._new_index("flat"), "flat")
            stale = [int(i) for i in ids if int(i) in self._scope_of]
            if stale:
                self._remove_locked(stale)
            partition.index.add_with_ids(vectors, ids)
            if partition.pending is not None:
                partition.pending.append(("add", ids, vectors))
            for entry_id in ids:
                self._scope_of[int(entry_id)] = scope

    def remove(self, ids: list[int]) -> None:
        with self._lock:
            self._remove_locked(ids)

    def _remove_locked(self, ids: list[int]) -> None:
        by_scope: dict[str, list[int]] = {}
        for entry_id in ids:
            scope = self._scope_of.pop(int(entry_id), None)
            if scope is not None:
                by_scope.setdefault(scope, []).append(int(entry_id))
        for scope, scope_ids in by_scope.items():
            partition = self._partitions[scope]
            id_array = np.asarray(scope_ids, dtype=np.int64)
            if partition.pending is not None:
                partition.pending.append(("remove", id_array, None))
            if partition.kind == "flat":
                partition.index.remove_ids(id_array)
            else:
                partition.tombstones.update(scope_ids)
            if partition.live_count == 0 and partition.pending is None:
                del self._partitions[scope]

    # -- maintenance -------------------------------------------------------------------------

    def scopes_needing_rebuild(self) -> list[str]:
        """Scopes that outgrew the flat index, or whose HNSW index carries too many tombstones."""
        with self._lock:
            return [scope for scope, p in self._partitions.items() if p.pending is None and self._wants_rebuild(p)]

    def _kind_for(self, current: str, live: int) -> str:
        """Flat below ``hnsw_min_entries``; an HNSW scope goes back to flat only below half of it."""
        floor = self.hnsw_min_entries // 2 if current == "hnsw" else self.hnsw_min_entries
        return "hnsw" if live >= floor else "flat"

    def _wants_rebuild(self, partition: _Partition) -> bool:
        if partition.kind == "flat":
            return partition.live_count >= self.hnsw_min_entries
        if partition.live_count < self.hnsw_min_entries // 2:
            return True  # shrank: exact search is cheaper again
        return len(partition.tombstones) > self._max_tombstone_ratio * max(int(partition.index.ntotal), 1)

    def rebuild(self, scope: str) -> bool:
        """Rebuild one scope's index without blocking searches; returns False if there was nothing to do.

        Blocking and slow for large scopes: run it in a worker thread.
        """
        with self._lock:
            partition = self._partitions.get(scope)
            if partition is None or partition.pending is not None:
                return False
            ids, vectors = self._live_vectors_locked(partition)
            partition.pending = []
            run = self._running[scope] = _Rebuild(self._kind_for(partition.kind, len(ids)), len(ids))
        log.info("index rebuild of scope %s started: %s into %s", scope, counted(run.total, "vector"), run.kind)
        try:
            fresh = self._new_index(run.kind)
            self._add_in_chunks(scope, run, fresh, ids, vectors)
        except BaseException:
            with self._lock:
                partition.pending = None
                del self._running[scope]
            raise
        with self._lock:
            tombstones = self._replay_locked(fresh, run.kind, partition.pending)
            if fresh.ntotal - len(tombstones) > 0:
                self._partitions[scope] = _Partition(fresh, run.kind, tombstones)
            else:
                self._partitions.pop(scope, None)
            self._rebuilds += 1
            del self._running[scope]
        seconds = time.monotonic() - run.started_at
        log.info("index rebuild of scope %s done: %s into %s in %.1f s", scope, counted(run.total, "vector"), run.kind,
                 seconds)  # fmt: skip
        return True

    def _add_in_chunks(
        self, scope: str, run: _Rebuild, fresh: faiss.IndexIDMap2, ids: np.ndarray, vectors: np.ndarray
    ) -> None:
        """Fill the new index chunk by chunk, publishing progress and logging about every 10%."""
        log_every = max(run.total // 10, 1)
        logged = 0
        for start in range(0, run.total, self._rebuild_chunk):
            end = min(start + self._rebuild_chunk, run.total)
            fresh.add_with_ids(vectors[start:end], ids[start:end])
            with self._lock:
                run.done = end
            if end < run.total and end - logged >= log_every:
                logged = end
                log.info(
                    "index rebuild of scope %s: %d of %d vectors (%d%%)", scope, end, run.total, 100 * end // run.total
                )

    @staticmethod
    def _replay_locked(
        fresh: faiss.IndexIDMap2, kind: str, pending: list[tuple[str, np.ndarray, np.ndarray | None]]
    ) -> set[int]:
        """Apply the changes made during a rebuild; returns the new index's tombstones."""
        tombstones: set[int] = set()
        for op, ids, vectors in pending:
            if op == "add":
                fresh.add_with_ids(vectors, ids)
            elif kind == "flat":
                fresh.remove_ids(ids)
            else:
                tombstones.update(int(i) for i in ids)
        return tombstones

    def _live_vectors_locked(self, partition: _Partition) -> tuple[np.ndarray, np.ndarray]:
        total = int(partition.index.ntotal)
        ids = faiss.vector_to_array(partition.index.id_map).astype(np.int64)
        vectors = partition.index.index.reconstruct_n(0, total) if total else np.zeros((0, self.dimension), np.float32)
        if partition.tombstones:
            keep = np.array([int(i) not in partition.tombstones for i in ids], dtype=bool)
            ids, vectors = ids[keep], vectors[keep]
        return ids, np.ascontiguousarray(vectors, dtype=np.float32)

    def _new_index(self, kind: str) -> faiss.IndexIDMap2:
        if kind == "flat":
            return faiss.IndexIDMap2(faiss.IndexFlatIP(self.dimension))
        inner = faiss.IndexHNSWFlat(self.dimension, self._hnsw_m, faiss.METRIC_INNER_PRODUCT)
        inner.hnsw.efConstruction = self._ef_construction
        inner.hnsw.efSearch = self._ef_search
        return faiss.IndexIDMap2(inner)

    # -- persistence -------------------------------------------------------------------------

    def save(self, folder: Path, *, embedding_model: str, metadata: dict[str, Any] | None = None) -> int:
        """Write a snapshot atomically; returns the number of entries saved. ``metadata`` (JSON)
        comes back from ``load``: the shared store's feed offset, for one."""
        folder.mkdir(parents=True, exist_ok=True)
        arrays: dict[str, Any] = {}
        manifest: dict = {
            "version": SNAPSHOT_VERSION,
            "dimension": self.dimension,
            "embedding_model": embedding_model,
            "saved_at": time.time(),
            "metadata": metadata or {},
            "partitions": [],
        }
        with self._lock:
            for number, (scope, partition) in enumerate(self._partitions.items()):
                if partition.pending is not None:
                    manifest["complete"] = False  # mid-rebuild: reconcile with the store at load time
                    continue
                arrays[f"p{number}"] = faiss.serialize_index(partition.index)
                arrays[f"t{number}"] = np.fromiter(partition.tombstones, dtype=np.int64)
                manifest["partitions"].append({"scope": scope, "key": number, "kind": partition.kind})
            saved = len(self._scope_of)
        with self._save_lock:  # one writer at a time: a shutdown may meet a periodic snapshot
            temporary = folder / f".snapshot-{os.getpid()}-{threading.get_ident()}.tmp.npz"
            try:
                np.savez(temporary, manifest=np.frombuffer(json.dumps(manifest).encode(), dtype=np.uint8), **arrays)
                with open(temporary, "rb") as handle:
                    os.fsync(handle.fileno())
                os.replace(temporary, folder / "snapshot.npz")
            except BaseException:
                temporary.unlink(missing_ok=True)  # a full disk must not keep a half-written copy
                raise
        return saved

    def load(self, folder: Path, *, embedding_model: str) -> dict[str, Any] | None:
        """Load a snapshot if one exists and fits this model; returns its metadata, or None if
        none was loaded."""
        return self.install(read_snapshot(folder), embedding_model=embedding_model)

    def install(self, snapshot: Snapshot | None, *, embedding_model: str) -> dict[str, Any] | None:
        """Take ``snapshot`` (``read_snapshot``'s) as the whole index if it fits this index and
        model; returns its metadata, or None if it was not taken."""
        if snapshot is None or not snapshot.fits(self.dimension, embedding_model):
            return None
        with self._lock:
            self._partitions = snapshot.partitions
            self._scope_of = snapshot.scope_of
        manifest = snapshot.manifest
        return {**(manifest.get("metadata") or {}), "complete": manifest.get("complete", True)}

    def ids(self) -> set[int]:
        with self._lock:
            return set(self._scope_of)


@dataclass
class Snapshot:
    """A saved index read from disk, not yet installed: reading it (the long part) needs neither
    the index nor the embedding model, so it can run while the model loads."""

    manifest: dict[str, Any]
    partitions: dict[str, _Partition]
    scope_of: dict[int, str]

    def fits(self, dimension: int, embedding_model: str) -> bool:
        manifest = self.manifest
        return (
            manifest.get("version") == SNAPSHOT_VERSION
            and manifest.get("dimension") == dimension
            and manifest.get("embedding_model") == embedding_model
        )


def read_snapshot(folder: Path) -> Snapshot | None:
    """The snapshot saved in ``folder``, or None if there is none (or one of another version).
    Blocking and long for a large index: run it in a worker thread."""
    path = folder / "snapshot.npz"
    if not path.exists():
        return None
    with np.load(path, allow_pickle=False) as data, open(path, "rb", buffering=0) as file:
        manifest = json.loads(data["manifest"].tobytes())
        if manifest.get("version") != SNAPSHOT_VERSION:
            return Snapshot(manifest, {}, {})
        partitions: dict[str, _Partition] = {}
        for item in manifest["partitions"]:
            index = _read_partition(data, file, f"p{item['key']}")
            partitions[item["scope"]] = _Partition(index, item["kind"], set(data[f"t{item['key']}"].tolist()))
    scope_of: dict[int, str] = {}
    for scope, partition in partitions.items():
        ids = faiss.vector_to_array(partition.index.id_map)
        if partition.tombstones:
            ids = ids[~np.isin(ids, np.fromiter(partition.tombstones, dtype=np.int64))]
        scope_of.update(dict.fromkeys(ids.tolist(), scope))  # whole arrays: no Python loop per id
    return Snapshot(manifest, partitions, scope_of)


def _read_partition(data: Any, file: BinaryIO, name: str) -> Any:
    """The serialized index stored as ``name`` in the open snapshot ``data`` (an ``NpzFile``), read
    by FAISS straight from ``file`` (the same snapshot): loading the array first, then handing it
    to FAISS, made two copies of every vector, each slow to fault in for a large index. Its CRC is
    checked as it is read, as the zip reader would. A member stored otherwise (compressed) takes the
    array's way."""
    archive = data.zip
    info = archive.getinfo(f"{name}.npy")
    if info.compress_type != zipfile.ZIP_STORED:
        return faiss.deserialize_index(data[name])  # already an IndexIDMap2
    file.seek(info.header_offset)
    local = file.read(30)  # the member's local header: its name's and extra field's lengths end it
    start = info.header_offset + 30 + int.from_bytes(local[26:28], "little") + int.from_bytes(local[28:30], "little")
    file.seek(start)
    version = np.lib.format.read_magic(file)
    read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, _, dtype = read_header(file)
    if dtype != np.uint8 or len(shape) != 1:
        raise ValueError(f"the snapshot's {name} is not a serialized index")
    header = file.tell() - start
    file.seek(start)
    crc, left = zlib.crc32(file.read(header)), int(shape[0])  # the CRC covers the .npy header too

    def read(size: int) -> bytes:
        nonlocal crc, left
        chunk = file.read(min(size, left))
        crc, left = zlib.crc32(chunk, crc), left - len(chunk)
        return chunk

    index = faiss.read_index(faiss.PyCallbackIOReader(read, 1 << 22))  # already an IndexIDMap2
    if left:
        read(left)  # what FAISS left unread still counts in the CRC
    if crc != info.CRC:
        raise ValueError(f"the snapshot's {name} is damaged (CRC mismatch)")
    return index


def _search_one_thread(index: Any, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """One query gains nothing from an OpenMP team, and a team's idle threads spin after it, on
    the cores the event loop and the embedder need. The calling thread's own setting (OpenMP's is
    per thread) is put back after."""
    threads = faiss.omp_get_max_threads()
    if threads == 1:
        return index.search(query, k)
    faiss.omp_set_num_threads(1)
    try:
        return index.search(query, k)
    finally:
        faiss.omp_set_num_threads(threads)
