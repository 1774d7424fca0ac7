"""Start-up says what matters: a taken port at once, one line on what the server runs with, and
upstream errors that name the upstream they came from."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from semcache.cli import startup_summary, without_credentials
from semcache.errors import UpstreamStatusError, UpstreamUnavailable
from semcache.settings import Settings
from semcache.testing.standin_upstream import StandinUpstream
from semcache.testing.uvicorn_thread import free_port
from semcache.upstreams import RemoteUpstream
from testkit.servers import SemcacheProcess

PASSWORD = "url-password-1234"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("SEMCACHE_") and name != "SEMCACHE_EMBEDDING_CACHE_DIR":
            monkeypatch.delenv(name)


def test_a_taken_port_fails_the_start_at_once_in_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: still refused
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "semcache", "serve", "--port", str(port), "--data-dir", str(tmp_path / "data"),
             "--upstream", "http://127.0.0.1:9/v1"],
            capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "200"},
        )  # fmt: skip
        took = time.monotonic() - started
    assert done.returncode != 0
    assert took < 10  # before the app is built and the model loads
    assert done.stdout.strip().splitlines() == [f"error: cannot listen on 127.0.0.1:{port}: address already in use"]
    assert not (tmp_path / "data").exists()  # nothing was started


def test_the_startup_summary_says_how_admin_is_guarded() -> None:
    base = {"upstream_url": f"https://operator:{PASSWORD}@llm.example:8443/v1?key=abc", "data_dir": Path("data")}
    open_locally = startup_summary(Settings(**base), client_keys=False)
    assert open_locally.endswith("/admin loopback only (no admin key)")
    assert "upstream https://llm.example:8443/v1;" in open_locally
    assert PASSWORD not in open_locally and "key=abc" not in open_locally
    closed = startup_summary(Settings(**base), client_keys=True)
    assert closed.endswith("/admin closed (API keys without an admin key)")
    keyed = startup_summary(Settings(**base, admin_key="k" * 24), client_keys=True)
    assert keyed.endswith("/admin admin key set")
    local = startup_summary(Settings(**base, backend="local", model=Path("/models/qwen")), client_keys=False)
    assert "upstream local model /models/qwen;" in local
    redis = startup_summary(Settings(**base, store="redis", redis_url=f"redis://:{PASSWORD}@cache:6379/2"), False)
    assert "store redis redis://cache:6379/2;" in redis and PASSWORD not in redis
    assert without_credentials("http://[::1]:8000/v1") == "http://[::1]:8000/v1"


def test_upstream_errors_name_the_host_and_path_never_the_password() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            raise httpx.ConnectError("refused", request=request)
        if b"Slowly" in request.content:
            raise httpx.ReadTimeout("slow", request=request)
        return httpx.Response(404, json={"detail": "Not Found"})

    async def main() -> None:
        remote = RemoteUpstream(
            f"http://operator:{PASSWORD}@llm.internal:8000/api", transport=httpx.MockTransport(answer)
        )
        body = {"model": "m", "messages": [{"role": "user", "content": "Hi"}]}
        try:
            with pytest.raises(UpstreamStatusError) as refused:
                await remote.complete(body, {})
            assert refused.value.status_code == 404 and refused.value.code == "upstream_error"
            refusal = "the upstream at http://llm.internal:8000/api/chat/completions answered HTTP 404"
            assert refused.value.message == refusal
            with pytest.raises(UpstreamUnavailable) as unreachable:
                await remote.list_models({})
            expected = "cannot reach the upstream at http://llm.internal:8000/api/models: ConnectError"
            assert unreachable.value.message == expected
            with pytest.raises(UpstreamUnavailable) as slow:
                await remote.complete({**body, "messages": [{"role": "user", "content": "Slowly"}]}, {})
            assert slow.value.status_code == 504
            assert slow.value.message == "the upstream at http://llm.internal:8000/api/chat/completions timed out"
            for error in (refused.value, unreachable.value, slow.value):
                assert PASSWORD not in json.dumps(error.to_openai())
        finally:
            await remote.close()

    asyncio.run(main())


@pytest.mark.slow
def test_the_server_logs_what_it_runs_with_and_names_an_upstream_without_v1(
    tmp_path: Path, upstream: StandinUpstream
) -> None:
    log_path = tmp_path / "semcache.log"
    without_v1 = upstream.root_url.replace("http://", f"http://operator:{PASSWORD}@")
    with SemcacheProcess(data_dir=tmp_path / "data", upstream_url=without_v1, log_path=log_path) as service:
        answer = httpx.post(
            f"{service.url}/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "Where is the upstream?"}]},
            timeout=30,
        )
    assert answer.status_code == 404
    message = answer.json()["error"]["message"]
    assert message == f"the upstream at http://127.0.0.1:{upstream.port}/chat/completions answered HTTP 404"

    text = log_path.read_text()
    assert PASSWORD not in text
    lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    summaries = [line["message"] for line in lines if line["message"].startswith("semcache on ")]
    assert summaries == [
        f"semcache on 127.0.0.1:{service.port}: upstream {upstream.root_url}; "
        f"store embedded SQLite {tmp_path / 'data' / 'entries.sqlite3'}; data folder {tmp_path / 'data'}; "
        f"embedder all-MiniLM-L6-v2 ({Settings().embedding_backend}); /admin loopback only (no admin key)"
    ]


@pytest.mark.slow
def test_a_dead_upstream_is_named_in_the_log_at_start_up_without_its_secrets(tmp_path: Path) -> None:
    port = free_port()
    log_path = tmp_path / "semcache.log"
    secret_url = f"http://operator:{PASSWORD}@127.0.0.1:{port}/v1?api-key={PASSWORD}"
    with SemcacheProcess(data_dir=tmp_path / "data", upstream_url=secret_url, log_path=log_path):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and "unreachable" not in log_path.read_text():
            time.sleep(0.1)
        text = log_path.read_text()
    assert PASSWORD not in text
    warnings = [json.loads(line)["message"] for line in text.splitlines() if "unreachable" in line]
    assert warnings and warnings[0].startswith(f"the upstream at http://127.0.0.1:{port} is unreachable (ConnectError)")


@pytest.mark.slow
def test_an_upstream_that_never_answers_does_not_delay_the_start(tmp_path: Path) -> None:
    """The check runs beside the start: /healthz is ready long before the check gives up."""
    with socket.socket() as silent:  # accepts connections (the kernel does) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        log_path = tmp_path / "semcache.log"
        env = {"SEMCACHE_UPSTREAM_CONNECT_TIMEOUT_S": "600"}
        with SemcacheProcess(data_dir=tmp_path / "data", upstream_url=url, env=env, log_path=log_path) as service:
            assert httpx.get(f"{service.url}/healthz", timeout=5).status_code == 200
            assert "unreachable" not in log_path.read_text()  # still waiting for an answer
