"""Structured logs: JSON lines with a request id, the id sent back in ``X-Request-Id`` and on to the
upstream, and no secret in any line, checked on a real ``semcache serve`` process."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from semcache.logs import (
    REDACTED,
    Redactor,
    accept_request_id,
    bind_request_id,
    configure_logging,
    unbind_request_id,
)
from semcache.testing.standin_upstream import StandinUpstream
from testkit.servers import SemcacheProcess

KEY_A = "sk-tenant-a-0001"
KEY_B = "tenant-b-key-0002"  # no sk- prefix: only the configured key list can catch it
ADMIN_KEY = "admin-key-0003"
UPSTREAM_KEY = "sk-upstream-0004"
URL_PASSWORD = "url-password-0005"
QUERY_SECRET = "sk-in-a-query-0006"
UNKNOWN_KEY = "sk-not-a-tenant-0007"
WRONG_ADMIN_KEY = "wrong-admin-0008"
SECRETS = (KEY_A, KEY_B, ADMIN_KEY, UPSTREAM_KEY, URL_PASSWORD, QUERY_SECRET, UNKNOWN_KEY, WRONG_ADMIN_KEY)
QUESTION = "How do I learn Python quickly?"
PARAPHRASE = "How can I learn Python fast?"


# -- redaction ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Authorization: Bearer abc.def", f"Authorization: {REDACTED}"),
        ("headers={'authorization': 'Bearer xyz', 'x': 1}", f"headers={{'authorization': '{REDACTED}', 'x': 1}}"),
        ('{"Authorization": "Basic dXNlcjpwYXNz"}', f'{{"Authorization": "{REDACTED}"}}'),
        (
            "[(b'authorization', b'Bearer q1'), (b'host', b'h')]",
            f"[(b'authorization', b'{REDACTED}'), (b'host', b'h')]",
        ),
        ('"GET /v1/models?api_key=abc123&x=1 HTTP/1.1" 200', f'"GET /v1/models?api_key={REDACTED}&x=1 HTTP/1.1" 200'),
        ("the key sk-proj-AbC_12-x was refused", f"the key {REDACTED} was refused"),
        ("sent Bearer tok3n upstream", f"sent Bearer {REDACTED} upstream"),
        ("Error connecting to redis://:hunter22@redis:6379/0", f"Error connecting to redis://:{REDACTED}@redis:6379/0"),
        ("POST https://user:pw@api.example/v1 failed", f"POST https://user:{REDACTED}@api.example/v1 failed"),
        ("x-api-key: B123", f"x-api-key: {REDACTED}"),
        ("admin_key=s3cret", f"admin_key={REDACTED}"),
        ("configured-secret-1 leaked", f"{REDACTED} leaked"),
        # what must stay readable
        ("POST http://127.0.0.1:8080/v1/chat/completions", "POST http://127.0.0.1:8080/v1/chat/completions"),
        ("a risk-free task-force", "a risk-free task-force"),
        ("api_keys_file=/etc/semcache/keys.yaml", "api_keys_file=/etc/semcache/keys.yaml"),
        ("wrong username or password, try again", "wrong username or password, try again"),
    ],
)
def test_redactor(text: str, expected: str) -> None:
    assert Redactor(["configured-secret-1", "ab"])(text) == expected


def test_short_texts_are_redacted_the_same_every_time_they_come_back() -> None:
    """The redactor remembers what it made of short texts: the second answer is the first, also
    once more texts came than it keeps."""
    redact = Redactor(["configured-secret-1"])
    texts = [f"key=sk-abc-{n} for configured-secret-1" for n in range(1500)] + ["POST /v1/chat/completions"]
    first = [redact(text) for text in texts]
    assert first == [redact(text) for text in texts]
    assert first[0] == f"key={REDACTED} for {REDACTED}" and first[-1] == "POST /v1/chat/completions"


def test_a_one_letter_secret_is_not_blanked_everywhere() -> None:
    assert Redactor(["a"])("a cat") == "a cat"


# -- the handler -------------------------------------------------------------------------------


@pytest.fixture
def captured() -> Iterator[Callable[..., io.StringIO]]:
    """``configure_logging`` into a string; the logging set-up is restored afterwards."""
    root = logging.getLogger()
    saved_root = (root.handlers[:], root.level)
    names = ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi", "httpx", "httpcore")
    saved = {name: (logging.getLogger(name).handlers[:], logging.getLogger(name).propagate,
                    logging.getLogger(name).level) for name in names}  # fmt: skip

    def configure(**kwargs: Any) -> io.StringIO:
        stream = io.StringIO()
        configure_logging(stream=stream, **kwargs)
        return stream

    yield configure
    root.handlers[:], _ = saved_root
    root.setLevel(saved_root[1])
    for name, (handlers, propagate, level) in saved.items():
        logger = logging.getLogger(name)
        logger.handlers[:], logger.propagate = handlers, propagate
        logger.setLevel(level)
    logging.captureWarnings(False)


def lines_of(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_lines_carry_the_request_id_and_extra_fields(captured: Callable[..., io.StringIO]) -> None:
    stream = captured(level="debug", log_format="json", secrets=["tenant-key-42"])
    log = logging.getLogger("semcache.test")
    log.info("before any request")
    token = bind_request_id("req-1")
    try:
        log.warning("upstream said %s", "no", extra={"upstream_status": 503, "detail": {"key": "tenant-key-42"}})
        try:
            raise RuntimeError("connecting with Authorization: Bearer tenant-key-42 failed")
        except RuntimeError:
            log.exception("call failed for tenant-key-42")
    finally:
        unbind_request_id(token)
    first, warning, failure = lines_of(stream)
    assert set(first) == {"time", "level", "logger", "message", "request_id"} and first["request_id"] is None
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", first["time"])
    assert warning == {
        "time": warning["time"], "level": "WARNING", "logger": "semcache.test", "message": "upstream said no",
        "request_id": "req-1", "upstream_status": 503, "detail": {"key": REDACTED},
    }  # fmt: skip
    assert failure["message"] == f"call failed for {REDACTED}" and failure["request_id"] == "req-1"
    assert "RuntimeError" in failure["exception"] and "tenant-key-42" not in failure["exception"]


def test_uvicorn_lines_go_through_the_same_handler(captured: Callable[..., io.StringIO]) -> None:
    stream = captured(level="info", log_format="json")
    access = logging.getLogger("uvicorn.access")
    access.info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:5", "GET", "/v1/models?api_key=sk-abc-123", "1.1", 200)
    logging.getLogger("uvicorn.error").info("Started", extra={"color_message": "\x1b[1mStarted\x1b[0m"})
    line, started = lines_of(stream)
    assert line["logger"] == "uvicorn.access" and "sk-abc" not in line["message"] and REDACTED in line["message"]
    assert "color_message" not in started


def test_text_format_for_terminals(captured: Callable[..., io.StringIO]) -> None:
    stream = captured(level="info", log_format="text")
    token = bind_request_id("req-9")
    logging.getLogger("semcache.test").info("hello %s", "sk-abcdef", extra={"status": 200})
    unbind_request_id(token)
    logging.getLogger("semcache.test").debug("not shown at info")
    (line,) = stream.getvalue().splitlines()
    assert line.endswith(f"INFO semcache.test [req-9] hello {REDACTED} status=200")


def test_an_unexpected_error_keeps_its_request_id_in_the_response_and_the_log(
    captured: Callable[..., io.StringIO],
) -> None:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from semcache.server.errors import install_error_handlers
    from semcache.server.request_context import RequestContext

    app = FastAPI()
    install_error_handlers(app)
    app.add_middleware(RequestContext)

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("failed while holding sk-live-secret-42")

    stream = captured(level="info", log_format="json")
    with TestClient(app, raise_server_exceptions=False) as client:
        response = client.get("/boom", headers={"X-Request-Id": "boom-1"})
    assert response.status_code == 500 and response.headers["x-request-id"] == "boom-1"
    assert response.json()["error"]["code"] == "internal_error"
    lines = [line for line in lines_of(stream) if line["logger"].startswith("semcache")]
    assert [(line["logger"], line["request_id"]) for line in lines] == [
        ("semcache.access", "boom-1"), ("semcache.server", "boom-1")
    ]  # fmt: skip
    access, failure = lines
    assert access["status"] == 500 and "RuntimeError" in failure["exception"]
    assert "sk-live" not in stream.getvalue()


def test_an_unexpected_error_on_the_chat_route_is_a_logged_500_in_openai_shape_with_its_request_id(
    captured: Callable[..., io.StringIO], tmp_path: Path, upstream: StandinUpstream
) -> None:
    """A valid chat request takes the direct path (server/fastpath/direct.py), past FastAPI's error
    handlers: a failure there still answers in OpenAI's shape, and is logged once, with the id."""
    from semcache.server import create_app
    from semcache.settings import Settings
    from semcache.testing.uvicorn_thread import ThreadedUvicorn
    from testkit.fakes import HashingEmbedder
    from testkit.servers import wait_healthy

    class FailingEmbedder(HashingEmbedder):
        def embed(self, texts):  # type: ignore[no-untyped-def]
            if any("boom" in text for text in texts):
                raise RuntimeError("the model broke while holding sk-live-secret-43")
            return super().embed(texts)

    settings = Settings(data_dir=tmp_path, upstream_url=upstream.base_url)
    with ThreadedUvicorn(create_app(settings, embedder=FailingEmbedder())) as server:
        wait_healthy(server.url, timeout_s=30)
        stream = captured(level="info", log_format="json")
        response = httpx.post(
            f"{server.url}/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "boom"}]},
            headers={"X-Request-Id": "boom-2"},
        )
        ok = httpx.post(
            f"{server.url}/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        )
    assert response.status_code == 500 and response.headers["x-request-id"] == "boom-2"
    assert response.json()["error"] == {
        "message": "internal error", "type": "server_error", "param": None, "code": "internal_error"
    }  # fmt: skip
    assert ok.status_code == 200  # and it serves on
    lines = [
        line for line in lines_of(stream) if line["request_id"] == "boom-2" and line["logger"].startswith("semcache")
    ]
    failure, access = lines
    assert failure["logger"] == "semcache.server" and "RuntimeError" in failure["exception"]
    assert access["logger"] == "semcache.access" and access["status"] == 500
    assert "sk-live" not in stream.getvalue()


@pytest.mark.parametrize(
    ("sent", "kept"),
    [("abc-123", True), ("trace:9f.x_y", True), ("x" * 128, True), ("x" * 129, False), ("a b", False),
     ("", False), ("id\nforged", False), ("<script>", False), ("é", False), (None, False)],
)  # fmt: skip
def test_a_client_request_id_is_kept_only_when_sane(sent: str | None, kept: bool) -> None:
    request_id = accept_request_id(sent)
    assert (request_id == sent) is kept
    assert re.fullmatch(r"[A-Za-z0-9._:+/=-]{1,128}", request_id)


# -- request ids over HTTP ---------------------------------------------------------------------


@pytest.mark.slow
def test_every_response_carries_a_request_id_that_also_goes_upstream(
    service: str, client: openai.OpenAI, upstream: StandinUpstream
) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": QUESTION}], extra_headers={"X-Request-Id": "client-id-1"}
    )
    assert raw.headers["x-request-id"] == "client-id-1"
    assert upstream.calls[-1]["headers"]["x-request-id"] == "client-id-1"
    miss = client.chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": "What is a monad?"}], stream=True
    )
    generated = miss.headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", generated)
    list(miss.parse())
    assert upstream.calls[-1]["headers"]["x-request-id"] == generated
    hit = client.chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": QUESTION}], extra_headers={"X-Request-Id": "bad id\t!"}
    )
    assert hit.headers["x-semcache"] == "hit" and re.fullmatch(r"[0-9a-f]{32}", hit.headers["x-request-id"])
    errors = [
        httpx.post(
            f"{service}/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"}
        ),
        httpx.get(f"{service}/nothing-here"),
        httpx.post(f"{service}/v1/chat/completions", content=b"x" * 5_000_000),
        httpx.get(f"{service}/healthz"),
    ]
    assert [r.status_code for r in errors] == [400, 404, 413, 200]
    ids = [r.headers["x-request-id"] for r in errors]
    assert len(set(ids)) == len(ids)


# -- a real process, scanned line by line ------------------------------------------------------


@pytest.mark.slow
def test_no_secret_reaches_any_log_line(tmp_path: Path, upstream: StandinUpstream) -> None:
    keys = tmp_path / "keys.yaml"
    keys.write_text(f"{KEY_A}: [team-a, shared]\n{KEY_B}: [team-b]\n")
    log_path = tmp_path / "semcache.log"
    upstream_url = upstream.base_url.replace("http://", f"http://operator:{URL_PASSWORD}@")
    process = SemcacheProcess(
        "--api-keys", str(keys), "--log-level", "debug",
        data_dir=tmp_path / "data", upstream_url=upstream_url, log_path=log_path,
        env={"SEMCACHE_ADMIN_KEY": ADMIN_KEY, "SEMCACHE_UPSTREAM_API_KEY": UPSTREAM_KEY,
             "SEMCACHE_BREAKER_FAILURE_THRESHOLD": "100", "SEMCACHE_UPSTREAM_RETRY_BASE_DELAY_S": "0.01"},
    )  # fmt: skip
    with process:
        sent = _traffic(process.url, upstream)
    upstream_ids = {call["headers"].get("x-request-id") for call in upstream.calls}

    text = log_path.read_text()
    for secret in SECRETS:
        assert secret not in text
    assert not re.search(r"(?<![A-Za-z0-9])sk-[A-Za-z0-9]", text)
    assert not re.search(r"(?i)bearer (?!\[redacted\])", text)
    lines = [json.loads(line) for line in text.splitlines()]  # every line is one JSON object
    assert all({"time", "level", "logger", "message", "request_id"} <= set(line) for line in lines)
    in_request = ("semcache.access", "semcache.pipeline", "semcache.upstream", "httpx")
    request_lines = [line for line in lines if line["logger"] in in_request]
    assert all(line["request_id"] for line in request_lines)
    logged = {line["request_id"] for line in lines if line["logger"] == "semcache.access"}
    assert set(sent) <= logged and "trace-me-123" in logged
    assert {line["logger"] for line in request_lines} >= {"semcache.pipeline", "semcache.upstream", "httpx"}
    for line in request_lines:
        if line["logger"] == "httpx" and "/chat/completions" in line["message"]:
            assert line["request_id"] in upstream_ids  # the stand-in records chat calls: the same id in both logs
    retried = [line for line in lines if line["logger"] == "semcache.upstream"]
    assert retried and all(line["request_id"] in sent for line in retried)
    assert any(line["message"].startswith("stream ended early") and line["request_id"] in sent for line in lines)


def _traffic(url: str, upstream: StandinUpstream) -> dict[str, int]:
    """Hits, misses, streams, bad keys, admin calls and upstream failures; returns request id → status."""
    sent: dict[str, int] = {}

    def call(method: str, path: str, key: str | None = None, **kwargs: Any) -> httpx.Response:
        headers = kwargs.pop("headers", {})
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        response = httpx.request(method, f"{url}{path}", headers=headers, timeout=30, **kwargs)
        sent[response.headers["x-request-id"]] = response.status_code
        return response

    def chat(key: str | None, prompt: str = QUESTION, **kwargs: Any) -> httpx.Response:
        body = {"model": "m", "messages": [{"role": "user", "content": prompt}], **kwargs.pop("body", {})}
        return call("POST", "/v1/chat/completions", key, json=body, **kwargs)

    statuses = [
        chat(KEY_A).status_code,  # miss
        chat(KEY_A).status_code,  # exact hit
        chat(KEY_A, PARAPHRASE).status_code,  # semantic hit
        chat(KEY_A, "Tell me about whales", body={"stream": True}).status_code,
        chat(KEY_A, "Tell me about whales", body={"stream": True}).status_code,
        chat(KEY_B).status_code,
        chat(KEY_A, headers={"X-Request-Id": "trace-me-123"}).status_code,
        call(
            "POST",
            f"/v1/chat/completions?api_key={QUERY_SECRET}",
            KEY_A,
            json={"model": "m", "messages": [{"role": "user", "content": QUESTION}]},
        ).status_code,
        chat(UNKNOWN_KEY).status_code,
        chat(None).status_code,
        chat(KEY_B, headers={"X-Semcache-Namespace": "team-a"}).status_code,
        call("GET", "/v1/models", KEY_A).status_code,
        call("GET", "/admin/decisions").status_code,
        call("GET", "/admin/decisions", KEY_A).status_code,
        call("GET", "/admin/decisions", WRONG_ADMIN_KEY).status_code,
        call("GET", "/admin/decisions", ADMIN_KEY).status_code,
        call("POST", "/v1/semcache/feedback", KEY_B, json={"id": "chatcmpl-nope", "correct": False}).status_code,
        call(
            "POST", "/v1/chat/completions", KEY_A, content=b"{not json", headers={"content-type": "application/json"}
        ).status_code,
    ]
    assert statuses == [200, 200, 200, 200, 200, 200, 200, 200, 401, 401, 403, 200, 401, 403, 403, 200, 404, 400]
    upstream.set_fault(status=500, times=3)  # every attempt fails: retries, then the error
    assert chat(KEY_A, "What is a monad?").status_code == 500
    upstream.set_fault(status=429, retry_after=0, times=1)  # one retry, then an answer
    assert chat(KEY_A, "What is a functor?").status_code == 200
    upstream.set_fault(cut_after_chunks=1, times=1)  # the stream breaks after its first chunk
    assert chat(KEY_A, "What is a lens?", body={"stream": True}).status_code == 200
    upstream.set_fault(malformed_sse=True, times=1)
    assert chat(KEY_A, "What is a prism?", body={"stream": True}).status_code == 200
    upstream.set_fault()  # none
    return sent
