"""The other ``/v1`` routes: passed on to the upstream untouched, answered as they come, never cached.

Only the routes in ``passthrough_routes`` are: by default the stateless inference routes (models,
embeddings, completions, moderations, audio, images). Embeddings reach this route only with
``cache_embeddings`` off; on, ``server/embeddings.py`` caches them. Account routes (files, batches, fine-tuning,
assistants, vector stores) act on whoever's key goes upstream, the operator's with
``upstream_api_key``, so they pass only when an operator lists them. Each route passes on only the
methods it needs to read or infer, and those an operator adds (``passthrough_methods``): any other
is a 405, never a deletion on the operator's account. Each relayed request takes the same auth,
namespace and rate limit as chat, and its errors come back scrubbed of secrets, as chat's do.
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from starlette.background import BackgroundTask

from ..protocols import RelayRequest
from ..settings import PASSTHROUGH_METHODS
from .routes import admitted_namespace, upstream_of
from .served import PASS_THROUGH_TAG, not_found, refusal

passthrough_router = APIRouter(tags=[PASS_THROUGH_TAG])

# A path below /v1 that stays there: segments of plain characters, never "." or "..".
_SEGMENT = re.compile(r"[A-Za-z0-9_\-][A-Za-z0-9_.\-:=]*")


async def passthrough(path: str, request: Request) -> Any:
    settings = request.app.state.semcache.settings
    full_path = f"/v1/{path}"
    segments = path.split("/")
    if not all(_SEGMENT.fullmatch(segment) and segment not in (".", "..") for segment in segments):
        raise not_found(request.app, settings, full_path)
    if request.method not in settings.passthrough_methods_of(segments[0]):
        raise refusal(request.app, settings, request.method, full_path)
    namespace = admitted_namespace(request)  # with API keys configured, only their holders may pass
    return await relay(request, f"/{path}", namespace, segments[0], await request.body())


async def relay(request: Request, path: str, namespace: str, route: str, body: bytes) -> StreamingResponse:
    """Pass the request on to the upstream's ``path`` (below /v1) with ``body``, and its answer back
    as it comes, never cached (``X-Semcache: bypass``); counted in /stats under ``route``."""
    state = request.app.state.semcache
    upstream = upstream_of(request)
    relay_request = RelayRequest(
        method=request.method,
        path=path,
        query=request.url.query,
        body=body,
        content_type=request.headers.get("content-type"),
    )
    try:
        relayed = await upstream.relay(relay_request, dict(request.headers))
    except Exception:
        state.observer.request(namespace, "error", None, route)
        raise
    state.observer.request(namespace, "bypass", None, route)
    return StreamingResponse(
        relayed.body,
        status_code=relayed.status,
        headers={**relayed.headers, "X-Semcache": "bypass"},
        background=BackgroundTask(relayed.close),
    )


for _method in PASSTHROUGH_METHODS:  # one operation each, for the OpenAPI schema
    passthrough_router.add_api_route(
        "/v1/{path:path}",
        passthrough,
        methods=[_method],
        operation_id=f"passthrough_{_method.lower()}",
        summary="Any other /v1 route in passthrough_routes, with the methods it passes on, passed on to the "
        "upstream (never cached)",
    )
