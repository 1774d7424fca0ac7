"""Hostile clients, issue 28: one tenant must not evict another. A real ``semcache serve`` (with the
embedded store and with Redis) in front of the stand-in upstream, with small bounds; a hostile
client floods it in several shapes while another client's entries, remembered responses and
requests must come through untouched:

- entries: the cache API's stores (no upstream cost), chat misses, stores spread over namespaces;
- remembered Responses hits: many small ones, a few heavy ones, hits spread over namespaces;
- the embeddings cache: a flood of ``/v1/embeddings`` inputs;
- per-namespace state: a client naming thousands of namespaces.

While a flood is served, ``/healthz`` and another client's exact hit answer within 100 ms.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from semcache.testing.standin_upstream import StandinUpstream
from testkit.probes import Probes
from testkit.redis_server import RedisServer
from testkit.servers import SemcacheProcess

from .conftest import ask

pytestmark = pytest.mark.slow

MAX_ENTRIES = 40
MAX_EMBEDDINGS = 40
REMEMBERED = 30
REMEMBERED_CHARS = 300_000
STATS_NAMESPACES = 50
METRICS_NAMESPACES = 10
VICTIM_QUESTIONS = [f"What is the boiling point of element number {n} at sea level?" for n in range(5)]


@pytest.fixture(scope="module")
def standin() -> Iterator[StandinUpstream]:
    with StandinUpstream() as upstream:
        yield upstream


@pytest.fixture(scope="module", params=["embedded", "redis"])
def service(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, standin: StandinUpstream
) -> Iterator[str]:
    """``semcache serve`` with small bounds, no key file (clients name any namespace), a fast sweeper."""
    folder = tmp_path_factory.mktemp(f"tenants-{request.param}")
    config = folder / "semcache.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "max_entries": MAX_ENTRIES,
                "max_embedding_entries": MAX_EMBEDDINGS,
                "sweep_interval_s": 0.2,
                "remembered_responses_max": REMEMBERED,
                "remembered_responses_max_chars": REMEMBERED_CHARS,
                "stats_max_namespaces": STATS_NAMESPACES,
                "metrics_max_namespaces": METRICS_NAMESPACES,
                "rate_limit_per_s": 100_000,
            }
        )
    )
    args = ["--config", str(config)]
    redis = None
    if request.param == "redis":
        redis = RedisServer(folder / "redis", appendonly=False).start()
        args += ["--store", "redis", "--redis-url", redis.url]
    try:
        with SemcacheProcess(
            *args, data_dir=folder / "data", upstream_url=standin.base_url, log_path=folder / "log"
        ) as process:
            yield process.url
    finally:
        if redis is not None:
            redis.stop()


@pytest.fixture
def victim(service: str) -> Iterator[openai.OpenAI]:
    """The other client, on a cache flushed of what earlier tests left."""
    flushed = httpx.post(f"{service}/admin/flush", json={"confirm": True}, timeout=30)
    assert flushed.status_code == 200, flushed.text
    client = openai.OpenAI(base_url=f"{service}/v1", api_key="sk-victim", max_retries=0)
    yield client
    client.close()


def in_namespace(namespace: str) -> dict[str, str]:
    return {"X-Semcache-Namespace": namespace}


def assert_fast(probes: Probes) -> None:
    """The probes taken during the flood were answered promptly, and every chat probe was a hit.

    Promptly: half within 100 ms and none past a second. The 100 ms promise for every probe is
    measured on a quiet machine by the benchmarks; a test machine whose cores are shared with other
    jobs stalls a process now and then for longer, flood or not, while a service that a flood held
    up fails the median."""
    health, asks = probes.result["health"], probes.result["asks"]
    assert len(health) >= 3, "the flood ended before the probes ran"
    assert set(probes.result["outcomes"]) == {"hit"}, probes.result["outcomes"]
    for name, times in (("/healthz", health), ("an exact hit", asks)):
        ordered = sorted(times)
        summary = f"{len(times)} probes, median {statistics.median(times):.3f} s, slowest {ordered[-3:]}"
        print(f"{name}: {summary}")  # shown by pytest -rP
        assert statistics.median(times) < 0.1, f"{name} was slow during the flood: {summary}"
        assert ordered[-1] < 1.0, f"{name} was held up during the flood: {summary}"


def flood(service: str, send: Callable[[httpx.Client, int], httpx.Response], count: int, workers: int = 2) -> None:
    """``count`` requests by ``workers`` threads at once, each client based at ``service``; each must succeed."""

    def worker(offset: int) -> None:
        with httpx.Client(base_url=service, timeout=60) as client:
            for n in range(offset, count, workers):
                response = send(client, n)
                assert response.status_code == 200, response.text

    with ThreadPoolExecutor(workers) as pool:
        for done in [pool.submit(worker, offset) for offset in range(workers)]:
            done.result()


def wait_for_sweeps(service: str) -> dict[str, Any]:
    """Until the sweeper brought the cache within its bound; /stats then."""
    deadline = time.monotonic() + 10
    while True:
        stats = httpx.get(f"{service}/stats", timeout=10).json()
        if (stats["entries"] is not None and stats["entries"] <= MAX_ENTRIES) or time.monotonic() > deadline:
            return stats
        time.sleep(0.2)


# -- entries --------------------------------------------------------------------------------------


def store_in(namespaces: list[str]) -> Callable[[httpx.Client, int], httpx.Response]:
    """The cache API's store: an entry for nothing, no upstream call."""

    def send(client: httpx.Client, n: int) -> httpx.Response:
        namespace = namespaces[n % len(namespaces)]
        body = {"prompt": f"Flood entry {n} of {namespace}: {n * 7919}", "answer": "spam", "namespace": namespace}
        return client.post("/v1/semcache/store", json=body)

    return send


def chat_misses(client: httpx.Client, n: int) -> httpx.Response:
    body = {"model": "test-model", "messages": [{"role": "user", "content": f"Flood question {n}: what is {n} cubed?"}]}
    return client.post("/v1/chat/completions", json=body, headers=in_namespace("flood"))


ENTRY_FLOODS: dict[str, tuple[Callable[[httpx.Client, int], httpx.Response], int]] = {
    "cache API stores": (store_in(["flood"]), 240),
    "chat misses": (chat_misses, 120),
    "stores over four namespaces": (store_in(["flood-a", "flood-b", "flood-c", "flood-d"]), 240),
}


@pytest.mark.parametrize("shape", list(ENTRY_FLOODS))
def test_a_flood_of_entries_evicts_nothing_of_a_namespace_within_its_share(
    service: str, victim: openai.OpenAI, shape: str, tmp_path: Path
) -> None:
    for question in VICTIM_QUESTIONS:
        assert ask(victim, question, extra_headers=in_namespace("victim"))[1]["x-semcache"] == "miss"
    send, count = ENTRY_FLOODS[shape]

    # The probe asks the victim's first question only: the other four are never touched again.
    with Probes(service, "victim", VICTIM_QUESTIONS[0], tmp_path) as probes:
        flood(service, send, count)
    assert_fast(probes)

    stats = wait_for_sweeps(service)
    assert stats["entries"] <= MAX_ENTRIES and stats["evicted"] > 0, stats
    for question in VICTIM_QUESTIONS:  # all five, though the flood's entries are all newer
        assert ask(victim, question, extra_headers=in_namespace("victim"))[1]["x-semcache"] == "hit", question


# -- remembered Responses hits ----------------------------------------------------------------------


def responses_hits(namespaces: list[str], chars: int) -> Callable[[httpx.Client, int], httpx.Response]:
    """The same question again and again: each hit is remembered under a fresh id. ``chars`` long."""

    def send(client: httpx.Client, n: int) -> httpx.Response:
        namespace = namespaces[n % len(namespaces)]
        question = f"Flood question of {namespace}: " + "why " * (chars // 4)
        return client.post(
            "/v1/responses", json={"model": "test-model", "input": question}, headers=in_namespace(namespace)
        )

    return send


RESPONSE_FLOODS: dict[str, tuple[Callable[[httpx.Client, int], httpx.Response], int]] = {
    "many small hits": (responses_hits(["flood"], 40), 300),
    "a few heavy hits": (responses_hits(["flood"], 20_000), 40),
    "hits over five namespaces": (responses_hits([f"flood-{n}" for n in range(5)], 40), 300),
}


@pytest.mark.parametrize("shape", list(RESPONSE_FLOODS))
def test_a_flood_of_responses_hits_forgets_nothing_another_namespace_may_go_on_from(
    service: str, victim: openai.OpenAI, shape: str, tmp_path: Path
) -> None:
    headers = in_namespace("victim")
    assert ask(victim, VICTIM_QUESTIONS[0], extra_headers=headers)[1]["x-semcache"] == "miss"  # the probe's
    issued = []
    for question in VICTIM_QUESTIONS[1:4]:
        victim.responses.create(model="test-model", input=question, extra_headers=headers)
        hit = victim.responses.with_raw_response.create(model="test-model", input=question, extra_headers=headers)
        assert hit.headers["x-semcache"] == "hit"
        issued.append(hit.parse().id)
    send, count = RESPONSE_FLOODS[shape]

    with Probes(service, "victim", VICTIM_QUESTIONS[0], tmp_path) as probes:
        flood(service, send, count)
    assert_fast(probes)

    for response_id in issued:  # each still known: the request goes on from it
        follow_up = victim.responses.create(
            model="test-model", input="And at the top of a mountain?", previous_response_id=response_id,
            extra_headers=headers,
        )  # fmt: skip
        assert follow_up.output_text == "Answer to: And at the top of a mountain?"
    with httpx.Client(base_url=service, timeout=60) as client:  # the flood's own oldest hits are forgotten
        oldest = send(client, 0).json()["id"]
        for _ in range(REMEMBERED):
            send(client, 0)
    with pytest.raises(openai.BadRequestError) as forgotten:
        victim.responses.create(model="test-model", input="And?", previous_response_id=oldest,
                                extra_headers=in_namespace(responses_namespace(shape)))  # fmt: skip
    assert forgotten.value.code == "previous_response_not_found"


def responses_namespace(shape: str) -> str:
    return "flood-0" if "namespaces" in shape else "flood"


# -- the embeddings cache ---------------------------------------------------------------------------

VICTIM_CHUNKS = [f"Victim document chunk {n}: the boiling point of water at sea level." for n in range(8)]


def embeddings_flood(client: httpx.Client, n: int) -> httpx.Response:
    """Eight inputs never seen before a request: each a miss, each stored."""
    body = {"model": "text-embedding-3-small", "input": [f"Flood chunk {n}.{k}: {n * 7919 + k}" for k in range(8)]}
    return client.post("/v1/embeddings", json=body, headers=in_namespace("flood"))


def test_a_flood_of_embeddings_evicts_nothing_of_a_namespace_within_its_share(
    service: str, victim: openai.OpenAI
) -> None:
    def embed_victim_chunks() -> dict[str, str]:
        raw = victim.embeddings.with_raw_response.create(
            model="text-embedding-3-small", input=VICTIM_CHUNKS, extra_headers=in_namespace("victim")
        )
        assert len(raw.parse().data) == len(VICTIM_CHUNKS)
        return dict(raw.headers)

    first = embed_victim_chunks()
    assert first["x-semcache"] == "miss" and first["x-semcache-cached-inputs"] == f"0/{len(VICTIM_CHUNKS)}"
    flood(service, embeddings_flood, 40)  # 320 vectors, all newer than the victim's 8

    deadline = time.monotonic() + 10
    while True:
        sizes = httpx.get(f"{service}/stats", timeout=10).json()["embeddings"]
        if (sizes["entries"] is not None and sizes["entries"] <= MAX_EMBEDDINGS) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert sizes["entries"] <= MAX_EMBEDDINGS and sizes["evicted"] > 0, sizes
    again = embed_victim_chunks()  # 8 of the bound's 40, within a share of 20: all still stored
    assert (
        again["x-semcache"] == "hit"
        and again["x-semcache-cached-inputs"] == f"{len(VICTIM_CHUNKS)}/{len(VICTIM_CHUNKS)}"
    )


# -- per-namespace state ------------------------------------------------------------------------------


def many_namespaces(client: httpx.Client, n: int) -> httpx.Response:
    """A request in a namespace of its own, as many as the client likes: counted, rate-limited,
    looked up, and (a miss) answered and stored."""
    body = {"prompt": f"Question {n}", "namespace": f"tenant-{n}"}
    return client.post("/v1/semcache/lookup", json=body)


def test_a_client_naming_thousands_of_namespaces_grows_no_per_namespace_state(
    service: str, victim: openai.OpenAI, tmp_path: Path
) -> None:
    assert ask(victim, VICTIM_QUESTIONS[0], extra_headers=in_namespace("victim"))[1]["x-semcache"] == "miss"
    with Probes(service, "victim", VICTIM_QUESTIONS[0], tmp_path) as probes:
        flood(service, many_namespaces, 3000)
    assert_fast(probes)

    stats = httpx.get(f"{service}/stats", timeout=10).json()
    assert len(stats["by_namespace"]) <= STATS_NAMESPACES + 1 and "(other)" in stats["by_namespace"]
    assert sum(c["requests"] for c in stats["by_namespace"].values()) == stats["requests"]
    metrics = httpx.get(f"{service}/metrics", timeout=10).text.splitlines()
    labelled = {line.split('namespace="')[1].split('"')[0] for line in metrics if 'namespace="' in line}
    assert len(labelled) <= METRICS_NAMESPACES + 1
    assert ask(victim, VICTIM_QUESTIONS[0], extra_headers=in_namespace("victim"))[1]["x-semcache"] == "hit"
