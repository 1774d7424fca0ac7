"""``semcache eval pairs``: precision and recall on labelled question pairs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..decision import guards
from ..decision.budget import conservative_start
from ..decision.quality import QualityPolicy
from ..decision.verification import band_start
from ..language import detect_script
from .data import DEFAULT_SEED
from .embedding_cache import CachedEmbedder
from .verifier import ErringVerifier

CURVE_THRESHOLDS = tuple(round(0.70 + 0.01 * i, 2) for i in range(30))
# For a script with its own threshold of at least 0.95: its model crowds its cosines near 1.
FINE_THRESHOLDS = tuple(round(0.95 + 0.001 * i, 3) for i in range(50))


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
class LanguageReport:
    """One script's pairs, at its own threshold, and its own curve to tune that threshold with."""

    pairs: int
    threshold: float
    at_policy: Scores
    curve: list[dict[str, float]]
    best_threshold: float | None
    best: Scores | None


@dataclass
class PairsReport:
    pairs: int
    policy: dict[str, Any]
    at_policy: Scores  # each pair at its script's threshold
    by_source: dict[str, Scores]
    by_language: dict[str, LanguageReport]  # by the script of q2, the question asked
    # One threshold for every pair, with guards and verification as configured; to tune one script's
    # threshold in a file that mixes scripts, read its curve in ``by_language``.
    curve: list[dict[str, float]]
    target_precision: float
    best_threshold: float | None  # most recall at the target precision, or None if never reached
    best: Scores | None
    # At the policy: pairs verified, approved, and the stand-in's errors among them.
    verification: dict[str, int] = field(default_factory=dict)
    similarities: list[float] = field(repr=False, default_factory=list)
    labels: list[bool] = field(repr=False, default_factory=list)
    languages: list[str] = field(repr=False, default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for name in ("similarities", "labels", "languages"):
            data.pop(name)
        return data


def evaluate_pairs(
    rows: list[dict[str, Any]],
    embedder: CachedEmbedder,
    policy: QualityPolicy,
    *,
    target_precision: float = 0.95,
    advance: Callable[[int], None] | None = None,
    seed: int = DEFAULT_SEED,
) -> PairsReport:
    """Score each pair as the semantic tier of a new namespace would: cosine, then guards, then,
    under its certified line (where a line that learns starts, above the threshold) and above its
    verification band's lower edge, or above the line where a doubting guard flags it, a stand-in
    verifier that knows the labels and errs like a model (``evaluation.verifier``).

    The cache holds q1 and is asked q2. Each pair is judged at the threshold of q2's script; a pair
    whose two sides are in different scripts never meets in the service (their scopes differ). With
    ``verify: async`` nothing is verified: a pair asked once is answered before its verdict comes.
    """
    first, second = [str(r["q1"]) for r in rows], [str(r["q2"]) for r in rows]
    embedder.warm(first + second, advance=advance)
    similarities = np.einsum("ij,ij->i", embedder.embed(first), embedder.embed(second))
    languages = np.array([detect_script(text) for text in second])
    similarities[languages != np.array([detect_script(text) for text in first])] = -1.0
    labels = np.array([bool(r["duplicate"]) for r in rows])
    # Where a model can be asked, the doubting guards send what they flag to it, above the line too.
    doubting = guards.doubting(policy.guards) if policy.verify != "off" else ()
    flagged = [
        {g.guard for g in guards.check(a, b, policy.guards + doubting) if not g.passed}
        for a, b in zip(first, second, strict=True)
    ]
    vetoed = np.array([bool(names - set(doubting)) for names in flagged], dtype=bool)
    doubted = np.array([bool(names & set(doubting)) for names in flagged], dtype=bool)
    # Each pair's verdict, drawn once; a threshold decides which of them are asked.
    truth = {(b, a): bool(label) for a, b, label in zip(first, second, labels, strict=True)}
    verifier = ErringVerifier(lambda query, cached: truth[(query, cached)], seed)
    approved = np.array([
        policy.verify == "sync" and not vetoed[row]
        and verifier.decide(second[row], first[row], float(similarities[row]))
        for row in range(len(rows))
    ], dtype=bool)  # fmt: skip

    # A new namespace that verifies starts its line above the threshold. With ``verify: off`` the
    # pairs are judged at the threshold itself: the score and guards alone, as under a pinned line.
    starts_high = policy.verify != "off" and policy.learn

    def line_at(threshold: float | np.ndarray) -> np.ndarray:
        return np.vectorize(conservative_start)(threshold) if starts_high else np.asarray(threshold)

    def verified_band(threshold: float | np.ndarray) -> np.ndarray:
        """Pairs a new namespace with this threshold would verify."""
        edge, line = np.vectorize(band_start)(threshold), line_at(threshold)
        band = (similarities >= edge) & (similarities < line)
        return (band | (doubted & (similarities >= line))) & ~vetoed & (policy.verify == "sync")

    def accepted_at(threshold: float | np.ndarray) -> np.ndarray:
        certified = (similarities >= line_at(threshold)) & ~doubted
        return (certified | (approved & verified_band(threshold))) & ~vetoed

    def best_of(rows: np.ndarray, thresholds: tuple[float, ...]) -> tuple[list[dict[str, float]], float | None]:
        curve = []
        for threshold in thresholds:
            scores = Scores.of(accepted_at(threshold)[rows], labels[rows])
            curve.append({"threshold": threshold, "precision": scores.precision, "recall": scores.recall})
        reaching = [c for c in curve if c["precision"] >= target_precision and c["recall"] > 0]
        return curve, max(reaching, key=lambda c: c["recall"])["threshold"] if reaching else None

    everything = np.ones(len(rows), dtype=bool)
    curve, best_threshold = best_of(everything, CURVE_THRESHOLDS)
    sources = sorted({str(r.get("source", "all")) for r in rows})
    source_of = np.array([str(r.get("source", "all")) for r in rows])
    thresholds = np.array([policy.threshold_for(language) for language in languages])
    at_policy = accepted_at(thresholds)
    asked = verified_band(thresholds)
    verification = {"asked": int(asked.sum()), "approved": int((asked & approved).sum()),
                    "approved_wrong": int((asked & approved & ~labels).sum()),
                    "rejected_right": int((asked & ~approved & labels).sum())}  # fmt: skip
    by_language = {}
    for language in sorted({str(name) for name in languages}):
        mine = languages == language
        threshold = policy.threshold_for(language)
        grid = (
            FINE_THRESHOLDS if language in policy.thresholds and threshold >= FINE_THRESHOLDS[0] else CURVE_THRESHOLDS
        )
        language_curve, language_best = best_of(mine, grid)
        by_language[language] = LanguageReport(
            pairs=int(mine.sum()), threshold=threshold, at_policy=Scores.of(at_policy[mine], labels[mine]),
            curve=language_curve, best_threshold=language_best,
            best=None if language_best is None else Scores.of(accepted_at(language_best)[mine], labels[mine]),
        )  # fmt: skip
    return PairsReport(
        pairs=len(rows),
        policy=policy.as_dict(),
        at_policy=Scores.of(at_policy, labels),
        by_source={s: Scores.of(at_policy[source_of == s], labels[source_of == s]) for s in sources},
        by_language=by_language,
        curve=curve,
        target_precision=target_precision,
        best_threshold=best_threshold,
        best=None if best_threshold is None else Scores.of(accepted_at(best_threshold), labels),
        verification=verification,
        similarities=[float(s) for s in similarities],
        labels=[bool(x) for x in labels],
        languages=[str(x) for x in languages],
    )
