"""Part of the hostile-client suite, for issue 16's server-layer findings: browsers on other sites
and DNS-rebinding pages reaching /admin, spellings of one API key each getting a rate-limit bucket
of their own, slow clients holding connections open, clients that leave mid-body or mid-stream
logged as failures, and /stats and /metrics showing every tenant to anyone.

Each test runs real ``semcache serve`` processes (bound to every interface, reached on 127.0.0.1
only) in front of the stand-in upstream, over real HTTP and plain sockets."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from semcache import cli
from semcache.server.access import AccessPolicy
from semcache.testing.standin_upstream import StandinUpstream
from testkit.servers import SemcacheProcess

from .conftest import assert_openai_error

pytestmark = pytest.mark.slow

KEY_A = "sk-hostile-a-0001"
KEY_B = "sk-hostile-b-0002"
ADMIN_KEY = "hostile-admin-key-0003"
METRICS_KEY = "hostile-metrics-key-0004"
READ_TIMEOUT_S = 1.0  # the header and body timeouts of the open service
# Generous: a timeout of READ_TIMEOUT_S must have closed the connection well before this.
CLOSED_WITHIN_S = 6.0
runner = CliRunner(env={"COLUMNS": "160"})


# -- the services --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def open_service(
    tmp_path_factory: pytest.TempPathFactory, _standin_server: StandinUpstream
) -> Iterator[SemcacheProcess]:
    """No key file and no admin key, on every interface, with short read timeouts and one upstream
    call at a time (so that an upstream call left running would hold up the next)."""
    folder = tmp_path_factory.mktemp("open")
    env = {
        "SEMCACHE_HEADER_TIMEOUT_S": str(READ_TIMEOUT_S),
        "SEMCACHE_BODY_TIMEOUT_S": str(READ_TIMEOUT_S),
        "SEMCACHE_UPSTREAM_MAX_CONCURRENT": "1",
        "SEMCACHE_ADMIN_KEY": "",
        "SEMCACHE_LOG_LEVEL": "info",
        "SEMCACHE_LOG_FORMAT": "json",
    }
    process = SemcacheProcess(
        "--host",
        "0.0.0.0",
        data_dir=folder / "data",
        upstream_url=_standin_server.base_url,
        env=env,
        log_path=folder / "semcache.log",
    )
    with process:
        yield process


@pytest.fixture(scope="module")
def keyed_service(
    tmp_path_factory: pytest.TempPathFactory, _standin_server: StandinUpstream
) -> Iterator[SemcacheProcess]:
    """A key file, an admin key and a metrics key, on every interface, with a rate limit of a burst
    of two and almost no refill."""
    folder = tmp_path_factory.mktemp("keyed")
    keys = folder / "keys.yaml"
    keys.write_text(f"{KEY_A}: [team-a]\n{KEY_B}: [team-b]\n")
    env = {
        "SEMCACHE_ADMIN_KEY": ADMIN_KEY,
        "SEMCACHE_METRICS_KEY": METRICS_KEY,
        "SEMCACHE_RATE_LIMIT_PER_S": "0.001",
        "SEMCACHE_RATE_LIMIT_BURST": "2",
        "SEMCACHE_LOG_LEVEL": "info",
        "SEMCACHE_LOG_FORMAT": "json",
    }
    process = SemcacheProcess(
        "--host",
        "0.0.0.0",
        "--api-keys",
        str(keys),
        data_dir=folder / "data",
        upstream_url=_standin_server.base_url,
        env=env,
        log_path=folder / "semcache.log",
    )
    with process:
        yield process


def log_lines(service: SemcacheProcess) -> list[dict[str, Any]]:
    """The service's JSON log lines so far (other lines, such as a warning printed to stderr, are skipped)."""
    assert service.log_path is not None
    lines = []
    for text in service.log_path.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(ValueError):
            line = json.loads(text)
            if isinstance(line, dict):
                lines.append(line)
    return lines


def lines_of_request(service: SemcacheProcess, request_id: str, wait_s: float = 5.0) -> list[dict[str, Any]]:
    """The log lines of one request, read a moment after its access line is there (uvicorn logs a
    failure of the request just after it)."""

    def lines() -> list[dict[str, Any]]:
        return [line for line in log_lines(service) if line.get("request_id") == request_id]

    deadline = time.monotonic() + wait_s
    while not any(line["logger"] == "semcache.access" for line in lines()) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)
    return lines()


def chat_body(prompt: str, stream: bool = False) -> dict[str, Any]:
    return {"model": "test-model", "messages": [{"role": "user", "content": prompt}], "stream": stream}


def planted_line(prompt: str, answer: str) -> bytes:
    """One line of an export file, as a page on another site would forge it."""
    entry = {
        "namespace": "default",
        "scope": "forged-scope",
        "exact_key": f"forged-{prompt}",
        "model": "test-model",
        "prompt": prompt,
        "answer": answer,
        "created_at": time.time(),
    }
    return json.dumps(entry).encode() + b"\n"


def import_lines(
    service: SemcacheProcess, lines: bytes, headers: dict[str, str], content_type: str = "application/x-ndjson"
) -> httpx.Response:
    """``POST /admin/entries/import`` of ``lines``, with ``headers`` and that Content-Type."""
    return httpx.post(
        f"{service.url}/admin/entries/import",
        content=lines,
        headers={**headers, "Content-Type": content_type},
        timeout=30,
    )


def entries_holding(service: SemcacheProcess, text: str) -> list[dict[str, Any]]:
    """Entries whose prompt or answer holds ``text``, read through /admin from loopback."""
    response = httpx.get(f"{service.url}/admin/entries", params={"text": text, "limit": 100}, timeout=30)
    assert response.status_code == 200, response.text
    return list(response.json()["data"])


# -- finding 4: /admin and other websites --------------------------------------------------------


JSON_ROUTES = {
    "/v1/chat/completions": {"model": "m", "messages": [{"role": "user", "content": "Is JSON typed?"}]},
    "/v1/responses": {"model": "m", "input": "Is JSON typed?"},
    "/v1/completions": {"model": "m", "prompt": "Is JSON typed?"},
    "/v1/embeddings": {"model": "m", "input": "Is JSON typed?"},
    "/v1/semcache/feedback": {"id": "no-such-hit", "correct": False},
    "/v1/semcache/lookup": {"prompt": "Is JSON typed?"},
    "/v1/semcache/store": {"prompt": "Is JSON typed?", "answer": "Typed JSON is taken."},
    "/admin/entries/delete": {"namespace": "nothing-here"},
}


@pytest.mark.parametrize("path", list(JSON_ROUTES))
def test_every_json_route_says_to_send_content_type_json_alike(open_service: SemcacheProcess, path: str) -> None:
    """JSON sent without a Content-Type (Python's ``data=``) or as a form (``curl -d``) gets one
    415 that says what to send, on every route; the same body typed as JSON is taken."""
    body = json.dumps(JSON_ROUTES[path]).encode()
    for content_type in (None, "application/x-www-form-urlencoded"):
        headers = {"Content-Type": content_type} if content_type else {}
        response = httpx.post(f"{open_service.url}{path}", content=body, headers=headers, timeout=30)
        assert_openai_error(response, 415, "unsupported_media_type")
        message = response.json()["error"]["message"]
        sent = f"Content-Type: {content_type}" if content_type else "no Content-Type"
        assert message.startswith(f"{path} takes a JSON body: send it with Content-Type: application/json"), message
        assert message.endswith(f"(this one has {sent})"), message
    typed = httpx.post(f"{open_service.url}{path}", content=body, headers={"Content-Type": "application/json"},
                       timeout=30)  # fmt: skip
    assert typed.status_code in (200, 404), typed.text  # 404: feedback on a hit that never was


@pytest.mark.parametrize(
    ("method", "path", "content_type", "body"),
    [
        (
            "POST",
            "/admin/entries/import",
            "text/plain;charset=UTF-8",
            planted_line("How do I reset my password?", "PLANTED-1"),
        ),
        ("POST", "/admin/entries/import", None, planted_line("How do I reset my password?", "PLANTED-2")),
        (
            "POST",
            "/admin/entries/import",
            "application/x-www-form-urlencoded",
            planted_line("Where is my order?", "PLANTED-3"),
        ),
        (
            "POST",
            "/admin/entries/import",
            "multipart/form-data; boundary=x",
            planted_line("Where is my order?", "PLANTED-4"),
        ),
        ("POST", "/admin/flush", None, b'{"confirm": true}'),
        ("POST", "/admin/flush", "text/plain", b'{"confirm": true}'),
        ("PUT", "/admin/namespaces/default/config", "text/plain", b'{"threshold": 0.1}'),
        ("POST", "/admin/entries/delete", "text/plain", b'{"namespace": "default"}'),
    ],
    ids=[
        "import-text-plain",
        "import-no-type",
        "import-form",
        "import-multipart",
        "flush-no-type",
        "flush-text-plain",
        "config-text-plain",
        "delete-text-plain",
    ],
)
def test_an_admin_body_a_browser_may_send_cross_site_without_asking_is_refused(
    open_service: SemcacheProcess, method: str, path: str, content_type: str | None, body: bytes
) -> None:
    """Without an admin key, a page on any site could POST these (no CORS preflight for text/plain,
    forms or no type at all) to a semcache on the visitor's own machine, and plant an answer."""
    url = open_service.url
    kept = "What is the boiling point of water?"
    assert httpx.post(f"{url}/v1/chat/completions", json=chat_body(kept), timeout=30).status_code == 200
    headers = {"Content-Type": content_type} if content_type is not None else {}
    response = httpx.request(method, f"{url}{path}", content=body, headers=headers, timeout=30)
    assert_openai_error(response, 415, "unsupported_media_type")
    assert not entries_holding(open_service, "PLANTED")
    assert entries_holding(open_service, kept), "nothing was flushed or deleted"
    config = httpx.get(f"{url}/admin/namespaces/default/config", timeout=30).json()
    assert config["config"]["threshold"] != 0.1


def test_a_non_json_admin_body_is_refused_with_the_admin_key_too(keyed_service: SemcacheProcess) -> None:
    admin_key = {"Authorization": f"Bearer {ADMIN_KEY}"}
    line = planted_line("Is a key enough for text/plain?", "PLANTED-KEYED")
    for content_type in ("text/plain", "application/x-www-form-urlencoded"):
        response = import_lines(keyed_service, line, admin_key, content_type)
        assert_openai_error(response, 415, "unsupported_media_type")
    found = httpx.get(f"{keyed_service.url}/admin/entries", params={"text": "PLANTED"}, headers=admin_key, timeout=30)
    assert found.status_code == 200 and found.json()["data"] == []


@pytest.mark.parametrize(
    "host",
    [
        "evil.example",
        "evil.example:{port}",
        "127.0.0.1.evil.example",
        "localhost.evil.example:{port}",
        "10.0.0.1:{port}",
        "0.0.0.0:{port}",
        "[::ffff:10.0.0.1]",
    ],
)
def test_admin_reached_through_a_foreign_host_name_is_refused(open_service: SemcacheProcess, host: str) -> None:
    """A DNS-rebinding page on evil.example reaches 127.0.0.1, with its own name in Host."""
    headers = {"Host": host.format(port=open_service.port)}
    for path in ("/admin/entries", "/admin/decisions", "/admin/entries/export", "/admin/namespaces/default/config"):
        response = httpx.get(f"{open_service.url}{path}", headers=headers, timeout=30)
        assert_openai_error(response, 403, "admin_loopback_only")
    imported = import_lines(open_service, planted_line("Who won the cup?", "PLANTED-HOST"), headers)
    assert_openai_error(imported, 403, "admin_loopback_only")
    rebinding_page = {**headers, "Origin": f"http://{headers['Host']}"}  # its own origin, too
    response = httpx.get(f"{open_service.url}/admin/entries", headers=rebinding_page, timeout=30)
    assert response.status_code == 403 and response.json()["error"]["code"] in (
        "admin_loopback_only",
        "admin_cross_site",
    )
    assert not entries_holding(open_service, "PLANTED-HOST")


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1:{port}",
        "localhost:{port}",
        "LOCALHOST",
        "localhost.",
        "app.localhost:{port}",
        "127.1.2.3",
        "[::1]:{port}",
    ],
)
def test_admin_from_loopback_with_a_loopback_host_and_json_works(open_service: SemcacheProcess, host: str) -> None:
    headers = {"Host": host.format(port=open_service.port)}
    url = open_service.url
    assert httpx.get(f"{url}/admin/decisions", headers=headers, timeout=30).status_code == 200
    prompt = f"What does the loopback host {headers['Host']} answer?"
    imported = import_lines(open_service, planted_line(prompt, "IMPORTED-OK"), headers)
    assert imported.status_code == 200 and imported.json()["imported"] == 1, imported.text
    found = httpx.get(f"{url}/admin/entries", params={"text": prompt}, headers=headers, timeout=30)
    assert [entry["prompt"] for entry in found.json()["data"]] == [prompt]
    deleted = httpx.post(f"{url}/admin/entries/delete", json={"text": prompt}, headers=headers, timeout=30)
    assert deleted.status_code == 200 and deleted.json()["deleted"] == 1


def test_the_admin_cli_still_works_from_loopback(open_service: SemcacheProcess, tmp_path: Path) -> None:
    """`semcache admin import` sends JSONL as application/x-ndjson; the other commands send JSON."""
    export = tmp_path / "entries.jsonl"
    export.write_bytes(planted_line("How do CLI imports travel?", "CLI-IMPORTED"))
    url = ["--url", open_service.url]
    imported = runner.invoke(
        cli.app, ["admin", "import", str(export), *url, "--json"], env={"SEMCACHE_ADMIN_KEY": None}
    )
    assert imported.exit_code == 0 and json.loads(imported.output)["imported"] == 1, imported.output
    listed = runner.invoke(cli.app, ["admin", "entries", "--text", "CLI-IMPORTED", *url, "--json"])
    assert listed.exit_code == 0 and len(json.loads(listed.output)["data"]) == 1, listed.output
    deleted = runner.invoke(cli.app, ["admin", "delete", "--text", "CLI-IMPORTED", "--yes", *url, "--json"])
    assert deleted.exit_code == 0 and json.loads(deleted.output)["deleted"] == 1, deleted.output


CROSS_SITE = [
    {"Origin": "https://evil.example"},
    {"Origin": "http://evil.example:8080"},
    {"Origin": "null"},  # a sandboxed frame, a file: page, a redirect
    {"Origin": "http://localhost.evil.example"},
    {"Sec-Fetch-Site": "cross-site"},
    {"Origin": "http://localhost:3000", "Sec-Fetch-Site": "cross-site"},
]


@pytest.mark.parametrize("browser", CROSS_SITE, ids=lambda h: ",".join(f"{k}={v}" for k, v in h.items()))
def test_a_cross_site_browser_request_is_refused_with_or_without_the_admin_key(
    open_service: SemcacheProcess, keyed_service: SemcacheProcess, browser: dict[str, str]
) -> None:
    admin_key = {"Authorization": f"Bearer {ADMIN_KEY}"}
    for service, key in ((open_service, {}), (keyed_service, admin_key)):
        read = httpx.get(f"{service.url}/admin/entries", headers={**browser, **key}, timeout=30)
        assert_openai_error(read, 403, "admin_cross_site")
        imported = import_lines(service, planted_line("Is this cross-site?", "PLANTED-ORIGIN"), {**browser, **key})
        assert_openai_error(imported, 403, "admin_cross_site")
        assert httpx.get(f"{service.url}/admin/entries", headers=key, timeout=30).status_code == 200
    assert not entries_holding(open_service, "PLANTED-ORIGIN")


def test_the_services_own_docs_page_may_use_admin_with_the_key(keyed_service: SemcacheProcess) -> None:
    """Swagger UI at /docs of a service reached by its network name sends that name as its Origin."""
    admin_key = {"Authorization": f"Bearer {ADMIN_KEY}"}
    own = {"Host": "semcache.internal:8080", "Origin": "http://semcache.internal:8080", **admin_key}
    assert httpx.get(f"{keyed_service.url}/admin/decisions", headers=own, timeout=30).status_code == 200
    other = {**own, "Origin": "http://semcache.internal.evil.example:8080"}
    read = httpx.get(f"{keyed_service.url}/admin/decisions", headers=other, timeout=30)
    assert_openai_error(read, 403, "admin_cross_site")


@pytest.mark.parametrize(
    "browser",
    [
        {"Origin": "http://localhost:5173"},
        {"Origin": "http://127.0.0.1:8080"},
        {"Origin": "http://[::1]"},
        {"Sec-Fetch-Site": "same-origin"},
        {"Sec-Fetch-Site": "none"},
    ],
)
def test_a_page_served_from_loopback_may_use_admin(open_service: SemcacheProcess, browser: dict[str, str]) -> None:
    """An operator's own dashboard on localhost, or the address bar."""
    assert httpx.get(f"{open_service.url}/admin/decisions", headers=browser, timeout=30).status_code == 200


def test_serving_on_every_interface_without_an_admin_key_warns(
    open_service: SemcacheProcess, keyed_service: SemcacheProcess
) -> None:
    assert open_service.log_path is not None and keyed_service.log_path is not None
    printed = open_service.log_path.read_text(encoding="utf-8").splitlines()
    plain = [line for line in printed if "SEMCACHE_ADMIN_KEY" in line and not line.startswith("{")]
    assert plain and "/admin" in plain[0] and "loopback" in plain[0], printed[:20]
    logged = [line for line in log_lines(open_service) if "SEMCACHE_ADMIN_KEY" in line["message"]]
    assert [line["level"] for line in logged] == ["WARNING"], logged
    assert "/admin" in logged[0]["message"] and "loopback" in logged[0]["message"]
    # With an admin key, nothing to warn of.
    assert "SEMCACHE_ADMIN_KEY" not in keyed_service.log_path.read_text(encoding="utf-8")


def test_every_admin_path_in_the_api_description_refuses_a_foreign_host(open_service: SemcacheProcess) -> None:
    """Each operation under /admin, as the OpenAPI description lists them: none is left out of the guard."""
    url = open_service.url
    paths = httpx.get(f"{url}/openapi.json", timeout=30).json()["paths"]
    operations = [
        (method.upper(), path) for path, item in paths.items() if path.startswith("/admin") for method in item
    ]
    assert len(operations) >= 11, operations
    for method, path in operations:
        concrete = path.replace("{namespace}", "default").replace("{entry_id}", "1")
        response = httpx.request(method, f"{url}{concrete}", headers={"Host": "evil.example"}, json={}, timeout=30)
        assert (response.status_code, response.json()["error"]["code"]) == (403, "admin_loopback_only"), (method, path)


def test_what_counts_as_loopback() -> None:
    """The peer's address, the Host header and the Origin: names a rebinding or cross-site page
    could use are never loopback."""
    from semcache.server.admin import is_loopback_address, is_loopback_host, is_loopback_origin

    assert all(map(is_loopback_address, ["127.0.0.1", "127.9.8.7", "::1", "::ffff:127.0.0.1"]))
    assert not any(
        map(is_loopback_address, ["10.0.0.1", "0.0.0.0", "::", "192.168.1.2", "localhost", "", "::ffff:8.8.8.8"])
    )
    loopback_hosts = [
        "localhost",
        "LocalHost:80",
        "localhost.",
        "a.b.localhost:1",
        "127.0.0.1",
        "127.0.0.1:8080",
        "[::1]",
        "[::1]:8080",
    ]
    foreign_hosts = [
        "",
        "evil.example",
        "localhost.evil.example",
        "127.0.0.1.evil.example",
        "evil.example:127",
        "0.0.0.0",
        "[::]",
        "::1",
        "[::1",
        "localhost:abc",
        "127.0.0.1:8080:1",
        "2130706433",
        "0x7f.1",
    ]
    assert all(map(is_loopback_host, loopback_hosts))
    assert not any(map(is_loopback_host, foreign_hosts))
    assert all(map(is_loopback_origin, ["http://localhost:3000", "https://127.0.0.1", "http://[::1]:8080"]))
    assert not any(
        map(
            is_loopback_origin,
            [
                "null",
                "https://evil.example",
                "file://",
                "http://localhost.evil.example",
                "localhost",
                "ftp://localhost",
            ],
        )
    )


# -- finding 8: the rate limit and spellings of one key ------------------------------------------


def test_spellings_of_one_key_share_one_rate_limit_bucket(keyed_service: SemcacheProcess) -> None:
    """The key file accepts any case of the scheme and extra spaces; each must not get a new bucket."""
    url = f"{keyed_service.url}/v1/chat/completions"
    spellings = [f"Bearer {KEY_A}", f"bearer {KEY_A}", f"BEARER {KEY_A}", f"Bearer  {KEY_A}", f"bEaReR   {KEY_A}"]
    statuses = []
    for authorization in spellings:
        response = httpx.post(
            url, json=chat_body("What is the rate of a bucket?"), headers={"Authorization": authorization}, timeout=30
        )
        statuses.append(response.status_code)
        if response.status_code == 429:
            assert_openai_error(response, 429, "rate_limit_exceeded")
    assert statuses == [200, 200, 429, 429, 429]
    other = httpx.post(
        url, json=chat_body("What is the rate of a bucket?"), headers={"Authorization": f"Bearer {KEY_B}"}, timeout=30
    )
    assert other.status_code == 200  # another key has a bucket of its own


def test_without_a_key_file_the_rate_limit_is_per_namespace_whatever_the_authorization() -> None:
    """Without a key file semcache accepts no credential (Authorization is the upstream's): a client
    that sends a new value each time must not get a new bucket each time."""
    policy = AccessPolicy()
    ids = {policy.rate_limit_key(authorization, "default") for authorization in ("Bearer a", "Bearer b", None, "x")}
    assert len(ids) == 1
    assert policy.rate_limit_key("Bearer a", "default") != policy.rate_limit_key("Bearer a", "other")
    keyed = AccessPolicy({KEY_A: ["team-a"], KEY_B: ["team-a"]})
    spellings = {keyed.rate_limit_key(f"{scheme} {KEY_A}", "team-a") for scheme in ("Bearer", "bearer", "BEARER ")}
    assert len(spellings) == 1 and KEY_A not in next(iter(spellings))
    assert keyed.rate_limit_key(f"Bearer {KEY_B}", "team-a") not in spellings


# -- finding 9: slow clients, and clients that leave --------------------------------------------


def _host_port(service: SemcacheProcess) -> tuple[str, int]:
    return "127.0.0.1", service.port


def trickle(
    service: SemcacheProcess, first: bytes, then: bytes, every_s: float = 0.2, for_s: float = 10.0
) -> tuple[bytes, float]:
    """Send ``first``, then ``then`` a byte at a time every ``every_s`` (round and round) for up to
    ``for_s``, reading whatever comes back; returns it once the server has closed the connection
    (or ``for_s`` is up), with the seconds that took."""
    started = time.monotonic()
    received = b""
    with socket.create_connection(_host_port(service), timeout=10) as sock:
        sock.sendall(first)
        sock.settimeout(every_s)
        position = 0
        while time.monotonic() - started < for_s:
            try:
                chunk = sock.recv(65536)
                if not chunk:
                    return received, time.monotonic() - started
                received += chunk
                continue
            except TimeoutError:
                pass
            except ConnectionError:
                return received, time.monotonic() - started
            if then:
                with contextlib.suppress(OSError):  # closed by the server: the next recv says so
                    sock.sendall(then[position % len(then) : position % len(then) + 1])
                position += 1
    return received, time.monotonic() - started


def assert_timed_out_with_408(reply: bytes, seconds: float) -> None:
    assert seconds < CLOSED_WITHIN_S, f"still open after {seconds:.1f} s: {reply[:200]!r}"
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), reply[:200]
    assert b"connection: close" in head.lower()
    error = json.loads(body)["error"]
    assert error["code"] == "request_timeout" and error["type"] == "invalid_request_error"


def test_a_request_head_sent_a_byte_at_a_time_is_answered_408_and_closed(open_service: SemcacheProcess) -> None:
    reply, seconds = trickle(open_service, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n", b"X-Slow: abcdefgh\r\n")
    assert_timed_out_with_408(reply, seconds)


def test_a_connection_that_sends_nothing_is_closed(open_service: SemcacheProcess) -> None:
    reply, seconds = trickle(open_service, b"", b"")
    assert reply == b"" and seconds < CLOSED_WITHIN_S, (reply, seconds)
    reply, seconds = trickle(open_service, b"\r\n", b"")  # blank lines start no request
    assert seconds < CLOSED_WITHIN_S, (reply, seconds)


@pytest.mark.parametrize("then", [b"", b'{"model": '], ids=["stalled", "a-byte-at-a-time"])
def test_a_partial_body_is_answered_408_and_closed(open_service: SemcacheProcess, then: bytes) -> None:
    body = json.dumps(chat_body("What is a partial body?")).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body) + 1000}\r\nX-Request-Id: partial-body-{len(then)}\r\n\r\n"
    ).encode()
    reply, seconds = trickle(open_service, head + body[:20], then)
    assert_timed_out_with_408(reply, seconds)
    lines = lines_of_request(open_service, f"partial-body-{len(then)}")
    assert [line["status"] for line in lines if line["logger"] == "semcache.access"] == [408]
    assert all(line["level"] == "INFO" for line in lines), lines


def test_idle_keep_alive_and_slow_answers_outlive_the_read_timeouts(
    open_service: SemcacheProcess, upstream: StandinUpstream
) -> None:
    """The timeouts bound how long a request takes to arrive: not an idle kept-alive connection
    (uvicorn's keep-alive timeout), nor the time semcache and its upstream take to answer."""
    with httpx.Client(base_url=open_service.url, timeout=30) as client:
        assert client.get("/healthz").status_code == 200
        time.sleep(READ_TIMEOUT_S * 2.5)
        assert client.get("/healthz").status_code == 200
        upstream.set_fault(latency_s=READ_TIMEOUT_S * 2.5, times=1)
        slow = client.post("/v1/chat/completions", json=chat_body("What takes the upstream a while?"))
        assert slow.status_code == 200 and slow.headers["x-semcache"] == "miss"
        body = json.dumps(chat_body("Is a streamed request body fine?")).encode()

        def slowly() -> Iterator[bytes]:  # a body that takes less than the timeout to arrive, in pieces
            for start in range(0, len(body), 16):
                time.sleep(READ_TIMEOUT_S / 20)
                yield body[start : start + 16]

        chunked = client.post("/v1/chat/completions", content=slowly(), headers={"Content-Type": "application/json"})
        assert chunked.status_code == 200, chunked.text


def assert_left_cleanly(service: SemcacheProcess, request_id: str) -> None:
    """One INFO access line with status 499, and nothing at warning or above, nor any traceback."""
    lines = lines_of_request(service, request_id)
    access = [line for line in lines if line["logger"] == "semcache.access"]
    assert [(line["level"], line["status"]) for line in access] == [("INFO", 499)], lines
    assert "client closed request" in access[0]["message"]
    assert all(line["level"] in ("DEBUG", "INFO") for line in lines), lines
    assert not any("exception" in line or "Traceback" in line["message"] for line in lines), lines


@pytest.mark.parametrize(
    ("path", "content_type"),
    [
        ("/v1/chat/completions", "application/json"),
        ("/v1/chat/completions", "text/plain"),
        ("/v1/semcache/feedback", "application/json"),
        ("/admin/entries/import", "application/x-ndjson"),
        ("/admin/entries/delete", "application/json"),
    ],
)
def test_a_client_that_leaves_mid_body_is_logged_once_at_info(
    open_service: SemcacheProcess, path: str, content_type: str
) -> None:
    request_id = f"leave-mid-body-{path.replace('/', '-')}-{content_type.replace('/', '-')}"
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\nContent-Length: 5000\r\n"
        f"X-Request-Id: {request_id}\r\n\r\n"
    ).encode()
    with socket.create_connection(_host_port(open_service), timeout=10) as sock:
        sock.sendall(head + b'{"model": "m", "messages": [')
        time.sleep(0.3)  # the route is reading the body by now
    assert_left_cleanly(open_service, request_id)
    assert httpx.get(f"{open_service.url}/healthz", timeout=10).status_code == 200


def test_a_client_that_leaves_mid_stream_is_logged_once_and_its_upstream_call_ends(
    open_service: SemcacheProcess, upstream: StandinUpstream
) -> None:
    """The stream's chunk generator is closed while the upstream is slow: the upstream call is
    cancelled (with one upstream call at a time, the next request would wait for it otherwise) and
    nothing is stored."""
    prompt = "Tell me a long story about " + " ".join(f"word{n}" for n in range(60))
    upstream.set_fault(chunk_delay_s=0.5, match="long story about")
    request = json.dumps(chat_body(prompt, stream=True)).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(request)}\r\nX-Request-Id: leave-mid-stream\r\n\r\n"
    ).encode()
    with socket.create_connection(_host_port(open_service), timeout=10) as sock:
        sock.sendall(head + request)
        received = b""
        while b"data: " not in received:
            chunk = sock.recv(65536)
            assert chunk, received
            received += chunk
        assert received.startswith(b"HTTP/1.1 200")
        time.sleep(0.7)  # a chunk or two later
    started = time.monotonic()
    after = httpx.post(
        f"{open_service.url}/v1/chat/completions", json=chat_body("Is the upstream free again?"), timeout=30
    )
    assert after.status_code == 200 and time.monotonic() - started < CLOSED_WITHIN_S
    assert_left_cleanly(open_service, "leave-mid-stream")
    assert not any("aclose()" in line.get("exception", "") + line["message"] for line in log_lines(open_service))
    assert not entries_holding(open_service, "word59")


# -- finding 11: /stats and /metrics with a key file ----------------------------------------------


@pytest.mark.parametrize("path", ["/stats", "/metrics"])
def test_stats_and_metrics_need_the_admin_or_metrics_key_with_a_key_file(
    keyed_service: SemcacheProcess, open_service: SemcacheProcess, path: str
) -> None:
    url = f"{keyed_service.url}{path}"

    def get(authorization: str | None) -> httpx.Response:
        headers = {"Authorization": authorization} if authorization is not None else {}
        return httpx.get(url, headers=headers, timeout=30)

    assert_openai_error(get(None), 401, "metrics_key_required")
    assert_openai_error(get("Basic " + METRICS_KEY), 401, "metrics_key_required")
    for refused in (f"Bearer {KEY_A}", f"Bearer {METRICS_KEY}x", f"Bearer {ADMIN_KEY[:-1]}"):
        assert_openai_error(get(refused), 403, "invalid_metrics_key")
    for key in (ADMIN_KEY, METRICS_KEY):
        assert get(f"Bearer {key}").status_code == 200
        assert get(f"bearer  {key}").status_code == 200
    # Without a key file they stay open, as before: a scraper without a key (docker-compose has no key file) works.
    assert httpx.get(f"{open_service.url}{path}", timeout=30).status_code == 200


def test_the_metrics_key_opens_nothing_else(keyed_service: SemcacheProcess) -> None:
    metrics_key = {"Authorization": f"Bearer {METRICS_KEY}"}
    assert_openai_error(httpx.get(f"{keyed_service.url}/admin/decisions", headers=metrics_key, timeout=30), 403)
    chat = httpx.post(f"{keyed_service.url}/v1/chat/completions", json=chat_body("hi"), headers=metrics_key, timeout=30)
    assert_openai_error(chat, 401)


def test_semcache_stats_sends_the_metrics_or_admin_key(keyed_service: SemcacheProcess) -> None:
    url = ["--url", keyed_service.url, "--json"]
    no_keys = {"SEMCACHE_METRICS_KEY": None, "SEMCACHE_ADMIN_KEY": None}
    refused = runner.invoke(cli.app, ["stats", *url], env=no_keys)
    assert refused.exit_code == 2 and "401" in refused.output and "--key" in refused.output, refused.output
    for env in (
        {"SEMCACHE_METRICS_KEY": METRICS_KEY, "SEMCACHE_ADMIN_KEY": None},
        {"SEMCACHE_METRICS_KEY": None, "SEMCACHE_ADMIN_KEY": ADMIN_KEY},
    ):
        read = runner.invoke(cli.app, ["stats", *url], env=env)
        assert read.exit_code == 0 and "by_namespace" in json.loads(read.output), read.output
    flag = runner.invoke(cli.app, ["stats", *url, "--key", METRICS_KEY], env=no_keys)
    assert flag.exit_code == 0, flag.output
    wrong = runner.invoke(cli.app, ["stats", *url, "--key", "not-the-key"], env=no_keys)
    assert wrong.exit_code == 2 and "403" in wrong.output and "not-the-key" not in wrong.output
    assert (
        METRICS_KEY not in runner.invoke(cli.app, ["stats", "--help"], env={"SEMCACHE_METRICS_KEY": METRICS_KEY}).output
    )
