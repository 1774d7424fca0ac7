"""Prometheus ``/metrics``, who may read it and ``/stats``, and the timer behind the request
latencies of both."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import Forbidden, Unauthorized
from ..metrics import Metrics
from ..stats import LatencyPath
from .access import bearer_token, same_secret

monitoring_router = APIRouter(tags=["monitoring"])

_HIT_PATHS: dict[str, LatencyPath] = {"exact": "exact_hit", "template": "template_hit", "semantic": "semantic_hit"}


def require_metrics_key(request: Request) -> None:
    """/stats and /metrics list every namespace. With client API keys configured, those belong to
    tenants who must not see each other: they need SEMCACHE_METRICS_KEY (which opens nothing else,
    for scrapers and dashboards) or the admin key, as a Bearer token. Without a key file they stay
    open, as any client may use any namespace then."""
    state = request.app.state.semcache
    if not state.access.configured:
        return
    keys = [key for key in (state.settings.metrics_key, state.settings.admin_key) if key]
    if not keys:
        raise Forbidden(
            "/stats and /metrics are closed: API keys are configured but neither SEMCACHE_METRICS_KEY nor "
            "SEMCACHE_ADMIN_KEY is",
            code="metrics_disabled",
        )
    token = bearer_token(request.headers.get("authorization"))
    if token is None:
        raise Unauthorized("this path needs the metrics key or the admin key as a Bearer token",
                           code="metrics_key_required")  # fmt: skip
    if not any([same_secret(token, key) for key in keys]):  # both compared, whichever matches
        raise Forbidden("wrong metrics key", code="invalid_metrics_key")


@monitoring_router.get(
    "/metrics",
    summary="Prometheus metrics of this replica (text exposition format)",
    description="With API keys configured, needs the metrics key or the admin key as a Bearer token.",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}}},
    dependencies=[Depends(require_metrics_key)],
)
async def metrics(request: Request) -> Response:
    registry: Metrics = request.app.state.semcache.metrics
    # Off the event loop: reading the index's figures waits for its lock, which a rebuild may hold.
    body, content_type = await asyncio.to_thread(registry.exposition)
    return Response(body, media_type=content_type)


class RequestTimer:
    """Times each cache-answered request from its first byte in to its last byte out (a stream's
    too), and files it under its path, read from the ``X-Semcache`` headers the route set.

    Requests refused before the cache was asked (bad input, rate limits) carry no such header and
    are not timed. Pure ASGI: a stream is timed to its end, and no task is added per request.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        path: list[LatencyPath] = []

        async def send_and_note(message: Message) -> None:
            if message["type"] == "http.response.start":
                found = _latency_path(message)
                if found is not None:
                    path.append(found)
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            if path:
                _record(scope, path[0], time.perf_counter() - started)


def _latency_path(start: Message) -> LatencyPath | None:
    headers = Headers(raw=start.get("headers", []))
    outcome = headers.get("x-semcache")
    if outcome is None:
        return None
    if start["status"] >= 400:
        return "error"
    if outcome == "hit":
        return _HIT_PATHS.get(headers.get("x-semcache-tier", ""))
    return "bypass" if outcome == "bypass" else "miss"


def _record(scope: Scope, path: LatencyPath, seconds: float) -> None:
    state: Any = scope["app"].state.semcache
    state.observer.request_duration(path, seconds)
