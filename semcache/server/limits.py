"""Bounds on everything a client controls, each refused with a 4xx in OpenAI's shape and a code of its own:

- the request line and headers (``BoundedHttpToolsProtocol``, in uvicorn, before the app sees them): 431;
- the body's size (``BodySizeLimit``, before it is read into memory): 413;
- the body's JSON (``BoundedJsonRoute``: strict UTF-8, bounded nesting; ``wire.parse_json_body``): 400;
- a chat request's messages, tools and text (``RequestBounds``): 400.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import BodyTooLarge, InvalidRequest
from ..settings import Settings
from ..wire import ChatCompletionRequest, parse_json_body


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
                f"{len(request.tools)} tools, more than the {self.max_tools} allowed", code="too_many_tools"
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
            return await handler(_BoundedJsonRequest(request.scope, request.receive))

        return bounded_handler


class _BoundedJsonRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            max_depth: int = self.app.state.semcache.settings.max_json_depth
            self._json = parse_json_body(await self.body(), max_depth)
        return self._json


def bounded_http_protocol(max_header_bytes: int, max_header_count: int) -> type[asyncio.Protocol] | None:
    """uvicorn's httptools protocol, refusing a request line and headers over these bounds with a 431.

    httptools itself has no bound (uvicorn keeps a 10 MB header in memory and passes it on). None
    when httptools is not installed: uvicorn's h11 then refuses a head over ``h11_max_incomplete_event_size``.
    """
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # pragma: no cover - uvicorn[standard] ships httptools
        return None

    class BoundedHttpToolsProtocol(HttpToolsProtocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._in_head = True  # between a request's first byte and the end of its headers
            self._head_bytes_received = 0  # counted per read, so a head that never ends is caught
            self._head_bytes = 0  # request line and headers, counted exactly
            self._header_count = 0
            self._refused = False

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return
            if self._in_head:
                self._head_bytes_received += len(data)
            super().data_received(data)
            if self._in_head and not self._refused and self._head_bytes_received > max_header_bytes:
                self._refuse()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._in_head, self._head_bytes_received, self._head_bytes, self._header_count = True, 0, 0, 0

        def on_url(self, url: bytes) -> None:
            self._head_bytes += len(url)
            if self._head_bytes <= max_header_bytes:
                super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            self._head_bytes += len(name) + len(value) + 4  # ": " and CRLF
            self._header_count += 1
            if self._head_bytes <= max_header_bytes and self._header_count <= max_header_count:
                super().on_header(name, value)  # never keep what is refused

        def on_headers_complete(self) -> None:
            if self._refused:
                return  # a request pipelined behind the refused one, in the same read
            if self._head_bytes > max_header_bytes or self._header_count > max_header_count:
                self._refuse()
                return
            self._in_head = False
            super().on_headers_complete()

        def on_body(self, body: bytes) -> None:
            if not self._refused:
                super().on_body(body)

        def on_message_complete(self) -> None:
            if not self._refused:
                super().on_message_complete()

        def _refuse(self) -> None:
            self._refused = True
            error = InvalidRequest(
                f"the request line and headers are over {max_header_bytes} bytes or {max_header_count} headers",
                code="request_headers_too_large",
                status_code=431,
            )
            body = json.dumps(error.to_openai()).encode()
            head = (
                "HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
                f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
            )
            self.transport.write(head.encode() + body)
            self.transport.close()

    return BoundedHttpToolsProtocol
