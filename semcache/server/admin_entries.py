"""The admin API for entries: list and search, delete, flush, export and import, and reloading the
templates. Every path goes through ``admin.require_admin`` (the admin key when one is configured,
else loopback only; JSON or JSONL bodies only); the work is done by ``semcache.management.EntryAdmin``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from ..entries import EntryQuery
from ..errors import InvalidRequest, NotFound, SemcacheError
from ..management import EntryAdmin, ImportReport, Match, Selection
from .access import validate_namespace
from .admin import require_admin
from .limits import BoundedJsonRoute
from .routes import entry_admin_of

entries_router = APIRouter(
    prefix="/admin", tags=["admin"], dependencies=[Depends(require_admin)], route_class=BoundedJsonRoute
)

_JSONL = "application/x-ndjson"
_DEFAULT_MAX_CHARS = 500
_MAX_ID = 2**63 - 1  # SQLite's largest INTEGER: a larger id is a 400, not an OverflowError


class EntryOut(BaseModel):
    """One cache entry as an operator sees it. Vectors are never returned here."""

    id: int
    namespace: str
    model: str
    scope: str = Field(description="Hash of namespace, model, earlier messages and answer-shaping parameters.")
    prompt: str
    answer: str
    truncated: bool = Field(description="True when the prompt or the answer was cut to max_chars.")
    has_tool_calls: bool = Field(description="The answer calls tools (served on exact matches only).")
    created_at: float = Field(description="Unix time, seconds.")
    expires_at: float | None = Field(description="Unix time, seconds; null: never expires.")
    last_access: float = Field(description="Unix time of the latest hit (hits are recorded in batches).")
    hits: int
    min_similarity: float | None = Field(
        description="The entry's own threshold, raised by negative feedback and by answers judged wrong for a query "
        "this close."
    )
    similarity: float | None = Field(None, description="Semantic searches only: cosine (0-1) to the query.")


class EntryList(BaseModel):
    object: str = "list"
    data: list[EntryOut]
    next_cursor: str | None = Field(description="Pass it as ?cursor= for the next page; null on the last page.")


class EntryDeleted(BaseModel):
    id: int
    deleted: bool = True


class DeleteRequest(BaseModel):
    """Filters that must all match. At least one is needed: to delete everything, use POST /admin/flush."""

    model_config = ConfigDict(extra="forbid")
    ids: list[Annotated[int, Field(ge=1, le=_MAX_ID)]] | None = Field(
        None, min_length=1, max_length=100_000, description="These entry ids."
    )
    namespace: str | None = Field(None, description="Entries of this namespace.")
    text: str | None = Field(None, min_length=1, description="Prompt or answer contains this (case-insensitive).")
    older_than_s: float | None = Field(None, ge=0, description="Entries created more than this many seconds ago.")
    query: str | None = Field(
        None, min_length=1, description="Forget everything near this question: entries whose prompt is this close."
    )
    min_similarity: float | None = Field(
        None, ge=0, le=1, description="With query: the least cosine (0-1); default: the namespace's threshold."
    )
    dry_run: bool = Field(False, description="Only report what would be deleted.")
    limit: int = Field(100, ge=0, le=10_000, description="How many of the matched entries to return in data.")
    max_chars: int = Field(_DEFAULT_MAX_CHARS, ge=0, description="Cut prompts and answers in data; 0: whole.")


class DeleteResult(BaseModel):
    dry_run: bool
    matched: int = Field(description="Live entries that matched the filters.")
    deleted: int = Field(description="Entries deleted (0 on a dry run).")
    data: list[EntryOut] = Field(description="The first `limit` matched entries, in id order.")


class FlushRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    confirm: bool = Field(False, strict=True, description="Must be true: a flush deletes every entry of the cache.")


class FlushResult(BaseModel):
    deleted: int


class ImportLineError(BaseModel):
    line: int
    message: str


class ImportResult(BaseModel):
    lines: int = Field(description="Non-blank lines read.")
    imported: int
    replaced: int = Field(description="Imported entries that replaced an entry with the same exact key.")
    skipped: int = Field(description="Lines whose entry had already expired.")
    embedded: int = Field(description="Prompts embedded here; the others brought vectors of the same model.")
    failed: int
    errors: list[ImportLineError] = Field(description="The first 100 failing lines, with what is wrong.")


class TemplatesReloaded(BaseModel):
    templates: int
    phrasings: int
    ids: list[str]
    shared: bool = Field(description="Published to the other replicas through Redis.")


@entries_router.get(
    "/entries",
    summary="List and search cache entries",
    description="Filter by namespace, by text (a case-insensitive substring of the prompt or the answer), or "
    "semantically with `query`: entries whose prompt has at least `min_similarity` cosine to it, best first, "
    "across every scope (model, system prompt, conversation) of the namespace. Pages: pass `next_cursor` back "
    "as `cursor`. Expired entries are left out; vectors are never returned.",
    response_model=EntryList,
)
async def list_entries(
    request: Request,
    namespace: str | None = Query(None, description="Only this namespace."),
    text: str | None = Query(None, min_length=1, description="Prompt or answer contains this (case-insensitive)."),
    query: str | None = Query(None, min_length=1, description="A question: search semantically, best first."),
    min_similarity: float | None = Query(
        None, ge=0, le=1, description="With query: the least cosine (0-1); default: the namespace's threshold."
    ),
    limit: int = Query(50, ge=1, le=1000),
    cursor: str | None = Query(None, description="next_cursor of the previous page."),
    max_chars: int = Query(_DEFAULT_MAX_CHARS, ge=0, description="Cut prompts and answers; 0: whole."),
) -> EntryList:
    admin = entry_admin_of(request)
    selection = _selection(admin, namespace, text, None, query, min_similarity)
    page = await admin.page(selection, limit=limit, cursor=cursor)
    return EntryList(data=[_entry_out(m, max_chars) for m in page.items], next_cursor=page.next_cursor)


@entries_router.get(
    "/entries/export",
    summary="Export entries as JSONL",
    description="Streams one JSON object per line: id, namespace, scope, exact_key, model, prompt, answer, "
    "created_at, expires_at, last_access, hits, tool_calls, min_similarity. With `vectors=true` each line also "
    "carries `vector` (base64 of little-endian float32) and `vector_model`, so an import with the same "
    "embedding model skips embedding. Expired entries are left out. A failure after the first line ends the "
    "stream with a line holding an OpenAI-style `error` object.",
    response_class=StreamingResponse,
    responses={200: {"content": {_JSONL: {"schema": {"type": "string"}}}, "description": "JSONL, one entry a line"}},
)
async def export_entries(
    request: Request,
    namespace: str | None = Query(None, description="Only this namespace."),
    text: str | None = Query(None, min_length=1, description="Prompt or answer contains this (case-insensitive)."),
    vectors: bool = Query(False, description="Include each entry's vector, base64."),
) -> StreamingResponse:
    admin = entry_admin_of(request)
    query = EntryQuery(namespace=_namespace(namespace), text=text)
    lines = admin.export(query, vectors=vectors)
    first = await anext(lines, "")  # a failure before the first line keeps its HTTP status
    headers = {"Content-Disposition": 'attachment; filename="semcache-export.jsonl"'}
    return StreamingResponse(_jsonl(first, lines), media_type=_JSONL, headers=headers)


@entries_router.post(
    "/entries/import",
    summary="Import entries from JSONL (an export), to warm a deployment",
    description="The body is JSONL as `GET /admin/entries/export` writes it, at most `max_body_bytes` (413 "
    "otherwise; `semcache admin import` sends a file in chunks of whole lines). Lines are imported in batches: "
    "prompts without a vector of this embedding model are embedded in one batched call per batch, then stored "
    "and indexed. Expired lines are skipped, an entry with the same exact key is replaced, and bad lines are "
    "reported by number (counted from `first_line`). Progress goes to the server log.",
    response_model=ImportResult,
    openapi_extra={"requestBody": {"required": True, "content": {_JSONL: {"schema": {"type": "string"}}}}},
)
async def import_entries(
    request: Request,
    first_line: int = Query(1, ge=1, description="The number of the body's first line in its file, for reports."),
) -> ImportResult:
    admin = entry_admin_of(request)
    body = await request.body()  # bounded by max_body_bytes: a body over it is refused before any line is stored
    report = await admin.import_lines(body.splitlines(), first_line=first_line)
    return _import_result(report)


@entries_router.post(
    "/entries/delete",
    summary="Delete entries by ids, namespace, text, age or semantic query (with a dry run)",
    description="Every filter given must match. `query` forgets everything near a question: entries whose "
    "prompt has at least `min_similarity` cosine to it, in every scope of the namespace. `dry_run` reports "
    "what would go and deletes nothing. Deletions leave the index at once; with the Redis store the other "
    "replicas drop them through the change feed.",
    response_model=DeleteResult,
)
async def delete_entries(body: DeleteRequest, request: Request) -> DeleteResult:
    admin = entry_admin_of(request)
    if all(v is None for v in (body.ids, body.namespace, body.text, body.older_than_s, body.query)):
        raise InvalidRequest(
            "name at least one filter (ids, namespace, text, older_than_s, query); "
            "to delete everything use POST /admin/flush",
            code="filter_required",
        )
    selection = _selection(admin, body.namespace, body.text, body.older_than_s, body.query, body.min_similarity)
    if body.ids is not None:
        selection = Selection(selection.query, frozenset(body.ids), selection.near, selection.min_similarity)
    report = await admin.delete(selection, dry_run=body.dry_run, sample_size=body.limit)
    return DeleteResult(
        dry_run=body.dry_run,
        matched=report.matched,
        deleted=report.deleted,
        data=[_entry_out(m, body.max_chars) for m in report.sample],
    )


@entries_router.get("/entries/{entry_id}", summary="One cache entry", response_model=EntryOut,
                    responses={404: {"description": "No such entry (or it expired)"}})  # fmt: skip
async def get_entry(request: Request, entry_id: int = Path(ge=1, le=_MAX_ID)) -> EntryOut:
    entry = await entry_admin_of(request).get(entry_id)
    if entry is None:
        raise NotFound(f"no entry with id {entry_id}")
    return _entry_out(Match(entry), 0)


@entries_router.delete(
    "/entries/{entry_id}",
    summary="Delete one cache entry",
    description="Removes it from the store and from the index (with Redis: from every replica's index).",
    response_model=EntryDeleted,
    responses={404: {"description": "No such entry"}},
)
async def delete_entry(request: Request, entry_id: int = Path(ge=1, le=_MAX_ID)) -> EntryDeleted:
    if not await entry_admin_of(request).delete_one(entry_id):
        raise NotFound(f"no entry with id {entry_id}")
    return EntryDeleted(id=entry_id)


@entries_router.post(
    "/flush",
    summary="Delete every entry of the cache",
    description='Needs `{"confirm": true}`. With the Redis store it deletes every entry of this cache (its '
    "--redis-prefix), and every replica drops them from its index through the change feed. Templates and "
    "namespace settings stay.",
    response_model=FlushResult,
)
async def flush(request: Request, body: FlushRequest | None = None) -> FlushResult:
    admin = entry_admin_of(request)
    if body is None or not body.confirm:
        raise InvalidRequest('a flush deletes every entry: send {"confirm": true}', code="confirmation_required")
    return FlushResult(deleted=await admin.flush())


@entries_router.post(
    "/templates/reload",
    summary="Reload the templates file",
    description="Reads the --templates file again, embeds its phrasings and swaps the template tier in at once. "
    "With the Redis store the templates are also published, and the other replicas reload them from the change "
    "feed. A bad file is a 400 and the old templates keep serving.",
    response_model=TemplatesReloaded,
)
async def reload_templates(request: Request) -> TemplatesReloaded:
    state = request.app.state.semcache
    admin = entry_admin_of(request)
    path = state.settings.templates
    if path is None:
        raise InvalidRequest("this server was started without --templates FILE", code="no_templates_file")
    share = state.replica.store.set_templates if state.replica is not None else None
    tier = await admin.reload_templates(path, state.settings.template_threshold, share)
    return TemplatesReloaded(
        templates=len(tier.templates),
        phrasings=len(tier.phrasings),
        ids=[template.id for template in tier.templates],
        shared=share is not None,
    )


def _selection(
    admin: EntryAdmin,
    namespace: str | None,
    text: str | None,
    older_than_s: float | None,
    near: str | None,
    min_similarity: float | None,
) -> Selection:
    namespace = _namespace(namespace)
    if min_similarity is not None and near is None:
        raise InvalidRequest("min_similarity needs a query", code="invalid_request")
    if near is not None and min_similarity is None:
        policies = admin.policies
        min_similarity = (policies.for_namespace(namespace) if namespace else policies.default).threshold
    created_before = None if older_than_s is None else admin.clock() - older_than_s
    query = EntryQuery(namespace=namespace, text=text, created_before=created_before)
    return Selection(query, None, near, min_similarity or 0.0)


def _namespace(namespace: str | None) -> str | None:
    return None if namespace is None else validate_namespace(namespace)


def _entry_out(match: Match, max_chars: int) -> EntryOut:
    entry = match.entry
    prompt, answer = _cut(entry.prompt, max_chars), _cut(entry.answer, max_chars)
    return EntryOut(
        id=int(entry.id or 0), namespace=entry.namespace, model=entry.model, scope=entry.scope,
        prompt=prompt, answer=answer, truncated=prompt != entry.prompt or answer != entry.answer,
        has_tool_calls=bool(entry.tool_calls), created_at=entry.created_at, expires_at=entry.expires_at,
        last_access=entry.last_access, hits=entry.hits, min_similarity=entry.min_similarity,
        similarity=None if match.similarity is None else round(match.similarity, 4),
    )  # fmt: skip


def _cut(text: str, max_chars: int) -> str:
    return text if max_chars == 0 or len(text) <= max_chars else text[:max_chars]


def _import_result(report: ImportReport) -> ImportResult:
    return ImportResult(
        lines=report.lines, imported=report.imported, replaced=report.replaced, skipped=report.skipped,
        embedded=report.embedded, failed=report.failed,
        errors=[ImportLineError(line=line, message=message) for line, message in report.errors],
    )  # fmt: skip


async def _jsonl(first: str, lines: AsyncGenerator[str, None]) -> AsyncIterator[str]:
    try:
        yield first
        async for chunk in lines:
            yield chunk
    except SemcacheError as error:  # the status is sent already: say so in-band, on a line of its own
        yield json.dumps(error.to_openai()) + "\n"
    finally:
        await lines.aclose()  # a client that went away stops the scan at once
