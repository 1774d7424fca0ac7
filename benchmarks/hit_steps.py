"""Where a semantic hit's time goes: the server's own step histograms (``/metrics``), read before
and after the one-client semantic-hit phase of ``python -m benchmarks run``.

Each step is the mean of its calls during the phase (the histogram's sum over its count, both as
differences); "the rest" is what the server spent on a semantic hit beyond one call of each:
parsing and validating the request, its keys, the template tier, the hand-off to the embedding
thread and back, the decision, the response and the log line. Approximate: the phase is mostly
semantic hits, but its few other requests add calls too. A paraphrase the verifier refused once is
asked again as an exact hit (one more exact lookup); its first ask was a miss, which embedded,
searched and checked like a hit, and after which the answer judge embedded two answers (longer
texts than a prompt) in the same embedding histogram.
"""

from __future__ import annotations

from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

# The steps of a semantic hit, each one call on the way: a histogram and its labels.
STEPS: dict[str, tuple[str, dict[str, str]]] = {
    "exact_lookup": ("semcache_store_duration_seconds", {"operation": "lookup"}),
    "embedding": ("semcache_embedding_duration_seconds", {}),
    "index_search": ("semcache_index_search_duration_seconds", {}),
    "candidate_read": ("semcache_store_duration_seconds", {"operation": "read"}),
    "guards": ("semcache_guards_duration_seconds", {}),
}
REQUEST = ("semcache_request_duration_seconds", {"path": "semantic_hit"})

Histograms = dict[tuple[str, frozenset[tuple[str, str]]], tuple[float, float]]  # (sum, count)


async def scrape(url: str) -> Histograms:
    """Every histogram's sum and count at ``url``'s ``/metrics``."""
    async with httpx.AsyncClient(timeout=30) as client:
        response = await client.get(f"{url}/metrics")
        response.raise_for_status()  # a metrics key set with --semcache-env: a 401, not metrics
    found: dict[tuple[str, frozenset[tuple[str, str]]], list[float]] = {}
    for family in text_string_to_metric_families(response.text):
        if family.type != "histogram":
            continue
        for sample in family.samples:
            part = {f"{family.name}_sum": 0, f"{family.name}_count": 1}.get(sample.name)
            if part is None:
                continue
            labels = frozenset(sample.labels.items())
            found.setdefault((family.name, labels), [0.0, 0.0])[part] = sample.value
    return {key: (total, count) for key, (total, count) in found.items()}


def _delta(before: Histograms, after: Histograms, name: str, labels: dict[str, str]) -> tuple[float, float]:
    key = (name, frozenset(labels.items()))
    total, count = after.get(key, (0.0, 0.0))
    earlier_total, earlier_count = before.get(key, (0.0, 0.0))
    return total - earlier_total, count - earlier_count


def semantic_hit_steps(before: Histograms, after: Histograms, client_mean_ms: float | None) -> dict[str, Any]:
    """Each step's mean ms and calls per semantic hit, the server's whole semantic hit, the rest,
    and what the client saw beyond the server (HTTP on loopback, the client's own work)."""
    request_s, hits = _delta(before, after, *REQUEST)
    if hits <= 0:
        return {"skipped": "no semantic hits counted by /metrics during the phase"}
    steps = {}
    for step, (name, labels) in STEPS.items():
        total_s, calls = _delta(before, after, name, labels)
        steps[step] = {
            "mean_ms": round(total_s / calls * 1000, 4) if calls else None,
            "calls_per_hit": round(calls / hits, 2),
        }
    server_ms = request_s / hits * 1000
    accounted_ms = sum(step["mean_ms"] or 0.0 for step in steps.values())
    result: dict[str, Any] = {
        "semantic_hits": int(hits),
        "server_mean_ms": round(server_ms, 4),
        "steps": steps,
        "rest_ms": round(server_ms - accounted_ms, 4),
    }
    if client_mean_ms is not None:
        result["client_mean_ms"] = round(client_mean_ms, 4)
        result["beyond_server_ms"] = round(client_mean_ms - server_ms, 4)
    return result
