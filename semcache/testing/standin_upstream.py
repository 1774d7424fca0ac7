"""A stand-in for an OpenAI-compatible LLM API, for tests and benchmarks.

This is a real HTTP server (FastAPI under uvicorn on loopback), not a mock.
It answers ``POST /v1/chat/completions`` deterministically -- the answer is
``"Answer to: <last user message>"`` unless ``state.answers`` overrides it --
answers semcache's verifications (``X-Semcache-Verification: true``) with one word, records every
chat request, and can be told to misbehave (latency, HTTP
errors, cut or malformed streams, hangs, odd finish reasons, tool calls), or
to answer like a hostile upstream: answers of any size (made in pieces, so a
150 MB answer never exists whole here), content after ``finish_reason``, choices
nobody asked for, and errors that quote the credential they refused.

Use from Python::

    with StandinUpstream() as upstream:
        client = openai.OpenAI(base_url=upstream.base_url, api_key="x")
        upstream.set_fault(status=429, retry_after=1, times=1)
        ...

or over HTTP (``POST /_control`` with the fault as a JSON object, e.g.
``{"answer_bytes": 150000000}`` or ``{"status": 401, "echo_authorization": true}``;
``GET /_control``, ``GET /_calls``, ``POST /_reset``), or in the foreground::

    python -m semcache.testing.standin_upstream --port 8000 --latency-s 0.3
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import re
import struct
import threading
import time
import uuid
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from .uvicorn_thread import ThreadedUvicorn

MODEL_ID = "standin-model"
# What POST /v1/audio/speech answers: bytes no text decoder would take for a string.
SPEECH_BYTES = bytes(range(256)) * 4
CHAT_PATH = "/v1/chat/completions"
HANG_SECONDS = 3600.0
GARBAGE_SSE_EVENT = b"data: {not json\n\n"
DONE_SSE_EVENT = b"data: [DONE]\n\n"
_POLL_INTERVAL_S = 0.05
# Answers of Fault.answer_bytes are this block of made-up lower-case words repeated (nothing JSON
# escapes, so their bytes on the wire are the answer's), sent in pieces of HUGE_PIECE_CHARS.
_FILLER_BLOCK = "".join(
    "".join(chr(ord("a") + (zlib.crc32(str(n).encode()) >> (4 * i)) % 26) for i in range(3 + n % 6)) + " "
    for n in range(12_000)
)
HUGE_PIECE_CHARS = 16 * 1024
# What Fault.content_after_finish sends after the finish_reason.
AFTER_FINISH_TEXT = " And one more thing."

# The ways Fault.bad_embeddings spoils an embeddings answer.
BAD_EMBEDDINGS = ("short", "not_json", "mixed_dimensions", "bad_index", "not_numbers")
# Vectors have this many numbers unless a request asks for other ``dimensions``.
EMBEDDING_DIMENSION = 8

# HTTP status -> (error code, error type) for OpenAI-shaped error bodies.
_ERROR_KINDS: dict[int, tuple[str, str]] = {
    429: ("rate_limit_exceeded", "requests"),
    500: ("internal_error", "server_error"),
    502: ("bad_gateway", "server_error"),
    503: ("service_unavailable", "server_error"),
}


# --------------------------------------------------------------------------
# State
# --------------------------------------------------------------------------


@dataclass
class Fault:
    """How the stand-in should misbehave for upcoming chat requests.

    ``times`` limits how many matching requests the whole fault applies to
    (``None`` = forever); ``match`` restricts it to requests whose last user
    message contains that substring.

    Hostile answers:

    - ``answer_bytes``: the answer is that many bytes of ASCII text
      (``huge_answer(answer_bytes)``), streamed or not, made in pieces as it is sent
      (``chunk_delay_s`` apart, in both modes).
    - ``content_after_finish``: a stream sends one more content delta
      (``AFTER_FINISH_TEXT``) after its ``finish_reason`` chunk (streams only).
    - ``extra_choices``: that many more choices, indexes 1, 2, ..., each a short
      answer of its own (``extra_choice_text``), whether or not the request asked for ``n``;
      in a stream, one chunk each, with no ``finish_reason``.
    - ``choice_index``: the index of the (first) choice, 0 as OpenAI sends it.
    - ``error_after_chunks``: a stream sends an in-band ``{"error": ...}`` event
      after that many content deltas, then ends without ``[DONE]``.
    - ``echo_authorization``: the error (``status``, else ``error_after_chunks``,
      else a 401) says ``Incorrect API key provided: <the Authorization header>``.
    - ``answer_status``: the answer as usual, streamed or not, sent with this success status
      (206 Partial Content, 203 from a proxy that changed it) instead of 200.
    - ``error_beside_answer``: a non-streamed answer carries an ``"error"`` object beside its choices.

    Embeddings (``POST /v1/embeddings``; ``match`` looks in its inputs, joined by spaces): ``status``,
    ``latency_s`` and ``bad_embeddings``, one of ``BAD_EMBEDDINGS``: ``short`` (the last vector left
    out), ``not_json`` (a body cut off), ``mixed_dimensions`` (the last vector one number short),
    ``bad_index`` (every index 0), ``not_numbers`` (a string among the numbers).
    """

    latency_s: float = 0.0
    chunk_delay_s: float = 0.0
    status: int | None = None
    retry_after: float | str | None = None
    times: int | None = None
    cut_after_chunks: int | None = None
    malformed_sse: bool = False
    hang_before_first_byte: bool = False
    finish_reason: str | None = None
    tool_calls: bool = False
    match: str | None = None
    answer_bytes: int | None = None
    content_after_finish: bool = False
    extra_choices: int = 0
    choice_index: int = 0
    error_after_chunks: int | None = None
    echo_authorization: bool = False
    answer_status: int | None = None
    error_beside_answer: bool = False
    bad_embeddings: str | None = None

    def __post_init__(self) -> None:
        if self.bad_embeddings is not None and self.bad_embeddings not in BAD_EMBEDDINGS:
            raise ValueError(f"bad_embeddings must be one of {BAD_EMBEDDINGS}, got {self.bad_embeddings!r}")
        if self.status is not None and not (isinstance(self.status, int) and 100 <= self.status <= 599):
            raise ValueError(f"status must be an HTTP status code, got {self.status!r}")
        success = isinstance(self.answer_status, int) and 200 <= self.answer_status <= 299
        if self.answer_status is not None and not success:
            raise ValueError(f"answer_status must be a success status (2xx), got {self.answer_status!r}")
        if self.times is not None and self.times < 0:
            raise ValueError("times must be >= 0 or None")
        if self.cut_after_chunks is not None and self.cut_after_chunks < 0:
            raise ValueError("cut_after_chunks must be >= 0 or None")
        if self.latency_s < 0 or self.chunk_delay_s < 0:
            raise ValueError("latency_s and chunk_delay_s must be >= 0")
        for name in ("answer_bytes", "error_after_chunks"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, int) and value >= 0):
                raise ValueError(f"{name} must be an integer >= 0 or None")
        for name in ("extra_choices", "choice_index"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 0):
                raise ValueError(f"{name} must be an integer >= 0")

    @property
    def sends_error_status(self) -> int | None:
        """The HTTP status of the error this fault answers with before any byte of the answer."""
        if self.status is None and self.echo_authorization and self.error_after_chunks is None:
            return 401
        return self.status

    @classmethod
    def from_dict(cls, data: Any) -> Fault:
        """Build a fault from a JSON object, rejecting unknown keys."""
        if data is None:
            return cls()
        if not isinstance(data, dict):
            raise ValueError("fault must be a JSON object")
        unknown = set(data) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"unknown fault field(s): {sorted(unknown)}")
        return cls(**data)

    def applies_to(self, prompt: str) -> bool:
        """Whether this fault targets a request with this last user message."""
        return self.match is None or self.match in prompt


@dataclass
class StandinState:
    """Everything the stand-in server knows; shared between test and server thread.

    ``answers`` maps a last-user-message text to a canned answer.
    ``base_latency_s`` is an always-on delay that ``reset()`` keeps; ``base_latency_jitter_s`` adds
    up to that much more, spread by a hash of the prompt so that a prompt always waits the same.
    """

    answers: dict[str, str] = field(default_factory=dict)
    # What verifications answer: None judges the two questions (``verification_verdict``), else this word.
    verdict: str | None = None
    # A model-like upstream for benchmarks: ``word_answer(prompt)`` words each answer not in ``answers``
    # (called once per completion, so it may word each differently), and ``judge(message)`` answers
    # each verification from its message, in place of ``verdict``.
    word_answer: Callable[[str], str] | None = field(default=None, repr=False, compare=False)
    judge: Callable[[str], str] | None = field(default=None, repr=False, compare=False)
    calls: list[dict[str, Any]] = field(default_factory=list)
    fault: Fault | None = None
    base_latency_s: float = 0.0
    base_latency_jitter_s: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    stopping: threading.Event = field(default_factory=threading.Event, repr=False, compare=False)

    def set_fault(self, fault: Fault | None = None, **kwargs: Any) -> Fault | None:
        """Replace the current fault (``fault`` object or ``Fault(**kwargs)``)."""
        new = fault if fault is not None else (Fault(**kwargs) if kwargs else None)
        with self.lock:
            self.fault = new
        return new

    def clear_fault(self) -> None:
        """Go back to normal behaviour."""
        self.set_fault(None)

    def reset(self) -> None:
        """Forget recorded calls and clear the fault (answers are kept)."""
        with self.lock:
            self.calls.clear()
            self.fault = None

    def record_call(self, call: dict[str, Any]) -> None:
        """Append one recorded request."""
        with self.lock:
            self.calls.append(call)

    def snapshot_calls(self) -> list[dict[str, Any]]:
        """A copy of the recorded calls, safe to read from any thread."""
        with self.lock:
            return list(self.calls)

    def base_delay_s(self, prompt: str) -> float:
        """``base_latency_s`` plus this prompt's share of ``base_latency_jitter_s``. The same prompt
        always waits the same, so a benchmark can send it down two paths on equal terms."""
        spread = zlib.crc32(prompt.encode()) / 0xFFFFFFFF
        return self.base_latency_s + spread * self.base_latency_jitter_s

    def answer_for(self, prompt: str) -> str:
        """The deterministic answer text for a last user message."""
        with self.lock:
            canned = self.answers.get(prompt)
        if canned is not None:
            return canned
        return self.word_answer(prompt) if self.word_answer is not None else f"Answer to: {prompt}"

    def verdict_for(self, message: str) -> str:
        """What a verification whose user message is ``message`` answers."""
        if self.judge is not None:
            return self.judge(message)
        return self.verdict if self.verdict is not None else verification_verdict(message)

    def take_fault(self, prompt: str) -> Fault | None:
        """Return (a copy of) the fault for this request and use up one ``times``."""
        with self.lock:
            fault = self.fault
            if fault is None or not fault.applies_to(prompt):
                return None
            if fault.times is not None:
                if fault.times <= 0:
                    self.fault = None
                    return None
                remaining = fault.times - 1
                self.fault = replace(fault, times=remaining) if remaining > 0 else None
            return replace(fault)


# --------------------------------------------------------------------------
# Request helpers
# --------------------------------------------------------------------------


def content_text(content: Any) -> str:
    """Text of a message ``content`` (a string or a list of content parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        return "\n".join(t for t in texts if isinstance(t, str))
    return ""


def last_user_text(messages: Any) -> str:
    """Text of the last ``role: user`` message, or ``""``."""
    if not isinstance(messages, list):
        return ""
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            return content_text(message.get("content"))
    return ""


def rough_tokens(text: str) -> int:
    """A rough token count (about four characters per token)."""
    return (len(text) + 3) // 4


def _standin_vector(text: str, as_base64: bool, dimension: int = 8) -> list[float] | str:
    """A deterministic unit vector for ``text`` (the same on every call), as floats or as OpenAI's
    base64 of little-endian float32."""
    values = [((zlib.crc32(f"{n}:{text}".encode()) % 2001) - 1000) / 1000 for n in range(dimension)]
    norm = sum(v * v for v in values) ** 0.5 or 1.0
    unit = [v / norm for v in values]
    return base64.b64encode(struct.pack(f"<{dimension}f", *unit)).decode() if as_base64 else unit


def huge_answer(size: int) -> str:
    """The whole text of an answer of ``size`` bytes (``Fault.answer_bytes``), for tests to compare."""
    return "".join(huge_answer_pieces(size))


def huge_answer_pieces(size: int, piece_chars: int = HUGE_PIECE_CHARS) -> Iterator[str]:
    """The text of an answer of ``size`` bytes, in pieces of ``piece_chars``, made one at a time."""
    for start in range(0, size, piece_chars):
        yield _filler(start, min(size, start + piece_chars))


def _filler(start: int, end: int) -> str:
    """Characters ``start`` to ``end`` of ``_FILLER_BLOCK`` repeated without end."""
    parts = []
    while start < end:
        offset = start % len(_FILLER_BLOCK)
        taken = min(end - start, len(_FILLER_BLOCK) - offset)
        parts.append(_FILLER_BLOCK[offset : offset + taken])
        start += taken
    return "".join(parts)


def extra_choice_text(index: int) -> str:
    """The answer of the extra choice ``index`` (``Fault.extra_choices``)."""
    return f"Another answer, choice {index}."


def split_pieces(text: str) -> list[str]:
    """Split into word pieces that keep their spaces, so ``"".join`` restores ``text``."""
    return re.findall(r"\S+\s*|\s+", text)


async def _read_json(request: Request) -> Any:
    """The request body as JSON, or ``None`` if it is not valid JSON."""
    try:
        return json.loads(await request.body())
    except (ValueError, UnicodeDecodeError):
        return None


def _error_response(status: int, message: str, *, retry_after: float | str | None = None) -> JSONResponse:
    """An OpenAI-shaped error response."""
    headers = {} if retry_after is None else {"retry-after": _format_retry_after(retry_after)}
    return JSONResponse(_error_body(status, message), status_code=status, headers=headers)


def _error_body(status: int, message: str) -> dict[str, Any]:
    """An OpenAI-shaped error object."""
    fallback_type = "invalid_request_error" if status < 500 else "server_error"
    code, error_type = _ERROR_KINDS.get(status, ("standin_error", fallback_type))
    return {"error": {"message": message, "type": error_type, "param": None, "code": code}}


def _format_retry_after(value: float | str) -> str:
    """Format a Retry-After value ("2", "0.5", or an HTTP date passed as a string)."""
    if isinstance(value, str):
        return value
    return str(int(value)) if float(value).is_integer() else str(value)


async def _sleep(seconds: float, interrupted: Callable[[], Awaitable[bool]]) -> bool:
    """Sleep in small steps; return False early if ``interrupted()`` turns true."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while (remaining := deadline - loop.time()) > 0:
        if await interrupted():
            return False
        await asyncio.sleep(min(remaining, _POLL_INTERVAL_S))
    return True


# --------------------------------------------------------------------------
# Building replies
# --------------------------------------------------------------------------


@dataclass
class _Reply:
    """Everything needed to render one completion, streamed or not."""

    id: str
    created: int
    model: str
    content: str | None
    tool_call: dict[str, Any] | None
    finish_reason: str
    usage: dict[str, int]
    answer_bytes: int | None = None  # a huge answer, made in pieces as it is sent; content is then ""
    choice_index: int = 0
    extra_choices: int = 0


def _build_reply(body: dict[str, Any], answer: str, fault: Fault) -> _Reply:
    """Decide the reply's content (or tool call), finish reason and usage."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    prompt_tokens = sum(rough_tokens(content_text(m.get("content"))) for m in messages)
    tool_call = _tool_call_for(body, last_user_text(body.get("messages"))) if fault.tool_calls else None
    huge = fault.answer_bytes is not None and tool_call is None
    content = None if tool_call else "" if huge else answer
    output = tool_call["function"]["arguments"] if tool_call else answer
    completion_tokens = (fault.answer_bytes or 0) // 4 if huge else rough_tokens(output)
    return _Reply(
        id=f"chatcmpl-standin-{uuid.uuid4().hex[:24]}",
        created=int(time.time()),
        model=str(body.get("model") or MODEL_ID),
        content=content,
        tool_call=tool_call,
        finish_reason=fault.finish_reason or ("tool_calls" if tool_call else "stop"),
        usage={
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
        answer_bytes=fault.answer_bytes if huge else None,
        choice_index=fault.choice_index,
        extra_choices=fault.extra_choices,
    )


def _tool_call_for(body: dict[str, Any], prompt: str) -> dict[str, Any]:
    """A tool call naming the request's first function tool (or ``standin_tool``)."""
    name = "standin_tool"
    tools = body.get("tools")
    if isinstance(tools, list) and tools and isinstance(tools[0], dict):
        name = (tools[0].get("function") or {}).get("name") or name
    return {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps({"prompt": prompt})},
    }


def _completion_json(reply: _Reply) -> dict[str, Any]:
    """A full non-streamed ``chat.completion`` object (a huge answer's content left empty)."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.content, "refusal": None}
    if reply.tool_call:
        message["tool_calls"] = [reply.tool_call]
    choices = [
        {"index": reply.choice_index, "message": message, "logprobs": None, "finish_reason": reply.finish_reason}
    ]
    for index in range(1, reply.extra_choices + 1):
        extra = {"role": "assistant", "content": extra_choice_text(index), "refusal": None}
        choices.append({"index": index, "message": extra, "logprobs": None, "finish_reason": "stop"})
    return {
        "id": reply.id,
        "object": "chat.completion",
        "created": reply.created,
        "model": reply.model,
        "choices": choices,
        "usage": reply.usage,
        "system_fingerprint": None,
    }


def _chunk(
    reply: _Reply, delta: dict[str, Any], finish_reason: str | None = None, index: int | None = None
) -> dict[str, Any]:
    """One ``chat.completion.chunk`` object with a single choice (the reply's own, unless ``index``)."""
    return {
        "id": reply.id,
        "object": "chat.completion.chunk",
        "created": reply.created,
        "model": reply.model,
        "system_fingerprint": None,
        "choices": [
            {
                "index": reply.choice_index if index is None else index,
                "delta": delta,
                "logprobs": None,
                "finish_reason": finish_reason,
            }
        ],
    }


def _first_delta(reply: _Reply) -> dict[str, Any]:
    """The opening delta: the role (and, for tool calls, the call's id and name)."""
    if reply.tool_call is None:
        return {"role": "assistant", "content": ""}
    call = reply.tool_call
    function = {"name": call["function"]["name"], "arguments": ""}
    head = {"index": 0, "id": call["id"], "type": "function", "function": function}
    return {"role": "assistant", "content": None, "tool_calls": [head]}


def _piece_count(reply: _Reply) -> int:
    """How many deltas ``_piece_deltas`` yields."""
    if reply.answer_bytes is not None:
        return -(-reply.answer_bytes // HUGE_PIECE_CHARS)
    text = reply.tool_call["function"]["arguments"] if reply.tool_call else reply.content or ""
    return len(split_pieces(text))


def _piece_deltas(reply: _Reply) -> Iterator[dict[str, Any]]:
    """The content deltas (or tool-call argument deltas), one per word piece (or huge answer piece)."""
    if reply.answer_bytes is not None:
        yield from ({"content": piece} for piece in huge_answer_pieces(reply.answer_bytes))
    elif reply.tool_call is None:
        yield from ({"content": piece} for piece in split_pieces(reply.content or ""))
    else:
        arguments = reply.tool_call["function"]["arguments"]
        yield from ({"tool_calls": [{"index": 0, "function": {"arguments": p}}]} for p in split_pieces(arguments))


def _sse(payload: dict[str, Any]) -> bytes:
    """Encode one SSE ``data:`` event."""
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def _fault_message(fault: Fault, request: Request, what: str) -> str:
    """The fault's error message; with ``echo_authorization``, the credential it refuses, quoted."""
    if fault.echo_authorization:
        return f"Incorrect API key provided: {request.headers.get('authorization', '')}"
    return f"Stand-in fault: {what}"


# --------------------------------------------------------------------------
# Responses
# --------------------------------------------------------------------------


class _AbortStream(Exception):
    """Raised by a body iterator to drop the connection without finishing."""


class _AbortableStreamingResponse(StreamingResponse):
    """A StreamingResponse whose iterator may raise ``_AbortStream``.

    On abort the final (empty, ``more_body=False``) message is never sent, so
    uvicorn closes the connection mid-body, like a crashed upstream.
    """

    async def stream_response(self, send: Any) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        try:
            async for chunk in self.body_iterator:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except _AbortStream:
            return
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _sse_events(
    reply: _Reply,
    fault: Fault,
    include_usage: bool,
    interrupted: Callable[[], Awaitable[bool]],
    error_message: str,
) -> AsyncIterator[bytes]:
    """The SSE byte stream for a reply, with the fault's delays, garbage, extras, error and cut applied."""
    extra = {"usage": None} if include_usage else {}
    yield _sse(_chunk(reply, _first_delta(reply)) | extra)
    for index in range(1, reply.extra_choices + 1):  # no finish_reason of its own: as the issue saw them
        delta = {"role": "assistant", "content": extra_choice_text(index)}
        yield _sse(_chunk(reply, delta, index=index) | extra)
    count = _piece_count(reply)
    garbage_at = count // 2 if fault.malformed_sse else None
    for index, delta in enumerate(_piece_deltas(reply)):
        if fault.cut_after_chunks is not None and index >= fault.cut_after_chunks:
            raise _AbortStream
        if fault.error_after_chunks is not None and index >= fault.error_after_chunks:
            yield _sse(_error_body(502, error_message))
            return
        if index == garbage_at:
            yield GARBAGE_SSE_EVENT
        if fault.chunk_delay_s and not await _sleep(fault.chunk_delay_s, interrupted):
            return
        yield _sse(_chunk(reply, delta) | extra)
    if garbage_at is not None and not count:
        yield GARBAGE_SSE_EVENT
    if fault.cut_after_chunks is not None:
        raise _AbortStream
    if fault.error_after_chunks is not None:
        yield _sse(_error_body(502, error_message))
        return
    yield _sse(_chunk(reply, {}, reply.finish_reason) | extra)
    if fault.content_after_finish:
        yield _sse(_chunk(reply, {"content": AFTER_FINISH_TEXT}) | extra)
    if include_usage:
        yield _sse(_chunk(reply, {}) | {"choices": [], "usage": reply.usage})
    yield DONE_SSE_EVENT


async def _truncated_body(data: bytes) -> AsyncIterator[bytes]:
    """Send the first half of ``data`` and then drop the connection."""
    yield data[: len(data) // 2]
    raise _AbortStream


def _stream_response(
    reply: _Reply,
    fault: Fault,
    body: dict[str, Any],
    interrupted: Callable[[], Awaitable[bool]],
    error_message: str,
) -> Response:
    """The ``stream: true`` response."""
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    events = _sse_events(reply, fault, include_usage, interrupted, error_message)
    return _AbortableStreamingResponse(events, status_code=fault.answer_status or 200, media_type="text/event-stream",
                                       headers={"cache-control": "no-cache"})  # fmt: skip


def _plain_response(reply: _Reply, fault: Fault, interrupted: Callable[[], Awaitable[bool]]) -> Response:
    """The ``stream: false`` response, truncated if the fault cuts responses."""
    if reply.answer_bytes is not None:
        return _huge_plain_response(reply, fault.chunk_delay_s, interrupted)
    completion = _completion_json(reply)
    if fault.error_beside_answer:
        completion["error"] = {"message": "the model failed part-way", "type": "server_error", "code": None}
    data = json.dumps(completion).encode()
    if fault.cut_after_chunks is None:
        return Response(data, status_code=fault.answer_status or 200, media_type="application/json")
    headers = {"content-length": str(len(data))}
    return _AbortableStreamingResponse(_truncated_body(data), media_type="application/json", headers=headers)


def _huge_plain_response(reply: _Reply, piece_delay_s: float, interrupted: Callable[[], Awaitable[bool]]) -> Response:
    """A ``chat.completion`` whose content is a huge answer, sent as its JSON's text before the
    content, the content in pieces (``piece_delay_s`` apart), and the text after it: never the
    whole body at once, and with no Content-Length, as a hostile upstream may send it."""
    assert reply.answer_bytes is not None
    marker = f"huge-answer-{uuid.uuid4().hex}"
    head, tail = json.dumps(_completion_json(replace(reply, content=marker))).encode().split(marker.encode())
    size = reply.answer_bytes

    async def body() -> AsyncIterator[bytes]:
        yield head
        for piece in huge_answer_pieces(size):
            if piece_delay_s and not await _sleep(piece_delay_s, interrupted):
                return
            yield piece.encode()
        yield tail

    return StreamingResponse(body(), media_type="application/json")


# --------------------------------------------------------------------------
# Verifications
# --------------------------------------------------------------------------

VERIFICATION_HEADER = "X-Semcache-Verification"
_QUOTED = re.compile(r"<<<\n(.*?)\n>>>", re.DOTALL)
_WORD = re.compile(r"[a-z0-9]+")
# Words that carry no meaning of their own here, and words that mean the same: a strict reader, as
# a model is, that lets a rewording through and stops a question about something else.
_FUNCTION_WORDS = frozenset(
    "a an the i me my we our you your how what which who whom whose when where why is are was were be been do "
    "does did can could should would will shall may might must to of in on at for with by from about into "
    "there it its this that these those some any please tell way ways best good up".split()
)
_SAME_MEANING = {"fast": "quick", "quickly": "quick", "rapidly": "quick", "speedy": "quick", "fastest": "quick",
                 "quickest": "quick", "pick": "learn", "study": "learn", "master": "learn", "begin": "start",
                 "commence": "start", "purchase": "buy", "obtain": "get", "acquire": "get"}  # fmt: skip


def _meaning(text: str) -> frozenset[str]:
    words = (_SAME_MEANING.get(w, w) for w in _WORD.findall(text.lower()) if w not in _FUNCTION_WORDS)
    return frozenset(w[:-1] if w.endswith("s") and len(w) > 3 else w for w in words)


def verification_verdict(message: str) -> str:
    """ "yes" when the two questions a verification quotes say the same once function words and
    synonyms are set aside, else "no": one changed word of substance is another question."""
    quoted = _QUOTED.findall(message)
    if len(quoted) < 2:
        return "no"
    return "yes" if _meaning(quoted[0]) == _meaning(quoted[1]) else "no"


def _is_verification(call: dict[str, Any]) -> bool:
    return str(call.get("headers", {}).get(VERIFICATION_HEADER.lower(), "")).lower() == "true"


# --------------------------------------------------------------------------
# The app
# --------------------------------------------------------------------------


def _record(state: StandinState, request: Request, body: Any) -> None:
    """Record one request in ``state.calls``."""
    headers = {k.lower(): v for k, v in request.headers.items()}
    state.record_call({"path": request.url.path, "json": body, "headers": headers, "time": time.time()})


async def _wait_before_answer(
    state: StandinState, fault: Fault, prompt: str, interrupted: Callable[[], Awaitable[bool]]
) -> bool:
    """Apply hang and latency before anything is sent; False if interrupted."""
    if fault.hang_before_first_byte and not await _sleep(HANG_SECONDS, interrupted):
        return False
    delay = state.base_delay_s(prompt) + fault.latency_s
    return not delay or await _sleep(delay, interrupted)


async def _chat_completions(state: StandinState, request: Request) -> Response:
    """Handle ``POST /v1/chat/completions``."""
    body = await _read_json(request)
    _record(state, request, body)
    if not isinstance(body, dict):
        return _error_response(400, "Request body must be a JSON object.")
    prompt = last_user_text(body.get("messages"))
    fault = state.take_fault(prompt) or Fault()

    async def client_gone() -> bool:
        return state.stopping.is_set() or await request.is_disconnected()

    async def server_stopping() -> bool:
        return state.stopping.is_set()

    if not await _wait_before_answer(state, fault, prompt, client_gone):
        return Response(status_code=499)
    status = fault.sends_error_status
    if status is not None:
        return _error_response(status, _fault_message(fault, request, f"HTTP {status}"), retry_after=fault.retry_after)
    if request.headers.get(VERIFICATION_HEADER, "").lower() == "true":
        answer = state.verdict_for(prompt)
    else:
        answer = state.answer_for(prompt)
    reply = _build_reply(body, answer, fault)
    if body.get("stream"):
        # StreamingResponse itself notices disconnects; only watch for shutdown here.
        message = _fault_message(fault, request, "error mid-stream")
        return _stream_response(reply, fault, body, server_stopping, message)
    return _plain_response(reply, fault, server_stopping)


def embedding_inputs(value: Any) -> list[str | list[int]] | None:
    """The inputs of an embeddings request, one per vector (a string, a list of token ids), or None
    when ``input`` is none of OpenAI's four forms."""
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not value:
        return None
    if all(isinstance(item, int) for item in value):
        return [value]
    if all(
        isinstance(item, str) or (isinstance(item, list) and all(isinstance(t, int) for t in item)) for item in value
    ):
        return value
    return None


def _token_ids(item: Any) -> bool:
    return isinstance(item, list) and all(isinstance(token, int) for token in item)


def standin_embedding(item: str | list[int], as_base64: bool = False, dimension: int = EMBEDDING_DIMENSION) -> Any:
    """The vector the stand-in gives an input: token ids have vectors of their own, never a text's."""
    text = item if isinstance(item, str) else "tokens:" + ",".join(map(str, item))
    return _standin_vector(text, as_base64, dimension)


async def _embeddings(state: StandinState, request: Request) -> Response:
    """Handle ``POST /v1/embeddings``: deterministic unit vectors, ``dimensions`` long if asked."""
    body = await _read_json(request)
    _record(state, request, body)
    items = embedding_inputs(body.get("input")) if isinstance(body, dict) else None
    dimension = body.get("dimensions", EMBEDDING_DIMENSION) if isinstance(body, dict) else None
    if items is None or not isinstance(dimension, int) or dimension < 1:
        return _error_response(400, "Invalid embeddings request.")
    assert isinstance(body, dict)
    fault = state.take_fault(" ".join(str(item) for item in items)) or Fault()
    if fault.latency_s and not await _sleep(fault.latency_s, request.is_disconnected):
        return Response(status_code=499)
    if fault.sends_error_status is not None:
        status = fault.sends_error_status
        return _error_response(status, _fault_message(fault, request, f"HTTP {status}"), retry_after=fault.retry_after)
    as_base64 = body.get("encoding_format") == "base64"  # the openai SDK's default
    data = [{"object": "embedding", "index": n, "embedding": standin_embedding(item, as_base64, dimension)}
            for n, item in enumerate(items)]  # fmt: skip
    tokens = sum(rough_tokens(item) if isinstance(item, str) else len(item) for item in items)
    answer = {"object": "list", "data": data, "model": body.get("model", MODEL_ID),
              "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}  # fmt: skip
    bad = fault.bad_embeddings
    if bad == "not_json":
        return Response(json.dumps(answer)[:-20].encode(), media_type="application/json")
    if bad == "short":
        data.pop()
    elif bad == "mixed_dimensions":
        data[-1]["embedding"] = standin_embedding(items[-1], False, dimension)[:-1]
    elif bad == "bad_index":
        for item in data:
            item["index"] = 0
    elif bad == "not_numbers":
        data[0]["embedding"] = ["0.5", *standin_embedding(items[0], False, dimension)[1:]]
    return JSONResponse(answer)


def create_standin_app(state: StandinState) -> FastAPI:
    """Create the stand-in ASGI app serving (and recording into) ``state``."""
    app = FastAPI(title="semcache stand-in upstream", docs_url=None, redoc_url=None, openapi_url=None)

    @app.post(CHAT_PATH)
    async def chat_completions(request: Request) -> Response:
        return await _chat_completions(state, request)

    @app.get("/v1/models")
    async def list_models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "standin"}]}

    @app.post("/v1/moderations")
    async def moderations(request: Request) -> Response:
        body = await _read_json(request)
        _record(state, request, body)
        fault = state.take_fault("")
        if fault is not None and fault.sends_error_status is not None:
            return _error_response(fault.sends_error_status, _fault_message(fault, request, "moderation"))
        inputs = body.get("input") if isinstance(body, dict) else None
        texts = inputs if isinstance(inputs, list) else [inputs]
        results = [
            {"flagged": "attack" in str(text).lower(), "categories": {}, "category_scores": {}} for text in texts
        ]
        return JSONResponse({"id": f"modr-{uuid.uuid4().hex[:12]}", "model": "omni-moderation-latest",
                             "results": results})  # fmt: skip

    @app.post("/v1/embeddings")
    async def embeddings(request: Request) -> Response:
        return await _embeddings(state, request)

    @app.post("/v1/audio/speech")
    async def speech(request: Request) -> Response:
        body = await _read_json(request)
        _record(state, request, body)

        async def audio() -> AsyncIterator[bytes]:
            for piece in range(4):  # in pieces, as a real one streams it
                yield SPEECH_BYTES[piece * 256 : (piece + 1) * 256]

        return StreamingResponse(audio(), media_type="audio/mpeg")

    @app.get("/v1/files")
    async def list_files(request: Request) -> dict[str, Any]:
        _record(state, request, None)
        return {
            "object": "list",
            "has_more": False,
            "data": [{"id": "file-standin", "object": "file", "purpose": "batch"}],
        }

    # Imported here: the dialects' routes are built from this module's helpers.
    from .standin_dialects import add_dialect_routes

    add_dialect_routes(app, state)

    @app.post("/_control")
    async def set_control(request: Request) -> Response:
        try:
            fault = Fault.from_dict(await _read_json(request))
        except (TypeError, ValueError) as exc:
            return _error_response(400, f"Bad fault: {exc}")
        state.set_fault(fault)
        return JSONResponse({"fault": asdict(fault)})

    @app.get("/_control")
    async def get_control() -> dict[str, Any]:
        fault = state.fault
        return {"fault": None if fault is None else asdict(fault)}

    @app.get("/_calls")
    async def get_calls() -> dict[str, Any]:
        calls = state.snapshot_calls()
        return {"count": len(calls), "calls": calls}

    @app.post("/_reset")
    async def reset() -> dict[str, Any]:
        state.reset()
        return {"ok": True}

    return app


# --------------------------------------------------------------------------
# Running it
# --------------------------------------------------------------------------


class StandinUpstream:
    """Run the stand-in under uvicorn in a background thread on loopback.

    Use as a context manager or call ``start()`` / ``stop()``.
    """

    def __init__(
        self, state: StandinState | None = None, *, host: str = "127.0.0.1", log_level: str = "warning"
    ) -> None:
        self.state = state if state is not None else StandinState()
        self.host = host
        self.log_level = log_level
        self._server: ThreadedUvicorn | None = None
        self.port = 0  # set by start(); kept after stop() so tests can check the port is closed

    @property
    def root_url(self) -> str:
        """``http://127.0.0.1:PORT`` (the control API lives here)."""
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL, ``http://127.0.0.1:PORT/v1``."""
        return f"{self.root_url}/v1"

    @property
    def calls(self) -> list[dict[str, Any]]:
        """A snapshot of the recorded requests."""
        return self.state.snapshot_calls()

    def chat_calls(self) -> int:
        """How many chat-completion requests reached the stand-in, verifications left out."""
        return sum(1 for call in self.calls if call["path"] == CHAT_PATH and not _is_verification(call))

    def verification_calls(self) -> list[dict[str, Any]]:
        """The verifications semcache asked, as recorded."""
        return [call for call in self.calls if call["path"] == CHAT_PATH and _is_verification(call)]

    def set_fault(self, **kwargs: Any) -> Fault | None:
        """Replace the current fault with ``Fault(**kwargs)`` (no kwargs: clear it)."""
        return self.state.set_fault(**kwargs)

    def reset(self) -> None:
        """Forget recorded calls and clear the fault."""
        self.state.reset()

    def start(self) -> StandinUpstream:
        """Bind a free port, start serving in a thread and wait until it answers."""
        if self._server is not None:
            raise RuntimeError("StandinUpstream is already running")
        self.state.stopping.clear()
        self._server = ThreadedUvicorn(
            create_standin_app(self.state), host=self.host, lifespan="off", log_level=self.log_level
        ).start()
        self.port = self._server.port
        return self

    def stop(self) -> None:
        """Interrupt sleeping handlers and stop the server thread."""
        if self._server is None:
            return
        self.state.stopping.set()
        self._server.stop()
        self._server = None

    def __enter__(self) -> StandinUpstream:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    """Run the stand-in in the foreground (for benchmarks and manual use)."""
    parser = argparse.ArgumentParser(description="Stand-in OpenAI-compatible upstream server.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--latency-s", type=float, default=0.0, help="delay before every answer")
    parser.add_argument(
        "--latency-jitter-s", type=float, default=0.0, help="up to this much more delay, fixed per prompt"
    )
    parser.add_argument("--log-level", default="info")
    args = parser.parse_args(argv)
    state = StandinState(base_latency_s=args.latency_s, base_latency_jitter_s=args.latency_jitter_s)
    app = create_standin_app(state)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, lifespan="off")


if __name__ == "__main__":
    main()
