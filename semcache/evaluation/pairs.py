"""``semcache eval pairs``: precision and recall on labelled question pairs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from .. import guards
from ..protocols import Verifier
from ..quality import QualityPolicy
from .embedding_cache import CachedEmbedder

CURVE_THRESHOLDS = tuple(round(0.70 + 0.01 * i, 2) for i in range(30))


@dataclass
class Scores:
    precision: float
    recall: float
    f1: float
    accepted: int
    true_positives: int
    positives: int

    @classmethod
    def of(cls, accepted: np.ndarray, labels: np.ndarray) -> Scores:
        true_positives = int((accepted & labels).sum())
        precision = true_positives / max(int(accepted.sum()), 1)
        recall = true_positives / max(int(labels.sum()), 1)
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        return cls(round(precision, 4), round(recall, 4), round(f1, 4), int(accepted.sum()), true_positives,
                   int(labels.sum()))  # fmt: skip


@dataclass
class PairsReport:
    pairs: int
    policy: dict[str, Any]
    at_policy: Scores
    by_source: dict[str, Scores]
    curve: list[dict[str, float]]  # per threshold, with guards and verifier as configured
    target_precision: float
    best_threshold: float | None  # most recall at the target precision, or None if never reached
    best: Scores | None
    similarities: list[float] = field(repr=False, default_factory=list)
    labels: list[bool] = field(repr=False, default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("similarities")
        data.pop("labels")
        return data


def evaluate_pairs(
    rows: list[dict[str, Any]],
    embedder: CachedEmbedder,
    policy: QualityPolicy,
    *,
    verifier: Verifier | None = None,
    target_precision: float = 0.95,
    advance: Callable[[int], None] | None = None,
) -> PairsReport:
    """Score each pair as the semantic tier would: cosine, then guards, then the verifier."""
    first, second = [str(r["q1"]) for r in rows], [str(r["q2"]) for r in rows]
    embedder.warm(first + second, advance=advance)
    similarities = np.einsum("ij,ij->i", embedder.embed(first), embedder.embed(second))
    labels = np.array([bool(r["duplicate"]) for r in rows])
    vetoed = np.array(
        [not all(g.passed for g in guards.check(a, b, policy.guards)) for a, b in zip(first, second, strict=True)]
    )
    rejected_by_verifier = _verifier_rejections(verifier, policy, first, second, similarities, vetoed)

    def accepted_at(threshold: float) -> np.ndarray:
        verified = ~rejected_by_verifier | (similarities >= policy.verify_below)
        return (similarities >= threshold) & ~vetoed & verified

    curve = []
    for threshold in CURVE_THRESHOLDS:
        scores = Scores.of(accepted_at(threshold), labels)
        curve.append({"threshold": threshold, "precision": scores.precision, "recall": scores.recall})
    reaching = [c for c in curve if c["precision"] >= target_precision and c["recall"] > 0]
    best_threshold = max(reaching, key=lambda c: c["recall"])["threshold"] if reaching else None
    sources = sorted({str(r.get("source", "all")) for r in rows})
    source_of = np.array([str(r.get("source", "all")) for r in rows])
    at_policy = accepted_at(policy.threshold)
    return PairsReport(
        pairs=len(rows),
        policy=policy.as_dict(),
        at_policy=Scores.of(at_policy, labels),
        by_source={s: Scores.of(at_policy[source_of == s], labels[source_of == s]) for s in sources},
        curve=curve,
        target_precision=target_precision,
        best_threshold=best_threshold,
        best=None if best_threshold is None else Scores.of(accepted_at(best_threshold), labels),
        similarities=[float(s) for s in similarities],
        labels=[bool(x) for x in labels],
    )


def _verifier_rejections(
    verifier: Verifier | None,
    policy: QualityPolicy,
    first: list[str],
    second: list[str],
    similarities: np.ndarray,
    vetoed: np.ndarray,
) -> np.ndarray:
    rejected = np.zeros(len(first), dtype=bool)
    if verifier is None:
        return rejected
    for row in np.flatnonzero((similarities < policy.verify_below) & ~vetoed & (similarities >= CURVE_THRESHOLDS[0])):
        rejected[row] = verifier(first[row], [second[row]])[0] < policy.verifier_min_score
    return rejected
