"""Thin routes: parse, call the pipeline, frame the answer as JSON or SSE."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from ..dialects import Dialect
from ..dialects.chat import CHAT
from ..errors import InvalidRequest, NotReady, SemcacheError, StoreUnavailable, openai_error_body
from ..keys import account_id, user_id
from ..management import EntryAdmin
from ..pipeline import Lookup, Pipeline, RequestControls
from ..protocols import Upstream
from ..settings import MAX_TTL_S
from ..wire import ChatCompletionRequest
from .access import bearer_token
from .errors import error_response
from .limits import BoundedJsonRoute, RequestBounds, require_json_body
from .monitoring import require_metrics_key
from .rendering import json_response, render

log = logging.getLogger("semcache.server")
router = APIRouter(route_class=BoundedJsonRoute)
# With fast_path on, valid chat requests reach chat_completions through fastpath.DirectRoute and this
# route serves the rest (FastAPI's errors for bodies that do not validate); off, it serves them all.
# Either way it is the OpenAPI schema's.
chat_router = APIRouter(dependencies=[Depends(require_json_body)], route_class=BoundedJsonRoute)
CHAT_PATH = "/v1/chat/completions"


def _state(request: Request) -> Any:
    return request.app.state.semcache


def upstream_of(request: Request) -> Upstream:
    """The upstream, or a 503 while the local model is still loading."""
    upstream: Upstream | None = _state(request).upstream
    if upstream is None:
        raise NotReady("the local model is still loading", headers={"Retry-After": "5"})
    return upstream


def admit(request: Request, namespace: str) -> None:
    """The rate limit, per client: raises a 429 for one over it."""
    state = _state(request)
    if state.rate_limiter is not None:
        state.rate_limiter.admit(state.access.rate_limit_key(request.headers.get("authorization"), namespace))


def admitted_namespace(request: Request) -> str:
    """The namespace that the client's key may use (401 or 403 before anything else), once the
    client's rate limit admitted the request (else a 429). Every /v1 route a client calls takes it."""
    namespace = namespace_of(request)
    admit(request, namespace)
    return namespace


def pipeline_of(request: Request) -> Pipeline:
    state = _state(request)
    if state.pipeline is None:
        detail = f"semcache failed to load: {state.load_error}" if state.load_error else "semcache is still loading"
        raise NotReady(detail, headers={"Retry-After": "5"})
    pipeline: Pipeline = state.pipeline
    return pipeline


def entry_admin_of(request: Request) -> EntryAdmin:
    """The operators' entry management, once the cache has loaded (a 503 until then)."""
    pipeline_of(request)
    admin: EntryAdmin = _state(request).entry_admin
    return admin


@chat_router.post(
    CHAT_PATH,
    summary="Create a chat completion, from the cache when possible",
    responses={200: {"content": {"text/event-stream": {}}, "description": "With "
                     "`stream: true`: server-sent events, one chunk each, ending with `data: [DONE]`"}},
)  # fmt: skip
async def chat_completions(body: ChatCompletionRequest, request: Request) -> Any:
    arrived, pipeline, namespace = admitted(request)
    return await answer(request, pipeline, body, namespace, arrived, CHAT, body.user)


def admitted(request: Request) -> tuple[float, Pipeline, str]:
    """When the request arrived (hits are padded from then: hit_min_latency_ms), the pipeline (a 503
    while loading), and the namespace that the client's key may use and whose rate limit it passed."""
    arrived = time.perf_counter()
    pipeline = pipeline_of(request)
    return arrived, pipeline, admitted_namespace(request)


async def answer(
    request: Request,
    pipeline: Pipeline,
    body: ChatCompletionRequest,
    namespace: str,
    arrived: float,
    dialect: Dialect,
    user: str | None,
) -> Response:
    """A request through the tiers, answered in its own API (``dialect``): ``body`` is its chat view,
    ``user`` who the client says it asks for (with ``scope_per_user``, part of the scope)."""
    RequestBounds.from_settings(_state(request).settings).check(body)
    upstream_headers = dict(request.headers)  # the upstream backend picks what it passes on
    lookup = await pipeline.lookup(body, namespace, request_controls(request, user), dialect, upstream_headers)
    try:
        if lookup.hit is not None:
            await pipeline.pad_hit(lookup, arrived)
            await pipeline.record(lookup)
            if body.stream:
                return _sse(pipeline.hit_stream(lookup), _outcome_headers(lookup), dialect)
            return await json_response(await pipeline.hit_response(lookup), headers=_outcome_headers(lookup))
        if body.stream:
            chunks = pipeline.forward_stream(lookup, upstream_headers)
            first = await anext(chunks, None)  # errors before the first byte keep their HTTP status
            await pipeline.pad_hit(lookup, arrived)  # an answer shared with a request in flight
            await pipeline.record(lookup)
            return _sse(chunks, _outcome_headers(lookup), dialect, first)
        response = await pipeline.forward(lookup, upstream_headers)
        await pipeline.pad_hit(lookup, arrived)
        await pipeline.record(lookup)
        return await json_response(response, headers=_outcome_headers(lookup))
    except SemcacheError as error:
        pipeline.record_error(namespace, dialect.api)
        failure = error_response(error)
        failure.headers.update(_outcome_headers(lookup))
        return failure


@router.get("/v1/models", summary="List the upstream's models")
async def list_models(request: Request) -> Any:
    admitted_namespace(request)  # with API keys configured, only their holders may ask
    return await upstream_of(request).list_models(dict(request.headers))


@router.get("/healthz", summary="200 once the model and the index are loaded, 503 before")
async def healthz(request: Request) -> JSONResponse:
    state = _state(request)
    if state.pipeline is not None:
        return JSONResponse({"status": "ok"})
    status = "failed" if state.load_error else "loading"
    return JSONResponse({"status": status, "error": state.load_error}, status_code=503)


@router.get(
    "/stats",
    summary="Hit-rate statistics: of every replica together with --store redis",
    description="With API keys configured, needs the metrics key or the admin key as a Bearer token.",
    dependencies=[Depends(require_metrics_key)],
)
async def stats(request: Request) -> dict[str, Any]:
    state = _state(request)
    replica = state.replica
    shared = await replica.cluster_stats() if replica is not None else None
    snapshot: dict[str, Any] = shared or state.stats.snapshot()
    snapshot["scope"] = "cluster" if shared is not None else "replica" if replica is not None else "process"
    if replica is not None:
        snapshot["replica"] = replica.status()
    pipeline = state.pipeline
    if pipeline is None:
        return {**snapshot, "entries": None, "ready": False}
    index = pipeline.index.stats()
    maintenance = state.maintenance
    return {
        **snapshot,
        "entries": await _count_or_none(state.store.count),
        "ready": True,
        "index": {
            "entries": index.entries,
            "tombstones": index.tombstones,
            "partitions": index.partitions,
            "hnsw_partitions": index.hnsw_partitions,
            "rebuilds": index.rebuilds,
            "rebuilding": index.rebuilding,
            "rebuild_progress": [
                {"scope": r.scope, "kind": r.kind, "done": r.done, "total": r.total, "seconds": round(r.seconds, 1)}
                for r in index.rebuild_progress
            ],
        },
        "expired": maintenance.expired if maintenance else 0,
        "evicted": maintenance.evicted if maintenance else 0,
        "embeddings": {**snapshot["embeddings"], **await _embedding_entries(state)},
        # Each namespace's error budget (this replica's view of the shared evidence), busiest first.
        "quality": pipeline.semantic.quality(limit=state.settings.metrics_max_namespaces),
    }


async def _embedding_entries(state: Any) -> dict[str, Any]:
    """The embeddings cache's size and what the sweeper took from it."""
    maintenance = state.maintenance
    return {
        "entries": await _count_or_none(state.store.count_embeddings),
        "expired": maintenance.expired_embeddings if maintenance else 0,
        "evicted": maintenance.evicted_embeddings if maintenance else 0,
    }


async def _count_or_none(count: Callable[[], Awaitable[int]]) -> int | None:
    """A count from the store; None while it is unreachable."""
    try:
        return await count()
    except StoreUnavailable:
        return None


def namespace_of(request: Request) -> str:
    """The request's namespace, checked against its API key's allowed set."""
    access = _state(request).access
    return str(access.namespace_for(request.headers.get("authorization"), request.headers.get("x-semcache-namespace")))


def request_controls(request: Request, user: str | None) -> RequestControls:
    """The request's cache headers, who sent it (its key and ``user`` field) and the account it names."""
    # Every Cache-Control header counts: a list header may be split over several lines.
    directives = {
        part.strip().lower() for value in request.headers.getlist("cache-control") for part in value.split(",")
    }
    ttl_headers = request.headers.getlist("x-semcache-ttl")
    if len(ttl_headers) > 1:
        raise InvalidRequest("send X-Semcache-TTL once", code="invalid_ttl")
    ttl_header = ttl_headers[0] if ttl_headers else None
    ttl: float | None = None
    if ttl_header is not None:
        try:
            ttl = float(ttl_header)
        except ValueError:
            ttl = -1.0
        if not math.isfinite(ttl) or not 0 <= ttl <= MAX_TTL_S:
            raise InvalidRequest(
                f"X-Semcache-TTL must be a number of seconds from 0 to {MAX_TTL_S} (ten years)", code="invalid_ttl"
            )
    return RequestControls(
        read_cache="no-cache" not in directives,
        store="no-store" not in directives,
        ttl_s=ttl,
        user=user_id(canonical_authorization(request.headers.get("authorization")), user),
        account=account_id(request.headers.get("openai-organization"), request.headers.get("openai-project")),
    )


def canonical_authorization(authorization: str | None) -> str | None:
    """``Bearer <token>`` for every spelling of a bearer token (``bearer``, ``BEARER``, extra spaces),
    so that one key is one user with ``scope_per_user``; anything else as sent."""
    token = bearer_token(authorization)
    return authorization if token is None else f"Bearer {token}"


def _outcome_headers(lookup: Lookup) -> dict[str, str]:
    headers: dict[str, str] = {"X-Semcache": lookup.outcome}
    if lookup.tier is not None:
        headers["X-Semcache-Tier"] = lookup.tier
    if lookup.tier == "semantic" and lookup.hit is not None and lookup.hit.similarity is not None:
        headers["X-Semcache-Similarity"] = f"{lookup.hit.similarity:.4f}"
    if lookup.hit is not None and lookup.hit.verified:
        headers["X-Semcache-Verified"] = "true"
    if lookup.coalesced_tier is not None:
        headers["X-Semcache-Coalesced"] = "true"
    if lookup.explored:
        headers["X-Semcache-Explored"] = "true"
    return headers


def _sse(
    chunks: AsyncIterator[dict[str, Any]],
    headers: dict[str, str],
    dialect: Dialect,
    first: dict[str, Any] | None = None,
) -> StreamingResponse:
    return _ClosingStreamingResponse(
        _sse_events(chunks, first, dialect),
        media_type="text/event-stream",
        headers={**headers, "Cache-Control": "no-cache"},
    )


class _ClosingStreamingResponse(StreamingResponse):
    """Closes its events when it ends, however it ends. A client that leaves while an event is being
    sent stops the response with the events paused at a ``yield``; closed here, in the request's own
    task, they release the upstream call at once, not whenever the garbage collector gets to them."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            close = getattr(self.body_iterator, "aclose", None)
            if close is not None:
                await close()


async def _sse_events(
    chunks: AsyncIterator[dict[str, Any]], first: dict[str, Any] | None, dialect: Dialect
) -> AsyncIterator[bytes]:
    named = dialect.named_events
    try:
        if first is not None:
            yield await _event(first, named)
        async for chunk in chunks:
            yield await _event(chunk, named)
    except SemcacheError as error:
        # Headers are gone already: report in-band, as OpenAI does, and never send [DONE].
        log.warning("stream ended early: %s", error.message)
        yield await _event(error.to_openai(), named)
        return
    except Exception:
        log.exception("stream failed")
        yield await _event(openai_error_body("internal error", "server_error", "internal_error"), named)
        return
    finally:
        # Close the chain now, not when the garbage collector gets to it: a client that went away
        # must release its upstream call, its concurrency slot and any flight it leads at once.
        close = getattr(chunks, "aclose", None)
        if close is not None:
            await close()
    if dialect.ends_with_done:
        yield b"data: [DONE]\n\n"


async def _event(payload: dict[str, Any], named: bool = False) -> bytes:
    """One SSE event, after an ``event:`` line naming its type when ``named`` (the Responses API);
    a large one (megabytes in one chunk) rendered with the event loop free between its pieces."""
    kind = payload.get("type") if named else None
    head = b"event: " + kind.encode() + b"\n" if isinstance(kind, str) and kind.isprintable() else b""
    return head + b"data: " + await render(payload) + b"\n\n"
