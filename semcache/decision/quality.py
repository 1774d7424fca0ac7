"""Hit quality: the per-namespace policy that decides whether a semantic candidate may be served,
and the log of recent decisions that operators tune it with.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..language import validate_thresholds
from ..settings import validate_guards
from .verification import VERIFY_MODES, VerifyMode

if TYPE_CHECKING:
    from ..settings import Settings


_MAX_HIT_MIN_LATENCY_MS = 60_000.0
# Fields a stored namespace config may still hold from before verification: dropped when read.
RETIRED_POLICY_FIELDS = frozenset({"verify_below", "verifier_min_score"})
MAX_TARGET_ERROR = 0.5


@dataclass(frozen=True)
class QualityPolicy:
    """How strict the semantic tier is. ``threshold`` and the band are cosine similarities (0-1).

    ``thresholds`` overrides ``threshold`` per prompt script ("han", "other", "latin"): each script
    has its own embedding model, and models spread their cosines differently (multilingual-e5
    packs them into 0.8-1.0).
    """

    threshold: float
    guards: tuple[str, ...] = ()
    # Candidates under the certified line and above the band's lower edge are put to a model
    # (semcache.decision.verification): before answering, in the background, or never.
    verify: VerifyMode = "sync"
    thresholds: dict[str, float] = field(default_factory=dict)
    # Tenant safety (docs/security.md, "Timing side channel" and "Cache poisoning"): entries serve only the
    # user who stored them; hits wait until this long after their request arrived.
    scope_per_user: bool = False
    hit_min_latency_ms: float = 0.0
    # The error budget (semcache.decision.budget): the share of semantic hits that may be wrong, and whether
    # the line is learned from evidence (else ``threshold`` is the line, as it is when pinned).
    target_error: float = 0.01
    learn: bool = True

    def threshold_for(self, language: str) -> float:
        return self.thresholds.get(language, self.threshold)

    def updated(self, changes: dict[str, Any]) -> QualityPolicy:
        if "guards" in changes:
            changes = {**changes, "guards": tuple(validate_guards(changes["guards"]))}
        if "thresholds" in changes:
            changes = {**changes, "thresholds": {**self.thresholds, **validate_thresholds(changes["thresholds"])}}
        policy = replace(self, **changes)
        if not 0.0 <= policy.threshold <= 1.0:
            raise ValueError("threshold must be between 0 and 1")
        if policy.verify not in VERIFY_MODES:
            raise ValueError(f"verify must be one of {', '.join(VERIFY_MODES)}")
        if not 0.0 < policy.target_error <= MAX_TARGET_ERROR:
            raise ValueError(f"target_error must be above 0 and at most {MAX_TARGET_ERROR}")
        if not 0.0 <= policy.hit_min_latency_ms <= _MAX_HIT_MIN_LATENCY_MS:
            raise ValueError(f"hit_min_latency_ms must be between 0 and {_MAX_HIT_MIN_LATENCY_MS:.0f}")
        return policy

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "guards": list(self.guards)}


class NamespacePolicies:
    """The default policy, and the overrides operators set per namespace (persisted by the caller)."""

    def __init__(self, default: QualityPolicy, overrides: dict[str, dict[str, Any]] | None = None) -> None:
        self.default = default
        self._overrides: dict[str, dict[str, Any]] = {}
        self._policies: dict[str, QualityPolicy] = {}
        for namespace, changes in (overrides or {}).items():
            self.set(namespace, {k: v for k, v in changes.items() if k not in RETIRED_POLICY_FIELDS})

    def for_namespace(self, namespace: str) -> QualityPolicy:
        return self._policies.get(namespace, self.default)

    def overrides(self, namespace: str) -> dict[str, Any]:
        return dict(self._overrides.get(namespace, {}))

    def pinned(self, namespace: str, language: str) -> bool:
        """Whether an operator set this namespace's threshold for the script: a pin wins over learning."""
        overrides = self._overrides.get(namespace, {})
        thresholds = overrides.get("thresholds")
        return "threshold" in overrides or (isinstance(thresholds, dict) and language in thresholds)

    def set(self, namespace: str, changes: dict[str, Any]) -> QualityPolicy:
        """Merge ``changes`` into the namespace's overrides; raises ValueError on bad values."""
        current = self._overrides.get(namespace, {})
        merged = {**current, **changes}
        if isinstance(changes.get("thresholds"), dict) and isinstance(current.get("thresholds"), dict):
            # per script: setting "han" keeps the namespace's "other"
            merged["thresholds"] = {**current["thresholds"], **changes["thresholds"]}
        policy = self.default.updated(merged)
        self._overrides[namespace] = merged
        self._policies[namespace] = policy
        return policy


@dataclass
class Decision:
    """One lookup's semantic verdict, for ``GET /admin/decisions`` and for tuning."""

    namespace: str
    query: str
    decision: str  # "hit", "miss", "rejected: <reason>", or "bypass: <reason>" (the cache was not asked)
    candidate: str | None = None
    similarity: float | None = None
    guards: list[dict[str, Any]] = field(default_factory=list)
    # "yes", "no" or "failed" from the verifier; "pending" while an async one runs; None: not asked.
    verification: str | None = None
    entry_id: int | None = None
    at: float = field(default_factory=time.time)
    language: str = "latin"  # the query's script, which picked its model and threshold
    threshold: float | None = None  # the line applied: the threshold, or the one the error budget learned
    explored: bool = False  # a would-be hit answered from the upstream, to label it

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class DecisionLog:
    def __init__(self, capacity: int = 1000) -> None:
        self._items: deque[Decision] = deque(maxlen=capacity)
        self._lock = threading.Lock()

    def add(self, decision: Decision) -> None:
        with self._lock:
            self._items.append(decision)

    def recent(self, limit: int, namespace: str | None = None) -> list[Decision]:
        with self._lock:
            items = [d for d in reversed(self._items) if namespace is None or d.namespace == namespace]
        return items[:limit]


def default_policy(settings: Settings) -> QualityPolicy:
    return QualityPolicy(
        threshold=settings.threshold,
        guards=tuple(settings.guards),
        verify=settings.verify,
        thresholds=dict(settings.language_thresholds),
        scope_per_user=settings.scope_per_user,
        hit_min_latency_ms=settings.hit_min_latency_ms,
        target_error=settings.target_error,
        learn=settings.learn_threshold,
    )
