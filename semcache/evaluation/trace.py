"""``semcache eval trace``: replay prompts in arrival order through the real lookup pipeline.

The upstream is simulated: it answers every prompt with an answer about its cluster, worded
differently each time, as a real model would. A hit is correct exactly when the answer it returns
was written for the prompt's own cluster.
"""

from __future__ import annotations

import random
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..decision.budget import ErrorBudgets
from ..decision.judges import EmbeddingJudge, JudgeCase
from ..decision.quality import DecisionLog, NamespacePolicies, QualityPolicy
from ..decision.verification import Verification
from ..embedders import BatchingEmbedder
from ..index import ScopedVectorIndex
from ..pipeline import Pipeline, RequestControls
from ..protocols import Relayed, RelayRequest, UpstreamApi
from ..stores import SQLiteStore
from ..tiers import TemplateTier
from ..tiers.template import LiveTemplates
from ..tokens import TokenCounter
from ..wire import ChatCompletionRequest, chat_completion, completion_id
from .data import DEFAULT_SEED
from .embedding_cache import CachedEmbedder
from .verifier import ErringVerifier
from .wording import DEFAULT_COMMON_SHARE, AnswerWording

# The replay compares the budget's estimate with the wrong share of the hits served from here on.
_SETTLED_FROM = 500
_CURVE_EVERY = 50


class ClusterUpstream:
    """An ``Upstream`` that answers each prompt about its labelled cluster, in different words each
    time, and remembers which cluster every answer it gave was about.

    Its answers are as hard for an answer judge as a model's (``evaluation.wording``): two answers
    to one question differ like a model's rewordings, and answers to look-alike questions read
    nearly as alike. ``common_share`` is the share of each answer's sentences that every topic's
    answers share."""

    def __init__(
        self, cluster_of: dict[str, str], seed: int = DEFAULT_SEED, common_share: float = DEFAULT_COMMON_SHARE
    ) -> None:
        self._cluster_of = cluster_of
        self._topic: dict[str, str] = {}
        for prompt, cluster in cluster_of.items():
            self._topic.setdefault(cluster, prompt.strip())
        self._wording = AnswerWording(seed, common_share)
        self.cluster_of_answer: dict[str, str] = {}
        self.calls = 0

    async def complete(
        self, body: dict[str, Any], headers: dict[str, str], api: UpstreamApi = "chat"
    ) -> dict[str, Any]:
        answer = self.answer(body["messages"][-1]["content"])
        return chat_completion(response_id=completion_id(), model=body["model"], content=answer, usage={})

    def answer(self, prompt: str) -> str:
        """A new answer to ``prompt``, about its cluster, remembered in ``cluster_of_answer``."""
        self.calls += 1
        cluster = self._cluster_of[prompt]
        answer = self._wording.answer(prompt, self._topic[cluster], cluster, self.calls)
        self.cluster_of_answer[answer] = cluster
        return answer

    async def stream(
        self, body: dict[str, Any], headers: dict[str, str], api: UpstreamApi = "chat"
    ) -> AsyncIterator[dict[str, Any]]:
        raise NotImplementedError("the trace replay asks without streaming")
        yield {}  # pragma: no cover

    async def list_models(self, headers: dict[str, str]) -> dict[str, Any]:
        return {"object": "list", "data": []}

    async def embed(self, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        raise NotImplementedError("the trace replay asks chat completions only")

    async def relay(self, request: RelayRequest, headers: dict[str, str]) -> Relayed:
        raise NotImplementedError("the trace replay asks chat completions only")

    async def close(self) -> None:
        return None


@dataclass(frozen=True)
class Learning:
    """The error budget a replay learns with, as ``semcache serve`` builds it from the settings;
    ``None`` in place of it replays at the fixed threshold."""

    min_labels: int = 50
    confidence: float = 0.85
    explore_share: float = 0.05
    judge_min_similarity: float = 0.85


@dataclass
class TraceReport:
    requests: int
    policy: dict[str, Any]
    hits: int
    tiers: dict[str, int]
    second_half: dict[str, float]  # wrong_hit_rate and served_share of the trace's second half alone
    correct_hits: int
    wrong_hits: int
    wrong_hit_rate: float  # wrong hits / hits
    possible_hits: int  # prompts with an earlier prompt of the same cluster
    served_share: float  # correct hits / possible hits
    misses: int
    upstream_calls: int
    extra_upstream_calls: int  # full answers beyond the misses (exploration; verifications are counted apart)
    extra_upstream_share: float
    seconds: float
    seed: int = DEFAULT_SEED  # of the replay's chances
    from_pairs: bool = False  # the trace was built from labelled pairs, in an order drawn from the seed
    common_share: float = DEFAULT_COMMON_SHARE  # of the stand-in's answer sentences, common to every topic
    reported_wrong: int = 0  # wrong hits that simulated users reported (--feedback-rate)
    learned: bool = False  # the error budget was on
    explored: int = 0  # would-be hits answered from the upstream to label them
    # The error budget at the end: its line, estimate, interval and labels (``Estimate.as_dict``).
    budget: dict[str, Any] = field(default_factory=dict)
    # The semantic hits served after ``from_request`` (500, or the first half of a shorter trace):
    # the mean of the estimated wrong share in force as each was served, against the observed share.
    calibration: dict[str, float] = field(default_factory=dict)
    judge: dict[str, int] = field(default_factory=dict)  # the judge's verdicts against the clusters' truth
    judge_cutoff: dict[str, Any] = field(default_factory=dict)  # how the judge decided at the end (its describe())
    # Verifications asked (of the stand-in verifier), its verdicts against the clusters' truth, the
    # tokens they would have cost, and the band's edge at the end.
    verification: dict[str, Any] = field(default_factory=dict)
    curve: list[dict[str, float]] = field(default_factory=list)  # the learning curve, every 50 requests
    wrong_examples: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class _AuditedJudge:
    """The embedding judge, with each verdict checked against the clusters the answers were about."""

    def __init__(self, inner: EmbeddingJudge, upstream: ClusterUpstream, cluster_of: dict[str, str]) -> None:
        self._inner, self._upstream, self._cluster_of = inner, upstream, cluster_of
        self.verdicts: Counter[str] = Counter()

    async def same_answer(self, case: JudgeCase) -> bool | None:
        same = await self._inner.same_answer(case)
        truth = self._upstream.cluster_of_answer.get(case.cached_answer) == self._cluster_of.get(case.question)
        verdict = "abstained" if same is None else ("right" if same == truth else "wrong")
        self.verdicts[f"{verdict}_{'same' if truth else 'different'}"] += 1
        return same

    def describe(self, namespace: str) -> dict[str, Any]:
        return self._inner.describe(namespace)

    def forget(self, namespace: str) -> None:
        self._inner.forget(namespace)

    async def observe(self, namespace: str, embedding_model: str, question: np.ndarray, answer: str) -> None:
        await self._inner.observe(namespace, embedding_model, question, answer)

    def wants_reasked(self, namespace: str, embedding_model: str) -> bool:
        return self._inner.wants_reasked(namespace, embedding_model)

    async def observe_reasked(self, namespace: str, embedding_model: str, first: str, second: str) -> None:
        await self._inner.observe_reasked(namespace, embedding_model, first, second)

    def knows_same_answers(self, namespace: str, embedding_model: str) -> bool:
        return self._inner.knows_same_answers(namespace, embedding_model)


async def evaluate_trace(
    rows: list[dict[str, Any]],
    embedder: CachedEmbedder,
    policy: QualityPolicy,
    *,
    learning: Learning | None = None,
    advance: Callable[[int], None] | None = None,
    work_dir: Path | None = None,
    feedback_rate: float = 0.0,
    seed: int = DEFAULT_SEED,
    common_share: float = DEFAULT_COMMON_SHARE,
) -> TraceReport:
    """Replay ``rows``; with ``learning``, the namespace's line is learned from near misses,
    exploration and feedback, judged by the embedding judge. With ``feedback_rate``, that share of
    wrong hits is reported as wrong, so feedback shows its effect too. ``seed`` draws the replay's
    chances: another seed is another run of the same traffic. Candidates under the line are
    verified as ``policy.verify`` says, by a stand-in that knows the clusters and errs like a model.
    ``common_share`` is the share of the stand-in's answer sentences common to every topic."""
    started = time.monotonic()
    prompts = [str(r["prompt"]) for r in rows]
    cluster_of = {str(r["prompt"]): str(r["cluster"]) for r in rows}
    embedder.warm(prompts)
    upstream = ClusterUpstream(cluster_of, seed, common_share)
    if learning is None:
        policy = policy.updated({"learn": False})
    with tempfile.TemporaryDirectory(dir=work_dir or _fast_temp_dir()) as folder:
        store = SQLiteStore(Path(folder) / "trace.sqlite3")
        await store.open()
        batcher = BatchingEmbedder(embedder)
        judge = None
        budgets = ErrorBudgets(rng=random.Random(seed))
        if learning is not None:
            budgets = ErrorBudgets(min_labels=learning.min_labels, confidence=learning.confidence,
                                   explore_share=learning.explore_share, rng=random.Random(seed))  # fmt: skip
            judge = _AuditedJudge(EmbeddingJudge(batcher.embed, learning.judge_min_similarity), upstream, cluster_of)
        verifier = ErringVerifier(lambda query, cached: cluster_of.get(query) == cluster_of.get(cached), seed)
        verification = Verification(verifier)
        pipeline = Pipeline(
            store=store, index=ScopedVectorIndex(embedder.dimension), embedder=batcher, upstream=upstream,
            templates=LiveTemplates(TemplateTier([], 1.0)), tokens=TokenCounter(Path(folder) / "tiktoken"),
            policies=NamespacePolicies(policy), default_ttl_s=0, max_temperature=1.0, verification=verification,
            decisions=DecisionLog(10), budgets=budgets, judge=judge,
        )  # fmt: skip
        try:
            report = await _replay(pipeline, rows, upstream, advance, feedback_rate, seed)
        finally:
            pipeline.semantic.close()
            await batcher.close()
            await store.close()
    report.policy = policy.as_dict()
    report.learned = learning is not None
    report.seed = seed
    report.common_share = common_share
    report.judge = dict(judge.verdicts) if judge is not None else {}
    report.judge_cutoff = judge.describe("eval") if judge is not None else {}
    prior = policy.threshold_for("latin")
    report.verification = {"mode": policy.verify, "asked": verifier.calls, "verdicts": dict(verifier.verdicts),
                           "share_of_requests": round(verifier.calls / len(rows), 4) if rows else 0.0,
                           "prompt_tokens": verifier.prompt_tokens,
                           "band": verification.describe("eval", "latin", prior, policy.target_error,
                                                         budgets.z)}  # fmt: skip
    report.seconds = round(time.monotonic() - started, 2)
    return report


async def _replay(
    pipeline: Pipeline,
    rows: list[dict[str, Any]],
    upstream: ClusterUpstream,
    advance: Callable[[int], None] | None,
    feedback_rate: float,
    seed: int,
) -> TraceReport:
    tiers = {"exact": 0, "template": 0, "semantic": 0}
    correct = wrong = misses = reported = explored = 0
    late_correct = late_wrong = 0
    half = len(rows) // 2
    settled_from = min(_SETTLED_FROM, half)
    settled = Counter[str]()  # semantic hits after settled_from, right and wrong
    estimated: list[float] = []  # the estimated wrong share in force at each of them
    chance = random.Random(seed)
    examples: list[dict[str, Any]] = []
    curve: list[dict[str, float]] = []
    possible_so_far = 0
    for position, row in enumerate(rows):
        request = ChatCompletionRequest.model_validate(
            {"model": "eval", "messages": [{"role": "user", "content": str(row["prompt"])}]}
        )
        possible_so_far += row.get("duplicate_of") is not None
        lookup = await pipeline.lookup(request, "eval", RequestControls())
        if lookup.hit is None:
            if lookup.explored:
                explored += 1
            else:
                misses += 1
            await pipeline.forward(lookup, {})
            await pipeline.labels_settled()  # as a live service would have, by the next similar request
            if pipeline.verification is not None:
                await pipeline.verification.settled()
        else:
            tiers[lookup.hit.tier] += 1
            right = upstream.cluster_of_answer.get(lookup.hit.answer) == str(row["cluster"])
            if lookup.hit.tier == "semantic" and position >= settled_from:
                settled["right" if right else "wrong"] += 1
                estimated.append(_estimate(pipeline)["estimated_error"])  # what /stats showed as it served
            if right:
                correct += 1
                late_correct += position >= half
            else:
                wrong += 1
                late_wrong += position >= half
                examples.append({"prompt": row["prompt"], "matched": lookup.hit.matched_prompt,
                                 "similarity": lookup.hit.similarity, "tier": lookup.hit.tier})  # fmt: skip
                if chance.random() < feedback_rate:  # a user notices and reports it
                    served = await pipeline.hit_response(lookup)
                    await pipeline.feedback(served["id"], "eval", correct=False)
                    reported += 1
        if (position + 1) % _CURVE_EVERY == 0 or position + 1 == len(rows):
            estimate = _estimate(pipeline)
            curve.append({"requests": position + 1, "line": estimate["decision_line"],
                          "estimated_error": estimate["estimated_error"],
                          "observed_error": round(wrong / (correct + wrong), 4) if correct + wrong else 0.0,
                          "served_share": round(correct / possible_so_far, 4) if possible_so_far else 0.0,
                          "labels": estimate["labels_total"]})  # fmt: skip
        if advance is not None:
            advance(1)
    hits = correct + wrong
    possible = sum(r.get("duplicate_of") is not None for r in rows)
    late_possible = sum(r.get("duplicate_of") is not None for r in rows[half:])
    late_hits = late_correct + late_wrong
    second_half = {
        "wrong_hit_rate": round(late_wrong / late_hits, 4) if late_hits else 0.0,
        "served_share": round(late_correct / late_possible, 4) if late_possible else 0.0,
    }
    extra = upstream.calls - misses
    budget = _estimate(pipeline)
    settled_hits = settled["right"] + settled["wrong"]
    calibration = {
        "from_request": float(settled_from),
        "estimated": round(sum(estimated) / len(estimated), 4) if estimated else budget["estimated_error"],
        "observed": round(settled["wrong"] / settled_hits, 4) if settled_hits else 0.0,
        "semantic_hits": float(settled_hits),
    }
    return TraceReport(
        requests=len(rows), policy={}, hits=hits, tiers=tiers, second_half=second_half, correct_hits=correct,
        wrong_hits=wrong,
        wrong_hit_rate=round(wrong / hits, 4) if hits else 0.0, possible_hits=possible,
        served_share=round(correct / possible, 4) if possible else 0.0, misses=misses,
        upstream_calls=upstream.calls, extra_upstream_calls=extra,
        extra_upstream_share=round(extra / len(rows), 4) if rows else 0.0, seconds=0.0,
        reported_wrong=reported, explored=explored, budget=budget, calibration=calibration, curve=curve,
        wrong_examples=examples,
    )  # fmt: skip


def _estimate(pipeline: Pipeline) -> dict[str, Any]:
    rule = pipeline.semantic.rule("eval", "latin")
    return pipeline.budgets.estimate("eval", "latin", rule, pinned=not rule.learn).as_dict()


def _fast_temp_dir() -> str | None:
    """RAM-backed scratch space where there is one: the replay's store needs no durability."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() else None
