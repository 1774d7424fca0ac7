"""One ``semcache serve`` per embedded data folder: a second one on the same folder is refused in
words, a lock left by a killed server never blocks a restart, and replicas on Redis may share one."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from semcache.testing.standin_upstream import StandinUpstream
from semcache.testing.uvicorn_thread import free_port
from testkit.redis_server import RedisServer
from testkit.servers import SemcacheProcess, kill_process

pytestmark = pytest.mark.slow

QUESTION = "How do I rotate the logs of my web server?"


@pytest.fixture
def running() -> Iterator[list[SemcacheProcess]]:
    """The servers a test starts, stopped after it."""
    servers: list[SemcacheProcess] = []
    yield servers
    for server in servers:
        server.stop()


def second_serve(data: Path, upstream: StandinUpstream, log: Path, *args: str) -> tuple[int | None, str]:
    """``semcache serve`` on ``data``, as a user would start it: its exit code, or None when it
    became healthy instead (then it is stopped), and what it printed."""
    port = free_port()
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "semcache", "serve", "--port", str(port), "--data-dir", str(data),
             "--upstream", upstream.base_url, *args],
            stdout=output, stderr=subprocess.STDOUT, env={**os.environ, "COLUMNS": "300"},
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while process.poll() is None and time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    return None, log.read_text()  # it serves the folder beside the first
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        return process.poll(), log.read_text()
    finally:
        kill_process(process)


def test_a_second_server_on_the_same_data_folder_exits_naming_the_folder_and_the_holder(
    tmp_path: Path, upstream: StandinUpstream, running: list[SemcacheProcess]
) -> None:
    data = tmp_path / "data"
    first = SemcacheProcess(data_dir=data, upstream_url=upstream.base_url, log_path=tmp_path / "first.log").start()
    running.append(first)
    assert first.process is not None

    started = time.monotonic()
    code, output = second_serve(data, upstream, tmp_path / "second.log")
    assert code is not None, f"a second server started on {data}:\n{output}"
    assert code != 0 and time.monotonic() - started < 60
    assert str(data) in output and f"pid {first.process.pid}" in output, output
    assert "Traceback" not in output
    assert httpx.get(f"{first.url}/healthz", timeout=5).status_code == 200  # the first one serves on


def test_a_server_killed_with_kill_9_never_blocks_a_restart_on_its_folder(
    tmp_path: Path, upstream: StandinUpstream, running: list[SemcacheProcess]
) -> None:
    data = tmp_path / "data"
    first = SemcacheProcess(data_dir=data, upstream_url=upstream.base_url, log_path=tmp_path / "first.log").start()
    stored = httpx.post(f"{first.url}/v1/semcache/store", json={"prompt": QUESTION, "answer": "logrotate"}, timeout=30)
    assert stored.status_code == 200, stored.text
    first.kill()

    again = SemcacheProcess(data_dir=data, upstream_url=upstream.base_url, log_path=tmp_path / "again.log")
    running.append(again.start())
    found = httpx.post(f"{again.url}/v1/semcache/lookup", json={"prompt": QUESTION}, timeout=30).json()
    assert found["hit"] and found["answer"] == "logrotate"


def test_replicas_on_redis_may_share_one_data_folder(
    tmp_path: Path, upstream: StandinUpstream, running: list[SemcacheProcess]
) -> None:
    data = tmp_path / "shared"
    with RedisServer(tmp_path / "redis") as redis_server:
        for name in ("a", "b"):
            replica = SemcacheProcess(
                "--store", "redis", "--redis-url", redis_server.url,
                data_dir=data, upstream_url=upstream.base_url, log_path=tmp_path / f"{name}.log",
            )  # fmt: skip
            running.append(replica.start())
        a, b = running
        stored = httpx.post(f"{a.url}/v1/semcache/store", json={"prompt": QUESTION, "answer": "logrotate"}, timeout=30)
        assert stored.status_code == 200, stored.text
        deadline = time.monotonic() + 10
        while not httpx.post(f"{b.url}/v1/semcache/lookup", json={"prompt": QUESTION}, timeout=30).json()["hit"]:
            assert time.monotonic() < deadline, "replica b never saw what replica a stored"
            time.sleep(0.1)
        for replica in list(running):
            replica.stop()
            running.remove(replica)
