"""Bounds on everything a client controls, each refused with a 4xx in OpenAI's shape and a code of its own:

- the request line and headers (``protocol.bounded_http_protocol``, in uvicorn, before the app sees them): 431;
- the body's size (``BodySizeLimit``, before it is read into memory): 413;
- the body's JSON (``BoundedJsonRequest``: strict UTF-8, bounded nesting and containers; ``wire.parse_json_body``): 400;
- a chat request's messages, tools and text (``RequestBounds``): 400.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import BodyTooLarge, InvalidRequest, UnsupportedMediaType
from ..settings import Settings
from ..wire import ChatCompletionRequest, parse_json_body
from ..wording import counted


class BodySizeLimit:
    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            await self._refuse(send)
            return
        received = 0
        response_started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    raise _TooLarge
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal response_started
            response_started = response_started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _TooLarge:
            if not response_started:
                await self._refuse(send)

    async def _refuse(self, send: Send) -> None:
        error = BodyTooLarge(f"the request body is larger than {self.max_body_bytes} bytes")
        body = json.dumps(error.to_openai()).encode()
        await send(
            {
                "type": "http.response.start",
                "status": error.status_code,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})


class _TooLarge(BaseException):
    """A BaseException so that body parsers which turn any Exception into a 400 let it through."""


@dataclass(frozen=True)
class RequestBounds:
    """What one chat request may hold (settings ``max_messages``, ``max_tools``, ``max_prompt_chars``)."""

    max_messages: int
    max_tools: int
    max_prompt_chars: int

    @classmethod
    def from_settings(cls, settings: Settings) -> RequestBounds:
        return cls(settings.max_messages, settings.max_tools, settings.max_prompt_chars)

    def check(self, request: ChatCompletionRequest) -> None:
        if len(request.messages) > self.max_messages:
            raise InvalidRequest(
                f"{len(request.messages)} messages, more than the {self.max_messages} allowed", code="too_many_messages"
            )
        if request.tools is not None and len(request.tools) > self.max_tools:
            raise InvalidRequest(
                f"{counted(len(request.tools), 'tool')}, more than the {self.max_tools} allowed", code="too_many_tools"
            )
        chars = request.content_chars()
        if chars > self.max_prompt_chars:
            raise InvalidRequest(
                f"the messages hold {chars} characters of text, more than the {self.max_prompt_chars} allowed",
                code="prompt_too_long",
            )


class BoundedJsonRoute(APIRoute):
    """A route whose JSON body is parsed by ``wire.parse_json_body`` instead of ``json.loads``."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def bounded_handler(request: Request) -> Response:
            return await handler(BoundedJsonRequest(request.scope, request.receive))

        return bounded_handler


def declares_json(content_type: str | None) -> bool:
    """Whether a Content-Type names JSON: ``application/json`` (any parameters) or ``application/*+json``."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def has_body(headers: Headers) -> bool:
    length = headers.get("content-length")
    return "transfer-encoding" in headers or (length is not None and length.strip() not in ("", "0"))


def require_json_body(request: Request) -> None:
    """Every JSON route's bodies must say they are JSON: browsers send untyped, text and form bodies
    to any site without asking it first (no CORS preflight), so that a page on another site could
    otherwise make its visitors' browsers call the semcache on their machine or network."""
    content_type = request.headers.get("content-type")
    if has_body(request.headers) and not declares_json(content_type):
        raise UnsupportedMediaType(not_json_message(request.url.path, content_type), code="unsupported_media_type")


def not_json_message(path: str, content_type: str | None, also: str = "") -> str:
    """The 415's words, alike on every route: what to send, and what was sent."""
    sent = f"this one has Content-Type: {content_type}" if content_type else "this one has no Content-Type"
    return f"{path} takes a JSON body: send it with Content-Type: application/json{also} ({sent})"


class BoundedJsonRequest(Request):
    """A request whose ``json()`` is ``wire.parse_json_body``'s. The outcome is kept in the scope,
    so that a body parsed once (``fastpath.DirectRoute``, then FastAPI's path) is not parsed again."""

    async def json(self) -> Any:
        if _JSON_FAILURE in self.scope:
            raise self.scope[_JSON_FAILURE]
        if _JSON not in self.scope:
            settings = self.app.state.semcache.settings
            try:
                self.scope[_JSON] = parse_json_body(await self.body(), settings.max_json_depth,
                                                    settings.max_json_containers)  # fmt: skip
            except InvalidRequest as exc:
                self.scope[_JSON_FAILURE] = exc
                raise
        return self.scope[_JSON]


_JSON = "semcache.json"
_JSON_FAILURE = "semcache.json_failure"
