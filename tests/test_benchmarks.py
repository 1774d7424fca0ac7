"""The benchmark scripts run end to end in a quick mode, so they cannot rot (speed is not judged)."""

from __future__ import annotations

import pytest

from benchmarks import index_search, latency, miss_overhead

pytestmark = pytest.mark.slow


def test_latency_benchmark_measures_every_outcome() -> None:
    result = latency.run(requests=6, upstream_latency_ms=0)
    for outcome in ("direct_upstream", "miss", "exact_hit", "semantic_hit"):
        assert result[outcome]["count"] > 0 and result[outcome]["p50_ms"] > 0
    assert result["_samples"]["exact_hit"]


def test_miss_overhead_benchmark_reports_ratios() -> None:
    result = miss_overhead.run(requests=4, upstream_latency_ms=10, chunk_delay_ms=1)
    for mode in ("non_stream", "stream"):
        assert result[mode]["ttfb_ratio"] > 0 and result[mode]["total_ratio"] > 0


def test_index_benchmark_measures_recall() -> None:
    import numpy as np

    rng = np.random.default_rng(0)
    vectors = index_search.synthetic(2_000, rng)
    queries = vectors[:50]
    result = index_search.measure("hnsw32", vectors, queries, np.arange(50))
    assert result["recall_at_1"] > 0.9 and result["search_p50_ms"] > 0
