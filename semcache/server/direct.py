"""The chat route's hot path: a valid chat request goes straight to its endpoint, past FastAPI's
per-request machinery; every other request, and any chat body that does not validate, takes
FastAPI's own path, so every error and the OpenAPI schema stay FastAPI's, word for word.

FastAPI's layers (its error and telemetry middlewares, the exception middleware, the exit stack,
routing, the request wrapper) are a noticeable share of a cache hit's time, and a hit needs none
of them. semcache's own middlewares (request id, timer, body size) wrap both paths, so each request passes
them once. A deployment under a root path (``--root-path``) takes FastAPI's path: correct, slower.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from fastapi import Request, Response
from pydantic import BaseModel
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import SemcacheError
from .errors import client_gone_response, error_response, internal_error_response
from .limits import BoundedJsonRequest, declares_json

log = logging.getLogger("semcache.server")

BodyT = TypeVar("BodyT", bound=BaseModel)


class DirectRoute(Generic[BodyT]):
    """Pure ASGI: ``POST path`` with a JSON body that ``model`` validates is answered by
    ``endpoint(body, request)``; anything else goes on to ``app``, with the body read so far
    handed on as if unread. The endpoint's ``SemcacheError`` becomes its OpenAI-shaped response,
    as FastAPI's exception handler would make it; anything else a logged 500 in the same shape."""

    def __init__(
        self, app: ASGIApp, path: str, model: type[BodyT], endpoint: Callable[[BodyT, Request], Awaitable[Response]]
    ) -> None:
        self.app = app
        self.path = path
        self.model = model
        self.endpoint = endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != self.path or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        request = BoundedJsonRequest(scope, receive)
        try:
            body = await self._valid_body(request)
            read = await request.body() if body is None else b""
        except ClientDisconnect:  # it left before its body was in
            await client_gone_response()(scope, receive, send)
            return
        if body is None:  # FastAPI's path says what is wrong
            await self.app(scope, _replay(read, receive), send)
            return
        try:
            response = await self.endpoint(body, request)
        except SemcacheError as error:
            response = error_response(error)
        except Exception:
            log.exception("unexpected error on %s %s", scope["method"], self.path)
            response = internal_error_response()
        await response(scope, receive, send)

    async def _valid_body(self, request: BoundedJsonRequest) -> BodyT | None:
        if not declares_json(request.headers.get("content-type")):
            return None
        try:
            return self.model.model_validate(await request.json())
        except ClientDisconnect:
            raise
        except Exception:  # not BaseException: a body over its size limit still ends the request
            return None


def _replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` for an app that has not seen the request body: the body first, then ``receive``'s
    own messages (a disconnect)."""
    replayed = False

    async def receive_again() -> Message:
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive_again
