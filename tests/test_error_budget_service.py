"""The error budget through the service: near misses and explored hits are labelled by comparing
answers, the evidence and the learned line show in /admin, /stats and /metrics, a pin wins, and
what was learned survives a restart (real HTTP, the openai SDK, the stand-in upstream)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from semcache.testing.standin_upstream import StandinUpstream
from testkit.servers import SemcacheProcess

from .conftest import ask, chat

pytestmark = pytest.mark.slow

QUESTION = "How do I learn Python quickly?"
# Close enough to be a near miss under the default line (0.91), too far to be served.
NEAR = "What is the fastest way to pick up Python programming?"
ANSWER = "Write small programs every day and read other people's code."


def quality(url: str, namespace: str = "default", labels: int = 0) -> dict[str, Any]:
    """The namespace's Latin-script budget, once it holds ``labels`` labels: answers are judged
    after the response, off the request's path."""
    deadline = time.monotonic() + 10
    while True:
        response = httpx.get(f"{url}/admin/namespaces/{namespace}/quality")
        assert response.status_code == 200, response.text
        budget = next(s for s in response.json()["scripts"] if s["language"] == "latin")
        if budget["labels_total"] >= labels or time.monotonic() > deadline:
            return budget
        time.sleep(0.05)


def spellings(text: str) -> list[str]:
    """Spellings of ``text`` that the exact tier keeps apart (case) but the model reads alike."""
    words = text.split()
    return [" ".join(w.upper() if flip else w for w, flip in zip(words, flips, strict=True))
            for flips in itertools.product([False, True], repeat=len(words))]  # fmt: skip


def test_a_near_miss_is_labelled_by_comparing_its_fresh_answer_with_the_candidates(
    serve: Callable[..., str], upstream: StandinUpstream, make_client: Callable[..., openai.OpenAI]
) -> None:
    upstream.state.answers.update({QUESTION: ANSWER, NEAR: ANSWER})  # one answer fits both
    url = serve()
    client = make_client(url)
    assert ask(client, QUESTION)[1]["x-semcache"] == "miss"
    assert ask(client, NEAR)[1]["x-semcache"] == "miss"  # under the line: asked upstream

    budget = quality(url, labels=1)
    assert budget["labels"]["near_miss"] == 1
    assert budget["decision_line"] == 0.91 and not budget["learning"]  # 1 label of the 50 needed
    assert budget["target_error"] == 0.01
    stats = httpx.get(f"{url}/stats").json()
    assert stats["quality"][0]["namespace"] == "default"
    assert stats["quality"][0]["labels_total"] == 1
    metrics = httpx.get(f"{url}/metrics").text
    assert 'semcache_quality_labels_total{language="latin",namespace="default",source="near_miss"} 1.0' in metrics
    assert 'semcache_decision_line{language="latin",namespace="default"} 0.91' in metrics


def test_a_candidate_judged_wrong_for_a_near_miss_raises_its_own_threshold(
    serve: Callable[..., str], upstream: StandinUpstream, make_client: Callable[..., openai.OpenAI]
) -> None:
    other = "Pack light, book early, and keep a copy of your passport."
    upstream.state.answers.update({QUESTION: ANSWER, NEAR: other})  # the candidate's answer does not fit
    url = serve()
    client = make_client(url)
    ask(client, QUESTION)
    ask(client, NEAR)

    budget = quality(url, labels=1)
    assert budget["labels"]["near_miss"] == 1
    entries = httpx.get(f"{url}/admin/entries", params={"namespace": "default", "text": "learn Python"}).json()
    [entry] = [e for e in entries["data"] if e["prompt"] == QUESTION]
    # Refuted at the near miss's similarity: the entry now needs a little more than that.
    similarity = httpx.get(f"{url}/admin/entries", params={"query": NEAR, "min_similarity": 0.5}).json()
    near = next(e["similarity"] for e in similarity["data"] if e["prompt"] == QUESTION)
    assert entry["min_similarity"] == pytest.approx(near + 0.005, abs=0.002)


def test_exploration_answers_some_would_be_hits_from_the_upstream_and_says_so(
    serve: Callable[..., str], upstream: StandinUpstream, make_client: Callable[..., openai.OpenAI]
) -> None:
    url = serve(learn_min_labels=1, explore_share=0.1)
    client = make_client(url)
    upstream.state.answers.update({QUESTION: ANSWER, NEAR: ANSWER})
    ask(client, QUESTION)
    ask(client, NEAR)  # the one label that lets the namespace learn and explore
    outcomes = []
    for spelling in spellings(QUESTION)[1:41]:
        upstream.state.answers[spelling] = ANSWER
        answer, headers = ask(client, spelling)
        assert answer == ANSWER
        outcomes.append((headers["x-semcache"], headers.get("x-semcache-explored")))
    explored = [o for o in outcomes if o[1] == "true"]
    assert explored and all(outcome == "miss" for outcome, _ in explored)
    assert ("hit", None) in outcomes
    assert len(explored) <= 0.1 * (len(outcomes) + 2)  # within explore_share of the namespace's requests

    budget = quality(url, labels=1 + len(explored))
    assert budget["explored"] == len(explored)
    assert budget["labels"]["explored"] == len(explored)  # each compared with the candidate's answer
    assert upstream.chat_calls() == 2 + len(explored)
    decisions = httpx.get(f"{url}/admin/decisions", params={"limit": 100}).json()["data"]
    assert any(d["explored"] and d["decision"].startswith("explored") for d in decisions)


def test_feedback_is_evidence_for_the_budget_too(
    serve: Callable[..., str], upstream: StandinUpstream, make_client: Callable[..., openai.OpenAI]
) -> None:
    url = serve()
    client = make_client(url)
    ask(client, "How do I bake sourdough bread?")
    raw = client.chat.completions.with_raw_response.create(
        model="test-model", messages=[{"role": "user", "content": "How do you bake sourdough bread?"}]
    )
    assert raw.headers["x-semcache-tier"] == "semantic"
    reply = httpx.post(f"{url}/v1/semcache/feedback", json={"id": raw.parse().id, "correct": True})
    assert reply.status_code == 200
    assert quality(url, labels=1)["labels"]["feedback"] == 1


def test_an_operators_threshold_and_target_per_namespace_win_over_learning(
    serve: Callable[..., str], upstream: StandinUpstream, make_client: Callable[..., openai.OpenAI]
) -> None:
    url = serve(learn_min_labels=1)
    client = make_client(url)
    upstream.state.answers.update({QUESTION: ANSWER, NEAR: ANSWER})
    headers = {"X-Semcache-Namespace": "help"}
    ask(client, QUESTION, extra_headers=headers)
    ask(client, NEAR, extra_headers=headers)
    assert quality(url, "help", labels=1)["learning"]
    put = httpx.put(f"{url}/admin/namespaces/help/config", json={"threshold": 0.97, "target_error": 0.02})
    assert put.status_code == 200, put.text
    assert put.json()["config"]["target_error"] == 0.02
    budget = quality(url, "help")
    assert budget["pinned"] and budget["decision_line"] == 0.97 and budget["target_error"] == 0.02

    bad = httpx.put(f"{url}/admin/namespaces/help/config", json={"target_error": 0.9})
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"

    reset = httpx.delete(f"{url}/admin/namespaces/help/quality")  # an operator forgets what it learned
    assert reset.status_code == 200
    assert reset.json()["scripts"][0]["labels_total"] == 0
    time.sleep(0.5)  # past a sweep: the store forgot it too
    assert quality(url, "help")["labels_total"] == 0


def test_what_was_learned_survives_a_restart(tmp_path: Path, upstream: StandinUpstream) -> None:
    upstream.state.answers.update({QUESTION: ANSWER, NEAR: ANSWER})
    data = tmp_path / "data"
    with SemcacheProcess(data_dir=data, upstream_url=upstream.base_url) as service:
        chat(service.url, QUESTION)
        chat(service.url, NEAR)
        assert quality(service.url, labels=1)["labels_total"] == 1
    with SemcacheProcess(data_dir=data, upstream_url=upstream.base_url) as service:
        budget = quality(service.url)
        assert budget["labels"]["near_miss"] == 1 and budget["traffic"] >= 1


def test_an_explored_request_whose_upstream_fails_is_served_its_cached_answer(
    serve: Callable[..., str], upstream: StandinUpstream, make_client: Callable[..., openai.OpenAI]
) -> None:
    url = serve(learn_min_labels=1, explore_share=0.1, upstream_max_attempts=1)
    client = make_client(url)
    upstream.state.answers.update({QUESTION: ANSWER, NEAR: ANSWER})
    ask(client, QUESTION)
    ask(client, NEAR)
    quality(url, labels=1)
    upstream.set_fault(status=503, times=1000)  # the upstream is down from here on
    outcomes = []
    for spelling in spellings(QUESTION)[1:41]:
        answer, headers = ask(client, spelling)  # never an error: each would have been a hit
        assert answer == ANSWER
        outcomes.append((headers["x-semcache"], headers.get("x-semcache-tier"), headers.get("x-semcache-explored")))
    assert {outcome for outcome, _, _ in outcomes} == {"hit"}
    assert ("hit", "semantic", None) in outcomes and not any(explored for _, _, explored in outcomes)
    decisions = httpx.get(f"{url}/admin/decisions", params={"limit": 100}).json()["data"]
    assert any(d["explored"] for d in decisions)  # some were explored, and the upstream failed them
