"""semcache.metrics and GET /metrics: real traffic through the openai SDK, then the series it left.

One service takes a fixed mix of requests (hits of every tier, misses, a bypass, a retried upstream
failure, an upstream error, a second namespace, an unpriced model); the tests read what it reports.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from semcache.fairness import OTHER_NAMESPACES
from semcache.index import IndexStats
from semcache.metrics import Metrics, Readings
from semcache.server import create_app
from semcache.settings import Settings
from semcache.testing.standin_upstream import StandinUpstream
from semcache.testing.uvicorn_thread import ThreadedUvicorn
from testkit.servers import wait_healthy

DASHBOARD = Path(__file__).resolve().parents[1] / "deploy" / "grafana" / "semcache-dashboard.json"
QUESTION = "How do I learn Python quickly?"
PARAPHRASE = "How can I learn Python fast?"
TEMPLATES = """\
templates:
  - questions: ["What are your opening hours?"]
    answer: "We are open from 9:00 to 17:00, Monday to Friday."
"""
# Dollars per million tokens, for the test model only: "unpriced-model" has no price and no default.
PRICES = {"test-model": {"input_per_1m": 1.0, "output_per_1m": 2.0}}

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@dataclass
class Traffic:
    url: str
    hit_usage: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # model: usage of each hit

    def metrics_text(self) -> str:
        response = httpx.get(f"{self.url}/metrics")
        response.raise_for_status()
        assert response.headers["content-type"].startswith("text/plain")
        return response.text

    def samples(self) -> Samples:
        return parse(self.metrics_text())

    def stats(self) -> dict[str, Any]:
        return httpx.get(f"{self.url}/stats").json()


def parse(text: str) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def completion(client: openai.OpenAI, prompt: str, **kwargs: Any) -> tuple[Any, dict[str, str]]:
    raw = client.chat.completions.with_raw_response.create(
        model=kwargs.pop("model", "test-model"), messages=[{"role": "user", "content": prompt}], **kwargs
    )
    return raw.parse(), dict(raw.headers)


def streamed(client: openai.OpenAI, prompt: str) -> tuple[str, Any]:
    """A streamed completion with its usage chunk: (X-Semcache, usage)."""
    with client.chat.completions.with_streaming_response.create(
        model="test-model", messages=[{"role": "user", "content": prompt}], stream=True,
        stream_options={"include_usage": True},
    ) as response:  # fmt: skip
        outcome = response.headers["x-semcache"]
        usage = [chunk.usage for chunk in response.parse() if chunk.usage is not None]
    return outcome, usage[-1] if usage else None


@pytest.fixture(scope="module")
def traffic(
    tmp_path_factory: pytest.TempPathFactory, _standin_server: StandinUpstream, minilm: Any
) -> Iterator[Traffic]:
    upstream = _standin_server
    upstream.reset()
    upstream.state.answers.clear()
    folder = tmp_path_factory.mktemp("metrics")
    (folder / "templates.yaml").write_text(TEMPLATES)
    settings = Settings(
        data_dir=folder / "data", upstream_url=upstream.base_url, templates=folder / "templates.yaml",
        prices=PRICES, upstream_retry_base_delay_s=0.01, sweep_interval_s=0.2,
    )  # fmt: skip
    with ThreadedUvicorn(create_app(settings, embedder=minilm)) as server:
        wait_healthy(server.url)
        run = Traffic(server.url)
        with openai.OpenAI(base_url=f"{server.url}/v1", api_key="sk-test", max_retries=0) as client:
            drive(client, upstream, run)
        wait_until(lambda: run.stats()["latency"]["paths"]["miss"]["lifetime"]["count"] == 5)
        yield run
    upstream.reset()


def drive(client: openai.OpenAI, upstream: StandinUpstream, run: Traffic) -> None:
    """The mix: 13 requests, 11 in the default namespace and 2 in tenant-b."""

    def expect(outcome: str, tier: str | None, prompt: str, **kwargs: Any) -> Any:
        reply, headers = completion(client, prompt, **kwargs)
        assert (headers["x-semcache"], headers.get("x-semcache-tier")) == (outcome, tier)
        if outcome == "hit":
            usage = (reply.usage.prompt_tokens, reply.usage.completion_tokens)
            run.hit_usage.setdefault(kwargs.get("model", "test-model"), []).append(usage)
        return reply

    expect("miss", None, QUESTION)
    exact = expect("hit", "exact", QUESTION)
    verdict = httpx.post(f"{run.url}/v1/semcache/feedback", json={"id": exact.id, "correct": True})
    assert verdict.status_code == 200
    expect("hit", "semantic", PARAPHRASE)
    expect("hit", "template", "What are your opening hours?")
    assert streamed(client, "What is the capital of France?")[0] == "miss"
    outcome, usage = streamed(client, "What is the capital of France?")
    assert outcome == "hit" and usage is not None
    run.hit_usage["test-model"].append((usage.prompt_tokens, usage.completion_tokens))
    expect("bypass", None, QUESTION, n=2)
    upstream.set_fault(status=500, times=1)  # retried once, then answered: a miss
    expect("miss", None, "Which rivers flow through Vienna?")
    upstream.set_fault(status=400, times=1)  # not retried: the client sees the upstream's error
    with pytest.raises(openai.BadRequestError):
        completion(client, "How tall is the Eiffel Tower?")
    tenant = {"extra_headers": {"X-Semcache-Namespace": "tenant-b"}}
    expect("miss", None, QUESTION, **tenant)
    expect("hit", "exact", QUESTION, **tenant)
    expect("miss", None, QUESTION, model="unpriced-model")
    expect("hit", "exact", QUESTION, model="unpriced-model")


def wait_until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """A request's latency is filed when its response has gone out, a moment after the client has it."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the service never reported the traffic"
        time.sleep(0.02)


# -- /metrics after traffic ---------------------------------------------------------------------


@pytest.mark.slow
def test_requests_are_counted_by_outcome_tier_and_namespace(traffic: Traffic) -> None:
    samples = traffic.samples()
    counted = {
        (dict(labels)["outcome"], dict(labels)["tier"], dict(labels)["namespace"]): count
        for (name, labels), count in samples.items()
        if name == "semcache_requests_total"
    }
    assert counted == {
        ("miss", "none", "default"): 4,
        ("hit", "exact", "default"): 3,
        ("hit", "semantic", "default"): 1,
        ("hit", "template", "default"): 1,
        ("bypass", "none", "default"): 1,
        ("error", "none", "default"): 1,
        ("miss", "none", "tenant-b"): 1,
        ("hit", "exact", "tenant-b"): 1,
    }


@pytest.mark.slow
def test_latency_histograms_have_the_requests_and_their_steps(traffic: Traffic) -> None:
    samples = traffic.samples()
    per_path = {
        path: value(samples, "semcache_request_duration_seconds_count", path=path)
        for path in ("exact_hit", "template_hit", "semantic_hit", "miss", "bypass", "error")
    }
    assert per_path == {"exact_hit": 4, "template_hit": 1, "semantic_hit": 1, "miss": 5, "bypass": 1, "error": 1}
    assert value(samples, "semcache_request_duration_seconds_sum", path="miss") > 0
    # +Inf holds every observation
    assert value(samples, "semcache_request_duration_seconds_bucket", path="exact_hit", le="+Inf") == 4
    # Five answers were stored; the upstream answered six times in full (one of them after a retry),
    # once as a stream.
    assert value(samples, "semcache_store_duration_seconds_count", operation="write") == 5
    assert value(samples, "semcache_upstream_duration_seconds_count") == 6
    assert value(samples, "semcache_upstream_first_byte_seconds_count") == 1
    for name, labels in [
        ("semcache_embedding_duration_seconds_count", {}),
        ("semcache_index_search_duration_seconds_count", {}),
        ("semcache_guards_duration_seconds_count", {}),
        ("semcache_store_duration_seconds_count", {"operation": "lookup"}),
        ("semcache_store_duration_seconds_count", {"operation": "read"}),
    ]:
        assert value(samples, name, **labels) > 0, (name, labels)
    batches = value(samples, "semcache_embedding_batch_size_count")
    assert batches > 0 and value(samples, "semcache_embedding_batch_size_sum") >= batches


@pytest.mark.slow
def test_upstream_errors_breaker_index_and_upkeep(traffic: Traffic) -> None:
    samples = traffic.samples()
    errors = {
        tuple(sorted(dict(labels).items())): count
        for (name, labels), count in samples.items()
        if name == "semcache_upstream_errors_total"
    }
    assert errors == {(("kind", "status"), ("status", "500")): 1, (("kind", "status"), ("status", "400")): 1}
    assert value(samples, "semcache_upstream_retries_total") == 1
    assert value(samples, "semcache_circuit_breaker_state", state="closed") == 1
    assert value(samples, "semcache_circuit_breaker_state", state="open") == 0
    assert value(samples, "semcache_circuit_breaker_opened_total") == 0
    assert value(samples, "semcache_ready") == 1
    stats = traffic.stats()
    assert value(samples, "semcache_index_entries") == stats["index"]["entries"] == 5
    assert value(samples, "semcache_index_tombstones") == stats["index"]["tombstones"]
    assert value(samples, "semcache_index_rebuilds_total") == stats["index"]["rebuilds"]
    assert value(samples, "semcache_evictions_total") == stats["evicted"]
    assert value(samples, "semcache_expiries_total") == stats["expired"]


@pytest.mark.slow
def test_tokens_and_cost_saved_match_the_usage_the_hits_reported(traffic: Traffic) -> None:
    priced = traffic.hit_usage["test-model"]
    unpriced = traffic.hit_usage["unpriced-model"]
    prompt = sum(p for p, _ in priced + unpriced)
    completion_tokens = sum(c for _, c in priced + unpriced)
    cost = sum(p * 1.0 + c * 2.0 for p, c in priced) / 1_000_000  # PRICES; the unpriced hit costs nothing
    assert prompt > 0 and completion_tokens > 0 and cost > 0
    samples = traffic.samples()
    tokens = {
        (dict(labels)["namespace"], dict(labels)["kind"]): count
        for (name, labels), count in samples.items()
        if name == "semcache_tokens_saved_total"
    }
    assert tokens[("default", "prompt")] + tokens[("tenant-b", "prompt")] == prompt
    assert tokens[("default", "completion")] + tokens[("tenant-b", "completion")] == completion_tokens
    dollars = value(samples, "semcache_cost_saved_usd_total", namespace="default") + value(
        samples, "semcache_cost_saved_usd_total", namespace="tenant-b"
    )
    assert dollars == pytest.approx(cost)
    savings = traffic.stats()["savings"]
    assert (savings["prompt_tokens"], savings["completion_tokens"]) == (prompt, completion_tokens)
    assert savings["total_tokens"] == prompt + completion_tokens
    assert abs(savings["cost_usd"] - cost) <= 2e-6  # counted in whole micro-dollars
    assert savings["unpriced_requests"] == 1


# -- /stats after traffic -----------------------------------------------------------------------


@pytest.mark.slow
def test_stats_keep_their_fields_and_add_latency_savings_and_top_namespaces(traffic: Traffic) -> None:
    stats = traffic.stats()
    assert (stats["requests"], stats["hits"], stats["misses"], stats["bypass"], stats["errors"]) == (13, 6, 5, 1, 1)
    assert stats["tiers"] == {"exact": 4, "template": 1, "semantic": 1}
    assert stats["hit_rate"] == round(6 / 11, 4) and stats["entries"] == 5 and stats["ready"] is True
    assert set(stats["by_namespace"]) == {"default", "tenant-b"}
    assert [row["namespace"] for row in stats["top_namespaces"]] == ["default", "tenant-b"]
    tenant = stats["top_namespaces"][1]
    assert (tenant["requests"], tenant["hits"], tenant["hit_rate"]) == (2, 1, 0.5)
    assert tenant["tokens_saved"] > 0 and tenant["cost_saved_usd"] > 0

    latency = stats["latency"]
    assert (latency["scope"], latency["recent_window_s"]) == ("replica", 300)
    counts = {path: figures["lifetime"]["count"] for path, figures in latency["paths"].items()}
    assert counts == {"exact_hit": 4, "template_hit": 1, "semantic_hit": 1, "miss": 5, "bypass": 1, "error": 1}
    for path, figures in latency["paths"].items():
        assert figures["recent"] == figures["lifetime"], path  # everything happened in the last minutes
        assert 0 < figures["lifetime"]["p50_ms"] <= figures["lifetime"]["p90_ms"] <= figures["lifetime"]["p99_ms"]


@pytest.mark.slow
def test_the_grafana_dashboard_uses_only_exported_metrics(traffic: Traffic) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])] + [
        variable["definition"] for variable in dashboard["templating"]["list"] if "definition" in variable
    ]
    referenced = {name for expr in exprs for name in re.findall(r"\bsemcache_[a-z_]+", expr)}
    exported = {name for name, _ in traffic.samples()}
    assert len(referenced) >= 20
    assert referenced <= exported, referenced - exported
    # every family the service exports has a place on the dashboard
    families = {family.name for family in text_string_to_metric_families(traffic.metrics_text())}
    shown = {re.sub(r"_(total|bucket|count|sum)$", "", name) for name in referenced}
    assert families <= shown, families - shown
    titles = {panel["title"] for panel in dashboard["panels"]}
    assert {"Hit rate", "Request latency p99 by path", "Upstream errors by status", "Circuit breaker"} <= titles


# -- Metrics on its own -------------------------------------------------------------------------


def test_every_series_follows_prometheus_naming() -> None:
    metrics = Metrics(lambda: Readings(ready=True, index=IndexStats(3, 1, 1, 0, 2, 0), breaker_state="open"))
    metrics.request("default", "hit", "exact")
    metrics.upstream_error(503, "status")
    metrics.saved("default", 10, 20, None)
    families = list(text_string_to_metric_families(metrics.exposition()[0].decode()))
    assert families and all(family.name.startswith("semcache_") for family in families)
    for family in families:
        if family.type == "counter":
            assert all(s.name.endswith(("_total", "_created")) for s in family.samples), family.name
        if family.type == "histogram":
            assert family.name.endswith(("_seconds", "_batch_size")), family.name
    samples = parse(metrics.exposition()[0].decode())
    assert value(samples, "semcache_circuit_breaker_state", state="open") == 1
    assert value(samples, "semcache_circuit_breaker_state", state="closed") == 0
    assert value(samples, "semcache_index_rebuilds_total") == 2
    assert value(samples, "semcache_cost_saved_usd_total", namespace="default") == 0  # no price: no dollars


def test_namespaces_beyond_the_cap_share_one_series() -> None:
    metrics = Metrics(max_namespaces=2)
    for namespace in ("a", "b", "c", "d", "a"):
        metrics.request(namespace, "miss", None)
    samples = parse(metrics.exposition()[0].decode())
    by_namespace = {
        dict(labels)["namespace"]: count
        for (name, labels), count in samples.items()
        if name == "semcache_requests_total"
    }
    assert by_namespace == {"a": 2, "b": 1, OTHER_NAMESPACES: 2}


def test_apps_in_one_process_keep_separate_registries() -> None:
    first, second = Metrics(), Metrics()
    first.request("default", "hit", "exact")
    assert value(parse(first.exposition()[0].decode()), "semcache_requests_total", outcome="hit", tier="exact",
                 namespace="default") == 1  # fmt: skip
    assert "semcache_requests_total{" not in second.exposition()[0].decode()


def test_before_loading_only_readiness_and_upkeep_are_reported() -> None:
    samples = parse(Metrics().exposition()[0].decode())
    assert value(samples, "semcache_ready") == 0
    names = {name for name, _ in samples}
    assert {"semcache_evictions_total", "semcache_expiries_total"} <= names
    assert not names & {"semcache_index_entries", "semcache_index_tombstones", "semcache_circuit_breaker_state"}


@pytest.mark.slow
def test_the_metrics_endpoint_is_in_the_openapi_description(traffic: Traffic) -> None:
    operation = httpx.get(f"{traffic.url}/openapi.json").json()["paths"]["/metrics"]["get"]
    assert "Prometheus" in operation["summary"] and "text/plain" in operation["responses"]["200"]["content"]


def test_a_timed_block_is_recorded_when_it_fails_too() -> None:
    from semcache.observer import NullObserver, timed

    class Recorder(NullObserver):
        def __init__(self) -> None:
            self.stages: list[str] = []

        def stage(self, stage: str, seconds: float) -> None:  # type: ignore[override]
            assert seconds >= 0
            self.stages.append(stage)

    recorder = Recorder()
    with timed(recorder, "store_read"):
        pass
    with pytest.raises(RuntimeError), timed(recorder, "store_write"):
        raise RuntimeError("a failing write is timed, and its error goes on")
    assert recorder.stages == ["store_read", "store_write"]
