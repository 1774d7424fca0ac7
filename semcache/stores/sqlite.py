"""The embedded store: entries and their vectors in SQLite (WAL), under the data folder.

Every write runs on one dedicated worker thread that owns the connection, so the event loop never
blocks on disk and SQLite never sees two writers. Point reads (by id, by exact key) run on the
event loop through a read-only connection of their own, and what they read is kept in memory
until the next write commits (``PointReads``). Commits use ``synchronous=FULL``: once ``put``
returns, the entry survives a crash of the process and of the machine. A write the disk refuses
(full, read-only, I/O error) raises ``StoreUnavailable``: the answer is served but not stored, and
reads (hits) go on.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from ..entries import CacheEntry, EntryQuery, NegativeFeedback, RemovedEntry, contains_text
from ..errors import StoreUnavailable
from ..fairness import fair_cuts

T = TypeVar("T")

# How long the ids of added evidence batches are kept: far longer than any resend waits.
_EVIDENCE_BATCHES_KEPT_S = 7 * 24 * 3600
_COLUMNS = (
    "id, namespace, scope, exact_key, model, prompt, answer, created_at, expires_at, last_access, hits, vector, "
    "min_similarity, tool_calls"
)


def _m001_entries(db: sqlite3.Connection) -> None:
    db.execute(
        """CREATE TABLE entries (
            id INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: ids double as FAISS ids
            namespace TEXT NOT NULL,
            scope TEXT NOT NULL,
            exact_key TEXT NOT NULL UNIQUE,
            model TEXT NOT NULL,
            prompt TEXT NOT NULL,
            answer TEXT NOT NULL,
            created_at REAL NOT NULL,
            expires_at REAL,
            last_access REAL NOT NULL,
            hits INTEGER NOT NULL DEFAULT 0,
            vector BLOB
        )"""
    )
    db.execute("CREATE INDEX entries_expires_at ON entries(expires_at) WHERE expires_at IS NOT NULL")
    db.execute("CREATE INDEX entries_last_access ON entries(last_access)")
    db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")


def _m002_feedback_and_namespace_config(db: sqlite3.Connection) -> None:
    db.execute("ALTER TABLE entries ADD COLUMN min_similarity REAL")
    db.execute(
        """CREATE TABLE feedback (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            entry_id INTEGER NOT NULL,
            query_key TEXT NOT NULL,
            vector BLOB,
            similarity REAL,
            created_at REAL NOT NULL
        )"""
    )
    db.execute("CREATE INDEX feedback_entry_id ON feedback(entry_id)")
    db.execute("CREATE TABLE namespace_config (namespace TEXT PRIMARY KEY, config TEXT NOT NULL)")


def _m003_tool_call_answers(db: sqlite3.Connection) -> None:
    db.execute("ALTER TABLE entries ADD COLUMN tool_calls TEXT")  # JSON, for cached tool-call answers


def _m004_namespace_index(db: sqlite3.Connection) -> None:
    db.execute("CREATE INDEX entries_namespace ON entries(namespace, id)")  # admin listing by namespace


def _m005_evidence(db: sqlite3.Connection) -> None:
    # The error budgets' counters (semcache.decision.budget), added to as evidence arrives.
    db.execute(
        """CREATE TABLE evidence (
            namespace TEXT NOT NULL,
            language TEXT NOT NULL,
            name TEXT NOT NULL,
            count INTEGER NOT NULL,
            PRIMARY KEY (namespace, language, name)
        )"""
    )
    # Batches already added: a batch resent (its first write may have landed) counts once.
    db.execute("CREATE TABLE evidence_batches (id TEXT PRIMARY KEY, added_at REAL NOT NULL)")


def _m006_embeddings(db: sqlite3.Connection) -> None:
    # The embeddings route's vectors (semcache.embedding_cache), float32 bytes by input key.
    db.execute(
        """CREATE TABLE embeddings (
            key TEXT PRIMARY KEY,
            vector BLOB NOT NULL,
            expires_at REAL,
            last_use REAL NOT NULL
        ) WITHOUT ROWID"""
    )
    db.execute("CREATE INDEX embeddings_expires_at ON embeddings(expires_at) WHERE expires_at IS NOT NULL")
    db.execute("CREATE INDEX embeddings_last_use ON embeddings(last_use)")


def _m007_namespace_sizes(db: sqlite3.Connection) -> None:
    # The size bound takes from the namespace holding the most (semcache.fairness): how many each
    # holds, kept by triggers, and each namespace's entries by recency.
    db.execute("CREATE INDEX entries_namespace_recency ON entries(namespace, last_access)")
    db.execute("CREATE TABLE namespace_sizes (namespace TEXT PRIMARY KEY, entries INTEGER NOT NULL) WITHOUT ROWID")
    db.execute("INSERT INTO namespace_sizes SELECT namespace, count(*) FROM entries GROUP BY namespace")
    db.execute(
        """CREATE TRIGGER entries_counted AFTER INSERT ON entries BEGIN
            INSERT INTO namespace_sizes VALUES (new.namespace, 1)
                ON CONFLICT (namespace) DO UPDATE SET entries = entries + 1;
        END"""
    )
    db.execute(
        """CREATE TRIGGER entries_uncounted AFTER DELETE ON entries BEGIN
            UPDATE namespace_sizes SET entries = entries - 1 WHERE namespace = old.namespace;
            DELETE FROM namespace_sizes WHERE namespace = old.namespace AND entries <= 0;
        END"""
    )


def _m008_embedding_namespaces(db: sqlite3.Connection) -> None:
    # The embeddings' size bound takes from the namespace holding the most, as the entries' does.
    # Vectors stored before hold '' (their key is a digest: the namespace cannot be recovered) and
    # go first.
    db.execute("ALTER TABLE embeddings ADD COLUMN namespace TEXT NOT NULL DEFAULT ''")
    db.execute("DROP INDEX embeddings_last_use")
    db.execute("CREATE INDEX embeddings_namespace_recency ON embeddings(namespace, last_use)")
    db.execute(
        "CREATE TABLE embedding_namespace_sizes (namespace TEXT PRIMARY KEY, embeddings INTEGER NOT NULL) WITHOUT ROWID"
    )
    db.execute("INSERT INTO embedding_namespace_sizes SELECT namespace, count(*) FROM embeddings GROUP BY namespace")
    db.execute(
        """CREATE TRIGGER embeddings_counted AFTER INSERT ON embeddings BEGIN
            INSERT INTO embedding_namespace_sizes VALUES (new.namespace, 1)
                ON CONFLICT (namespace) DO UPDATE SET embeddings = embeddings + 1;
        END"""
    )
    db.execute(
        """CREATE TRIGGER embeddings_uncounted AFTER DELETE ON embeddings BEGIN
            UPDATE embedding_namespace_sizes SET embeddings = embeddings - 1 WHERE namespace = old.namespace;
            DELETE FROM embedding_namespace_sizes WHERE namespace = old.namespace AND embeddings <= 0;
        END"""
    )
    db.execute(
        """CREATE TRIGGER embeddings_recounted AFTER UPDATE OF namespace ON embeddings
            WHEN old.namespace <> new.namespace BEGIN
            UPDATE embedding_namespace_sizes SET embeddings = embeddings - 1 WHERE namespace = old.namespace;
            DELETE FROM embedding_namespace_sizes WHERE namespace = old.namespace AND embeddings <= 0;
            INSERT INTO embedding_namespace_sizes VALUES (new.namespace, 1)
                ON CONFLICT (namespace) DO UPDATE SET embeddings = embeddings + 1;
        END"""
    )


MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [
    _m001_entries,
    _m002_feedback_and_namespace_config,
    _m003_tool_call_answers,
    _m004_namespace_index,
    _m005_evidence,
    _m006_embeddings,
    _m007_namespace_sizes,
    _m008_embedding_namespaces,
]


@contextmanager
def _transaction(db: sqlite3.Connection) -> Iterator[None]:
    """An explicit transaction; the connection runs in autocommit mode otherwise."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def migrate(db: sqlite3.Connection) -> None:
    """Apply, in order, the migrations not yet recorded in ``_migrations``."""
    db.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
    applied = {row[0] for row in db.execute("SELECT name FROM _migrations")}
    for migration in MIGRATIONS:
        if migration.__name__ in applied:
            continue
        with _transaction(db):
            migration(db)
            db.execute("INSERT INTO _migrations VALUES (?, ?)", (migration.__name__, time.time()))


class PointReads:
    """Entries read by id or by exact key (or found missing), kept until the next write commits.

    A hit then costs a dictionary lookup instead of a query, which in a server is slow for its size:
    SQLite's code and pages go cold between requests.
    Every write empties it as it ends (``clear``, before the write's call returns), so a read that
    starts after a write returned never sees what the write replaced. A read that raced a write is
    not kept: ``keep`` takes the generation from before the read, and a write in between moved it on.
    """

    def __init__(self, capacity: int = 4096) -> None:
        self._capacity = capacity
        self._entries: dict[tuple[str, object], CacheEntry | None] = {}
        self._generation = 0
        self._lock = threading.Lock()  # writes clear it from the store's thread

    @property
    def generation(self) -> int:
        return self._generation

    def get(self, column: str, value: object) -> tuple[bool, CacheEntry | None]:
        """(known, entry): the entry kept, or None for one known to be missing."""
        try:
            return True, self._entries[(column, value)]
        except KeyError:
            return False, None

    def keep(self, column: str, value: object, entry: CacheEntry | None, generation: int) -> None:
        with self._lock:
            if generation != self._generation:
                return  # a write ended since the read began: what it read may be gone
            if len(self._entries) >= self._capacity:
                del self._entries[next(iter(self._entries))]  # the oldest
            self._entries[(column, value)] = entry

    def clear(self) -> None:
        with self._lock:
            self._generation += 1
            self._entries.clear()


class SQLiteStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="semcache-sqlite")
        self._db: sqlite3.Connection | None = None
        # Point reads by key run on the event loop through a connection of their own: in WAL mode
        # they never wait for the writer, and cost less than the hop to a thread would.
        self._reader: sqlite3.Connection | None = None
        self._point_reads = PointReads()

    async def open(self) -> None:
        await self._call(self._open)

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("PRAGMA busy_timeout=5000")
        migrate(db)
        # The same case-insensitive match as EntryQuery.matches; SQLite's own LIKE folds ASCII only.
        db.create_function("semcache_contains", 2, _contains, deterministic=True)
        reader = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        reader.execute("PRAGMA query_only=1")
        reader.execute("PRAGMA busy_timeout=0")  # never block the loop: a busy read goes to the thread
        self._db, self._reader = db, reader

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self._db is not None:
            await self._call(self._db.close)
            self._db = None
        self._executor.shutdown(wait=True)

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)
        except sqlite3.OperationalError as exc:
            if _cannot_write(exc):  # a full disk or a broken folder: the caller answers without the store
                raise StoreUnavailable(f"the embedded store cannot write: {exc}") from exc
            raise

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """A write transaction; once it ends, committed or not, the point reads kept are dropped."""
        try:
            with _transaction(self.db):
                yield
        finally:
            self._point_reads.clear()

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            raise RuntimeError("the store is not open")
        return self._db

    # -- Store protocol ------------------------------------------------------------------------

    async def put(self, entry: CacheEntry) -> tuple[int, list[RemovedEntry]]:
        return await self._call(self._put, entry)

    def _put(self, entry: CacheEntry) -> tuple[int, list[RemovedEntry]]:
        with self._writing():
            return self._insert(entry)

    async def put_many(self, entries: Sequence[CacheEntry]) -> list[tuple[int, list[RemovedEntry]]]:
        return await self._call(self._put_many, list(entries))

    def _put_many(self, entries: list[CacheEntry]) -> list[tuple[int, list[RemovedEntry]]]:
        with self._writing():  # one commit (one fsync) for the batch
            return [self._insert(entry) for entry in entries]

    def _insert(self, entry: CacheEntry) -> tuple[int, list[RemovedEntry]]:
        """Insert, replacing the entry with the same exact key; inside the caller's transaction."""
        vector = None if entry.vector is None else np.asarray(entry.vector, dtype=np.float32).tobytes()
        removed = [
            RemovedEntry(row[0], row[1])
            for row in self.db.execute(
                "DELETE FROM entries WHERE exact_key = ? RETURNING id, scope", (entry.exact_key,)
            )
        ]
        cursor = self.db.execute(
            f"INSERT INTO entries ({_COLUMNS}) VALUES (NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                entry.namespace,
                entry.scope,
                entry.exact_key,
                entry.model,
                entry.prompt,
                entry.answer,
                entry.created_at,
                entry.expires_at,
                entry.last_access or entry.created_at,
                entry.hits,
                vector,
                entry.min_similarity,
                None if entry.tool_calls is None else json.dumps(entry.tool_calls),
            ),
        )
        entry_id = cursor.lastrowid
        assert entry_id is not None
        return entry_id, removed

    async def get(self, entry_id: int) -> CacheEntry | None:
        return await self._point_read("id", entry_id)

    async def get_by_exact_key(self, exact_key: str) -> CacheEntry | None:
        return await self._point_read("exact_key", exact_key)

    async def _point_read(self, column: str, value: object) -> CacheEntry | None:
        known, entry = self._point_reads.get(column, value)
        if known:
            return entry
        generation = self._point_reads.generation
        entry = await self._read_one(column, value)
        self._point_reads.keep(column, value, entry, generation)
        return entry

    async def _read_one(self, column: str, value: object) -> CacheEntry | None:
        if self._reader is not None:
            try:
                return _select_one(self._reader, column, value)
            except sqlite3.OperationalError:  # busy (a checkpoint, a recovery): wait on the store's thread
                pass
        return await self._call(self._get_one, column, value)

    def _get_one(self, column: str, value: object) -> CacheEntry | None:
        return _select_one(self.db, column, value)

    async def touch(self, accesses: dict[int, float]) -> None:
        if accesses:
            await self._call(self._touch, list(accesses.items()))

    def _touch(self, accesses: list[tuple[int, float]]) -> None:
        with self._writing():
            self.db.executemany(
                "UPDATE entries SET last_access = max(last_access, ?), hits = hits + 1 WHERE id = ?",
                [(at, entry_id) for entry_id, at in accesses],
            )

    async def delete_expired(self, now: float) -> list[RemovedEntry]:
        return await self._call(
            self._delete_returning, "DELETE FROM entries WHERE expires_at <= ? RETURNING id, scope", (now,)
        )

    async def evict_fairly(self, keep: int) -> list[RemovedEntry]:
        return await self._call(self._evict_fairly, keep)

    def _evict_fairly(self, keep: int) -> list[RemovedEntry]:
        sizes = dict(self.db.execute("SELECT namespace, entries FROM namespace_sizes").fetchall())
        cuts = fair_cuts(sizes, keep)
        if not cuts:
            return []
        removed: list[RemovedEntry] = []
        with self._writing():
            for namespace, cut in cuts.items():
                rows = self.db.execute(
                    "DELETE FROM entries WHERE id IN (SELECT id FROM entries WHERE namespace = ? "
                    "ORDER BY last_access ASC, id ASC LIMIT ?) RETURNING id, scope",
                    (namespace, cut),
                )
                removed += [RemovedEntry(row[0], row[1]) for row in rows]
        return removed

    async def delete(self, entry_ids: Iterable[int]) -> list[RemovedEntry]:
        ids = list(entry_ids)
        return await self._call(self._delete_ids, ids) if ids else []

    def _delete_ids(self, ids: list[int]) -> list[RemovedEntry]:
        removed: list[RemovedEntry] = []
        with self._writing():  # one commit however many: a flush of a million entries stays fast
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                marks = ",".join("?" * len(chunk))
                rows = self.db.execute(f"DELETE FROM entries WHERE id IN ({marks}) RETURNING id, scope", chunk)
                removed += [RemovedEntry(row[0], row[1]) for row in rows]
        return removed

    def _delete_returning(self, sql: str, params: Iterable[object]) -> list[RemovedEntry]:
        with self._writing():
            return [RemovedEntry(row[0], row[1]) for row in self.db.execute(sql, tuple(params))]

    async def count(self) -> int:
        return await self._call(lambda: int(self.db.execute("SELECT count(*) FROM entries").fetchone()[0]))

    async def vectors(self, batch_size: int = 10_000) -> AsyncIterator[tuple[list[int], list[str], np.ndarray]]:
        last_id = 0
        while True:
            rows = await self._call(self._vector_batch, last_id, batch_size)
            if not rows:
                return
            last_id = rows[-1][0]
            usable = [(entry_id, scope, blob) for entry_id, scope, blob in rows if blob is not None]
            if usable:
                matrix = np.vstack([np.frombuffer(blob, dtype=np.float32) for _, _, blob in usable])
                yield [entry_id for entry_id, _, _ in usable], [scope for _, scope, _ in usable], matrix

    def _vector_batch(self, after_id: int, limit: int) -> list[tuple[int, str, bytes | None]]:
        return self.db.execute(
            "SELECT id, scope, vector FROM entries WHERE id > ? ORDER BY id LIMIT ?", (after_id, limit)
        ).fetchall()

    async def entries(
        self, query: EntryQuery, *, after_id: int = 0, batch_size: int = 500, with_vectors: bool = False
    ) -> AsyncIterator[list[CacheEntry]]:
        while True:
            batch = await self._call(self._entry_batch, query, after_id, batch_size, with_vectors)
            if not batch:
                return
            yield batch
            if len(batch) < batch_size:
                return
            after_id = int(batch[-1].id or 0)

    def _entry_batch(self, query: EntryQuery, after_id: int, limit: int, with_vectors: bool) -> list[CacheEntry]:
        """One page of ``query``'s matches; the filters run in SQL, with the namespace index."""
        conditions: list[str] = ["id > ?"]
        params: list[object] = [after_id]
        if query.namespace is not None:
            conditions.append("namespace = ?")
            params.append(query.namespace)
        if query.created_before is not None:
            conditions.append("created_at < ?")
            params.append(query.created_before)
        if query.text is not None:
            conditions.append("(semcache_contains(prompt, ?) OR semcache_contains(answer, ?))")
            params += [query.text, query.text]
        columns = _COLUMNS if with_vectors else _COLUMNS.replace("vector,", "NULL,")
        sql = f"SELECT {columns} FROM entries WHERE {' AND '.join(conditions)} ORDER BY id LIMIT ?"
        return [_entry_from_row(row) for row in self.db.execute(sql, (*params, limit))]

    # -- used at start-up to reconcile the FAISS snapshot --------------------------------------

    async def stored_ids(self) -> set[int]:
        return await self._call(lambda: {row[0] for row in self.db.execute("SELECT id FROM entries")})

    async def vectors_for(self, entry_ids: list[int]) -> tuple[list[int], list[str], np.ndarray]:
        found_ids: list[int] = []
        scopes: list[str] = []
        rows: list[np.ndarray] = []
        for start in range(0, len(entry_ids), 500):
            chunk = entry_ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            rows_found: list[tuple[int, str, bytes]] = await self._call(
                lambda c=chunk, m=marks: self.db.execute(
                    f"SELECT id, scope, vector FROM entries WHERE id IN ({m}) AND vector IS NOT NULL", c
                ).fetchall()
            )
            for entry_id, scope, blob in rows_found:
                found_ids.append(entry_id)
                scopes.append(scope)
                rows.append(np.frombuffer(blob, dtype=np.float32))
        matrix = np.vstack(rows) if rows else np.zeros((0, 0), dtype=np.float32)
        return found_ids, scopes, matrix

    async def prompts(self) -> list[tuple[int, str, str]]:
        """(id, namespace, prompt) of every entry, to embed them again."""
        return await self._call(
            lambda: self.db.execute("SELECT id, namespace, prompt FROM entries ORDER BY id").fetchall()
        )

    async def set_vectors(self, entry_ids: list[int], vectors: np.ndarray) -> None:
        def write() -> None:
            with self._writing():
                self.db.executemany(
                    "UPDATE entries SET vector = ? WHERE id = ?",
                    [(np.asarray(v, dtype=np.float32).tobytes(), i) for i, v in zip(entry_ids, vectors, strict=True)],
                )

        await self._call(write)

    # -- feedback and per-namespace settings -----------------------------------------------------

    async def add_negative_feedback(self, feedback: NegativeFeedback, raise_min_similarity_to: float | None) -> None:
        """Record that an entry was wrong for a query, and optionally raise the entry's own threshold."""
        vector = None if feedback.vector is None else np.asarray(feedback.vector, dtype=np.float32).tobytes()

        def write() -> None:
            with self._writing():
                self.db.execute(
                    "INSERT INTO feedback (entry_id, query_key, vector, similarity, created_at) VALUES (?, ?, ?, ?, ?)",
                    (feedback.entry_id, feedback.query_key, vector, feedback.similarity, time.time()),
                )
                if raise_min_similarity_to is not None:
                    self.db.execute(
                        "UPDATE entries SET min_similarity = max(coalesce(min_similarity, 0), ?) WHERE id = ?",
                        (raise_min_similarity_to, feedback.entry_id),
                    )

        await self._call(write)

    async def raise_min_similarity(self, entry_id: int, to: float) -> None:
        def write() -> None:
            with self._writing():
                self.db.execute(
                    "UPDATE entries SET min_similarity = max(coalesce(min_similarity, 0), ?) WHERE id = ?",
                    (to, entry_id),
                )

        await self._call(write)

    async def negative_feedback(self) -> list[NegativeFeedback]:
        """Every recorded negative for a live entry; orphans of deleted entries are dropped."""

        def read() -> list[NegativeFeedback]:
            with self._writing():
                self.db.execute("DELETE FROM feedback WHERE entry_id NOT IN (SELECT id FROM entries)")
            rows = self.db.execute("SELECT entry_id, query_key, vector, similarity FROM feedback").fetchall()
            return [
                NegativeFeedback(e, k, None if v is None else np.frombuffer(v, dtype=np.float32), s)
                for e, k, v, s in rows
            ]

        return await self._call(read)

    async def namespace_configs(self) -> dict[str, dict[str, Any]]:
        rows = await self._call(lambda: self.db.execute("SELECT namespace, config FROM namespace_config").fetchall())
        return {namespace: json.loads(config) for namespace, config in rows}

    async def set_namespace_config(self, namespace: str, config: dict[str, Any]) -> None:
        def write() -> None:
            with self._writing():
                self.db.execute(
                    "INSERT OR REPLACE INTO namespace_config VALUES (?, ?)", (namespace, json.dumps(config))
                )

        await self._call(write)

    async def add_evidence(self, batch_id: str, deltas: dict[tuple[str, str], dict[str, int]]) -> None:
        rows = [(*key, name, count) for key, counts in deltas.items() for name, count in counts.items()]

        def write() -> None:
            now = time.time()
            with self._writing():
                self.db.execute("DELETE FROM evidence_batches WHERE added_at < ?", (now - _EVIDENCE_BATCHES_KEPT_S,))
                added = self.db.execute("INSERT OR IGNORE INTO evidence_batches VALUES (?, ?)", (batch_id, now))
                if added.rowcount == 0:
                    return  # this batch landed before
                self.db.executemany(
                    "INSERT INTO evidence VALUES (?, ?, ?, ?) ON CONFLICT (namespace, language, name) "
                    "DO UPDATE SET count = count + excluded.count",
                    rows,
                )

        if rows:
            await self._call(write)

    async def clear_evidence(self, namespace: str | None) -> None:
        def write() -> None:
            with self._writing():
                if namespace is None:
                    self.db.execute("DELETE FROM evidence")
                else:
                    self.db.execute("DELETE FROM evidence WHERE namespace = ?", (namespace,))

        await self._call(write)

    async def evidence(self) -> dict[tuple[str, str], dict[str, int]]:
        query = "SELECT namespace, language, name, count FROM evidence"
        rows = await self._call(lambda: self.db.execute(query).fetchall())
        totals: dict[tuple[str, str], dict[str, int]] = {}
        for namespace, language, name, count in rows:
            totals.setdefault((namespace, language), {})[name] = int(count)
        return totals

    # -- the embeddings cache ----------------------------------------------------------------------

    async def get_embeddings(self, keys: Sequence[str], now: float) -> dict[str, bytes]:
        wanted = list(dict.fromkeys(keys))
        return await self._call(self._get_embeddings, wanted, now) if wanted else {}

    def _get_embeddings(self, keys: list[str], now: float) -> dict[str, bytes]:
        found: dict[str, bytes] = {}
        for start in range(0, len(keys), 500):
            chunk = keys[start : start + 500]
            marks = ",".join("?" * len(chunk))
            rows = self.db.execute(
                f"SELECT key, vector FROM embeddings WHERE key IN ({marks}) AND coalesce(expires_at > ?, 1)",
                (*chunk, now),
            )
            found.update((key, bytes(vector)) for key, vector in rows)
        if found:  # recency for the size bound: one commit per request, not one per input
            with _transaction(self.db):  # entries untouched: the point reads stay
                self.db.executemany(
                    "UPDATE embeddings SET last_use = max(last_use, ?) WHERE key = ?", [(now, k) for k in found]
                )
        return found

    async def put_embeddings(
        self, namespace: str, items: dict[str, bytes], now: float, expires_at: float | None
    ) -> None:
        rows = [(key, vector, expires_at, now, namespace) for key, vector in items.items()]

        def write() -> None:
            with _transaction(self.db):  # entries untouched: the point reads stay
                # An upsert, not a REPLACE: a REPLACE's delete would not fire the counting trigger.
                self.db.executemany(
                    "INSERT INTO embeddings (key, vector, expires_at, last_use, namespace) VALUES (?, ?, ?, ?, ?) "
                    "ON CONFLICT (key) DO UPDATE SET vector = excluded.vector, expires_at = excluded.expires_at, "
                    "last_use = excluded.last_use, namespace = excluded.namespace",
                    rows,
                )

        if rows:
            await self._call(write)

    async def delete_expired_embeddings(self, now: float) -> int:
        return await self._call(self._delete_counted, "DELETE FROM embeddings WHERE expires_at <= ?", (now,))

    async def evict_embeddings(self, keep: int) -> int:
        return await self._call(self._evict_embeddings, keep)

    def _evict_embeddings(self, keep: int) -> int:
        sizes = dict(self.db.execute("SELECT namespace, embeddings FROM embedding_namespace_sizes").fetchall())
        surplus = sum(sizes.values()) - keep
        if surplus <= 0:
            return 0
        # Vectors stored before namespaces were kept go first, then the fair cuts of the others.
        unknown = min(sizes.pop("", 0), surplus)
        cuts = fair_cuts(sizes, keep) if surplus > unknown else {}
        if unknown:
            cuts[""] = unknown
        evicted = 0
        with _transaction(self.db):  # entries untouched: the point reads stay
            for namespace, cut in cuts.items():
                evicted += self.db.execute(
                    "DELETE FROM embeddings WHERE key IN (SELECT key FROM embeddings WHERE namespace = ? "
                    "ORDER BY last_use ASC, key ASC LIMIT ?)",
                    (namespace, cut),
                ).rowcount
        return int(evicted)

    def _delete_counted(self, sql: str, params: tuple[object, ...]) -> int:
        with _transaction(self.db):  # entries untouched: the point reads stay
            return int(self.db.execute(sql, params).rowcount)

    async def count_embeddings(self) -> int:
        return await self._call(lambda: int(self.db.execute("SELECT count(*) FROM embeddings").fetchone()[0]))

    async def get_meta(self, key: str) -> str | None:
        row = await self._call(lambda: self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone())
        return None if row is None else str(row[0])

    async def set_meta(self, key: str, value: str) -> None:
        def write() -> None:
            with self._writing():
                self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

        await self._call(write)


def _cannot_write(exc: sqlite3.OperationalError) -> bool:
    """SQLite's own verdict that the disk, not the query, failed: full, read-only or an I/O error."""
    primary = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    return primary in (sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_READONLY)


def _contains(haystack: str | None, needle: str | None) -> bool:
    return haystack is not None and needle is not None and contains_text(haystack, needle)


def _select_one(db: sqlite3.Connection, column: str, value: object) -> CacheEntry | None:
    row = db.execute(f"SELECT {_COLUMNS} FROM entries WHERE {column} = ?", (value,)).fetchone()
    return None if row is None else _entry_from_row(row)


def _entry_from_row(row: tuple[Any, ...]) -> CacheEntry:
    (
        entry_id,
        namespace,
        scope,
        exact_key,
        model,
        prompt,
        answer,
        created_at,
        expires_at,
        last_access,
        hits,
        vector,
        min_similarity,
        tool_calls,
    ) = row
    return CacheEntry(
        id=entry_id,
        namespace=namespace,
        scope=scope,
        exact_key=exact_key,
        model=model,
        prompt=prompt,
        answer=answer,
        created_at=created_at,
        expires_at=expires_at,
        last_access=last_access,
        hits=hits,
        vector=None if vector is None else np.frombuffer(vector, dtype=np.float32),
        min_similarity=min_similarity,
        tool_calls=None if tool_calls is None else json.loads(tool_calls),
    )
