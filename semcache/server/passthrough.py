"""The other ``/v1`` routes: passed on to the upstream untouched, answered as they come, never cached.

Only the routes in ``passthrough_routes`` are: by default the stateless inference routes (models,
embeddings, completions, moderations, audio, images). Embeddings reach this route only with
``cache_embeddings`` off; on, ``server/embeddings.py`` caches them. Account routes (files, batches, fine-tuning,
assistants, vector stores) act on whoever's key goes upstream, the operator's with
``upstream_api_key``, so they pass only when an operator lists them. Each relayed request takes the
same auth, namespace and rate limit as chat, and its errors come back scrubbed of secrets, as chat's
do.
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from starlette.background import BackgroundTask

from ..errors import NotFound
from ..protocols import RelayRequest
from .routes import admit, namespace_of, upstream_of

passthrough_router = APIRouter(tags=["pass-through"])

# A path below /v1 that stays there: segments of plain characters, never "." or "..".
_SEGMENT = re.compile(r"[A-Za-z0-9_\-][A-Za-z0-9_.\-:=]*")


async def passthrough(path: str, request: Request) -> Any:
    state = request.app.state.semcache
    segments = path.split("/")
    if not all(_SEGMENT.fullmatch(segment) and segment not in (".", "..") for segment in segments):
        raise NotFound(f"no route /v1/{path}", code="unknown_route")
    if segments[0] not in state.settings.passthrough_routes:
        raise NotFound(
            f"semcache does not serve or pass on /v1/{segments[0]}; an operator can add it to passthrough_routes",
            code="unknown_route",
        )
    namespace = namespace_of(request)
    admit(request, namespace)  # with API keys configured, only their holders may pass
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


for _method in ("GET", "POST", "PUT", "PATCH", "DELETE"):  # one operation each, for the OpenAPI schema
    passthrough_router.add_api_route(
        "/v1/{path:path}",
        passthrough,
        methods=[_method],
        operation_id=f"passthrough_{_method.lower()}",
        summary="Any other /v1 route in passthrough_routes, passed on to the upstream (never cached)",
    )
