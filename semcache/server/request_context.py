"""Every request gets an id: the client's ``X-Request-Id`` when it is sane, else a fresh one. It is
bound for the whole request (so every log line carries it), sent back in ``X-Request-Id``, and the
request ends with one log line: method, path, status, duration and the cache's verdict.

A client that left before its answer was complete is logged with status 499, "client closed
request" (as nginx does), whatever the answer's own status was; one whose body did not arrive in
time, with the 408 that ``protocol.py`` sent it itself."""

from __future__ import annotations

import logging
import time
from typing import Any

from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..logs import REQUEST_ID_HEADER, accept_request_id, bind_request_id, unbind_request_id
from .errors import CLIENT_CLOSED_REQUEST

log = logging.getLogger("semcache.access")

# Set in a request's scope by the HTTP protocol when it answered the request itself (a 408).
ANSWERED_BY_PROTOCOL = "semcache.answered_by_protocol"
# Statuses that need a word in the access line: neither is a route's answer.
_EXPLAINED = {408: "request timeout", CLIENT_CLOSED_REQUEST: "client closed request"}

# Polled by load balancers and scrapers: their lines go to debug, not to every operator's screen.
_QUIET_PATHS = frozenset({"/healthz", "/metrics"})


class RequestContext:
    """Pure ASGI middleware (no extra task), so the id is bound in the request's own context."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = accept_request_id(Headers(scope=scope).get(REQUEST_ID_HEADER))
        token = bind_request_id(request_id)
        started = time.perf_counter()
        response: dict[str, Any] = {"status": 500, "complete": False}

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers[REQUEST_ID_HEADER] = request_id
                response.update(status=message["status"], semcache=headers.get("x-semcache"),
                                tier=headers.get("x-semcache-tier"))  # fmt: skip
            elif not message.get("more_body", False):
                response["complete"] = True
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except BaseException:
            # The id stays bound: uvicorn logs the failure after this returns, in this same task
            # (which ends with the request).
            _log_request(scope, response, time.perf_counter() - started)
            raise
        if not response["complete"]:
            # The app returned without finishing its answer: only when the client left (a stream
            # stops when it does; uvicorn reports any other case itself).
            response["status"] = CLIENT_CLOSED_REQUEST
        _log_request(scope, response, time.perf_counter() - started)
        unbind_request_id(token)


def _log_request(scope: Scope, response: dict[str, Any], seconds: float) -> None:
    path = scope.get("path", "")  # never the query string: clients put keys there
    fields = {
        "method": scope.get("method"),
        "path": path,
        "status": scope.get(ANSWERED_BY_PROTOCOL) or response["status"],
        "duration_ms": round(seconds * 1000, 2),
        "client": (scope.get("client") or ("",))[0],
    }
    if response.get("semcache"):
        fields["semcache"] = response["semcache"]
    if response.get("tier"):
        fields["tier"] = response["tier"]
    level = logging.DEBUG if path in _QUIET_PATHS else logging.INFO
    explained = _EXPLAINED.get(fields["status"])
    if explained is None:
        log.log(level, "%s %s %d", fields["method"], path, fields["status"], extra=fields)
    else:
        log.log(level, "%s %s %d %s", fields["method"], path, fields["status"], explained, extra=fields)
