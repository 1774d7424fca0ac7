"""Fuzzing the parsers that read untrusted bytes: the request body (client) and the SSE stream (upstream).

The request parser must turn any bytes into a request or a 4xx with a code, never a 5xx; the SSE
parser must turn any stream into well-formed chunks or an ``UpstreamError``, never anything else.
Short in CI; ``SEMCACHE_RELIABILITY=full`` runs many more examples.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from semcache.dialects.chat import StreamedChatAnswer as _StreamedAnswer
from semcache.errors import InvalidRequest, UpstreamError
from semcache.keys import bypass_reason, normalize, request_key
from semcache.server.limits import RequestBounds
from semcache.settings import Settings
from semcache.upstreams.remote import RemoteUpstream, parse_sse
from semcache.wire import ChatCompletionRequest, parse_json_body
from testkit.reliability import full_mode

pytestmark = pytest.mark.reliability

FUZZ = settings(
    max_examples=2000 if full_mode() else 150,
    derandomize=True,  # the same inputs on every CI run
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    database=None,
)
DEFAULTS = Settings()
BODY_CODES = {"invalid_json", "json_too_deep", "json_too_large"}

# Text as clients send it, lone surrogates and the characters JSON keeps raw but splitlines splits at included.
any_text = st.text(st.characters(codec=None, exclude_categories=()), max_size=40) | st.sampled_from(
    ["\u2028", "a\x85b", "\x1c", "\ud800", "\U0001f600", "", " ", "What is 2 + 2?"]
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | any_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(any_text, inner, max_size=4),
    max_leaves=20,
)
messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "user", "assistant", "tool", "robot"]), "content": any_text | json_values}
    ),
    min_size=0,
    max_size=4,
)
chat_bodies = st.fixed_dictionaries(
    {"model": any_text, "messages": messages},
    optional={
        "temperature": st.floats(-1, 3) | json_values,
        "stream": st.booleans() | json_values,
        "tools": st.lists(json_values, max_size=3),
        "stop": any_text | st.lists(any_text, max_size=3),
        "n": st.integers(-1, 3),
        "user": any_text,
        "metadata": json_values,
    },
)


def nested(depth: int) -> bytes:
    return b'{"model":"m","messages":[{"role":"user","content":"hi"}],"x":' + b"[" * depth + b"]" * depth + b"}"


def encoded(body: dict[str, Any], mangle: int) -> bytes:
    """The body as a client may send it: JSON, or JSON with a byte swapped for one that is not UTF-8."""
    raw = json.dumps(body, ensure_ascii=mangle % 2 == 0).encode("utf-8", "surrogatepass")
    if mangle > 1 and raw:
        position = mangle % len(raw)
        raw = raw[:position] + b"\xff" + raw[position + 1 :]
    return raw


def parse_request(raw: bytes) -> ChatCompletionRequest | None:
    """The whole request path short of the network: bytes, JSON, the model, the bounds, the keys."""
    try:
        request = ChatCompletionRequest.model_validate(parse_json_body(raw, DEFAULTS.max_json_depth))
        RequestBounds.from_settings(DEFAULTS).check(request)
    except InvalidRequest as error:
        assert error.status_code == 400 and error.code in BODY_CODES | {
            "too_many_messages",
            "too_many_tools",
            "prompt_too_long",
        }
        return None
    except ValidationError:
        return None  # a 400 with the validation errors
    if bypass_reason(request, DEFAULTS.max_temperature) is None:
        key = request_key(request, "default")
        assert key.normalized == normalize(key.prompt)
    json.dumps(request.upstream_body(), ensure_ascii=False).encode()  # what is forwarded can be sent
    return request


@FUZZ
@given(raw=st.binary(max_size=300))
@example(raw=b'{"model":"m","messages":[{"role":"user","content":"\\ud800"}]}')  # was a 500: lone surrogate
@example(raw=b'{"model":"m","messages":[{"role":"user","content":"x"}],"x":NaN}')  # NaN cannot be forwarded
@example(raw=nested(100_000))  # was a RecursionError at about 1,000
@example(raw=nested(DEFAULTS.max_json_depth))
@example(raw=b'{"model":"m","messages":[{"role":"user","content":"\xff"}]}')
def test_any_bytes_parse_or_get_a_400(raw: bytes) -> None:
    parse_request(raw)


@FUZZ
@given(body=chat_bodies, mangle=st.integers(0, 10_000))
@example(body={"model": "m", "messages": [{"role": "user", "content": "\ud800"}]}, mangle=0)
def test_chat_shaped_bodies_parse_or_get_a_400(body: dict[str, Any], mangle: int) -> None:
    parse_request(encoded(body, mangle))


def test_the_depth_bound_is_exact_and_fast() -> None:
    assert parse_request(nested(DEFAULTS.max_json_depth - 1)) is not None  # the outer object is a level
    with pytest.raises(InvalidRequest) as caught:
        parse_json_body(nested(DEFAULTS.max_json_depth), DEFAULTS.max_json_depth)
    assert caught.value.code == "json_too_deep"


@pytest.mark.slow
@settings(FUZZ, max_examples=400 if full_mode() else 60)
@given(body=chat_bodies, mangle=st.integers(0, 10_000))
@example(body={"model": "m", "messages": [{"role": "user", "content": "\ud800"}]}, mangle=0)
@example(body={"model": "m", "messages": [{"role": "user", "content": "x"}], "metadata": [[[[[]]]]]}, mangle=0)
def test_the_service_answers_any_body_with_a_2xx_or_a_4xx(
    body: dict[str, Any], mangle: int, service: str, http: httpx.Client
) -> None:
    response = http.post(f"{service}/v1/chat/completions", content=encoded(body, mangle))
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"} and error["code"], error


@pytest.fixture
def http() -> Any:
    with httpx.Client(timeout=30, headers={"content-type": "application/json"}) as client:
        yield client


# --- The SSE parser -------------------------------------------------------------------------------

chunk_texts = st.text(st.characters(codec="utf-8"), max_size=12) | st.sampled_from(["\u2028", "\x85", "\r", "é"])


def sse_chunk(text: str) -> dict[str, Any]:
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": text}}]}


def stream_bytes(events: list[bytes], line_end: bytes, done: bool) -> bytes:
    body = b"".join(b"data: " + event + line_end + line_end for event in events)
    return body + (b"data: [DONE]" + line_end + line_end if done else b"")


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({cut % (len(data) + 1) for cut in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points) if b > a]


async def chunks_of(pieces: list[bytes]) -> AsyncIterator[bytes]:
    for piece in pieces:
        yield piece


def read_stream(pieces: list[bytes]) -> tuple[list[dict[str, Any]], UpstreamError | None]:
    """What the parser yields from these byte chunks, and the error it ended with, if any."""

    async def collect() -> tuple[list[dict[str, Any]], UpstreamError | None]:
        got: list[dict[str, Any]] = []
        try:
            async for chunk in parse_sse(chunks_of(pieces)):
                got.append(chunk)
        except UpstreamError as error:
            return got, error
        return got, None

    return asyncio.run(asyncio.wait_for(collect(), timeout=10))  # never hangs


def assert_well_formed(chunks: list[dict[str, Any]]) -> None:
    answer = _StreamedAnswer(max_bytes=1_000_000)  # the pipeline reads every chunk; it must not fail on any
    for chunk in chunks:
        assert isinstance(chunk, dict) and isinstance(chunk.get("choices", []), list)
        answer.add(chunk)


@FUZZ
@given(
    texts=st.lists(chunk_texts, max_size=5),
    line_end=st.sampled_from([b"\n", b"\r\n", b"\r"]),
    cuts=st.lists(st.integers(0, 10_000), max_size=8),
)
@example(texts=["a\u2028b", "c\x85d"], line_end=b"\n", cuts=[])  # httpx's aiter_lines split these events
@example(texts=["x"], line_end=b"\r\n", cuts=[7])  # a CRLF cut between its CR and its LF
def test_a_valid_stream_yields_its_chunks_however_it_is_cut(texts: list[str], line_end: bytes, cuts: list[int]) -> None:
    events = [json.dumps(sse_chunk(text), ensure_ascii=False).encode() for text in texts]
    chunks, error = read_stream(split(stream_bytes(events, line_end, done=True), cuts))
    assert error is None
    assert chunks == [sse_chunk(text) for text in texts]


garbage_lines = st.binary(max_size=60) | st.sampled_from(
    [
        b"data: {not json",
        b"data: [[[[[[[[",
        b"data: " + b"[" * 5000 + b"]" * 5000,  # was a RecursionError: json.loads of deep nesting
        b'data: "\\ud800"',
        b"data: \xff\xfe",
        b"data: 42",
        b'data: {"choices": "x"}',
        b'data: {"choices": [{"delta": "x"}]}',
        b'data: {"choices": [{"delta": {"tool_calls": [{"index": "one"}]}}]}',  # was a ValueError in the pipeline
        b'data: {"error": {"message": "boom"}}',
        b"data: NaN",
        b": comment",
        b"event: ping",
        b"data: [DONE]",
    ]
)


@FUZZ
@given(
    lines=st.lists(garbage_lines | st.builds(lambda t: b"data: " + json.dumps(sse_chunk(t)).encode(), chunk_texts)),
    line_end=st.sampled_from([b"\n", b"\r\n", b"\r"]),
    cuts=st.lists(st.integers(0, 10_000), max_size=8),
)
@example(lines=[b'data: {"choices": [{"delta": {"tool_calls": [{"index": "one"}]}}]}'], line_end=b"\n", cuts=[])
@example(lines=[b"data: " + b"[" * 5000], line_end=b"\n", cuts=[])
def test_any_stream_yields_well_formed_chunks_or_an_upstream_error(
    lines: list[bytes], line_end: bytes, cuts: list[int]
) -> None:
    chunks, error = read_stream(split(line_end.join(lines) + line_end, cuts))
    assert_well_formed(chunks)
    if error is None:  # a clean end needs [DONE], on a line of its own
        assert any(line.strip() == b"data: [DONE]" or line.strip() == b"data:[DONE]" for line in _lines(lines))


def _lines(lines: list[bytes]) -> list[bytes]:
    return [part for line in lines for part in line.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")]


def test_an_endless_line_is_an_upstream_error_not_a_memory_leak() -> None:
    pieces = [b"data: "] + [b"x" * 1_048_576] * 9
    chunks, error = read_stream(pieces)
    assert chunks == [] and error is not None and "over" in error.message


# --- The upstream's JSON answers --------------------------------------------------------------------


def upstream_answering(content: bytes) -> RemoteUpstream:
    """A RemoteUpstream whose HTTP transport answers every call with these bytes (httpx's own in-process
    transport: thousands of odd bodies in seconds)."""
    handler: Callable[[httpx.Request], httpx.Response] = lambda request: httpx.Response(200, content=content)  # noqa: E731
    return RemoteUpstream("http://upstream.invalid/v1", transport=httpx.MockTransport(handler))


@FUZZ
@given(content=st.binary(max_size=200) | st.builds(lambda v: json.dumps(v).encode(), json_values))
@example(content=b"[" * 5000 + b"]" * 5000)  # was a RecursionError
@example(content=b'{"choices": [{"message": "x", "finish_reason": "stop"}]}')  # was an AttributeError later on
@example(content=b'{"choices": [{"message": {"content": "\\ud800"}}]}')
def test_any_upstream_answer_is_a_completion_or_an_upstream_error(content: bytes) -> None:
    async def call() -> None:
        upstream = upstream_answering(content)
        try:
            answer = await upstream.complete({"model": "m", "messages": []}, {})
        except UpstreamError:
            return
        finally:
            await upstream.close()
        assert all(isinstance(choice.get("message") or {}, dict) for choice in answer["choices"])
        json.dumps(answer, allow_nan=False, ensure_ascii=False).encode()  # what the client gets can be sent

    asyncio.run(call())
