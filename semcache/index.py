"""The vector index: one FAISS inner-product index per scope, over unit vectors (so IP = cosine).

Partitioning by scope means a search can only ever see entries of the request's own scope, and a
small scope (one conversation) costs a tiny exact index. A scope starts as an exact flat index and
is rebuilt as HNSW once it reaches ``hnsw_min_entries``. HNSW cannot remove vectors, so removals
there become tombstones that searches skip, and a background rebuild drops them.

FAISS does not support adding and searching at the same time: every touch of a FAISS object holds
``self._lock``. Rebuilds build the new index outside the lock and swap it in atomically.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import faiss as _faiss
import numpy as np

# faiss's bundled type stubs describe the C++ signatures, not the numpy-friendly wrappers its
# Python layer installs (remove_ids(array), add_with_ids(array, array)); treat it as untyped.
faiss: Any = _faiss

SNAPSHOT_VERSION = 1
_MAX_TOMBSTONE_OVERFETCH = 64


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


@dataclass(frozen=True)
class IndexStats:
    entries: int
    tombstones: int
    partitions: int
    hnsw_partitions: int
    rebuilds: int
    rebuilding: int


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
    ) -> None:
        self.dimension = dimension
        self.hnsw_min_entries = hnsw_min_entries
        self._hnsw_m = hnsw_m
        self._ef_search = hnsw_ef_search
        self._ef_construction = hnsw_ef_construction
        self._max_tombstone_ratio = max_tombstone_ratio
        self._lock = threading.Lock()
        self._save_lock = threading.Lock()
        self._partitions: dict[str, _Partition] = {}
        self._scope_of: dict[int, str] = {}
        self._rebuilds = 0

    # -- reads -------------------------------------------------------------------------------

    def search(self, scope: str, vector: np.ndarray, k: int = 4) -> list[tuple[int, float]]:
        """The ``k`` nearest live entries of ``scope``, as (id, cosine), best first."""
        query = np.ascontiguousarray(vector, dtype=np.float32).reshape(1, -1)
        with self._lock:
            partition = self._partitions.get(scope)
            if partition is None or partition.index.ntotal == 0:
                return []
            fetch = k + min(len(partition.tombstones), _MAX_TOMBSTONE_OVERFETCH)
            similarities, ids = partition.index.search(query, min(fetch, int(partition.index.ntotal)))
            tombstones = set(partition.tombstones)
        found = [
            (int(i), float(s)) for i, s in zip(ids[0], similarities[0], strict=True) if i >= 0 and i not in tombstones
        ]
        return found[:k]

    def __len__(self) -> int:
        with self._lock:
            return len(self._scope_of)

    def __contains__(self, entry_id: int) -> bool:
        with self._lock:
            return entry_id in self._scope_of

    def stats(self) -> IndexStats:
        with self._lock:
            return IndexStats(
                entries=len(self._scope_of),
                tombstones=sum(len(p.tombstones) for p in self._partitions.values()),
                partitions=len(self._partitions),
                hnsw_partitions=sum(p.kind == "hnsw" for p in self._partitions.values()),
                rebuilds=self._rebuilds,
                rebuilding=sum(p.pending is not None for p in self._partitions.values()),
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
        kind = self._kind_for(partition.kind, len(ids))
        try:
            fresh = self._new_index(kind)
            if len(ids):
                fresh.add_with_ids(vectors, ids)
        except BaseException:
            with self._lock:
                partition.pending = None
            raise
        with self._lock:
            tombstones = self._replay_locked(fresh, kind, partition.pending)
            if fresh.ntotal - len(tombstones) > 0:
                self._partitions[scope] = _Partition(fresh, kind, tombstones)
            else:
                self._partitions.pop(scope, None)
            self._rebuilds += 1
        return True

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

    def save(self, folder: Path, *, embedding_model: str) -> int:
        """Write a snapshot atomically; returns the number of entries saved."""
        folder.mkdir(parents=True, exist_ok=True)
        arrays: dict[str, Any] = {}
        manifest: dict = {
            "version": SNAPSHOT_VERSION,
            "dimension": self.dimension,
            "embedding_model": embedding_model,
            "saved_at": time.time(),
            "partitions": [],
        }
        with self._lock:
            for number, (scope, partition) in enumerate(self._partitions.items()):
                if partition.pending is not None:
                    continue  # mid-rebuild: the store will fill these in at load time
                arrays[f"p{number}"] = faiss.serialize_index(partition.index)
                arrays[f"t{number}"] = np.fromiter(partition.tombstones, dtype=np.int64)
                manifest["partitions"].append({"scope": scope, "key": number, "kind": partition.kind})
            saved = len(self._scope_of)
        with self._save_lock:  # one writer at a time: a shutdown may meet a periodic snapshot
            temporary = folder / f".snapshot-{os.getpid()}-{threading.get_ident()}.tmp.npz"
            np.savez(temporary, manifest=np.frombuffer(json.dumps(manifest).encode(), dtype=np.uint8), **arrays)
            with open(temporary, "rb") as handle:
                os.fsync(handle.fileno())
            os.replace(temporary, folder / "snapshot.npz")
        return saved

    def load(self, folder: Path, *, embedding_model: str) -> bool:
        """Load a snapshot if one exists and fits this model; returns whether one was loaded."""
        path = folder / "snapshot.npz"
        if not path.exists():
            return False
        with np.load(path, allow_pickle=False) as data:
            manifest = json.loads(data["manifest"].tobytes())
            if (
                manifest.get("version") != SNAPSHOT_VERSION
                or manifest.get("dimension") != self.dimension
                or manifest.get("embedding_model") != embedding_model
            ):
                return False
            partitions: dict[str, _Partition] = {}
            for item in manifest["partitions"]:
                index = faiss.deserialize_index(data[f"p{item['key']}"])  # already an IndexIDMap2
                partitions[item["scope"]] = _Partition(index, item["kind"], set(data[f"t{item['key']}"].tolist()))
        with self._lock:
            self._partitions = partitions
            self._scope_of = {}
            for scope, partition in partitions.items():
                for entry_id in faiss.vector_to_array(partition.index.id_map):
                    if int(entry_id) not in partition.tombstones:
                        self._scope_of[int(entry_id)] = scope
        return True

    def ids(self) -> set[int]:
        with self._lock:
            return set(self._scope_of)
