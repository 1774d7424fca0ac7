"""The fast_path setting: off, FastAPI's own route serves chat requests with the same answers, no
write is coalesced, and the request head bounds (431) and read deadlines (408) still hold."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from semcache import cli
from semcache.server import create_app
from semcache.server.access import AccessPolicy
from semcache.server.fastpath import DirectRoute
from semcache.settings import Settings
from semcache.testing.standin_upstream import StandinUpstream
from testkit.fakes import HashingEmbedder
from testkit.servers import SemcacheProcess

from .test_hostile_http import READ_TIMEOUT_S, assert_timed_out_with_408, chat_body, trickle
from .test_limits import raw_request


def middleware_chain(settings: Settings) -> list[type]:
    """The types of the ASGI apps a request passes through, outermost first, down to FastAPI's routing."""
    app: Any = create_app(settings, embedder=HashingEmbedder(), access=AccessPolicy()).build_middleware_stack()
    chain = []
    while app is not None and len(chain) < 50:
        chain.append(type(app))
        app = getattr(app, "app", None)
    return chain


@pytest.mark.parametrize("fast_path", [True, False])
def test_the_direct_chat_route_is_in_the_stack_only_with_the_fast_path(tmp_path: Path, fast_path: bool) -> None:
    chain = middleware_chain(Settings(data_dir=tmp_path, fast_path=fast_path))
    assert (DirectRoute in chain) is fast_path, chain


@pytest.mark.parametrize("fast_path", [True, False])
def test_responses_are_written_coalesced_only_with_the_fast_path(fast_path: bool) -> None:
    protocol = cli._http_protocol(Settings(fast_path=fast_path))
    assert protocol is not None  # uvicorn[standard] ships httptools: the bounded protocol either way
    names = [cls.__name__ for cls in protocol.__mro__]
    assert "BoundedHttpToolsProtocol" in names and "HttpToolsProtocol" in names
    assert ("CoalescingProtocol" in names) is fast_path, names


@pytest.mark.slow
def test_with_the_fast_path_off_fastapis_route_answers_the_same(serve: Callable[..., str]) -> None:
    """The same requests to a service with and one without the fast path: the same status codes,
    header names, cache outcomes and bodies (but for the ids and timestamps each answer makes)."""
    on, off = serve(fast_path=True), serve(fast_path=False)
    requests: list[dict[str, Any]] = [
        {"json": chat_body("What is the fast path?")},  # a miss
        {"json": chat_body("What is the fast path?")},  # then an exact hit
        {"json": chat_body("What is the fast path?", stream=True)},
        {"content": b'{"model": "m", "messages": "hi"}', "headers": {"content-type": "application/json"}},
        {"data": {"model": "m"}},  # a form body: FastAPI's path either way
    ]
    for request in requests:
        answers = [httpx.post(f"{url}/v1/chat/completions", timeout=30, **request) for url in (on, off)]
        first, second = answers
        assert first.status_code == second.status_code, (request, first.text, second.text)
        assert set(first.headers) == set(second.headers), request
        assert first.headers.get("x-semcache") == second.headers.get("x-semcache"), request
        assert _without_ids(first) == _without_ids(second), request


def _without_ids(response: httpx.Response) -> Any:
    if response.headers["content-type"].startswith("text/event-stream"):
        events = [line.removeprefix("data: ") for line in response.text.splitlines() if line.startswith("data: ")]
        return [event if event == "[DONE]" else _drop_ids(json.loads(event)) for event in events]
    return _drop_ids(response.json())


def _drop_ids(body: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in body.items() if key not in {"id", "created"}}


@pytest.fixture(scope="module")
def plain_service(
    tmp_path_factory: pytest.TempPathFactory, _standin_server: StandinUpstream
) -> Iterator[SemcacheProcess]:
    """``semcache serve`` with the fast path off, small head bounds and short read deadlines."""
    env = {
        "SEMCACHE_FAST_PATH": "false",
        "SEMCACHE_MAX_HEADER_BYTES": "8192",
        "SEMCACHE_MAX_HEADER_COUNT": "20",
        "SEMCACHE_HEADER_TIMEOUT_S": str(READ_TIMEOUT_S),
        "SEMCACHE_BODY_TIMEOUT_S": str(READ_TIMEOUT_S),
    }
    data = tmp_path_factory.mktemp("plain")
    with SemcacheProcess(data_dir=data, upstream_url=_standin_server.base_url, env=env) as service:
        yield service


@pytest.mark.slow
def test_with_the_fast_path_off_oversized_heads_get_a_431(plain_service: SemcacheProcess) -> None:
    request_line = b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
    for head in (
        request_line + b"X-Big: " + b"a" * 10_000 + b"\r\n\r\n",
        request_line + b"".join(b"X-H%d: 1\r\n" % n for n in range(30)) + b"\r\n",
    ):
        reply = raw_request(plain_service.url, head)
        assert reply.startswith(b"HTTP/1.1 431"), reply[:100]
        assert json.loads(reply.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "request_headers_too_large"
    answered = httpx.post(f"{plain_service.url}/v1/chat/completions", json=chat_body("Still served?"), timeout=30)
    assert answered.status_code == 200 and answered.headers["x-semcache"] == "miss"


@pytest.mark.slow
def test_with_the_fast_path_off_slow_requests_get_a_408(plain_service: SemcacheProcess) -> None:
    reply, seconds = trickle(plain_service, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n", b"X-Slow: abcdefgh\r\n")
    assert_timed_out_with_408(reply, seconds)
    body = json.dumps(chat_body("What is a partial body?")).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body) + 1000}\r\n\r\n"
    ).encode()
    reply, seconds = trickle(plain_service, head + body[:20], b"")
    assert_timed_out_with_408(reply, seconds)
