"""The HTTP protocol ``semcache serve`` runs: uvicorn's httptools protocol with bounds on the
request head, and with each response's head and body sent in one write.

uvicorn writes a response's head and its body separately: two sends, two packets, and on loopback
two wake-ups of the client. On the 2-core machine, those two writes were about a third of the
event loop's work on an exact hit (py-spy, 2026-11-30); sending them as one saved 0.1-0.2 ms per
request.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from ..errors import InvalidRequest


class CoalescedWrites:
    """A transport that holds a write until the next one, and sends both in one write: a
    response's head goes out with the start of its body, at once. A write that no other follows
    in the same turn of the event loop goes out at the end of that turn (``call_soon``), or
    before closing. Everything else is the wrapped transport's, flow control included."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: bytes | None = None

    def write(self, data: bytes) -> None:
        if self._pending is None:
            self._pending = data
            self._loop.call_soon(self._flush)
            return
        held, self._pending = self._pending, None
        self._transport.write(held + data)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._pending = None
        self._transport.abort()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + len(self._pending or b"")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def _flush(self) -> None:
        held, self._pending = self._pending, None
        if held is not None and not self._transport.is_closing():
            self._transport.write(held)


def http_protocol(max_header_bytes: int, max_header_count: int) -> type[asyncio.Protocol] | None:
    """uvicorn's httptools protocol, refusing a request line and headers over these bounds with a 431,
    and sending what one turn of the event loop writes in one write (``CoalescedWrites``).

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

        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(CoalescedWrites(transport, self.loop))

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
