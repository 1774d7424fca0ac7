"""Unit tests for semcache.stats: flat counters that replicas can add up, savings, latency percentiles."""

from __future__ import annotations

import math
import random

import pytest

from semcache.metrics import Metrics
from semcache.observer import FanOut
from semcache.stats import LATENCY_PATHS, Latencies, Stats
from semcache.tokens import Price, PriceTable


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def exact_percentile(values: list[float], quantile: float) -> float:
    return sorted(values)[math.ceil(quantile * len(values)) - 1]  # nearest rank


def test_percentiles_are_within_two_percent_of_the_exact_ones() -> None:
    latencies = Latencies()
    rng = random.Random(7)
    values = [rng.lognormvariate(-5, 1.2) for _ in range(5000)]  # around 7 ms, with a long tail
    for seconds in values:
        latencies.record("miss", seconds)
    figures = latencies.snapshot()["paths"]["miss"]["lifetime"]
    assert figures["count"] == 5000
    for quantile, name in ((0.5, "p50_ms"), (0.9, "p90_ms"), (0.99, "p99_ms")):
        assert figures[name] == pytest.approx(exact_percentile(values, quantile) * 1000, rel=0.025), name


def test_the_recent_window_forgets_what_is_older_and_the_lifetime_does_not() -> None:
    clock = Clock()
    latencies = Latencies(window_s=300, clock=clock)
    for _ in range(10):
        latencies.record("exact_hit", 0.001)
    clock.now += 200
    latencies.record("exact_hit", 0.1)
    figures = latencies.snapshot()["paths"]["exact_hit"]
    assert figures["recent"]["count"] == 11 and figures["lifetime"]["count"] == 11

    clock.now += 150  # the ten fast ones are 350 s old now
    figures = latencies.snapshot()["paths"]["exact_hit"]
    assert figures["lifetime"]["count"] == 11 and figures["lifetime"]["p50_ms"] == pytest.approx(1.0, rel=0.02)
    assert figures["recent"]["count"] == 1 and figures["recent"]["p50_ms"] == pytest.approx(100, rel=0.02)

    clock.now += 400
    assert latencies.snapshot()["paths"]["exact_hit"]["recent"] == {
        "count": 0, "p50_ms": None, "p90_ms": None, "p99_ms": None,
    }  # fmt: skip


def test_every_path_is_reported_even_before_its_first_request() -> None:
    snapshot = Stats().snapshot()["latency"]
    assert (snapshot["scope"], snapshot["recent_window_s"]) == ("replica", 300)
    assert tuple(snapshot["paths"]) == LATENCY_PATHS
    assert snapshot["paths"]["bypass"]["lifetime"]["count"] == 0


def test_many_cheap_hits_add_up_to_what_they_cost_together() -> None:
    stats = Stats()
    prices = PriceTable({"gpt-4o-mini": Price(input_per_1m=0.15, output_per_1m=0.6)})
    for _ in range(1000):  # 10 prompt + 0 completion tokens: 1.5 micro-dollars each
        stats.saved("default", 10, 0, prices.cost_usd("gpt-4o-mini", 10, 0))
    savings = stats.snapshot()["savings"]
    assert savings["cost_usd"] == pytest.approx(0.0015, abs=1e-6)
    assert (savings["prompt_tokens"], savings["completion_tokens"], savings["total_tokens"]) == (10_000, 0, 10_000)
    assert savings["unpriced_requests"] == 0


def test_price_table_matches_exactly_then_falls_back_to_default() -> None:
    prices = PriceTable({"a": Price(1.0, 2.0), "default": Price(10.0, 20.0)})
    assert prices.cost_usd("a", 1_000_000, 500_000) == pytest.approx(2.0)
    assert prices.cost_usd("a-2024", 1_000_000, 0) == pytest.approx(10.0)
    assert PriceTable({"a": Price(1.0, 2.0)}).cost_usd("b", 100, 100) is None
    assert PriceTable().cost_usd("a", 100, 100) is None


def test_replicas_counts_add_up_to_the_cluster_figures() -> None:
    """With --store redis each replica adds its unshared counts into one hash; this is that sum."""
    first, second = Stats(), Stats()
    first.request("support", "hit", "exact")
    first.saved("support", 20, 30, 0.000125)
    second.request("support", "miss")
    second.request("billing", "hit", "semantic")
    second.saved("billing", 5, 5, None)
    second.request("billing", "hit", "exact")
    second.saved("billing", 5, 5, 0.00001)
    shared = first.take_unshared() + second.take_unshared()
    cluster = first.snapshot(shared)
    assert cluster["savings"] == {
        "prompt_tokens": 30, "completion_tokens": 40, "total_tokens": 70, "cost_usd": 0.000135, "unpriced_requests": 1,
    }  # fmt: skip
    billing, support = cluster["top_namespaces"]  # as many requests each: by name
    assert billing == {
        "namespace": "billing", "requests": 2, "hits": 2, "hit_rate": 1.0, "tokens_saved": 20, "cost_saved_usd": 1e-05,
    }  # fmt: skip
    assert support == {
        "namespace": "support", "requests": 2, "hits": 1, "hit_rate": 0.5, "tokens_saved": 50,
        "cost_saved_usd": 0.000125,
    }  # fmt: skip
    assert set(cluster["by_namespace"]) == {"billing", "support"}  # the existing figures stay as they were
    assert cluster["by_namespace"]["support"] == {
        "requests": 2, "hits": 1, "misses": 1, "bypass": 0, "errors": 0, "reported_wrong": 0, "hit_rate": 0.5,
    }  # fmt: skip
    assert all(isinstance(count, int) for count in shared.values())  # Redis HINCRBY adds integers only


def test_top_namespaces_are_the_ten_busiest() -> None:
    stats = Stats()
    for n in range(12):
        for _ in range(n + 1):
            stats.request(f"ns{n:02d}", "miss")
    top = stats.snapshot()["top_namespaces"]
    assert [row["namespace"] for row in top] == [f"ns{n:02d}" for n in range(11, 1, -1)]


def test_one_fan_out_tells_each_event_once_to_stats_and_to_prometheus() -> None:
    stats, metrics = Stats(), Metrics()
    observer = FanOut(stats, metrics)
    observer.request("support", "hit", "semantic")
    observer.saved("support", 10, 20, None)
    observer.feedback("support", False)
    observer.coalesced()
    observer.request_duration("semantic_hit", 0.004)
    observer.embedded(3, 0.01)
    snapshot = stats.snapshot()
    assert snapshot["hits"] == 1 and snapshot["tiers"]["semantic"] == 1
    assert snapshot["feedback"] == {"correct": 0, "wrong": 1} and snapshot["coalesced"] == 1
    assert snapshot["savings"]["total_tokens"] == 30 and snapshot["embedding"]["prompts"] == 3
    assert snapshot["latency"]["paths"]["semantic_hit"]["lifetime"]["count"] == 1
    text = metrics.exposition()[0].decode()
    assert 'semcache_requests_total{namespace="support",outcome="hit",tier="semantic"} 1.0' in text
    assert 'semcache_feedback_total{namespace="support",verdict="wrong"} 1.0' in text
    assert "semcache_coalesced_total 1.0" in text
    assert 'semcache_request_duration_seconds_count{path="semantic_hit"} 1.0' in text
