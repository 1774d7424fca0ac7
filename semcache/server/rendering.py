"""Compact JSON for responses and stream events, rendered without holding up the event loop.

A small payload is rendered in one call. A large one (an answer of megabytes) is rendered a piece
at a time, long strings cut into slices, with the event loop free between pieces: ``json.dumps`` of
one long string holds the GIL for as long as it runs, so a worker thread would not free the loop.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

from fastapi.responses import JSONResponse, Response

# Payloads of at most this many characters (of strings, plus one per item) are rendered at once.
_INLINE_CHARS = 64 * 1024
# A large payload is rendered in pieces of about this many characters, ...
_PIECE_CHARS = 64 * 1024
# ... a list's items a slice of at most this many at a time, ...
_LIST_SLICE = 1024
# ... and the event loop is let in whenever this many characters were rendered since it last was.
_CHARS_BETWEEN_YIELDS = 256 * 1024


def dumps(value: Any) -> str:
    """Compact JSON, as every response and event is sent."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


async def render(value: Any) -> bytes:
    """``dumps(value)`` as UTF-8, rendered a piece at a time when it is large."""
    if _size_up_to(value, _INLINE_CHARS) <= _INLINE_CHARS:
        return dumps(value).encode()
    parts: list[bytes] = []
    since_yield = 0
    for piece in _pieces(value):
        parts.append(piece.encode())
        since_yield += len(piece) + 1
        if since_yield >= _CHARS_BETWEEN_YIELDS:
            await asyncio.sleep(0)
            since_yield = 0
    return b"".join(parts)


async def json_response(value: Any, *, status_code: int = 200, headers: dict[str, str] | None = None) -> Response:
    """A JSON response; a large one rendered with the event loop free between its pieces."""
    if _size_up_to(value, _INLINE_CHARS) <= _INLINE_CHARS:
        return JSONResponse(value, status_code=status_code, headers=headers)
    return Response(await render(value), status_code=status_code, headers=headers, media_type="application/json")


def _size_up_to(value: Any, limit: int) -> int:
    """About how many characters ``value``'s JSON takes (its strings, plus one per item), counted
    no further than past ``limit``: a large value costs no more to measure than a small one."""
    size = 0
    pending = [value]
    while pending and size <= limit:
        item = pending.pop()
        if isinstance(item, str):
            size += len(item)
        elif isinstance(item, dict):
            size += len(item)
            if size <= limit:
                pending.extend(item.keys())
                pending.extend(item.values())
        elif isinstance(item, list | tuple):
            size += len(item)
            if size <= limit:
                pending.extend(item)
        else:
            size += 1
    return size


def _pieces(value: Any) -> Iterator[str]:
    """``dumps(value)`` in pieces of about ``_PIECE_CHARS``: their concatenation is the same text."""
    if _size_up_to(value, _PIECE_CHARS) <= _PIECE_CHARS:
        yield dumps(value)
    elif isinstance(value, str):
        yield '"'
        for start in range(0, len(value), _PIECE_CHARS):
            yield dumps(value[start : start + _PIECE_CHARS])[1:-1]  # JSON escapes each character alone
        yield '"'
    elif isinstance(value, dict) and all(isinstance(key, str) for key in value):
        yield "{"
        for number, (key, item) in enumerate(value.items()):
            yield ("," if number else "") + dumps(key) + ":"
            yield from _pieces(item)
        yield "}"
    elif isinstance(value, list | tuple):
        yield "["
        for start in range(0, len(value), _LIST_SLICE):
            items = list(value[start : start + _LIST_SLICE])
            comma = "," if start else ""
            if _size_up_to(items, _PIECE_CHARS) <= _PIECE_CHARS:
                yield comma + dumps(items)[1:-1]
                continue
            for number, item in enumerate(items):
                yield "," if start or number else ""
                yield from _pieces(item)
        yield "]"
    else:
        yield dumps(value)
