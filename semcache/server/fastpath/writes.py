"""A response's head and body in one write: uvicorn writes them separately, two sends and, on
loopback, two wake-ups of the client, a noticeable share of the event loop's work on a cache hit."""

from __future__ import annotations

import asyncio
from typing import Any


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


def with_coalesced_writes(protocol: type[Any]) -> type[asyncio.Protocol]:
    """``protocol`` (a subclass of uvicorn's httptools protocol, which keeps ``self.loop``) writing
    through ``CoalescedWrites``."""

    class CoalescingProtocol(protocol):
        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(CoalescedWrites(transport, self.loop))

    return CoalescingProtocol
