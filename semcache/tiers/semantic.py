"""Semantic tier: the nearest earlier prompt of the same scope that passes the namespace's policy.

A candidate is served only if, in order:
1. its cosine similarity reaches the namespace's decision line for the prompt's script (each script
   has its own model, and so its own line): the line its error budget learned (``semcache.decision.budget``),
   or the threshold while it has too little evidence or an operator pinned it; and the entry's own
   learned threshold;
2. it was never reported wrong for this query (negative feedback);
3. every enabled guard passes (numbers, negation, entities, ...);
4. under the line but within the verification band (``semcache.decision.verification``), a model says the
   cached answer answers the query: the first such candidate is verified, and decides. A few
   verified hits are audited instead: answered from the upstream, and judged. Each approval the
   verifier gives when asked, and each audit, is the error budget's evidence: approvals count as
   labels at the verifier's audited error rate. Where verification is on, a candidate that a
   doubting guard flags (``guards.DOUBTING``, when not enabled to veto) is verified above the line
   too, and labels no line.
Each lookup leaves a ``Decision`` that explains the outcome. A similar request still in flight is
judged by the same rules (``accepts_in_flight``), less those that need a stored entry.

The best candidate that passes every check but the line is evidence: its similarity counts as
traffic, and if it fell just under the line (a near miss), or is one of the few would-be hits
explored, the lookup carries it as a ``Probe``, to be labelled once the request's own upstream
answer is back.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from ..decision import guards
from ..decision.budget import BudgetRule, ErrorBudgets, conservative_start
from ..decision.quality import Decision, NamespacePolicies, QualityPolicy
from ..decision.verification import Verdict, Verification, VerificationCase, band_start
from ..entries import CacheEntry
from ..feedback import WrongAnswers
from ..index import ScopedVectorIndex
from ..keys import RequestKey
from ..observer import NullObserver, Observer, timed
from ..protocols import EntryReader
from .base import Hit

_CANDIDATES = 4
_INLINE_TOKENIZE_CHARS = 4_000
# "audit": a verified hit answered from the upstream instead, to check the verifier; "reasked": an
# exact hit answered from the upstream instead, to show the judge two answers to one question.
ProbeSource = Literal["near_miss", "explored", "audit", "reasked"]


InFlightAction = Literal["serve", "verify", "no"]


@dataclass(frozen=True)
class InFlightVerdict:
    """Whether a similar request still in flight may answer this one: "serve", "verify" once its
    answer is in, or "no", judged against ``line``. ``doubted``: to be verified because a doubting
    guard flagged it above the line. Both are decided when the request is accepted, so that a line
    moving while its answer is awaited changes neither what the verdict teaches nor what is logged."""

    action: InFlightAction
    line: float
    doubted: bool = False


@dataclass(frozen=True)
class Probe:
    """A candidate to label once the request's own upstream answer is back."""

    entry_id: int
    similarity: float
    prompt: str
    answer: str
    source: ProbeSource


@dataclass(frozen=True)
class CandidateCheck:
    """A candidate's check: why it may not answer (``reason``), or the doubting guard that wants it
    verified before it is served, however high it scores (``doubt``)."""

    reason: str | None = None
    doubt: str | None = None


@dataclass(frozen=True)
class SemanticResult:
    hit: Hit | None = None
    probe: Probe | None = None


class SemanticTier:
    def __init__(
        self,
        index: ScopedVectorIndex,
        store: EntryReader,
        policies: NamespacePolicies,
        verification: Verification | None = None,
        on_decision: Callable[[Decision], None] | None = None,
        *,
        budgets: ErrorBudgets | None = None,
        wrong_answers: WrongAnswers | None = None,
        observer: Observer | None = None,
        reads_whole: Callable[[RequestKey, str], bool] | None = None,
    ) -> None:
        self.index = index
        self.budgets = budgets or ErrorBudgets()
        self.wrong_answers = wrong_answers or WrongAnswers()
        self._store = store
        self.policies = policies
        self.verification = verification or Verification(None)
        self._on_decision = on_decision
        self._observer = observer or NullObserver()
        # Whether the key's embedding model reads all of a text: a vector of the start alone
        # cannot tell two prompts apart that differ further on.
        self._reads_whole = reads_whole
        # For vectors that arrive without their candidates (see ``candidates``).
        self._search_thread = ThreadPoolExecutor(1, "semcache-faiss")

    def candidates(self, key: RequestKey, vector: np.ndarray) -> list[tuple[int, float]]:
        """The nearest entries of the request's scope, as (id, cosine). Blocking, and safe in any thread."""
        return self.candidates_many(key.scope, vector.reshape(1, -1))[0]

    def candidates_many(self, scope: str, vectors: np.ndarray) -> list[list[tuple[int, float]]]:
        """``candidates`` for each row of ``vectors``, in one search: the pipeline runs it in the
        embedding thread, right after the model, for every prompt of the batch with this scope."""
        with timed(self._observer, "index_search"):
            return self.index.search_many(scope, vectors, _CANDIDATES)

    def rule(self, namespace: str, language: str) -> BudgetRule:
        """The namespace's error budget for the script: its prior, its target, whether it learns."""
        policy = self.policies.for_namespace(namespace)
        learn = policy.learn and not self.policies.pinned(namespace, language)
        prior = policy.threshold_for(language)
        # A line that learns starts safe, and comes down as far as its evidence vouches for.
        start = conservative_start(prior) if learn else None
        return BudgetRule(prior, policy.target_error, learn, start)

    def line(self, namespace: str, language: str) -> float:
        return self.budgets.line(namespace, language, self.rule(namespace, language))

    def quality(self, namespace: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """The error budget of each namespace and script with evidence (of ``namespace`` alone, its
        Latin-script budget at least), the busiest first: for /stats, /metrics and /admin."""
        keys = self.budgets.keys(namespace, limit)
        if namespace is not None and not keys:
            keys = [(namespace, "latin")]
        estimates = []
        for name, language in keys:
            rule = self.rule(name, language)
            estimate = self.budgets.estimate(name, language, rule, pinned=self.policies.pinned(name, language))
            verification = self.verification.describe(name, language, rule.prior, rule.target_error, self.budgets.z)
            verification["mode"] = self._verify_mode(self.policies.for_namespace(name))
            estimates.append({"namespace": name, "language": language, **estimate.as_dict(),
                              "verification": verification})  # fmt: skip
        return estimates

    async def lookup(
        self,
        key: RequestKey,
        vector: np.ndarray,
        now: float,
        candidates: list[tuple[int, float]] | None = None,
        *,
        explore: bool = True,
        headers: Mapping[str, str] | None = None,
    ) -> SemanticResult:
        """The best candidate that passes the policy; ``candidates`` are searched here unless given.
        ``explore=False``: a would-be hit is a hit (the cache API has no upstream answer to compare).
        ``headers``: the request's, whose credentials a verification uses."""
        policy = self.policies.for_namespace(key.namespace)
        if candidates is None:
            loop = asyncio.get_running_loop()
            candidates = await loop.run_in_executor(self._search_thread, self.candidates, key, vector)
        rule = self.rule(key.namespace, key.language)
        line = self.budgets.line(key.namespace, key.language, rule)
        # Near misses are labelled only where the line may yet move, from a floor that does not move with it.
        floor = band_start(rule.prior) if rule.learn else line
        verify = self._verify_mode(policy)
        edge = self.verification.lower_edge(key.namespace, key.language, rule.prior) if verify != "off" else 1.0
        # Under the edge, down to where the band starts, a few candidates are verified without being served.
        probe_floor = band_start(rule.prior) if verify != "off" else 1.0
        lowest = min(floor, probe_floor)
        decision = Decision(
            namespace=key.namespace, query=key.prompt, decision="miss", language=key.language, threshold=line
        )
        rejected: Decision | None = None
        asked = False  # a verification was asked for this request
        query_whole: bool | None = None  # read whole by the model: worked out once, when a candidate needs it
        for entry_id, similarity in candidates:
            if decision.candidate is None:
                decision.entry_id, decision.similarity = entry_id, round(similarity, 4)
            if similarity < lowest:
                if decision.candidate is None:  # traffic far below the line, where nothing is known
                    self.budgets.candidate_seen(key.namespace, key.language, similarity, rule, line)
                break
            with timed(self._observer, "store_read"):
                entry = await self._store.get(entry_id)
            if entry is None or entry.is_expired(now) or entry.scope != key.scope:
                continue  # removed or expired since it was indexed; the sweeper will drop it
            decision = Decision(namespace=key.namespace, query=key.prompt, decision="miss", candidate=entry.prompt,
                                similarity=round(similarity, 4), entry_id=entry_id, language=key.language,
                                threshold=line)  # fmt: skip
            if query_whole is None:
                query_whole = await self._read_whole(key, key.prompt)
            checked = await self._check(
                policy, key, vector, entry, entry.prompt, similarity, decision, query_whole, verify != "off"
            )
            if checked.reason is not None:
                decision.decision = f"rejected: {checked.reason}"
                rejected = rejected or (decision if similarity >= line else None)
                continue
            assert entry.id is not None
            self.budgets.candidate_seen(key.namespace, key.language, similarity, rule, line)
            if checked.doubt and similarity >= line:
                if asked:
                    break  # one verification per request
                asked = True
                case = VerificationCase(key.namespace, key.language, key.prompt, key.exact, entry.id,
                                        entry.prompt, entry.answer, key.model, similarity, doubted=True)  # fmt: skip
                if await self._verified(case, verify, decision, headers or {}):
                    return self._verified_hit(decision, entry, similarity, audit=False)  # no evidence of the band
                decision.decision = f"rejected: guard {checked.doubt} doubts it, and it was not verified"
                rejected = rejected or decision
                continue  # a certified candidate under it may still answer
            if similarity < line:
                if similarity >= edge and not asked:
                    case = VerificationCase(key.namespace, key.language, key.prompt, key.exact, entry.id,
                                            entry.prompt, entry.answer, key.model, similarity)  # fmt: skip
                    if await self._verified(case, verify, decision, headers or {}):
                        return self._verified_hit(decision, entry, similarity, audit=explore)
                elif similarity >= probe_floor and not asked and self.verification.probe_due(key.namespace):
                    case = VerificationCase(key.namespace, key.language, key.prompt, key.exact, entry.id,
                                            entry.prompt, entry.answer, key.model, similarity)  # fmt: skip
                    self.verification.verify_later(case, headers or {}, functools.partial(self._approved, case))
                # A near miss; the log keeps why a candidate above the line was refused.
                self._decide(decision if decision.verification else rejected or decision)
                if similarity < floor:
                    return SemanticResult()
                return SemanticResult(probe=Probe(entry.id, similarity, entry.prompt, entry.answer, "near_miss"))
            if explore and self.budgets.should_explore(key.namespace, key.language, rule):
                decision.decision, decision.explored = "explored: answered from the upstream to label it", True
                self._decide(decision)
                return SemanticResult(probe=Probe(entry.id, similarity, entry.prompt, entry.answer, "explored"))
            decision.decision = "hit"
            self._decide(decision)
            hit = Hit(tier="semantic", answer=entry.answer, matched_prompt=entry.prompt, entry_id=entry.id,
                      similarity=min(similarity, 1.0))  # fmt: skip
            return SemanticResult(hit=hit)
        self._decide(decision)
        return SemanticResult()

    def _verified_hit(self, decision: Decision, entry: CacheEntry, similarity: float, *, audit: bool) -> SemanticResult:
        """A candidate the verifier approved: served, or, where ``audit`` and its share is due,
        answered from the upstream to audit the verifier."""
        assert entry.id is not None
        if audit and self._audit(decision.namespace):
            decision.decision = "explored: a verified hit, answered from the upstream to audit it"
            decision.explored = True
            self._decide(decision)
            return SemanticResult(probe=Probe(entry.id, similarity, entry.prompt, entry.answer, "audit"))
        decision.decision = "hit"
        self._decide(decision)
        hit = Hit(tier="semantic", answer=entry.answer, matched_prompt=entry.prompt, entry_id=entry.id,
                  similarity=similarity, verified=True)  # fmt: skip
        return SemanticResult(hit=hit)

    def _audit(self, namespace: str) -> bool:
        """Whether to audit this verified hit: its share has come due, and the allowance has room."""
        if not self.verification.audit_due(namespace) or not self.budgets.spend_exploration(namespace):
            return False
        self.verification.audit_taken(namespace)
        return True

    def audited(self, namespace: str, language: str, similarity: float, correct: bool, *, judge_knows: bool) -> None:
        """A judge's label of an audited verified hit. ``judge_knows``: the judge knows how this
        namespace's right answers read, so that its "different" may count against the verifier."""
        if judge_knows:
            # Approvals are weighed by the audits of a judge that could have said "different" alone:
            # counting the others' "same", the verifier's right answers would vouch for it.
            self.budgets.audited(namespace, language, correct)
        if correct or judge_knows:
            rule = self.rule(namespace, language)
            self.verification.audited(namespace, language, similarity, correct, rule.target_error, self.budgets.z)

    def _approved(self, case: VerificationCase, verdict: Verdict) -> None:
        """A verdict the verifier gave when asked: an approval is the budget's evidence (once: a
        remembered verdict is not given again)."""
        if verdict == "yes" and not case.doubted:
            self.budgets.verdict(case.namespace, case.language, case.similarity)

    async def accepts_in_flight(
        self, key: RequestKey, vector: np.ndarray, candidate: str, similarity: float
    ) -> InFlightVerdict:
        """Whether a similar request still in flight may answer this one, by the same rules as a
        stored candidate (it has no entry yet: no learned threshold, no feedback), logged alike:
        "serve", "verify" once its answer is in (under the line, within a synchronous band, or doubted),
        or "no"."""
        policy = self.policies.for_namespace(key.namespace)
        rule = self.rule(key.namespace, key.language)
        line = self.budgets.line(key.namespace, key.language, rule)
        verify = self._verify_mode(policy)
        edge = self.verification.lower_edge(key.namespace, key.language, rule.prior) if verify == "sync" else 1.0
        decision = Decision(namespace=key.namespace, query=key.prompt, decision="miss", candidate=candidate,
                            similarity=round(similarity, 4), language=key.language, threshold=line)  # fmt: skip
        if similarity < min(line, edge):
            checked = CandidateCheck("below the line")
        else:
            query_whole = await self._read_whole(key, key.prompt)
            checked = await self._check(
                policy, key, vector, None, candidate, similarity, decision, query_whole, verify != "off"
            )
        reason = checked.reason
        if reason is None and checked.doubt and verify != "sync":
            reason = f"guard {checked.doubt} doubts it, and an answer in flight is verified only in sync mode"
        action: InFlightAction = (
            "no" if reason is not None else "serve" if similarity >= line and not checked.doubt else "verify"
        )
        if action != "verify":  # a verified one is logged once its verdict is in
            decision.decision = "hit: a request in flight" if action == "serve" else f"rejected: {reason}"
            self._decide(decision)
        doubted = action == "verify" and checked.doubt is not None and similarity >= line
        return InFlightVerdict(action, line, doubted)

    async def verify_in_flight(
        self, key: RequestKey, candidate: str, answer: str, similarity: float, accepted: InFlightVerdict,
        headers: Mapping[str, str],
    ) -> bool:  # fmt: skip
        """Whether a model approves the answer of a similar request that was in flight (no entry:
        its verdict is not remembered), ``accepted`` for verification by ``accepts_in_flight``."""
        case = VerificationCase(key.namespace, key.language, key.prompt, key.exact, None, candidate, answer, key.model,
                                similarity, accepted.doubted)  # fmt: skip
        verdict = await self.verification.verify(case, headers, functools.partial(self._approved, case))
        outcome = "hit: a request in flight" if verdict == "yes" else "miss"
        self._decide(Decision(namespace=key.namespace, query=key.prompt, decision=outcome, candidate=candidate,
                              similarity=round(similarity, 4), language=key.language, threshold=accepted.line,
                              verification=verdict))  # fmt: skip
        return verdict == "yes"

    async def _check(
        self,
        policy: QualityPolicy,
        key: RequestKey,
        vector: np.ndarray,
        entry: CacheEntry | None,
        candidate: str,
        similarity: float,
        decision: Decision,
        query_whole: bool,
        verifying: bool,
    ) -> CandidateCheck:
        """Why ``candidate`` (the prompt of ``entry``, when it is stored) may not answer the query,
        or, where ``verifying``, which doubting guard wants it verified however high it scores."""
        if entry is not None:
            if entry.tool_calls is not None:
                return CandidateCheck("tool calls are served on exact matches only")
            if entry.min_similarity is not None and similarity < entry.min_similarity:
                return CandidateCheck("below the entry's learned threshold")
            if entry.id is not None and self.wrong_answers.reported_wrong(entry.id, key.exact, vector):
                return CandidateCheck("reported wrong for this query")
        if not query_whole or not await self._read_whole(key, candidate):
            return CandidateCheck("longer than the embedding model reads")
        doubting = guards.doubting(policy.guards) if verifying else ()
        check = functools.partial(guards.check, key.prompt, candidate, policy.guards + doubting)
        with timed(self._observer, "guards"):
            if len(key.prompt) + len(candidate) > _INLINE_TOKENIZE_CHARS:  # the guards read both texts whole
                results = await asyncio.to_thread(check)
            else:
                results = check()
        # A doubting guard's flag sends the candidate to verification; it never vetoes.
        decision.guards = [{"guard": r.guard, "passed": r.passed, "detail": r.detail}
                           | ({"doubt": True} if r.guard in doubting else {}) for r in results]  # fmt: skip
        failed = [r.guard for r in results if not r.passed and r.guard not in doubting]
        if failed:
            return CandidateCheck(f"guard {failed[0]}")
        doubts = [r.guard for r in results if not r.passed]
        return CandidateCheck(None, doubts[0] if doubts else None)

    async def _verified(
        self, case: VerificationCase, mode: str, decision: Decision, headers: Mapping[str, str]
    ) -> bool:
        """Whether a model approves the candidate: now (``sync``, or a verdict remembered), or in the
        background for the next time (``async``), which is no for this request."""
        approved = functools.partial(self._approved, case)
        if mode == "async" and self.verification.remembered(case) is None:
            self.verification.verify_later(case, headers, approved)
            decision.verification = "pending"
            return False
        # A remembered verdict is free, and not counted again.
        decision.verification = await self.verification.verify(case, headers, approved)
        return decision.verification == "yes"

    def _verify_mode(self, policy: QualityPolicy) -> str:
        """The namespace's ``verify``, or "off" where no verifier is configured."""
        return policy.verify if self.verification.available else "off"

    async def _read_whole(self, key: RequestKey, text: str) -> bool:
        """Whether the key's embedding model reads all of ``text`` (True when it cannot tell)."""
        if self._reads_whole is None:
            return True
        if len(text) > _INLINE_TOKENIZE_CHARS:  # tokenizing a long text takes a while
            return await asyncio.to_thread(self._reads_whole, key, text)
        return self._reads_whole(key, text)

    def close(self) -> None:
        self._search_thread.shutdown(wait=False)
        self.verification.close()

    def _decide(self, decision: Decision) -> None:
        if self._on_decision is not None:
            self._on_decision(decision)
