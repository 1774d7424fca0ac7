"""``semcache eval trace``: replay prompts in arrival order through the real lookup pipeline.

The upstream is simulated: it answers every prompt with an answer about its cluster, worded
differently each time, as a real model would. A hit is correct exactly when the answer it returns
was written for the prompt's own cluster.
"""

from __future__ import annotations

import random
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..embedders import BatchingEmbedder
from ..index import ScopedVectorIndex
from ..pipeline import Pipeline, RequestControls
from ..protocols import Verifier
from ..quality import DecisionLog, NamespacePolicies, QualityPolicy
from ..stats import Stats
from ..stores import SQLiteStore
from ..tiers import TemplateTier
from ..tokens import TokenCounter
from ..wire import ChatCompletionRequest, chat_completion, completion_id
from .embedding_cache import CachedEmbedder

# Pieces a simulated answer is worded from: each call picks its own, so no two answers to one
# cluster need be the same string.
_OPENINGS = ("In short,", "Here is the answer:", "Briefly,", "To answer your question,", "Good question.")
_CLOSINGS = ("Hope that helps.", "Let me know if you need more.", "", "That is the gist of it.")


class ClusterUpstream:
    """An ``Upstream`` that answers each prompt about its labelled cluster, in different words each
    time, and remembers which cluster every answer it gave was about."""

    def __init__(self, cluster_of: dict[str, str], seed: int = 20240601) -> None:
        self._cluster_of = cluster_of
        self._wording = random.Random(seed)
        self.cluster_of_answer: dict[str, str] = {}
        self.calls = 0

    async def complete(self, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        self.calls += 1
        cluster = self._cluster_of[body["messages"][-1]["content"]]
        answer = self._answer_about(cluster)
        self.cluster_of_answer[answer] = cluster
        return chat_completion(response_id=completion_id(), model=body["model"], content=answer, usage={})

    def _answer_about(self, cluster: str) -> str:
        opening, closing = self._wording.choice(_OPENINGS), self._wording.choice(_CLOSINGS)
        return f"{opening} this is answer {self.calls} on topic {cluster}. {closing}".strip()

    async def stream(self, body: dict[str, Any], headers: dict[str, str]) -> AsyncIterator[dict[str, Any]]:
        raise NotImplementedError("the trace replay asks without streaming")
        yield {}  # pragma: no cover

    async def list_models(self, headers: dict[str, str]) -> dict[str, Any]:
        return {"object": "list", "data": []}

    async def close(self) -> None:
        return None


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
    extra_upstream_calls: int  # calls beyond the misses (verification), as a share of requests below
    extra_upstream_share: float
    seconds: float
    reported_wrong: int = 0  # wrong hits that simulated users reported (--feedback-rate)
    wrong_examples: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


async def evaluate_trace(
    rows: list[dict[str, Any]],
    embedder: CachedEmbedder,
    policy: QualityPolicy,
    *,
    verifier: Verifier | None = None,
    advance: Callable[[int], None] | None = None,
    work_dir: Path | None = None,
    feedback_rate: float = 0.0,
) -> TraceReport:
    """Replay ``rows``; with ``feedback_rate``, that share of wrong hits is reported as wrong, so
    the feedback mechanism (negative entries, learned per-entry thresholds) shows its effect."""
    started = time.monotonic()
    prompts = [str(r["prompt"]) for r in rows]
    cluster_of = {str(r["prompt"]): str(r["cluster"]) for r in rows}
    embedder.warm(prompts)
    upstream = ClusterUpstream(cluster_of)
    with tempfile.TemporaryDirectory(dir=work_dir or _fast_temp_dir()) as folder:
        store = SQLiteStore(Path(folder) / "trace.sqlite3")
        await store.open()
        batcher = BatchingEmbedder(embedder)
        pipeline = Pipeline(
            store=store, index=ScopedVectorIndex(embedder.dimension), embedder=batcher, upstream=upstream,
            templates=TemplateTier([], 1.0), tokens=TokenCounter(Path(folder) / "tiktoken"), stats=Stats(),
            policies=NamespacePolicies(policy), default_ttl_s=0, max_temperature=1.0, verifier=verifier,
            decisions=DecisionLog(10),
        )  # fmt: skip
        try:
            report = await _replay(pipeline, rows, upstream, advance, feedback_rate)
        finally:
            pipeline.semantic.close()
            await batcher.close()
            await store.close()
    report.policy = policy.as_dict()
    report.seconds = round(time.monotonic() - started, 2)
    return report


async def _replay(
    pipeline: Pipeline,
    rows: list[dict[str, Any]],
    upstream: ClusterUpstream,
    advance: Callable[[int], None] | None,
    feedback_rate: float,
) -> TraceReport:
    tiers = {"exact": 0, "template": 0, "semantic": 0}
    correct = wrong = misses = reported = 0
    late_correct = late_wrong = 0
    half = len(rows) // 2
    chance = random.Random(20240601)
    examples: list[dict[str, Any]] = []
    for position, row in enumerate(rows):
        request = ChatCompletionRequest.model_validate(
            {"model": "eval", "messages": [{"role": "user", "content": str(row["prompt"])}]}
        )
        lookup = await pipeline.lookup(request, "eval", RequestControls())
        if lookup.hit is None:
            misses += 1
            await pipeline.forward(lookup, {})
        else:
            tiers[lookup.hit.tier] += 1
            if upstream.cluster_of_answer.get(lookup.hit.answer) == str(row["cluster"]):
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
    return TraceReport(
        requests=len(rows), policy={}, hits=hits, tiers=tiers, second_half=second_half, correct_hits=correct,
        wrong_hits=wrong,
        wrong_hit_rate=round(wrong / hits, 4) if hits else 0.0, possible_hits=possible,
        served_share=round(correct / possible, 4) if possible else 0.0, misses=misses,
        upstream_calls=upstream.calls, extra_upstream_calls=extra,
        extra_upstream_share=round(extra / len(rows), 4) if rows else 0.0, seconds=0.0,
        reported_wrong=reported, wrong_examples=examples,
    )  # fmt: skip


def _fast_temp_dir() -> str | None:
    """RAM-backed scratch space where there is one: the replay's store needs no durability."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() else None
