"""Hit-rate counters, per namespace and per tier; tokens and money saved; request latencies.

Counters are kept flat (``hits``, ``tier:exact``, ``ns:<namespace>:misses``...) so that replicas
sharing a Redis store can add theirs into one hash, and any replica can report the totals. Money
saved is counted in whole micro-dollars for the same reason: the hash adds integers. Latency
percentiles cannot be added up across replicas; they stay each replica's own.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from typing import Any, Literal

from .fairness import NamespaceLabels

Outcome = Literal["hit", "miss", "bypass", "error"]
LatencyPath = Literal["exact_hit", "template_hit", "semantic_hit", "miss", "bypass", "error"]
LATENCY_PATHS: tuple[LatencyPath, ...] = ("exact_hit", "template_hit", "semantic_hit", "miss", "bypass", "error")

_OUTCOME_COUNTER = {"hit": "hits", "miss": "misses", "bypass": "bypass", "error": "errors"}
_NAMESPACE_FIELDS = ("requests", "hits", "misses", "bypass", "errors", "reported_correct", "reported_wrong")
TIERS = ("exact", "template", "semantic")
_TOP_NAMESPACES = 10
_MICRO = 1_000_000


class Stats:
    """The counters behind ``/stats``. An ``Observer`` (semcache.observer): the app hands one
    ``FanOut`` of it and the Prometheus metrics to every part, so each event is told once."""

    def __init__(self, *, max_namespaces: int = 10_000) -> None:
        # Clients choose namespaces: past this many, the rest are counted together as "(other)".
        self._namespace = NamespaceLabels(max_namespaces)
        self._counts: Counter[str] = Counter()  # this process, since it started
        self._unshared: Counter[str] = Counter()  # not yet added to the shared store
        self.embed_batches = 0
        self.embedded_prompts = 0
        self.latencies = Latencies()  # this replica's own
        self._cost_carry: dict[str, float] = {}  # fractions of a micro-dollar not counted yet
        self._lock = threading.Lock()

    def _add(self, *names: str) -> None:
        with self._lock:
            self._add_locked(dict.fromkeys(names, 1))

    def _add_locked(self, amounts: dict[str, int]) -> None:
        for name, amount in amounts.items():
            if amount:
                self._counts[name] += amount
                self._unshared[name] += amount

    # -- Observer ----------------------------------------------------------------------------------

    def request(self, namespace: str, outcome: Outcome, tier: str | None = None, route: str = "chat") -> None:
        counter = _OUTCOME_COUNTER[outcome]
        namespace = self._namespace(namespace)
        names = ["requests", counter, f"ns:{namespace}:requests", f"ns:{namespace}:{counter}"]
        names += [f"route:{route}:requests", f"route:{route}:{counter}"]
        if tier is not None:
            names.append(f"tier:{tier}")
        self._add(*names)

    def coalesced(self) -> None:
        self._add("coalesced")

    def feedback(self, namespace: str, correct: bool) -> None:
        verdict = "reported_correct" if correct else "reported_wrong"
        namespace = self._namespace(namespace)
        self._add(verdict, f"ns:{namespace}:{verdict}")

    def saved(self, namespace: str, prompt_tokens: int, completion_tokens: int, cost_usd: float | None) -> None:
        """A request answered without calling the upstream: the tokens it would have cost, and
        their price (None when the model has no price)."""
        namespace = self._namespace(namespace)
        amounts = {
            "saved_prompt_tokens": prompt_tokens,
            "saved_completion_tokens": completion_tokens,
            f"ns:{namespace}:saved_tokens": prompt_tokens + completion_tokens,
        }
        with self._lock:
            if cost_usd is None:
                amounts["saved_unpriced"] = 1
            else:
                for name in ("saved_cost_microusd", f"ns:{namespace}:saved_cost_microusd"):
                    amounts[name] = self._whole_microdollars(name, cost_usd)
            self._add_locked(amounts)

    def _whole_microdollars(self, name: str, cost_usd: float) -> int:
        """Whole micro-dollars to count now; the fraction waits for the next hit, so that many cheap
        hits add up to what they cost together."""
        carried = self._cost_carry.get(name, 0.0) + cost_usd * _MICRO
        whole = int(carried)
        self._cost_carry[name] = carried - whole
        return whole

    def request_duration(self, path: LatencyPath, seconds: float) -> None:
        self.latencies.record(path, seconds)

    def embedded(self, batch_size: int, seconds: float) -> None:
        with self._lock:
            self.embed_batches += 1
            self.embedded_prompts += batch_size

    def embeddings(self, namespace: str, inputs: int, from_cache: int, asked: int, tokens_saved: int) -> None:
        with self._lock:
            self._add_locked({"embeddings:requests": 1, "embeddings:inputs": inputs,
                              "embeddings:from_cache": from_cache, "embeddings:asked_upstream": asked,
                              "embeddings:tokens_saved": tokens_saved})  # fmt: skip

    def verified(
        self,
        namespace: str,
        verdict: str,
        seconds: float,
        prompt_tokens: int,
        completion_tokens: int,
        cost_usd: float | None,
    ) -> None:
        namespace = self._namespace(namespace)
        amounts = {f"verify:{verdict}": 1, f"ns:{namespace}:verify_{verdict}": 1,
                   "verify:milliseconds": round(seconds * 1000), "verify:prompt_tokens": prompt_tokens,
                   "verify:completion_tokens": completion_tokens}  # fmt: skip
        with self._lock:
            if cost_usd is not None:
                amounts["verify:cost_microusd"] = self._whole_microdollars("verify:cost_microusd", cost_usd)
            self._add_locked(amounts)

    def stage(self, stage: str, seconds: float) -> None:
        pass  # steps are Prometheus histograms only

    def upstream_error(self, status: int, kind: str) -> None:
        pass  # Prometheus only

    # -- sharing and reporting -------------------------------------------------------------------

    def take_unshared(self) -> Counter[str]:
        """Counts recorded since the last call, for adding to the shared store."""
        with self._lock:
            taken, self._unshared = self._unshared, Counter()
        return taken

    def give_back_unshared(self, counts: Counter[str]) -> None:
        """Counts that could not be shared (the store was down): they go out with the next batch."""
        with self._lock:
            self._unshared.update(counts)

    def counts(self) -> Counter[str]:
        with self._lock:
            return Counter(self._counts)

    def snapshot(self, counts: Counter[str] | None = None) -> dict[str, Any]:
        """The figures for ``/stats``: of ``counts`` (every replica's) if given, else of this process."""
        counts = self.counts() if counts is None else counts
        namespaces: dict[str, Counter[str]] = {}
        routes: dict[str, Counter[str]] = {}
        for name, value in counts.items():
            kind, _, rest = name.partition(":")
            if kind in ("ns", "route"):
                owner, _, field = rest.rpartition(":")
                (namespaces if kind == "ns" else routes).setdefault(owner, Counter())[field] = value
        with self._lock:
            embedding = {
                "batches": self.embed_batches,
                "prompts": self.embedded_prompts,
                "mean_batch_size": round(self.embedded_prompts / self.embed_batches, 2) if self.embed_batches else 0.0,
            }
        return {
            **_outcomes(counts),
            "tiers": {tier: counts[f"tier:{tier}"] for tier in TIERS},
            "feedback": {"correct": counts["reported_correct"], "wrong": counts["reported_wrong"]},
            "coalesced": counts["coalesced"],
            "by_namespace": {ns: _outcomes(c) for ns, c in sorted(namespaces.items())},
            "by_route": {route: _outcomes(c) for route, c in sorted(routes.items())},
            "top_namespaces": _top_namespaces(namespaces),
            "savings": _savings(counts),
            "embedding": embedding,
            "embeddings": _embeddings(counts),
            "verification": _verification(counts),
            "latency": self.latencies.snapshot(),
        }


def _outcomes(counts: Counter[str]) -> dict[str, Any]:
    cacheable = counts["hits"] + counts["misses"]
    return {
        "requests": counts["requests"],
        "hits": counts["hits"],
        "misses": counts["misses"],
        "bypass": counts["bypass"],
        "errors": counts["errors"],
        "reported_wrong": counts["reported_wrong"],
        "hit_rate": round(counts["hits"] / cacheable, 4) if cacheable else 0.0,
    }


def _savings(counts: Counter[str]) -> dict[str, Any]:
    prompt, completion = counts["saved_prompt_tokens"], counts["saved_completion_tokens"]
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "cost_usd": round(counts["saved_cost_microusd"] / _MICRO, 6),
        "unpriced_requests": counts["saved_unpriced"],  # their model has no price: cost_usd leaves them out
    }


def _verification(counts: Counter[str]) -> dict[str, Any]:
    """Verifications asked of the upstream, their verdicts, cost, and what hits saved net of it."""
    verdicts = {verdict: counts[f"verify:{verdict}"] for verdict in ("yes", "no", "failed")}
    asked = sum(verdicts.values())
    cost = counts["verify:cost_microusd"] / _MICRO
    return {
        "asked": asked,
        **verdicts,
        "mean_ms": round(counts["verify:milliseconds"] / asked, 1) if asked else 0.0,
        "prompt_tokens": counts["verify:prompt_tokens"],
        "completion_tokens": counts["verify:completion_tokens"],
        "cost_usd": round(cost, 6),
        "net_cost_saved_usd": round(counts["saved_cost_microusd"] / _MICRO - cost, 6),
        "net_tokens_saved": counts["saved_prompt_tokens"]
        + counts["saved_completion_tokens"]
        - counts["verify:prompt_tokens"]
        - counts["verify:completion_tokens"],
    }


def _embeddings(counts: Counter[str]) -> dict[str, Any]:
    """The /v1/embeddings cache: inputs served from it, asked upstream, and the upstream tokens saved."""
    inputs, from_cache = counts["embeddings:inputs"], counts["embeddings:from_cache"]
    return {
        "requests": counts["embeddings:requests"],
        "inputs": inputs,
        "inputs_from_cache": from_cache,
        "inputs_asked_upstream": counts["embeddings:asked_upstream"],
        "input_hit_rate": round(from_cache / inputs, 4) if inputs else 0.0,
        "tokens_saved": counts["embeddings:tokens_saved"],
    }


def _top_namespaces(namespaces: dict[str, Counter[str]]) -> list[dict[str, Any]]:
    """The busiest namespaces, most requests first."""
    ranked = sorted(
        (item for item in namespaces.items() if item[1]["requests"]), key=lambda i: (-i[1]["requests"], i[0])
    )
    return [
        {
            "namespace": namespace,
            "requests": counts["requests"],
            "hits": counts["hits"],
            "hit_rate": _outcomes(counts)["hit_rate"],
            "tokens_saved": counts["saved_tokens"],
            "cost_saved_usd": round(counts["saved_cost_microusd"] / _MICRO, 6),
        }
        for namespace, counts in ranked[:_TOP_NAMESPACES]
    ]


# Latency buckets grow by 4% from one microsecond: a bucket's middle is within 2% of any value in it.
_GROWTH = 1.04
_FLOOR_S = 1e-6
_QUANTILES = ((0.5, "p50_ms"), (0.9, "p90_ms"), (0.99, "p99_ms"))


class Latencies:
    """Request latencies per path, since this replica started and over the last ``window_s``.

    Durations are counted in log-spaced buckets, so memory stays fixed however many requests come
    and a percentile is within about 2% of the exact one. The window is kept in ten slices and the
    oldest slice is dropped whole, so "recent" covers the last 90 to 100% of ``window_s``.
    """

    def __init__(self, window_s: float = 300.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self._slice_s = window_s / 10
        self._clock = clock
        self._lifetime: dict[str, Counter[int]] = {path: Counter() for path in LATENCY_PATHS}
        self._recent: dict[str, deque[tuple[int, Counter[int]]]] = {path: deque() for path in LATENCY_PATHS}
        self._lock = threading.Lock()

    def record(self, path: LatencyPath, seconds: float) -> None:
        bucket = int(math.log(max(seconds, _FLOOR_S) / _FLOOR_S) / math.log(_GROWTH))
        now = self._slice_now()
        with self._lock:
            self._lifetime[path][bucket] += 1
            slices = self._recent[path]
            if not slices or slices[-1][0] != now:
                slices.append((now, Counter()))
            slices[-1][1][bucket] += 1
            _drop_before(slices, now - 9)

    def snapshot(self) -> dict[str, Any]:
        now = self._slice_now()
        paths: dict[str, Any] = {}
        with self._lock:
            for path in LATENCY_PATHS:
                slices = self._recent[path]
                _drop_before(slices, now - 9)
                recent: Counter[int] = Counter()
                for _, counts in slices:
                    recent.update(counts)
                paths[path] = {"lifetime": _percentiles(self._lifetime[path]), "recent": _percentiles(recent)}
        return {"scope": "replica", "recent_window_s": self.window_s, "paths": paths}

    def _slice_now(self) -> int:
        return int(self._clock() // self._slice_s)


def _drop_before(slices: deque[tuple[int, Counter[int]]], first: int) -> None:
    while slices and slices[0][0] < first:
        slices.popleft()


def _percentiles(buckets: Counter[int]) -> dict[str, Any]:
    count = sum(buckets.values())
    figures: dict[str, Any] = {"count": count}
    ordered = sorted(buckets.items())
    for quantile, name in _QUANTILES:
        rank, seen, figures[name] = max(1, math.ceil(quantile * count)), 0, None
        for bucket, n in ordered:
            seen += n
            if seen >= rank:
                middle_s = _FLOOR_S * _GROWTH ** (bucket + 0.5)
                figures[name] = float(f"{middle_s * 1000:.3g}")
                break
    return figures
