"""Restarts keep the cache, and kill -9 loses no acknowledged entry (real processes)."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from pathlib import Path

import httpx
import pytest

from semcache.testing.standin_upstream import StandinUpstream
from testkit.servers import SemcacheProcess

from .conftest import chat, write_misses

pytestmark = pytest.mark.slow


def test_restart_keeps_entries_without_re_embedding(tmp_path: Path, upstream: StandinUpstream) -> None:
    data = tmp_path / "data"
    log = tmp_path / "semcache.log"
    with SemcacheProcess(data_dir=data, upstream_url=upstream.base_url, log_path=log) as service:
        assert chat(service.url, "How do I bake sourdough bread?").headers["x-semcache"] == "miss"
        assert chat(service.url, "What is the speed of light?").headers["x-semcache"] == "miss"
    assert (data / "faiss" / "snapshot.npz").exists()  # written at shutdown

    with SemcacheProcess(data_dir=data, upstream_url=upstream.base_url, log_path=log) as service:
        stats = httpx.get(f"{service.url}/stats").json()
        assert stats["entries"] == 2 and stats["index"]["entries"] == 2
        exact = chat(service.url, "How do I bake sourdough bread?")
        semantic = chat(service.url, "How do you bake sourdough bread?")
        assert exact.headers["x-semcache-tier"] == "exact"
        assert semantic.headers["x-semcache-tier"] == "semantic"
        assert semantic.json()["choices"][0]["message"]["content"] == "Answer to: How do I bake sourdough bread?"
        # Only the two misses and the semantic lookup were embedded: the restart re-embedded nothing.
        assert httpx.get(f"{service.url}/stats").json()["embedding"]["prompts"] == 1
    assert upstream.chat_calls() == 2


def test_kill_9_during_writes_loses_no_acknowledged_entry(tmp_path: Path, upstream: StandinUpstream) -> None:
    data = tmp_path / "data"
    upstream.state.base_latency_s = 0.02
    service = SemcacheProcess(data_dir=data, upstream_url=upstream.base_url, log_path=tmp_path / "log").start()
    acknowledged: list[str] = []
    stop = threading.Event()

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for worker in range(8):
            pool.submit(write_misses, service.url, worker, acknowledged, stop)
        deadline = time.monotonic() + 30
        while len(acknowledged) < 60 and time.monotonic() < deadline:
            time.sleep(0.05)
        service.kill()
        stop.set()
    upstream.state.base_latency_s = 0.0
    assert len(acknowledged) >= 60

    calls_before = upstream.chat_calls()
    with SemcacheProcess(data_dir=data, upstream_url=upstream.base_url, log_path=tmp_path / "log") as restarted:
        for prompt in acknowledged:
            response = chat(restarted.url, prompt)
            assert response.headers.get("x-semcache-tier") == "exact", prompt
            assert response.json()["choices"][0]["message"]["content"] == f"Answer to: {prompt}"
        stats = httpx.get(f"{restarted.url}/stats").json()
        assert stats["index"]["entries"] == stats["entries"]  # store and index agree after the crash
    assert upstream.chat_calls() == calls_before


def test_a_damaged_snapshot_is_rebuilt_from_the_store(tmp_path: Path, upstream: StandinUpstream) -> None:
    data = tmp_path / "data"
    with SemcacheProcess(data_dir=data, upstream_url=upstream.base_url) as service:
        chat(service.url, "How do I bake sourdough bread?")
    (data / "faiss" / "snapshot.npz").write_bytes(b"not a snapshot")
    with SemcacheProcess(data_dir=data, upstream_url=upstream.base_url) as service:
        assert httpx.get(f"{service.url}/stats").json()["index"]["entries"] == 1
        assert chat(service.url, "How do you bake sourdough bread?").headers["x-semcache-tier"] == "semantic"
