"""Error budgets: for each namespace and prompt script, the decision line (the lowest cosine a
semantic hit needs) that keeps the share of wrong hits within ``target_error``, learned from the
evidence of live traffic.

Evidence is counted in bins of cosine similarity:

- traffic: lookups whose best candidate (one the guards let through) fell in the bin;
- labels: candidates whose stored answer a judge compared with a fresh upstream answer to the same
  request (near misses just under the line, explored would-be hits), or that a client reported on
  (feedback), each correct or wrong;
- verdicts: candidates a verifier approved when asked (``semcache.decision.verification``), and the
  audits of verified hits (answered from the upstream instead and judged), right or wrong.

A verdict counts as a label only at the verifier's audited error rate: once at least
``MIN_VERIFIER_AUDITS`` audits put the upper bound of their wrong share (at the budget's
confidence) within ``target_error``, each approval counts as that bound's share of a wrong label
and the rest of a right one. Until then approvals count for nothing, neither right nor wrong, and
they never count towards ``min_labels``.

Each bin's error rate comes from strata of labels (below the lowest label, from the prior: the
target at the configured threshold, more errors below it), made non-increasing in similarity (pool
adjacent violators). The wrong share of a line is the traffic-weighted mean rate of the bins at and
above it, with a Wilson interval on the effective number of labels behind it. The line goes below
the prior only as far as that upper bound is within the target, the hits at the line itself are
not much worse, and labels reach; above it only when the evidence shows the prior breaks the
budget. Until a namespace has ``min_labels`` labels, the line is the prior and nothing is explored.

Counts are additive, so replicas on one Redis share them by adding their deltas (``share_evidence``)
and reading the totals back (``load``).
"""

from __future__ import annotations

import math
import random
import threading
import uuid
from collections import Counter
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from ..protocols import EvidenceStore

LabelSource = Literal["near_miss", "explored", "feedback"]
LABEL_SOURCES: tuple[LabelSource, ...] = ("near_miss", "explored", "feedback")

BIN_WIDTH = 0.005
LOWEST_SIMILARITY = 0.40
BINS = round((1.0 - LOWEST_SIMILARITY) / BIN_WIDTH)
# The prior's error rate falls by e for each third of (1 - prior) above it, and rises alike below.
_PRIOR_SLOPE = 3.0
_PRIOR_WEIGHT = 1.0
# Labels per stratum of the estimate: fewer make it noisy, more make it coarse.
_STRATUM_LABELS = 20
_PRIOR_MAX_ERROR = 0.5
# Of the would-be hits, at most this share is explored, and never beyond explore_share of requests:
# each request adds explore_share to its namespace's allowance, which holds at most _EXPLORE_BURST.
_EXPLORE_CHANCE = 0.5
_EXPLORE_BURST = 2.0
# The lowest a line may learn to go, in units of the prior's distance from 1 below it (0.64 for a
# prior of 0.91), and how much worse than target_error the hits at the line itself may be.
LOWEST_LINE = 3.0
MARGINAL_FACTOR = 3.0
_RECOMPUTE_EVERY = 50
# Where a learning line starts, in units of the prior's distance from 1, below 1.
START_LINE = 0.22
# Audits of verified hits before their wrong share can vouch for the verifier's approvals.
MIN_VERIFIER_AUDITS = 10
# Clients choose namespaces: past this many namespace-and-script budgets, new ones keep the prior
# and are not counted, so that neither memory nor the store grows without bound.
MAX_BUDGETS = 10_000


def conservative_start(prior: float) -> float:
    """Where a line that learns starts: ``START_LINE`` of the prior's distance from 1 below 1 (0.98
    for MiniLM's 0.91). Under it, candidates are verified (or, with ``verify: off``, not served) until
    evidence certifies a lower line; the prior alone, unverified, serves too many look-alikes."""
    return round(1.0 - START_LINE * (1.0 - prior), 4)


def bin_of(similarity: float) -> int | None:
    """The bin of a cosine, or None below the lowest bin (never labelled, never counted)."""
    if similarity < LOWEST_SIMILARITY:
        return None
    return min(BINS - 1, int((similarity - LOWEST_SIMILARITY) / BIN_WIDTH + 1e-9))


def bin_floor(index: int) -> float:
    return round(LOWEST_SIMILARITY + index * BIN_WIDTH, 4)


@dataclass(frozen=True)
class EvidenceBatch:
    """Counts on their way to the store, under an id that makes adding them idempotent."""

    id: str
    deltas: dict[tuple[str, str], dict[str, int]]


@dataclass(frozen=True)
class BudgetRule:
    """What the operator set for a namespace's script: the prior, the target, and whether to learn."""

    prior: float  # the configured threshold
    target_error: float
    learn: bool = True  # False: the line is the prior (a pinned threshold, or learning turned off)
    # Where a learning line starts, before evidence vouches for a lower one (None: at the prior).
    start: float | None = None

    @property
    def starting_line(self) -> float:
        return self.prior if self.start is None else self.start


@dataclass(frozen=True)
class Estimate:
    """The state of one namespace's script, for /stats, /metrics and /admin."""

    line: float
    prior: float
    learning: bool  # enough labels: the line is learned
    pinned: bool
    target_error: float
    estimated_error: float
    interval: tuple[float, float]
    confidence: float
    labels: dict[str, int]
    labels_total: int
    traffic: int  # lookups with a candidate the guards passed
    hits_given_up: int  # would-be hits at the prior that the line held back
    explored: int
    verdicts: int = 0  # approvals the verifier gave when asked
    verdict_labels: int = 0  # of them, those counted as labels now: all once the audits vouch, else none
    verifier_audits: int = 0
    verifier_audits_wrong: int = 0
    verifier_error_bound: float = 1.0  # the upper bound of the audited wrong share (1.0: too few audits)

    def as_dict(self) -> dict[str, Any]:
        return {
            "decision_line": self.line, "prior_threshold": self.prior, "learning": self.learning,
            "pinned": self.pinned, "target_error": self.target_error,
            "estimated_error": round(self.estimated_error, 4),
            "interval": [round(self.interval[0], 4), round(self.interval[1], 4)], "confidence": self.confidence,
            "labels": dict(self.labels), "labels_total": self.labels_total, "traffic": self.traffic,
            "hits_given_up": self.hits_given_up, "explored": self.explored,
            "verdicts": self.verdicts, "verdict_labels": self.verdict_labels,
            "verifier_audits": self.verifier_audits, "verifier_audits_wrong": self.verifier_audits_wrong,
            "verifier_error_bound": round(self.verifier_error_bound, 4),
        }  # fmt: skip


@dataclass
class _Evidence:
    traffic: list[int] = field(default_factory=lambda: [0] * BINS)
    correct: list[int] = field(default_factory=lambda: [0] * BINS)
    wrong: list[int] = field(default_factory=lambda: [0] * BINS)
    verdicts: list[int] = field(default_factory=lambda: [0] * BINS)  # a verifier's approvals
    # labels by source, hits given up, explored, audits of verified hits and the wrong ones among them
    counters: Counter[str] = field(default_factory=Counter)

    def add(self, counts: dict[str, int]) -> None:
        for name, count in counts.items():
            kind, _, rest = name.partition(":")
            if kind in ("t", "c", "w", "y") and rest.isdigit() and int(rest) < BINS:
                {"t": self.traffic, "c": self.correct, "w": self.wrong, "y": self.verdicts}[kind][int(rest)] += count
            elif kind in ("src", "n"):
                self.counters[name] += count

    @property
    def labels_total(self) -> int:
        """The judges' and clients' labels (a verifier's approvals are not among them)."""
        return sum(self.correct) + sum(self.wrong)

    def verifier_error_bound(self, z: float) -> float:
        """The upper bound of the audited verified hits' wrong share (1.0 while they are too few)."""
        audited = self.counters["n:audited"]
        if audited < MIN_VERIFIER_AUDITS:
            return 1.0
        return wilson(self.counters["n:audited_wrong"] / audited, audited, z)[1]

    def labels(self, rule: BudgetRule, z: float) -> _Labels:
        """The labels per bin: the judges' and clients', and the verifier's approvals at their audited
        error rate once the audits vouch for it within ``target_error``."""
        bound = self.verifier_error_bound(z)
        if bound > rule.target_error or not any(self.verdicts):
            return _Labels([float(n) for n in self.correct], [float(n) for n in self.wrong], 0)
        correct = [c + (1.0 - bound) * y for c, y in zip(self.correct, self.verdicts, strict=True)]
        wrong = [w + bound * y for w, y in zip(self.wrong, self.verdicts, strict=True)]
        return _Labels(correct, wrong, sum(self.verdicts))


@dataclass(frozen=True)
class _Labels:
    correct: list[float]
    wrong: list[float]
    verdicts: int  # the approvals among them

    def lowest(self) -> int | None:
        """The lowest bin with a label."""
        return next((i for i in range(BINS) if self.correct[i] + self.wrong[i] > 0), None)


class ErrorBudgets:
    """The evidence and decision lines of every namespace and script. Thread-safe."""

    def __init__(
        self,
        *,
        min_labels: int = 50,
        confidence: float = 0.7,
        explore_share: float = 0.05,
        rng: random.Random | None = None,
    ) -> None:
        self.min_labels = min_labels
        self.confidence = confidence
        self.explore_share = explore_share
        self._z = NormalDist().inv_cdf(confidence)
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._evidence: dict[tuple[str, str], _Evidence] = {}
        self._deltas: dict[tuple[str, str], Counter[str]] = {}
        self._pending: EvidenceBatch | None = None  # taken for the store, not known to be stored
        self._lines: dict[tuple[str, str, BudgetRule], float] = {}  # cached until the evidence changes
        self._unseen: Counter[tuple[str, str]] = Counter()  # changes since its lines were worked out
        self._allowance: dict[str, float] = {}  # per namespace: explorations it may make now

    @property
    def z(self) -> float:
        """The one-sided normal quantile of ``confidence``: how sure a bound must be."""
        return self._z

    # -- deciding ----------------------------------------------------------------------------------

    def line(self, namespace: str, language: str, rule: BudgetRule) -> float:
        """The cosine a semantic hit needs in this namespace and script."""
        if not rule.learn:
            return rule.prior
        key = (namespace, language, rule)
        with self._lock:
            line = self._lines.get(key)
            if line is None:
                evidence = self._evidence.get((namespace, language))
                if evidence is None:  # not kept: only budgets with evidence (at most MAX_BUDGETS) are
                    return rule.starting_line
                line = self._lines[key] = self._learned_line(evidence, rule)
            return line

    def note_request(self, namespace: str) -> None:
        """One more semantic lookup: the namespace may explore a little more (up to a burst)."""
        with self._lock:
            allowance = self._allowance.get(namespace)
            if allowance is None and len(self._allowance) >= MAX_BUDGETS:
                return
            self._allowance[namespace] = min((allowance or 0.0) + self.explore_share, _EXPLORE_BURST)

    def should_explore(self, namespace: str, language: str, rule: BudgetRule) -> bool:
        """Whether to answer this would-be hit from the upstream instead, to label it: only once the
        line is learned, by chance, and within ``explore_share`` of this namespace's requests.
        Each yes is counted as explored."""
        if not rule.learn:
            return False
        with self._lock:
            evidence = self._evidence.get((namespace, language))
            if evidence is None or evidence.labels_total < self.min_labels:
                return False
        if not self.spend_exploration(namespace):
            return False
        self._add(namespace, language, {"n:explored": 1})
        return True

    def labelled(self, namespace: str, language: str) -> bool:
        """Whether the namespace's script has any labels yet: its judge's verdicts have begun to count."""
        with self._lock:
            evidence = self._evidence.get((namespace, language))
            return evidence is not None and evidence.labels_total > 0

    def spend_exploration(self, namespace: str) -> bool:
        """Whether to spend one full upstream answer beyond the misses now (an explored hit, an
        audited verified hit, a re-asked exact hit): by chance, within ``explore_share`` of the
        namespace's requests. Every kind draws on the one allowance."""
        if self.explore_share <= 0:
            return False
        with self._lock:
            if self._allowance.get(namespace, 0.0) < 1.0 or self._rng.random() >= _EXPLORE_CHANCE:
                return False
            self._allowance[namespace] -= 1.0
        return True

    # -- evidence ----------------------------------------------------------------------------------

    def candidate_seen(self, namespace: str, language: str, similarity: float, rule: BudgetRule, line: float) -> None:
        """A lookup's best candidate that the guards let through: traffic, and a hit given up if the
        prior would have served it."""
        index = bin_of(similarity)
        counts = {} if index is None else {f"t:{index}": 1}
        if rule.prior <= similarity < line:
            counts["n:given_up"] = 1
        self._add(namespace, language, counts)

    def label(self, namespace: str, language: str, similarity: float, correct: bool, source: LabelSource) -> None:
        """Whether the candidate at ``similarity`` would have been a right answer."""
        index = bin_of(similarity)
        if index is None:
            return
        self._add(namespace, language, {f"{'c' if correct else 'w'}:{index}": 1, f"src:{source}": 1})

    def verdict(self, namespace: str, language: str, similarity: float) -> None:
        """A verifier approved the candidate at ``similarity`` when asked (a remembered verdict is
        not news: it was counted when given)."""
        index = bin_of(similarity)
        if index is not None:
            self._add(namespace, language, {f"y:{index}": 1})

    def audited(self, namespace: str, language: str, correct: bool) -> None:
        """A judge's label of a verified hit answered from the upstream instead: the verifier's audit."""
        self._add(namespace, language, {"n:audited": 1, **({} if correct else {"n:audited_wrong": 1})})

    def _add(self, namespace: str, language: str, counts: dict[str, int]) -> None:
        if not counts:
            return
        key = (namespace, language)
        with self._lock:
            if key not in self._evidence and len(self._evidence) >= MAX_BUDGETS:
                return
            self._evidence.setdefault(key, _Evidence()).add(counts)
            self._deltas.setdefault(key, Counter()).update(counts)
            self._unseen[key] += 1
            # A label can move the line: it is redone now, in the labelling task, rather than by the
            # next lookup. Traffic moves it little, so lines are redone every so often.
            if any(name[0] in "cwy" or name.startswith("n:audited") for name in counts):
                self._unseen[key] = 0
                self._relearn_lines(namespace, language)
            elif self._unseen[key] >= _RECOMPUTE_EVERY:
                self._unseen[key] = 0
                self._forget_lines(namespace, language)

    def _relearn_lines(self, namespace: str, language: str) -> None:
        """Work out again the lines in use for this namespace and script (with the lock held)."""
        evidence = self._evidence[(namespace, language)]
        for key in [k for k in self._lines if k[0] == namespace and k[1] == language]:
            self._lines[key] = self._learned_line(evidence, key[2])

    def _forget_lines(self, namespace: str, language: str | None) -> None:
        for key in [k for k in self._lines if k[0] == namespace and language in (None, k[1])]:
            del self._lines[key]

    # -- persistence -------------------------------------------------------------------------------

    def pending_batch(self) -> EvidenceBatch | None:
        """The evidence to add to the store: the batch that has not been stored yet, if any (sent
        again with its id, so that it counts once), else what was added since the last one."""
        with self._lock:
            if self._pending is None and self._deltas:
                deltas, self._deltas = self._deltas, {}
                self._pending = EvidenceBatch(uuid.uuid4().hex, {key: dict(c) for key, c in deltas.items()})
            return self._pending

    def batch_stored(self, batch: EvidenceBatch) -> None:
        with self._lock:
            if self._pending is batch:
                self._pending = None

    def load(self, totals: dict[tuple[str, str], dict[str, int]]) -> None:
        """Replace the evidence with the store's totals (every replica's), plus what is not flushed yet."""
        with self._lock:
            evidence: dict[tuple[str, str], _Evidence] = {}
            for key, counts in totals.items():
                evidence.setdefault(key, _Evidence()).add(counts)
            unstored = [*self._deltas.items(), *(self._pending.deltas.items() if self._pending else [])]
            for key, counts in unstored:
                evidence.setdefault(key, _Evidence()).add(dict(counts))
            self._evidence = evidence
            self._lines.clear()

    # -- reporting ---------------------------------------------------------------------------------

    def keys(self, namespace: str | None = None, limit: int | None = None) -> list[tuple[str, str]]:
        """The (namespace, script) budgets with evidence, of ``namespace`` alone if given, busiest first."""
        with self._lock:
            found = [(sum(e.traffic), key) for key, e in self._evidence.items() if namespace in (None, key[0])]
        found.sort(key=lambda item: (-item[0], item[1]))
        return [key for _, key in found[:limit]]

    def forget(self, namespace: str) -> None:
        """Drop what this process knows of a namespace's evidence (an operator's reset)."""
        with self._lock:
            for key in [k for k in self._evidence if k[0] == namespace]:
                del self._evidence[key]
            for key in [k for k in self._deltas if k[0] == namespace]:
                del self._deltas[key]
            if self._pending is not None:
                kept = {key: counts for key, counts in self._pending.deltas.items() if key[0] != namespace}
                self._pending = EvidenceBatch(self._pending.id, kept)
            self._forget_lines(namespace, None)

    def estimate(self, namespace: str, language: str, rule: BudgetRule, pinned: bool = False) -> Estimate:
        line = self.line(namespace, language, rule)
        with self._lock:
            evidence = self._evidence.get((namespace, language)) or _Evidence()
            counted = evidence.labels(rule, self._z)
            rate, low, high = self._wrong_share(evidence, _fit(counted, rule), line)
            labels: dict[str, int] = {source: evidence.counters[f"src:{source}"] for source in LABEL_SOURCES}
            return Estimate(
                line=round(line, 4), prior=rule.prior, learning=rule.learn and evidence.labels_total >= self.min_labels,
                pinned=pinned, target_error=rule.target_error, estimated_error=rate,
                interval=(low, high),
                confidence=self.confidence, labels=labels, labels_total=evidence.labels_total,
                traffic=sum(evidence.traffic), hits_given_up=evidence.counters["n:given_up"],
                explored=evidence.counters["n:explored"], verdicts=sum(evidence.verdicts),
                verdict_labels=counted.verdicts, verifier_audits=evidence.counters["n:audited"],
                verifier_audits_wrong=evidence.counters["n:audited_wrong"],
                verifier_error_bound=evidence.verifier_error_bound(self._z),
            )  # fmt: skip

    # -- the estimate --------------------------------------------------------------------------------

    def _learned_line(self, evidence: _Evidence, rule: BudgetRule) -> float:
        # Approvals alone never switch learning on: they are only the candidates a verifier let
        # through, and only judges' labels (its "no"s become near misses) show how the rest fare.
        if evidence.labels_total < self.min_labels:
            return rule.starting_line
        counted = evidence.labels(rule, self._z)
        fit = _fit(counted, rule)
        lowest_label = counted.lowest()
        if lowest_label is None:
            return rule.starting_line
        # Never below the labels, nor further below the prior than its band: a namespace's own
        # clients make its evidence, and must not talk its line down to nothing.
        floor = max(bin_floor(lowest_label), rule.prior - LOWEST_LINE * (1.0 - rule.prior))
        certified = 1.0  # no line within budget: no semantic hits
        for index, (rate, labels) in _lowering(evidence.traffic, fit):
            if bin_floor(index) < floor - 1e-9:
                break
            # The hits at the line itself may not be much worse than the budget, however many
            # easy hits above it dilute the average.
            marginal = fit.rates[index] <= MARGINAL_FACTOR * rule.target_error
            if marginal and wilson(rate, labels, self._z)[1] <= rule.target_error:
                certified = bin_floor(index)
        if certified <= rule.starting_line:
            return certified  # as low as the evidence vouches for, with confidence
        _, low, _ = self._wrong_share(evidence, fit, rule.starting_line)
        if low <= rule.target_error:
            return rule.starting_line  # nothing shows that the start breaks the budget
        return certified  # it does: up to a line the evidence vouches for, or none

    def _wrong_share(self, evidence: _Evidence, fit: _Fit, line: float) -> tuple[float, float, float]:
        """The estimated wrong share of hits at ``line``, and its lower and upper confidence bounds."""
        first = bin_of(line)
        if first is None:
            first = 0
        elif bin_floor(first) < line - 1e-9:
            first += 1  # a line inside a bin (the prior) serves only the bins above it
        # A line of 1.0 serves nothing; its estimate is the top bin's, which shows why it is there.
        first = min(first, BINS - 1)
        rate, labels = fit.rates[first], fit.weights[first]  # no traffic yet: the rate at the line
        for index, estimate in _lowering(evidence.traffic, fit):
            if index < first:
                break
            rate, labels = estimate
        low, high = wilson(rate, labels, self._z)
        return rate, low, high


def wilson(share: float, labels: float, z: float) -> tuple[float, float]:
    """The Wilson score interval of a share seen in ``labels`` labels (fewer than one: no knowledge)."""
    if labels < 1:
        return 0.0, 1.0
    centre = share + z * z / (2 * labels)
    spread = z * math.sqrt(share * (1 - share) / labels + z * z / (4 * labels * labels))
    scale = 1 + z * z / labels
    return max(0.0, (centre - spread) / scale), min(1.0, (centre + spread) / scale)


@dataclass(frozen=True)
class _Fit:
    rates: list[float]  # per bin, non-increasing in similarity
    weights: list[float]  # per bin, the labels behind its rate
    blocks: list[int]  # per bin, the block of pooled bins it belongs to (pooled bins share one rate)


def _lowering(traffic: list[int], fit: _Fit) -> list[tuple[int, tuple[float, float]]]:
    """For each line, from the top bin down: the traffic-weighted wrong share of the bins it serves,
    and the effective number of labels behind it (Kish: 1 / sum of block share^2 / block labels).
    Lines above all traffic are left out."""
    out = []
    served = wrong = 0.0
    done = 0.0  # sum over finished blocks of (block traffic)^2 / block labels
    block, block_traffic = -1, 0.0
    for index in range(BINS - 1, -1, -1):
        if fit.blocks[index] != block:
            if block >= 0:
                done += block_traffic**2 / fit.weights[index + 1]
            block, block_traffic = fit.blocks[index], 0.0
        served += traffic[index]
        wrong += traffic[index] * fit.rates[index]
        block_traffic += traffic[index]
        if served:
            spread = done + block_traffic**2 / fit.weights[index]
            out.append((index, (wrong / served, served**2 / spread)))
    return out


async def share_evidence(budgets: ErrorBudgets, store: EvidenceStore) -> None:
    """Add this process's new evidence to the store's totals, then take up the totals: with Redis,
    every replica's evidence. A batch the store may not have taken (an error, a timeout, a
    cancellation) is sent again next time under the same id, and the store counts it once."""
    batch = budgets.pending_batch()
    if batch is not None:
        await store.add_evidence(batch.id, batch.deltas)
        budgets.batch_stored(batch)
    budgets.load(await store.evidence())


def prior_error(similarity: float, rule: BudgetRule) -> float:
    """The prior's error rate at a cosine: the target at the prior threshold."""
    scale = max(1.0 - rule.prior, 0.01) / _PRIOR_SLOPE
    return min(_PRIOR_MAX_ERROR, rule.target_error * math.exp((rule.prior - similarity) / scale))


def _fit(counted: _Labels, rule: BudgetRule) -> _Fit:
    """Each bin's error rate, from strata of at least ``_STRATUM_LABELS`` labels taken from the
    lowest label up; the top stratum reaches to 1.0, so bins above every label share the rate of the
    labels below them, which bounds theirs (wrong answers grow rarer as similarity rises). The
    strata's rates are made non-increasing in similarity (pool adjacent violators). Below the lowest
    label only the prior speaks, bin by bin, with the weight of one label each."""
    labelled = [i for i in range(BINS) if counted.wrong[i] + counted.correct[i] > 0]
    # (first bin, end bin, wrong, labels), from the top; counts are fractional where approvals count
    strata: list[tuple[int, int, float, float]] = []
    if labelled:
        bottom_up: list[list[Any]] = []  # [first, end, wrong, labels]
        start, wrong, labels = labelled[0], 0.0, 0.0
        for index in range(labelled[0], BINS):
            wrong += counted.wrong[index]
            labels += counted.wrong[index] + counted.correct[index]
            if labels >= _STRATUM_LABELS - 1e-9:
                bottom_up.append([start, index + 1, wrong, labels])
                start, wrong, labels = index + 1, 0.0, 0.0
        if bottom_up and labels < _STRATUM_LABELS - 1e-9:  # the few top labels join the stratum below
            top = bottom_up[-1]
            top[1], top[2], top[3] = BINS, top[2] + wrong, top[3] + labels
        elif start < BINS:
            bottom_up.append([start, BINS, wrong, labels])
        else:
            bottom_up[-1][1] = BINS
        strata = [(a, b, w, n) for a, b, w, n in reversed(bottom_up)]
    end = labelled[0] if labelled else BINS
    means = [w / n for _, _, w, n in strata]
    weights = [float(n) for _, _, _, n in strata]
    for index in range(end - 1, -1, -1):  # below every label, each bin has the prior's rate for it
        means.append(prior_error(min(bin_floor(index) + BIN_WIDTH / 2, rule.prior), rule))
        weights.append(_PRIOR_WEIGHT)
        strata.append((index, index + 1, 0.0, 0.0))
    rates, weights_of, blocks = [0.0] * BINS, [0.0] * BINS, [0] * BINS
    # Pooled from the top down, a rate must not fall: reversed, it is the non-increasing fit.
    pooled = non_increasing_fit(means[::-1], weights[::-1])
    for number, (start, stop, mean, weight) in enumerate(pooled):
        for stratum in strata[len(strata) - stop : len(strata) - start]:
            for index in range(stratum[0], stratum[1]):
                rates[index], weights_of[index], blocks[index] = mean, weight, number
    return _Fit(rates, weights_of, blocks)


def non_increasing_fit(means: list[float], weights: list[float]) -> list[tuple[int, int, float, float]]:
    """The non-increasing fit of ``means``: blocks of (start, end, mean, weight)."""
    blocks: list[list[float]] = []  # [start, end, mean, weight]
    for index, (mean, weight) in enumerate(zip(means, weights, strict=True)):
        blocks.append([index, index + 1, mean, weight])
        while len(blocks) > 1 and blocks[-2][2] < blocks[-1][2]:
            right = blocks.pop()
            left = blocks[-1]
            total = left[3] + right[3]
            left[2] = (left[2] * left[3] + right[2] * right[3]) / total
            left[1], left[3] = right[1], total
    return [(int(s), int(e), m, w) for s, e, m, w in blocks]
