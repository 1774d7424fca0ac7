"""Restarts keep the cache, and kill -9 loses no acknowledged entry (real processes)."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from pathlib import Path

import httpx
import pytest

from semcache.testing.servers import SemcacheProcess
from semcache.testing.standin_upstream import StandinUpstream

pytestmark = pytest.mark.slow


def _chat(url: str, prompt: str) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/chat/completions", timeout=30, json={"model": "m", "messages": [{"role": "user", "content": prompt}]}
    )


def test_restart_keeps_entries_without_re_embedding(tmp_path: Path, upstream: StandinUpstream) -> None:
    data = tmp_path / "data"
    log = tmp_path / "semcache.log"
    with SemcacheProcess(data_dir=data, upstream_url=upstream.base_url, log_path=log) as service:
        assert _chat(service.url, "How do I bake sourdough bread?").headers["x-semcache"] == "miss"
        assert _chat(service.url, "What is the speed of light?").headers["x-semcache"] == "miss"
    assert (data / "faiss" / "snapshot.npz").exists()  # written at shutdown

    with SemcacheProcess(data_dir=data, upstream_url=upstream.base_url, log_path=log) as service:
        stats = httpx.get(f"{service.url}/stats").json()
        assert stats["entries"] == 2 and stats["index"]["entries"] == 2
        exact = _chat(service.url, "How do I bake sourdough bread?")
        semantic = _chat(service.url, "How do you bake sourdough bread?")
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

    def writer(worker: int) -> None:
        for n in range(10_000):
            if stop.is_set():
                return
            prompt = f"Question {worker}-{n}: what is {worker * 1000 + n} squared?"
            try:
                response = _chat(service.url, prompt)
            except httpx.HTTPError:
                return  # the process died mid-request: not acknowledged
            if response.status_code == 200 and response.headers["x-semcache"] == "miss":
                acknowledged.append(prompt)  # answered from upstream, so stored before the reply

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for worker in range(8):
            pool.submit(writer, worker)
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
            response = _chat(restarted.url, prompt)
            assert response.headers.get("x-semcache-tier") == "exact", prompt
            assert response.json()["choices"][0]["message"]["content"] == f"Answer to: {prompt}"
        stats = httpx.get(f"{restarted.url}/stats").json()
        assert stats["index"]["entries"] == stats["entries"]  # store and index agree after the crash
    assert upstream.chat_calls() == calls_before


def test_a_damaged_snapshot_is_rebuilt_from_the_store(tmp_path: Path, upstream: StandinUpstream) -> None:
    data = tmp_path / "data"
    with SemcacheProcess(data_dir=data, upstream_url=upstream.base_url) as service:
        _chat(service.url, "How do I bake sourdough bread?")
    (data / "faiss" / "snapshot.npz").write_bytes(b"not a snapshot")
    with SemcacheProcess(data_dir=data, upstream_url=upstream.base_url) as service:
        assert httpx.get(f"{service.url}/stats").json()["index"]["entries"] == 1
        assert _chat(service.url, "How do you bake sourdough bread?").headers["x-semcache-tier"] == "semantic"
