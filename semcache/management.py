"""Operators' work on the stored entries: list and search them, delete them, flush, export, import,
and reload the templates.

Every change goes to the store first, then to this process's FAISS index. With the Redis store the
other replicas learn of it from the change feed: the store publishes a ``del`` event for every
deletion and a ``put`` event for every imported entry.

The admin routes stay thin: they parse the request, call an ``EntryAdmin`` and frame the answer.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .decision.quality import NamespacePolicies
from .embedders import BatchingEmbedder
from .entries import CacheEntry, EntryQuery, RemovedEntry
from .errors import InvalidRequest
from .index import ScopedVectorIndex
from .language import detect_script
from .protocols import OperatorStore
from .tiers import TemplateTier, load_templates
from .tiers.template import LiveTemplates
from .wording import counted

log = logging.getLogger("semcache.management")

# Entries read from the store per batch while scanning.
SCAN_BATCH = 1000
# Import lines parsed, embedded and stored per batch: one embedding call and one store write each.
IMPORT_BATCH = 256
# An import logs its progress each time this many more lines are done.
IMPORT_LOG_EVERY = 1000
# How many failing import lines are described in the report (all are counted).
MAX_REPORTED_ERRORS = 100
_NAMESPACE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$"


@dataclass(frozen=True)
class Selection:
    """The entries an operation applies to. Every part given must match.

    ``query`` filters in the store; ``ids`` restricts to those entries; ``near`` keeps entries whose
    prompt lies within ``min_similarity`` (cosine, 0-1) of that question.
    """

    query: EntryQuery = field(default_factory=EntryQuery)
    ids: frozenset[int] | None = None
    near: str | None = None
    min_similarity: float = 0.0


@dataclass(frozen=True)
class Match:
    """An entry (without its vector) and, for semantic selections, its prompt's cosine to the question."""

    entry: CacheEntry
    similarity: float | None = None


@dataclass(frozen=True)
class Page:
    items: list[Match]
    next_cursor: str | None  # pass it back for the next page; None on the last one


@dataclass
class DeleteReport:
    matched: int = 0
    deleted: int = 0
    sample: list[Match] = field(default_factory=list)  # the first matches, for a dry run to show


@dataclass
class ImportReport:
    lines: int = 0  # non-blank lines read
    imported: int = 0
    replaced: int = 0  # imported entries that replaced one with the same exact key
    skipped: int = 0  # already expired
    embedded: int = 0  # prompts embedded here; the rest brought usable vectors
    failed: int = 0
    errors: list[tuple[int, str]] = field(default_factory=list)  # (line number, what is wrong)

    def fail(self, line: int, message: str) -> None:
        self.failed += 1
        if len(self.errors) < MAX_REPORTED_ERRORS:
            self.errors.append((line, message))


class ExportedEntry(BaseModel):
    """One line of an export file. ``id`` is informational: an import assigns new ids."""

    model_config = ConfigDict(extra="ignore")
    id: int | None = None
    namespace: str = Field(pattern=_NAMESPACE_PATTERN)
    scope: str = Field(min_length=1, max_length=256)
    exact_key: str = Field(min_length=1, max_length=256)
    model: str = Field(min_length=1)
    prompt: str = Field(min_length=1)
    answer: str
    created_at: float = Field(allow_inf_nan=False)
    expires_at: float | None = Field(None, allow_inf_nan=False)
    last_access: float | None = Field(None, allow_inf_nan=False)
    hits: int = Field(0, ge=0)
    tool_calls: list[dict[str, Any]] | None = None
    min_similarity: float | None = Field(None, ge=0, le=1)
    vector: str | None = Field(None, description="base64 of little-endian float32, with vector_model")
    vector_model: str | None = None

    @classmethod
    def of(cls, entry: CacheEntry, vector_model: str | None) -> ExportedEntry:
        vector = None
        if vector_model is not None and entry.vector is not None:
            vector = base64.b64encode(np.asarray(entry.vector, dtype="<f4").tobytes()).decode()
        return cls(
            id=entry.id, namespace=entry.namespace, scope=entry.scope, exact_key=entry.exact_key, model=entry.model,
            prompt=entry.prompt, answer=entry.answer, created_at=entry.created_at, expires_at=entry.expires_at,
            last_access=entry.last_access, hits=entry.hits, tool_calls=entry.tool_calls,
            min_similarity=entry.min_similarity, vector=vector, vector_model=vector_model if vector else None,
        )  # fmt: skip

    def to_entry(self, vector: np.ndarray | None) -> CacheEntry:
        return CacheEntry(
            namespace=self.namespace, scope=self.scope, exact_key=self.exact_key, model=self.model,
            prompt=self.prompt, answer=self.answer, created_at=self.created_at, expires_at=self.expires_at,
            vector=vector, last_access=self.last_access or self.created_at, hits=self.hits,
            min_similarity=self.min_similarity, tool_calls=self.tool_calls,
        )  # fmt: skip


@dataclass
class EntryAdmin:
    """Entry management over the store, the index and the embedder the request path uses."""

    store: OperatorStore
    index: ScopedVectorIndex
    embedder: BatchingEmbedder
    templates: LiveTemplates
    policies: NamespacePolicies
    clock: Callable[[], float] = time.time

    def _model_of(self, namespace: str, prompt: str) -> str:
        """The embedding model the request path uses for this prompt: by namespace and script."""
        router = self.embedder.router
        models = router.routes.models()
        return models[0] if len(models) == 1 else router.model_for(namespace, detect_script(prompt))

    # -- listing and searching ---------------------------------------------------------------

    async def page(self, selection: Selection, *, limit: int, cursor: str | None) -> Page:
        """One page of the selected entries: in id order, or by similarity for a semantic search.

        The cursor is opaque to clients: the last id shown for id order, an offset for a search.
        """
        if selection.near is not None:
            return await self._search_page(selection, limit, _cursor(cursor))
        found: list[Match] = []
        async with aclosing(self._selected(selection, after_id=_cursor(cursor))) as batches:
            async for batch in batches:
                found += batch
                if len(found) > limit:
                    break  # one more than shown tells that another page follows
        more = len(found) > limit
        return Page(found[:limit], str(found[limit - 1].entry.id) if more else None)

    async def _search_page(self, selection: Selection, limit: int, offset: int) -> Page:
        """A semantic search compares the question with the stored vector of every selected entry.

        The index is partitioned by scope (namespace, model, system prompt, conversation and
        parameters are hashed together), and an operator's question has no scope: "everything
        near this question" spans every model and conversation of a namespace. So this scans the
        selected entries' stored vectors in batches of ``SCAN_BATCH`` and scores them in a worker
        thread (one matrix product per batch). That is exact, with no HNSW recall loss, and costs
        one read of the namespace's vectors: linear in its size, about what an export costs.
        With several embedding models (routing by script), each entry is compared with the question
        as its own model embeds it, so no two models' vectors meet. Only (similarity, id) pairs are
        kept in memory; the page's entries are read afterwards.
        """
        scored: list[tuple[float, int]] = []
        async for batch in self._selected(selection):
            scored += [(m.similarity or 0.0, int(m.entry.id or 0)) for m in batch]
        scored.sort(key=lambda pair: (-pair[0], pair[1]))
        items: list[Match] = []
        for similarity, entry_id in scored[offset : offset + limit]:
            entry = await self.store.get(entry_id)
            if entry is not None:  # else deleted meanwhile
                items.append(Match(replace(entry, vector=None), similarity))
        more = len(scored) > offset + limit
        return Page(items, str(offset + limit) if more else None)

    async def get(self, entry_id: int) -> CacheEntry | None:
        entry = await self.store.get(entry_id)
        if entry is None or entry.is_expired(self.clock()):
            return None
        return replace(entry, vector=None)

    async def _selected(self, selection: Selection, *, after_id: int = 0) -> AsyncGenerator[list[Match], None]:
        """The live entries ``selection`` picks, in id order, in batches (vectors dropped)."""
        near, now = selection.near, self.clock()
        if selection.ids is not None:
            batches = self._by_ids(sorted(i for i in selection.ids if i > after_id))
        else:
            batches = self.store.entries(
                selection.query, after_id=after_id, batch_size=SCAN_BATCH, with_vectors=near is not None
            )
        questions: dict[str, np.ndarray] = {}  # the question as each entry's embedding model sees it
        async for batch in batches:
            live = [e for e in batch if not e.is_expired(now) and selection.query.matches(e)]
            if near is None:
                yield [Match(e) for e in live]
                continue
            live = [e for e in live if e.vector is not None]
            models = [self._model_of(e.namespace, e.prompt) for e in live]
            for model in dict.fromkeys(models):
                if model not in questions:
                    questions[model] = await self.embedder.embed(near, model)
            pairs = [(e.vector, questions[model]) for e, model in zip(live, models, strict=True)]
            similarities = await asyncio.to_thread(_cosines, pairs)
            yield [
                Match(replace(e, vector=None), s)
                for e, s in zip(live, similarities, strict=True)
                if s >= selection.min_similarity
            ]

    async def _by_ids(self, ids: list[int]) -> AsyncIterator[list[CacheEntry]]:
        for start in range(0, len(ids), SCAN_BATCH):
            found = [await self.store.get(entry_id) for entry_id in ids[start : start + SCAN_BATCH]]
            yield [entry for entry in found if entry is not None]

    # -- deleting ----------------------------------------------------------------------------

    async def delete_one(self, entry_id: int) -> bool:
        return await self._drop([entry_id]) == 1

    async def delete(self, selection: Selection, *, dry_run: bool, sample_size: int) -> DeleteReport:
        """Delete what ``selection`` picks, batch by batch as the scan finds it; or, with
        ``dry_run``, only count it and keep the first ``sample_size`` matches to show."""
        report = DeleteReport()
        async for batch in self._selected(selection):
            report.matched += len(batch)
            report.sample += batch[: max(sample_size - len(report.sample), 0)]
            if not dry_run and batch:
                report.deleted += await self._drop([int(m.entry.id or 0) for m in batch])
        if not dry_run:
            log.info("deleted %s (%s)", counted(report.deleted, "entry"), _describe(selection))
        return report

    async def flush(self) -> int:
        """Delete every stored entry (with Redis: every entry of this cache, on every replica)."""
        ids = sorted(await self.store.stored_ids())
        deleted = 0
        for start in range(0, len(ids), 10 * SCAN_BATCH):
            deleted += await self._drop(ids[start : start + 10 * SCAN_BATCH])
            if len(ids) > 10 * SCAN_BATCH:
                log.info("flush: %d of %s deleted", deleted, counted(len(ids), "entry"))
        log.warning("flushed the cache: %s deleted", counted(deleted, "entry"))
        return deleted

    async def _drop(self, ids: list[int]) -> int:
        removed = await self.store.delete(ids)
        await asyncio.to_thread(self.index.remove, [r.id for r in removed])
        return len(removed)

    # -- export and import -------------------------------------------------------------------

    async def export(self, query: EntryQuery, *, vectors: bool) -> AsyncGenerator[str, None]:
        """The live entries ``query`` picks as JSONL lines, each ending in a newline."""
        now = self.clock()
        async for batch in self.store.entries(query, batch_size=SCAN_BATCH, with_vectors=vectors):
            live = [e for e in batch if not e.is_expired(now)]
            models = [self._model_of(e.namespace, e.prompt) if vectors else None for e in live]
            lines = [
                ExportedEntry.of(e, model).model_dump_json(exclude_none=True) + "\n"
                for e, model in zip(live, models, strict=True)
            ]
            if lines:
                yield "".join(lines)

    async def import_lines(self, lines: Sequence[bytes], *, first_line: int = 1) -> ImportReport:
        """Import JSONL lines (numbered from ``first_line`` in reports and logs), ``IMPORT_BATCH``
        at a time: parsed in a worker thread, prompts without a usable vector embedded in one
        batched call, then stored with one write and indexed. Expired lines are skipped."""
        report = ImportReport()
        started, logged = time.monotonic(), 0
        for start in range(0, len(lines), IMPORT_BATCH):
            chunk = lines[start : start + IMPORT_BATCH]
            parsed = await asyncio.to_thread(self._parse, chunk, first_line + start, report)
            if parsed:
                await self._import_batch(parsed, report)
            if report.lines - logged >= IMPORT_LOG_EVERY:
                logged = report.lines
                log.info("import from line %d: %s", first_line, _progress(report, started))
        log.info("import from line %d done: %s", first_line, _progress(report, started))
        return report

    def _parse(self, chunk: Sequence[bytes], first_line: int, report: ImportReport) -> list[tuple[CacheEntry, bool]]:
        """Entries from lines, each with whether it still needs embedding. Runs in a worker thread."""
        now = self.clock()
        parsed: list[tuple[CacheEntry, bool]] = []
        for number, line in enumerate(chunk, start=first_line):
            if not line.strip():
                continue
            report.lines += 1
            try:
                item = ExportedEntry.model_validate_json(line)
                vector = self._usable_vector(item)
            except (ValidationError, ValueError) as exc:
                report.fail(number, _describe_error(exc))
                continue
            if item.expires_at is not None and item.expires_at <= now:
                report.skipped += 1
                continue
            parsed.append((item.to_entry(vector), vector is None))
        return parsed

    def _usable_vector(self, item: ExportedEntry) -> np.ndarray | None:
        """The line's vector if this embedding model made it; None means embed the prompt here."""
        if item.vector is None or item.vector_model != self._model_of(item.namespace, item.prompt):
            return None
        try:
            vector = np.frombuffer(base64.b64decode(item.vector, validate=True), dtype="<f4").astype(np.float32)
        except (binascii.Error, ValueError) as exc:
            raise ValueError("vector: not base64 of float32 values") from exc
        norm = float(np.linalg.norm(vector)) if vector.size == self.index.dimension else 0.0
        if not np.isfinite(norm) or norm == 0.0:
            raise ValueError(f"vector: expected {self.index.dimension} finite float32 values, not all zero")
        return vector / norm

    async def _import_batch(self, parsed: list[tuple[CacheEntry, bool]], report: ImportReport) -> None:
        entries = [entry for entry, _ in parsed]
        by_model: dict[str, list[CacheEntry]] = {}
        for entry, needs_vector in parsed:
            if needs_vector:  # embedded by the model a request for it would use
                by_model.setdefault(self._model_of(entry.namespace, entry.prompt), []).append(entry)
        for model, missing in by_model.items():
            vectors = await self.embedder.embed_many([entry.prompt for entry in missing], model)
            for entry, vector in zip(missing, vectors, strict=True):
                entry.vector = vector
            report.embedded += len(missing)
        results = await self.store.put_many(entries)
        await asyncio.to_thread(self._index_imported, entries, results)
        report.imported += len(entries)
        report.replaced += sum(bool(replaced) for _, replaced in results)

    def _index_imported(self, entries: list[CacheEntry], results: list[tuple[int, list[RemovedEntry]]]) -> None:
        index = self.index
        replaced = [r.id for _, removed in results for r in removed]
        if replaced:
            index.remove(replaced)
        by_scope: dict[str, list[int]] = {}
        for row, entry in enumerate(entries):
            by_scope.setdefault(entry.scope, []).append(row)
        for scope, rows in by_scope.items():
            ids = np.asarray([results[row][0] for row in rows], dtype=np.int64)
            index.add(scope, ids, np.vstack([np.asarray(entries[row].vector, dtype=np.float32) for row in rows]))

    # -- templates ---------------------------------------------------------------------------

    async def reload_templates(
        self, path: Path, threshold: float, share: Callable[[list[dict[str, Any]]], Awaitable[None]] | None = None
    ) -> TemplateTier:
        """Read the template file again, embed its phrasings, publish them through ``share`` (the
        shared store, whose feed tells the other replicas), then swap the tier in with one
        assignment. A bad file raises ``InvalidRequest`` and leaves the old templates serving."""
        try:
            templates = await asyncio.to_thread(load_templates, path)
        except OSError as exc:
            raise InvalidRequest(f"cannot read the templates file: {exc}", code="invalid_templates") from exc
        except ValueError as exc:
            raise InvalidRequest(f"the templates file is invalid: {exc}", code="invalid_templates") from exc
        tier = TemplateTier(templates, threshold)
        await tier.embed_phrasings(self.embedder)  # by every model a request may use
        if share is not None:
            await share([template.as_dict() for template in templates])
        self.templates.swap(tier)
        log.info("templates reloaded from %s: %s, %s", path, counted(len(templates), "template"),
                 counted(len(tier.phrasings), "phrasing"))  # fmt: skip
        return tier


def _cosines(pairs: list[tuple[np.ndarray | None, np.ndarray]]) -> list[float]:
    """Row by row: each stored vector against the question embedded by the same model."""
    if not pairs:
        return []
    stored = np.vstack([np.asarray(v, dtype=np.float32) for v, _ in pairs])
    questions = np.vstack([np.asarray(q, dtype=np.float32) for _, q in pairs])
    return [float(s) for s in np.einsum("ij,ij->i", stored, questions)]


def _cursor(cursor: str | None) -> int:
    if cursor is None or cursor == "":
        return 0
    if not cursor.isdigit():
        raise InvalidRequest("cursor: pass back the next_cursor of the previous page", code="invalid_cursor")
    return int(cursor)


def _describe(selection: Selection) -> str:
    query = selection.query
    parts = [
        f"namespace={query.namespace}" if query.namespace is not None else "",
        f"text={query.text!r}" if query.text is not None else "",
        f"created_before={query.created_before:.0f}" if query.created_before is not None else "",
        f"ids={len(selection.ids)}" if selection.ids is not None else "",
        f"near={selection.near!r}>={selection.min_similarity}" if selection.near is not None else "",
    ]
    return ", ".join(part for part in parts if part) or "everything"


def _describe_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        problems = []
        for error in exc.errors()[:3]:
            if error.get("type") == "json_invalid":
                return "not a JSON object"
            location = ".".join(str(part) for part in error.get("loc", ()))
            problems.append(f"{location or 'line'}: {error.get('msg', 'invalid')}")
        return "; ".join(problems)
    return str(exc)


def _progress(report: ImportReport, started: float) -> str:
    return (
        f"{counted(report.lines, 'line')}, {report.imported} imported ({report.embedded} embedded), "
        f"{report.skipped} skipped as expired, {report.failed} failed, in {time.monotonic() - started:.1f} s"
    )
