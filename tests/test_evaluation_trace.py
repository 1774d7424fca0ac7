"""The trace replay's simulated upstream and its report, without the labelled data."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from semcache.evaluation.trace import ClusterUpstream
from semcache.evaluation.wording import DEFAULT_COMMON_SHARE
from semcache.protocols import Embedder


def ask(upstream: ClusterUpstream, prompt: str) -> str:
    body = {"model": "eval", "messages": [{"role": "user", "content": prompt}]}
    response = asyncio.run(upstream.complete(body, {}))
    return str(response["choices"][0]["message"]["content"])


def test_the_simulated_upstream_words_each_answer_differently_and_knows_its_cluster() -> None:
    upstream = ClusterUpstream({"How do I reset my password?": "c1", "I forgot my password": "c1", "Refunds?": "c2"})
    answers = [ask(upstream, "How do I reset my password?") for _ in range(3)] + [ask(upstream, "I forgot my password")]
    assert len(set(answers)) == 4  # never a fixed string
    assert {upstream.cluster_of_answer[a] for a in answers} == {"c1"}
    assert upstream.cluster_of_answer[ask(upstream, "Refunds?")] == "c2"
    assert upstream.calls == 5


# Questions of our own: each with a paraphrase (the same cluster) and a look-alike (another cluster).
QUESTIONS = [
    ("How do I get into MIT?", "What does it take to be admitted to MIT?", "How do I get into MIT graduate school?"),
    ("How can I learn Python quickly?", "What is the fastest way to learn Python?",
     "How can I learn Python quickly for data science jobs?"),
    ("How do I reset my Gmail password?", "I forgot my Gmail password, how do I get back in?",
     "How do I change my Gmail username?"),
    ("What is the best way to lose weight?", "How can I lose weight fast?", "What is the best way to gain weight?"),
    ("How do I delete my Facebook account?", "How can I permanently remove my Facebook profile?",
     "How do I deactivate my Instagram account?"),
    ("Which laptop is best for programming?", "What laptop should a programmer buy?",
     "Which laptop is best for gaming?"),
    ("How do I export my contacts from Outlook?", "How can I get my contact list out of Outlook?",
     "How do I import contacts into Outlook?"),
    ("Why is the sky blue?", "What makes the sky look blue?", "Why is the ocean blue?"),
]  # fmt: skip


def answer_cosines(minilm: Embedder, common_share: float) -> dict[str, np.ndarray]:
    """Cosines between two of the stand-in's answers: to one question asked twice and to a question
    and its paraphrase (right pairs), to look-alike questions, and to unrelated ones."""
    cluster_of = {}
    for number, (question, paraphrase, look_alike) in enumerate(QUESTIONS):
        cluster_of[question] = cluster_of[paraphrase] = f"asked-{number}"
        cluster_of[look_alike] = f"look-alike-{number}"
    upstream = ClusterUpstream(cluster_of, seed=7, common_share=common_share)

    def cosines(pairs: list[tuple[str, str]]) -> np.ndarray:
        first = minilm.embed([upstream.answer(a) for a, _ in pairs])
        second = minilm.embed([upstream.answer(b) for _, b in pairs])
        return np.einsum("ij,ij->i", first, second) / np.linalg.norm(first, axis=1) / np.linalg.norm(second, axis=1)

    again = [(q, q) for q, _, _ in QUESTIONS for _ in range(4)] + [(q, p) for q, p, _ in QUESTIONS for _ in range(4)]
    others = [(QUESTIONS[i][0], QUESTIONS[j][0]) for i in range(len(QUESTIONS)) for j in range(i)]
    return {"right": cosines(again), "look_alike": cosines([(q, look) for q, _, look in QUESTIONS for _ in range(4)]),
            "unrelated": cosines(others)}  # fmt: skip


def test_the_simulated_upstream_is_deterministic_given_its_seed() -> None:
    cluster_of = {"How do I reset my password?": "c1", "Refunds?": "c2"}
    first, second = ClusterUpstream(cluster_of, seed=3), ClusterUpstream(cluster_of, seed=3)
    for prompt in [*cluster_of, *cluster_of]:
        assert ask(first, prompt) == ask(second, prompt)
    assert ask(ClusterUpstream(cluster_of, seed=4), "Refunds?") != ask(ClusterUpstream(cluster_of, seed=3), "Refunds?")


@pytest.mark.slow
def test_the_simulated_upstreams_answers_are_as_hard_to_judge_as_a_models(minilm: Embedder) -> None:
    cosines = answer_cosines(minilm, DEFAULT_COMMON_SHARE)
    right, look_alike, unrelated = cosines["right"], cosines["look_alike"], cosines["unrelated"]
    # Two answers to one question differ like a model's rewordings: not near-copies.
    assert 0.65 <= float(np.median(right)) < 0.9
    assert float(np.quantile(right, 0.95)) < 0.95
    # Answers to look-alike questions read nearly as alike: the two overlap, so an answer judge errs.
    assert float(np.median(unrelated)) < float(np.median(look_alike)) < float(np.median(right))
    assert float(np.quantile(look_alike, 0.9)) >= float(np.quantile(right, 0.1))


@pytest.mark.slow
def test_answers_that_share_most_sentences_read_alike_across_topics(minilm: Embedder) -> None:
    cosines = answer_cosines(minilm, 0.8)
    # Answers to unrelated questions read as alike as two answers to one question often do.
    assert float(np.median(cosines["unrelated"])) >= 0.6
    assert float(np.quantile(cosines["unrelated"], 0.75)) >= float(np.quantile(cosines["right"], 0.25))
