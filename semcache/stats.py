"""Hit-rate counters, per namespace and per tier.

Counters are kept flat (``hits``, ``tier:exact``, ``ns:<namespace>:misses``...) so that replicas
sharing a Redis store can add theirs into one hash, and any replica can report the totals.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any, Literal

Outcome = Literal["hit", "miss", "bypass", "error"]

_OUTCOME_COUNTER = {"hit": "hits", "miss": "misses", "bypass": "bypass", "error": "errors"}
_NAMESPACE_FIELDS = ("requests", "hits", "misses", "bypass", "errors", "reported_correct", "reported_wrong")
TIERS = ("exact", "template", "semantic")


class Stats:
    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()  # this process, since it started
        self._unshared: Counter[str] = Counter()  # not yet added to the shared store
        self.embed_batches = 0
        self.embedded_prompts = 0
        self._lock = threading.Lock()

    def _add(self, *names: str) -> None:
        with self._lock:
            for name in names:
                self._counts[name] += 1
                self._unshared[name] += 1

    def record(self, namespace: str, outcome: Outcome, tier: str | None = None) -> None:
        counter = _OUTCOME_COUNTER[outcome]
        names = ["requests", counter, f"ns:{namespace}:requests", f"ns:{namespace}:{counter}"]
        if tier is not None:
            names.append(f"tier:{tier}")
        self._add(*names)

    def record_coalesced(self) -> None:
        self._add("coalesced")

    def record_feedback(self, namespace: str, correct: bool) -> None:
        verdict = "reported_correct" if correct else "reported_wrong"
        self._add(verdict, f"ns:{namespace}:{verdict}")

    def record_embed_batch(self, size: int, seconds: float) -> None:
        with self._lock:
            self.embed_batches += 1
            self.embedded_prompts += size

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
        for name, value in counts.items():
            if name.startswith("ns:"):
                namespace, _, field = name[3:].rpartition(":")
                namespaces.setdefault(namespace, Counter())[field] = value
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
            "embedding": embedding,
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
