"""The HTTP protocol ``semcache serve`` runs: uvicorn's httptools protocol with bounds on the
request head, deadlines on reading a request, and each response's head and body sent in one write.

uvicorn writes a response's head and its body separately: two sends, two packets, and on loopback
two wake-ups of the client. On a small response such as an exact hit, those writes are a large share
of the event loop's work, so they are sent as one.
"""

from __future__ import annotations

import asyncio
import http
import json
import logging
from typing import Any, Literal

from ..errors import InvalidRequest, RequestTimeout, SemcacheError
from .request_context import ANSWERED_BY_PROTOCOL

log = logging.getLogger("semcache.server")


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


def http_protocol(
    max_header_bytes: int, max_header_count: int, header_timeout_s: float, body_timeout_s: float
) -> type[asyncio.Protocol] | None:
    """uvicorn's httptools protocol, refusing a request line and headers over these bounds with a 431,
    closing slow requests, and sending what one turn of the event loop writes in one write
    (``CoalescedWrites``).

    A request whose line and headers are not all in within ``header_timeout_s`` of their first byte,
    or whose body is not all in within ``body_timeout_s`` of the end of its headers, is answered 408
    (when nothing was sent for it yet) and its connection closed; so is a new connection that sends
    nothing for ``header_timeout_s``. A kept-alive connection waiting for its next request keeps
    uvicorn's own keep-alive timeout, and the time semcache takes to answer is not bounded here.
    The deadlines are ``loop.call_later`` timers, started only when a phase is not over by the end
    of the read that began it: a request that arrives in one read starts none.

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
            # "idle": no request begun; "head": between its first byte and the end of its headers.
            self._phase: Literal["idle", "head", "body"] = "idle"
            self._phase_began = False  # in the read being parsed: its deadline starts after it
            self._read_deadline: asyncio.TimerHandle | None = None
            self._head_bytes_received = 0  # counted per read, so a head that never ends is caught
            self._head_bytes = 0  # request line and headers, counted exactly
            self._header_count = 0
            self._refused = False

        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(CoalescedWrites(transport, self.loop))
            self._start_deadline(header_timeout_s)

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_deadline()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return
            if self._phase != "body":
                self._head_bytes_received += len(data)
            super().data_received(data)
            if self._phase != "body" and not self._refused and self._head_bytes_received > max_header_bytes:
                self._refuse()
            self._time_the_read()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._phase, self._phase_began = "head", True
            self._head_bytes_received, self._head_bytes, self._header_count = 0, 0, 0

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
            self._phase, self._phase_began = "body", True
            super().on_headers_complete()

        def on_body(self, body: bytes) -> None:
            if not self._refused:
                super().on_body(body)

        def on_message_complete(self) -> None:
            if not self._refused:
                self._phase = "idle"
                super().on_message_complete()

        def _time_the_read(self) -> None:
            """After a read: start the deadline of a phase it began and did not finish; stop it when
            a whole request is in and being answered."""
            began, self._phase_began = self._phase_began, False
            if not self._reading():
                self._stop_deadline()
            elif self._phase == "idle" and self._answering():
                self._stop_deadline()  # uvicorn's keep-alive timeout starts once the answer is sent
            elif began or self._read_deadline is None:
                self._start_deadline(body_timeout_s if self._phase == "body" else header_timeout_s)

        def _reading(self) -> bool:
            """False once this connection was refused, is closing, or was handed to another protocol
            (uvicorn's WebSocket one, on an upgrade)."""
            return not self._refused and not self.transport.is_closing() and self.transport.get_protocol() is self

        def _answering(self) -> bool:
            return self.cycle is not None and not self.cycle.response_complete

        def _start_deadline(self, seconds: float) -> None:
            self._stop_deadline()
            self._read_deadline = self.loop.call_later(seconds, self._deadline_passed)

        def _stop_deadline(self) -> None:
            if self._read_deadline is not None:
                self._read_deadline.cancel()
                self._read_deadline = None

        def _deadline_passed(self) -> None:
            self._read_deadline = None
            if not self._reading():
                return
            if self.flow.read_paused or (self._phase == "head" and self._answering()):
                # Not the client's doing: reading is paused until semcache catches up, or the
                # request waits behind an earlier one still being answered.
                self._start_deadline(body_timeout_s if self._phase == "body" else header_timeout_s)
            elif self._phase == "idle":
                log.debug("closed a connection that sent no request in %g s", header_timeout_s)
                self.transport.close()
            elif self._phase == "head":
                log.info("closed a connection whose request line and headers took over %g s", header_timeout_s,
                         extra={"client": (self.client or ("",))[0]})  # fmt: skip
                self._answer_and_close(
                    RequestTimeout(f"the request line and headers did not arrive within {header_timeout_s:g} s")
                )
            elif self.cycle.response_started:
                self.transport.close()  # answered already (a refusal that needs no body): only close
            else:
                # The route reading the body hears of a disconnect; its access line shows this 408.
                self.cycle.scope[ANSWERED_BY_PROTOCOL] = RequestTimeout.status_code
                self.cycle.disconnected = True
                self.cycle.message_event.set()
                self._answer_and_close(
                    RequestTimeout(f"the request body did not arrive within {body_timeout_s:g} s of its headers")
                )

        def _refuse(self) -> None:
            self._answer_and_close(
                InvalidRequest(
                    f"the request line and headers are over {max_header_bytes} bytes or {max_header_count} headers",
                    code="request_headers_too_large",
                    status_code=431,
                )
            )

        def _answer_and_close(self, error: SemcacheError) -> None:
            """Answer ``error`` in OpenAI's shape and close: nothing more is read from this connection."""
            self._refused = True
            self._stop_deadline()
            body = json.dumps(error.to_openai()).encode()
            head = (
                f"HTTP/1.1 {error.status_code} {http.HTTPStatus(error.status_code).phrase}\r\n"
                f"content-type: application/json\r\ncontent-length: {len(body)}\r\nconnection: close\r\n\r\n"
            )
            self.transport.write(head.encode() + body)
            self.transport.close()

    return BoundedHttpToolsProtocol
