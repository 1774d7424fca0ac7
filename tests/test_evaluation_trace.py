"""The trace replay's simulated upstream and its report, without the labelled data."""

from __future__ import annotations

import asyncio

from semcache.evaluation.trace import ClusterUpstream


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
