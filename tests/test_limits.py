"""Limits toward clients: the token bucket, the context-length guard, and the bounds on client input."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from semcache.errors import InvalidRequest, RateLimited
from semcache.limits import RateLimiter, fit_context
from semcache.server.limits import RequestBounds
from semcache.testing.standin_upstream import StandinUpstream
from semcache.tokens import TokenCounter
from semcache.wire import ChatCompletionRequest
from testkit.servers import SemcacheProcess


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_bucket_allows_a_burst_then_refills_at_the_rate() -> None:
    clock = Clock()
    limiter = RateLimiter(rate_per_s=2, burst=3, clock=clock)
    for _ in range(3):
        limiter.admit("alice")
    with pytest.raises(RateLimited) as caught:
        limiter.admit("alice")
    assert caught.value.status_code == 429 and caught.value.headers["Retry-After"] == "1"
    limiter.admit("bob")  # every client has its own bucket
    clock.now = 0.5
    limiter.admit("alice")  # one token back after half a second at 2/s


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> TokenCounter:
    return TokenCounter(tmp_path_factory.mktemp("tiktoken"))


def request(*messages: dict) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"model": "gpt-4o-mini", "messages": list(messages)})


def test_a_request_within_the_limit_is_untouched(tokens: TokenCounter) -> None:
    short = request({"role": "user", "content": "hello"})
    assert fit_context(short, tokens, 100, trim_oldest_turns=False) is short
    assert fit_context(short, tokens, None, trim_oldest_turns=False) is short


def test_over_the_limit_is_a_400_unless_trimming(tokens: TokenCounter) -> None:
    long = request(
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "word " * 200},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
                                                             "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "result " * 50},
        {"role": "user", "content": "And now?"},
    )  # fmt: skip
    with pytest.raises(InvalidRequest) as caught:
        fit_context(long, tokens, 60, trim_oldest_turns=False)
    assert caught.value.code == "context_length_exceeded"
    trimmed = fit_context(long, tokens, 60, trim_oldest_turns=True)
    assert [m.role for m in trimmed.messages] == ["system", "user"]  # the tool result went with its call


def test_trimming_cannot_drop_the_prompt_itself(tokens: TokenCounter) -> None:
    huge = request({"role": "user", "content": "word " * 500})
    with pytest.raises(InvalidRequest):
        fit_context(huge, tokens, 50, trim_oldest_turns=True)


def test_token_counter_cache_is_seeded_offline(tmp_path: Path, tokens: TokenCounter) -> None:
    assert tokens.count_text("hello world", "gpt-4o-mini") == 2


# --- Bounds on client input (docs/http-api.md, "Bounds on client input") --------------------------


def chat_body(**fields: Any) -> bytes:
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields}).encode()


def user(content: Any, times: int = 1) -> list[dict[str, Any]]:
    return [{"role": "user", "content": content}] * times


def nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


HI = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]'
BOUNDED_BODIES = {
    "deep-100k": (b"[" * 100_000 + b"]" * 100_000, 400, "json_too_large"),  # 100,000 arrays, counted first
    "deep-65": (chat_body(metadata=nested(64)), 400, "json_too_deep"),  # 65 with the body's own object
    "invalid-utf8": (b'{"model": "m", "messages": [{"role": "user", "content": "\xff"}]}', 400, "invalid_json"),
    "lone-surrogate": (b'{"model": "m", "messages": [{"role": "user", "content": "\\ud800"}]}', 400, "invalid_json"),
    "nan": (HI + b', "seed": NaN}', 400, "invalid_json"),
    "messages": (chat_body(messages=user("hi", 5)), 400, "too_many_messages"),
    "messages-ceiling": (chat_body(messages=user("x", 20_000)), 400, "too_many_messages"),
    "tools": (chat_body(tools=[{"type": "function"}] * 3), 400, "too_many_tools"),
    "prompt-chars": (chat_body(messages=user("x" * 101)), 400, "prompt_too_long"),
    "content-parts": (chat_body(messages=user([{"type": "text", "text": "a"}] * 2000)), 400, "too_many_content_parts"),
    "body-size": (chat_body(messages=user("x" * 5_000_000)), 413, "request_too_large"),
}


@pytest.mark.slow
@pytest.mark.reliability
@pytest.mark.parametrize(("body", "status", "code"), BOUNDED_BODIES.values(), ids=BOUNDED_BODIES.keys())
def test_each_bound_is_a_fast_4xx_with_its_own_code(
    serve: Callable[..., str], body: bytes, status: int, code: str
) -> None:
    url = serve(max_messages=4, max_tools=2, max_prompt_chars=100)
    started = time.perf_counter()
    response = httpx.post(f"{url}/v1/chat/completions", content=body, headers={"content-type": "application/json"})
    assert (response.status_code, response.json()["error"]["code"]) == (status, code), response.text
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert time.perf_counter() - started < 2.0


@pytest.mark.slow
@pytest.mark.reliability
def test_admin_and_feedback_bodies_are_bounded_too(serve: Callable[..., str]) -> None:
    url = serve()
    for depth, code in ((100_000, "json_too_large"), (65, "json_too_deep")):
        deep = b'{"id": ' + b"[" * depth + b"]" * depth + b"}"
        for path in ("/v1/semcache/feedback", "/admin/entries/delete"):
            response = httpx.post(f"{url}{path}", content=deep, headers={"content-type": "application/json"})
            assert (response.status_code, response.json()["error"]["code"]) == (400, code)
    many = httpx.put(f"{url}/admin/namespaces/x/config", json={"thresholds": {str(n): 0.5 for n in range(1000)}})
    assert many.status_code == 400 and len(many.text) < 2000  # not an echo of a thousand names
    huge_id = 2**64  # found by the API fuzzer: was a 500 (an OverflowError in SQLite)
    assert httpx.get(f"{url}/admin/entries/{huge_id}").status_code == 400
    assert httpx.post(f"{url}/admin/entries/delete", json={"ids": [huge_id]}).status_code == 400


def raw_request(url: str, head: bytes) -> bytes:
    """Send a request head over a plain socket (httpx refuses to send some of these); the reply's first bytes."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        with contextlib.suppress(OSError):  # it may close before reading everything: its answer is there
            sock.sendall(head)
        return sock.recv(4096)


@pytest.fixture(scope="module")
def semcache_serve(
    tmp_path_factory: pytest.TempPathFactory, _standin_server: StandinUpstream
) -> Iterator[SemcacheProcess]:
    """``semcache serve`` itself, for what only the CLI sets up: uvicorn's parser and connections."""
    env = {"SEMCACHE_MAX_HEADER_BYTES": "8192", "SEMCACHE_MAX_HEADER_COUNT": "20"}
    data = tmp_path_factory.mktemp("serve")
    with SemcacheProcess(data_dir=data, upstream_url=_standin_server.base_url, env=env) as service:
        yield service


@pytest.mark.slow
def test_an_idle_connection_outlives_the_clients_own_keep_alive(semcache_serve: SemcacheProcess) -> None:
    """httpx and the openai SDK drop idle connections after 5 s. A server that closed them at 5 s
    too would race the client reusing one: the request would fail with a connection error."""
    host, port = semcache_serve.url.removeprefix("http://").split(":")
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        assert read_response(sock).startswith(b"HTTP/1.1 200")
        time.sleep(6)  # idle longer than a client's own keep-alive
        sock.sendall(request)
        assert read_response(sock).startswith(b"HTTP/1.1 200")  # the same connection still serves


def read_response(sock: socket.socket) -> bytes:
    """One whole response with a Content-Length, however many writes the server sent it in."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(4096)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    while len(body) < length:
        body += sock.recv(4096)
    return head + b"\r\n\r\n" + body


@pytest.mark.slow
@pytest.mark.reliability
def test_oversized_request_heads_get_a_431_from_semcache_serve(semcache_serve: SemcacheProcess) -> None:
    """Through the real CLI: uvicorn's httptools keeps any head in memory unless semcache bounds it."""
    service = semcache_serve
    # A bound on waiting, not a speed test: a head that never ends must not be waited for.
    request_line = b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
    assert raw_request(service.url, request_line + b"\r\n").startswith(b"HTTP/1.1 200")
    for head in (
        request_line + b"X-Big: " + b"a" * 10_000 + b"\r\n\r\n",  # one big header
        request_line + b"".join(b"X-H%d: 1\r\n" % n for n in range(30)) + b"\r\n",  # too many
        request_line + b"X-Endless: " + b"a" * 10_000_000,  # never ends: refused before it does
        b"GET /healthz?" + b"q" * 10_000 + b" HTTP/1.1\r\n\r\n",  # a long URL
    ):
        started = time.perf_counter()
        reply = raw_request(service.url, head)
        assert reply.startswith(b"HTTP/1.1 431"), reply[:100]
        assert json.loads(reply.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "request_headers_too_large"
        assert time.perf_counter() - started < 10.0
    assert httpx.get(f"{service.url}/healthz").status_code == 200  # and it serves on


def test_request_bounds_name_what_is_over() -> None:
    bounds = RequestBounds(max_messages=2, max_tools=1, max_prompt_chars=10)
    bounds.check(request({"role": "user", "content": [{"type": "text", "text": "0123456789"}]}))
    with pytest.raises(InvalidRequest) as caught:
        bounds.check(request({"role": "user", "content": [{"type": "text", "text": "01234567890"}]}))
    assert caught.value.code == "prompt_too_long" and "11 characters" in caught.value.message


@pytest.mark.slow
def test_the_chat_route_takes_json_by_media_type_and_refuses_other_bodies_in_openai_shape(
    serve: Callable[..., str],
) -> None:
    """Valid JSON bodies take the direct path past FastAPI's machinery (server/fastpath/direct.py); every
    other body takes FastAPI's path, and its error keeps OpenAI's shape."""
    url = f"{serve()}/v1/chat/completions"
    for content_type in ("application/json; charset=utf-8", "application/vnd.api+json"):
        answered = httpx.post(url, content=HI + b"}", headers={"content-type": content_type})
        assert answered.status_code == 200 and answered.headers["x-semcache"] in {"miss", "hit"}, content_type
    form = httpx.post(url, data={"model": "m"})  # what curl -d sends without a content type
    invalid = httpx.post(url, content=b'{"model": "m", "messages": "hi"}', headers={"content-type": "application/json"})
    for refused, status in ((form, 415), (invalid, 400)):
        assert refused.status_code == status, refused.text
        assert refused.json()["error"]["type"] == "invalid_request_error"
