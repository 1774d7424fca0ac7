"""Several replicas sharing one cache through a real redis-server: what one stores, the others
serve; expiry, restarts, kill -9 and Redis outages lose no acknowledged entry."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from semcache.embedders.sentence_transformer import SentenceTransformerEmbedder
from semcache.server import create_app
from semcache.settings import Settings
from semcache.testing.standin_upstream import StandinUpstream
from semcache.testing.uvicorn_thread import ThreadedUvicorn
from testkit.redis_server import RedisServer
from testkit.servers import SemcacheProcess, wait_healthy

from .conftest import ask, chat, write_misses

pytestmark = pytest.mark.slow

QUESTION = "How do I bake sourdough bread at home?"
PARAPHRASE = "How do you bake sourdough bread at home?"


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis").start()
    yield server
    server.stop()


class Replicas:
    """In-process replicas with the real model, each with its own data folder."""

    def __init__(self, tmp_path: Path, redis_url: str, upstream: StandinUpstream, model: SentenceTransformerEmbedder):
        self.tmp_path, self.redis_url, self.upstream, self.model = tmp_path, redis_url, upstream, model
        self.running: list[ThreadedUvicorn] = []

    def start(self, name: str, **overrides: Any) -> ThreadedUvicorn:
        settings = Settings(
            data_dir=self.tmp_path / name,
            upstream_url=self.upstream.base_url,
            store="redis",
            redis_url=self.redis_url,
            redis_timeout_s=0.5,
            sweep_interval_s=0.2,
            **overrides,
        )
        server = ThreadedUvicorn(create_app(settings, embedder=self.model)).start()
        self.running.append(server)
        wait_healthy(server.url)
        return server

    def stop(self, server: ThreadedUvicorn) -> None:
        server.stop()
        self.running.remove(server)


@pytest.fixture
def replicas(
    tmp_path: Path, redis_server: RedisServer, upstream: StandinUpstream, minilm: SentenceTransformerEmbedder
) -> Iterator[Replicas]:
    group = Replicas(tmp_path, redis_server.url, upstream, minilm)
    yield group
    for server in list(group.running):
        group.stop(server)


def stats(url: str) -> dict[str, Any]:
    return dict(httpx.get(f"{url}/stats", timeout=10).json())


def wait_for(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_stored_through_one_replica_hit_through_another(
    replicas: Replicas, make_client: Callable[..., openai.OpenAI]
) -> None:
    prices = {"default": {"input_per_1m": 0.5, "output_per_1m": 1.5}}
    a, b = replicas.start("a", prices=prices), replicas.start("b", prices=prices)
    client_a, client_b = make_client(a.url), make_client(b.url)
    assert ask(client_a, QUESTION)[1]["x-semcache"] == "miss"

    stored_at = time.monotonic()
    wait_for(lambda: stats(b.url)["index"]["entries"] == 1)
    followed_in = time.monotonic() - stored_at
    answer, headers = ask(client_b, PARAPHRASE)
    assert headers["x-semcache-tier"] == "semantic" and answer == f"Answer to: {QUESTION}"
    assert followed_in < 5.0  # typically milliseconds: benchmarks/replication.py measures it
    streamed = client_b.chat.completions.create(
        model="test-model", messages=[{"role": "user", "content": QUESTION}], stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == f"Answer to: {QUESTION}"

    # /stats on either replica reports both together (each shares its counts every half second).
    for url in (a.url, b.url):
        wait_for(lambda u=url: stats(u)["requests"] == 3)  # type: ignore[misc]
        figures = stats(url)
        assert (figures["scope"], figures["hits"], figures["misses"]) == ("cluster", 2, 1)
        assert figures["tiers"]["semantic"] == 1 and figures["tiers"]["exact"] == 1
        assert figures["savings"]["total_tokens"] > 0 and figures["savings"]["cost_usd"] > 0
    # Tokens and money saved are the cluster's (b served both hits); latencies are each replica's own.
    assert stats(a.url)["savings"] == stats(b.url)["savings"]
    wait_for(lambda: stats(b.url)["latency"]["paths"]["exact_hit"]["lifetime"]["count"] == 1)
    assert stats(a.url)["latency"]["paths"]["miss"]["lifetime"]["count"] == 1
    assert stats(a.url)["latency"]["paths"]["semantic_hit"]["lifetime"]["count"] == 0
    assert stats(b.url)["latency"]["paths"]["semantic_hit"]["lifetime"]["count"] == 1
    assert replicas.upstream.chat_calls() == 1


def test_expiry_reaches_every_replica(replicas: Replicas, make_client: Callable[..., openai.OpenAI]) -> None:
    a, b = replicas.start("a"), replicas.start("b")
    ask(make_client(a.url), QUESTION, extra_headers={"X-Semcache-TTL": "1"})
    wait_for(lambda: stats(b.url)["index"]["entries"] == 1)
    assert ask(make_client(b.url), PARAPHRASE)[1]["x-semcache"] == "hit"
    # Redis expires the entry itself; each replica's sweep then drops it from its index.
    wait_for(lambda: stats(a.url)["index"]["entries"] == 0 and stats(b.url)["index"]["entries"] == 0)
    assert stats(a.url)["entries"] == 0
    assert ask(make_client(b.url), PARAPHRASE)[1]["x-semcache"] == "miss"


def test_a_late_replica_catches_up_and_a_restart_replays_only_the_feed(
    replicas: Replicas, make_client: Callable[..., openai.OpenAI]
) -> None:
    a = replicas.start("a")
    first = [f"What is the capital city of country number {n}?" for n in range(3)]
    for prompt in first:
        ask(make_client(a.url), prompt)

    b = replicas.start("b")  # no snapshot: indexes the stored vectors, embeds nothing
    sync = stats(b.url)["replica"]["last_sync"]
    assert (sync["snapshot_loaded"], sync["reconciled"], sync["added"]) == (False, True, 3)
    for prompt in first:
        assert ask(make_client(b.url), prompt)[1]["x-semcache-tier"] == "exact"
    replicas.stop(b)  # saves its snapshot with its feed offset

    later = [f"Who wrote the novel with catalogue number {n}?" for n in range(2)]
    for prompt in later:
        ask(make_client(a.url), prompt)
    b = replicas.start("b")
    sync = stats(b.url)["replica"]["last_sync"]
    assert (sync["snapshot_loaded"], sync["reconciled"], sync["replayed"]) == (True, False, 2)
    figures = stats(b.url)
    assert figures["index"]["entries"] == 5 and figures["embedding"]["prompts"] == 0  # nothing re-embedded
    headers = ask(make_client(b.url), "Who wrote the novel with the catalogue number 1?")[1]
    assert headers["x-semcache-tier"] == "semantic"


def test_templates_settings_and_feedback_are_shared(
    replicas: Replicas, make_client: Callable[..., openai.OpenAI], tmp_path: Path
) -> None:
    templates = tmp_path / "templates.yaml"
    templates.write_text('templates:\n  - questions: ["What are your opening hours?"]\n    answer: "9 to 5."\n')
    a = replicas.start("a", templates=templates)
    b = replicas.start("b")  # no template file: takes the shared templates
    answer, headers = ask(make_client(b.url), "What are your opening hours?")
    assert (answer, headers["x-semcache-tier"]) == ("9 to 5.", "template")

    httpx.put(f"{a.url}/admin/namespaces/strict/config", json={"threshold": 0.99}).raise_for_status()
    wait_for(lambda: httpx.get(f"{b.url}/admin/namespaces/strict/config").json()["config"]["threshold"] == 0.99)

    ask(make_client(a.url), QUESTION)
    wait_for(lambda: stats(b.url)["index"]["entries"] == 1)
    raw = make_client(b.url).chat.completions.with_raw_response.create(
        model="test-model", messages=[{"role": "user", "content": PARAPHRASE}]
    )
    assert raw.headers["x-semcache-tier"] == "semantic"
    verdict = httpx.post(f"{b.url}/v1/semcache/feedback", json={"id": raw.parse().id, "correct": False})
    assert verdict.status_code == 200
    # Reported wrong on B: A never serves that entry for that question either.
    wait_for(lambda: stats(a.url)["replica"]["events_applied"] >= 4)
    assert ask(make_client(a.url), PARAPHRASE)[1]["x-semcache"] == "miss"


def test_redis_down_means_a_plain_proxy_then_it_catches_up(
    replicas: Replicas, redis_server: RedisServer, make_client: Callable[..., openai.OpenAI]
) -> None:
    a, b = replicas.start("a"), replicas.start("b")
    ask(make_client(a.url), QUESTION)
    redis_server.stop()

    client = make_client(a.url)
    for n in range(3):
        started = time.monotonic()
        answer, headers = ask(client, f"A question asked while Redis is down, number {n}")
        assert headers["x-semcache"] == "bypass" and answer.startswith("Answer to:")
        assert time.monotonic() - started < 5
    figures = stats(a.url)
    assert figures["scope"] == "replica" and figures["replica"]["connected"] is False and figures["entries"] is None

    redis_server.start()  # same port and folder: its AOF comes back
    wait_for(lambda: stats(a.url)["replica"]["connected"] and stats(b.url)["replica"]["connected"], 20)
    headers = ask(client, PARAPHRASE)[1]
    assert headers.get("x-semcache-tier") == "semantic", headers  # the AOF kept the entry
    ask(client, "What is the boiling point of water at sea level?")
    wait_for(lambda: stats(b.url)["index"]["entries"] == 2)
    figures = stats(b.url)
    assert figures["bypass"] == 3  # counted during the outage, shared once Redis was back


def test_kill_9_of_a_replica_while_writing_and_of_redis_loses_nothing_acknowledged(
    tmp_path: Path, redis_server: RedisServer, upstream: StandinUpstream
) -> None:
    def replica(name: str) -> SemcacheProcess:
        return SemcacheProcess(
            "--store", "redis", "--redis-url", redis_server.url,
            data_dir=tmp_path / name, upstream_url=upstream.base_url, log_path=tmp_path / f"{name}.log",
        )  # fmt: skip

    upstream.state.base_latency_s = 0.02
    a, b = replica("a").start(), replica("b").start()
    acknowledged: list[str] = []
    stop = threading.Event()

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        for worker in range(6):
            pool.submit(write_misses, a.url, worker, acknowledged, stop)
        wait_for(lambda: len(acknowledged) >= 40, 60)
        a.kill()
        stop.set()
    upstream.state.base_latency_s = 0.0
    calls_before = upstream.chat_calls()

    for prompt in acknowledged:  # the other replica has every acknowledged entry
        assert chat(b.url, prompt).headers.get("x-semcache-tier") == "exact", prompt

    redis_server.kill()  # and Redis itself dies: appendfsync always keeps them all
    redis_server.start()  # same port and folder: its AOF comes back
    a = replica("a").start()
    try:
        wait_for(lambda: stats(b.url)["replica"]["connected"], 20)
        for url in (a.url, b.url):
            for prompt in acknowledged:
                assert chat(url, prompt).headers.get("x-semcache-tier") == "exact", prompt
        figures = stats(a.url)
        assert figures["index"]["entries"] == figures["entries"] >= len(acknowledged)
    finally:
        a.stop()
        b.stop()
    assert upstream.chat_calls() == calls_before


def test_every_replica_learns_from_the_evidence_of_all(
    replicas: Replicas, upstream: StandinUpstream, make_client: Callable[..., openai.OpenAI]
) -> None:
    first, second = replicas.start("a"), replicas.start("b")
    question, near = "How do I learn Python quickly?", "What is the fastest way to pick up Python programming?"
    upstream.state.answers.update({question: "Practise daily.", near: "Practise daily."})
    client = make_client(first.url)
    ask(client, question)
    ask(client, near)  # a near miss, labelled on the first replica

    def labels(url: str) -> int:
        scripts = httpx.get(f"{url}/admin/namespaces/default/quality", timeout=10).json()["scripts"]
        return int(scripts[0]["labels"]["near_miss"])

    wait_for(lambda: labels(second.url) == 1)  # through Redis, at the second replica's next sweep
    assert labels(first.url) == 1
