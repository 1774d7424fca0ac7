"""Prometheus ``/metrics``, and the timer behind the request latencies of ``/metrics`` and ``/stats``."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..metrics import Metrics
from ..stats import LatencyPath

monitoring_router = APIRouter(tags=["monitoring"])

_HIT_PATHS: dict[str, LatencyPath] = {"exact": "exact_hit", "template": "template_hit", "semantic": "semantic_hit"}


@monitoring_router.get(
    "/metrics",
    summary="Prometheus metrics of this replica (text exposition format)",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}}},
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
    state.stats.record_latency(path, seconds)
    state.metrics.request_duration(path, seconds)
