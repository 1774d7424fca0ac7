"""Hit-rate counters of this process, per namespace and per tier."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Literal

Outcome = Literal["hit", "miss", "bypass", "error"]


@dataclass
class _Counts:
    requests: int = 0
    hits: int = 0
    misses: int = 0
    bypass: int = 0
    errors: int = 0
    reported_correct: int = 0
    reported_wrong: int = 0

    def as_dict(self) -> dict[str, Any]:
        cacheable = self.hits + self.misses
        return {
            "requests": self.requests,
            "hits": self.hits,
            "misses": self.misses,
            "bypass": self.bypass,
            "errors": self.errors,
            "reported_wrong": self.reported_wrong,
            "hit_rate": round(self.hits / cacheable, 4) if cacheable else 0.0,
        }


@dataclass
class Stats:
    total: _Counts = field(default_factory=_Counts)
    tiers: dict[str, int] = field(default_factory=lambda: {"exact": 0, "template": 0, "semantic": 0})
    namespaces: dict[str, _Counts] = field(default_factory=dict)
    coalesced: int = 0
    embed_batches: int = 0
    embedded_prompts: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, namespace: str, outcome: Outcome, tier: str | None = None) -> None:
        with self._lock:
            for counts in (self.total, self.namespaces.setdefault(namespace, _Counts())):
                counts.requests += 1
                if outcome == "hit":
                    counts.hits += 1
                elif outcome == "miss":
                    counts.misses += 1
                elif outcome == "bypass":
                    counts.bypass += 1
                else:
                    counts.errors += 1
            if tier is not None:
                self.tiers[tier] = self.tiers.get(tier, 0) + 1

    def record_coalesced(self) -> None:
        with self._lock:
            self.coalesced += 1

    def record_feedback(self, namespace: str, correct: bool) -> None:
        with self._lock:
            counts = self.namespaces.setdefault(namespace, _Counts())
            if correct:
                counts.reported_correct += 1
            else:
                counts.reported_wrong += 1

    def record_embed_batch(self, size: int, seconds: float) -> None:
        with self._lock:
            self.embed_batches += 1
            self.embedded_prompts += size

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                **self.total.as_dict(),
                "tiers": dict(self.tiers),
                "feedback": {
                    "correct": sum(c.reported_correct for c in self.namespaces.values()),
                    "wrong": sum(c.reported_wrong for c in self.namespaces.values()),
                },
                "coalesced": self.coalesced,
                "by_namespace": {ns: counts.as_dict() for ns, counts in sorted(self.namespaces.items())},
                "embedding": {
                    "batches": self.embed_batches,
                    "prompts": self.embedded_prompts,
                    "mean_batch_size": round(self.embedded_prompts / self.embed_batches, 2)
                    if self.embed_batches
                    else 0.0,
                },
            }
