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

from semcache.decision.budget import conservative_start
from semcache.testing.standin_upstream import StandinUpstream
from testkit.servers import SemcacheProcess
from testkit.support_bot import GREETING, SIGN_OFF

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
    # 1 label of the 50 needed: the line is where a learning line starts, above the threshold.
    assert budget["decision_line"] == conservative_start(0.91) and not budget["learning"]
    assert budget["target_error"] == 0.01
    stats = httpx.get(f"{url}/stats").json()
    assert stats["quality"][0]["namespace"] == "default"
    assert stats["quality"][0]["labels_total"] == 1
    metrics = httpx.get(f"{url}/metrics").text
    assert 'semcache_quality_labels_total{language="latin",namespace="default",source="near_miss"} 1.0' in metrics
    assert f'semcache_decision_line{{language="latin",namespace="default"}} {conservative_start(0.91)}' in metrics


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
    assert budget["labels"]["near_miss"] == 1  # "different" needs no calibration: it only ever holds hits back
    entries = httpx.get(f"{url}/admin/entries", params={"namespace": "default", "text": "learn Python"}).json()
    [entry] = [e for e in entries["data"] if e["prompt"] == QUESTION]
    # Refuted at the near miss's similarity: the entry now needs a little more than that.
    similarity = httpx.get(f"{url}/admin/entries", params={"query": NEAR, "min_similarity": 0.5}).json()
    near = next(e["similarity"] for e in similarity["data"] if e["prompt"] == QUESTION)
    assert entry["min_similarity"] == pytest.approx(near + 0.005, abs=0.002)


# Questions on unrelated topics, each with a near miss of it and the answer that fits both.
NEAR_MISSES = [
    ("What time do your branches open on Saturday?", "Are branches open at the weekend?",
     "Branches open from nine until noon on Saturdays."),
    ("How do I boil an egg so the yolk stays soft?", "What is the way to cook a soft boiled egg?",
     "Boil it for six minutes, then cool it in cold water."),
    ("How can I improve my sleep at night?", "What helps me sleep better at night?",
     "Keep a regular bedtime and avoid screens for an hour before."),
    ("How often should I water a cactus?", "How frequently does a cactus need watering?",
     "Water it every two to three weeks, and less in winter."),
    ("How do I remove a red wine stain from a carpet?", "What gets red wine out of carpet?",
     "Blot it, then dab on a paste of baking soda and water."),
    ("Why is the sky blue during the day?", "What makes the daytime sky look blue?",
     "Air scatters blue sunlight more than red, so the sky looks blue."),
    ("How do I tie a bow tie?", "What are the steps to tie a bowtie?",
     "Cross the long end over, loop it behind, then fold and pull it through."),
    ("How do I convert Celsius to Fahrenheit?", "What is the formula from Celsius to Fahrenheit?",
     "Multiply by nine fifths and add thirty-two."),
]  # fmt: skip


def judge_state(url: str, unrelated_pairs: int) -> dict[str, Any]:
    """The judge's cut-off in the default namespace, once it has paired this many unrelated answers:
    it pairs each answer it judges after the verdict, so by then the verdict is in too."""
    deadline = time.monotonic() + 10
    while True:
        judge = httpx.get(f"{url}/admin/namespaces/default/quality").json()["judge"]
        # Keyed by the Latin script's model, named with its backend ("all-MiniLM-L6-v2+int8-static").
        latin = [state for model, state in judge["models"].items() if model.startswith("all-MiniLM-L6-v2")]
        state = latin[0] if latin else {"unrelated_pairs": 0}
        if state["unrelated_pairs"] >= unrelated_pairs or time.monotonic() > deadline:
            return state
        time.sleep(0.05)


def calibrate_judge(url: str, client: openai.OpenAI, upstream: StandinUpstream, wrap: bool = False) -> int:
    """Near misses on unrelated topics, answered plainly or by the bot (``wrap``), until the judge has
    calibrated its cut-off on the namespace's answers; returns the labels they gave."""
    for question, near, answer in NEAR_MISSES:
        plain, reworded = answer, answer + " Good luck!"
        if wrap:
            plain, reworded = GREETING + plain + SIGN_OFF, GREETING + reworded + SIGN_OFF
        upstream.state.answers.update({question: plain, near: reworded})
        assert ask(client, question)[1]["x-semcache"] == "miss"
        assert ask(client, near)[1]["x-semcache"] == "miss"  # a near miss, judged against the question's answer
    state = judge_state(url, unrelated_pairs=20)
    assert state["same_at"] is not None
    return int(quality(url)["labels_total"])


def test_the_judge_calibrates_its_cut_off_on_a_namespace_whose_answers_all_read_alike(
    serve: Callable[..., str], upstream: StandinUpstream, make_client: Callable[..., openai.OpenAI]
) -> None:
    url = serve()
    client = make_client(url)
    calibrate_judge(url, client, upstream, wrap=True)
    state = judge_state(url, unrelated_pairs=20)
    assert state["unrelated_pairs"] >= 20
    # Answers to unrelated questions read alike here: "the same" must now be clearly above them.
    assert state["same_at"] > 0.9 and state["same_at"] == pytest.approx(state["unrelated_level"] + 0.05, abs=1e-3)
    # Before it had seen enough answers it said "different" or nothing, never "the same" on a fixed 0.85.
    budget = quality(url)
    assert budget["labels"]["near_miss"] < len(NEAR_MISSES)

    # Now a reworded answer is still the same...
    question = "How do I reset my online banking password?"
    near = "I forgot the password for internet banking, what now?"
    reset = "Open Settings, choose Security and press Reset password; a link arrives by email."
    reworded = "Press Reset password under Settings, Security: we email you a link."
    upstream.state.answers.update({question: GREETING + reset + SIGN_OFF, near: GREETING + reworded + SIGN_OFF})
    ask(client, question)
    assert ask(client, near)[1]["x-semcache"] == "miss"
    labelled = quality(url, labels=budget["labels_total"] + 1)
    assert labelled["labels_total"] == budget["labels_total"] + 1
    assert not refuted(url, question)

    # ...and a neighbour's answer, alike only in its greeting and sign-off, is not counted as right.
    neighbour = "How do I reset my online banking PIN?"
    pin = "To change your PIN, open Settings, choose Cards and press Change PIN; a code arrives by text message."
    upstream.state.answers[neighbour] = GREETING + pin + SIGN_OFF
    state = judge_state(url, unrelated_pairs=0)
    assert ask(client, neighbour)[1]["x-semcache"] == "miss"
    assert judge_state(url, unrelated_pairs=state["unrelated_pairs"] + 1)["unrelated_pairs"] > state["unrelated_pairs"]
    after = quality(url)
    assert after["labels_total"] == labelled["labels_total"] or refuted(url, question) or refuted(url, near)

    # An operator's reset forgets the calibration with the evidence.
    forgotten = httpx.delete(f"{url}/admin/namespaces/default/quality").json()
    assert forgotten["judge"] == {"judge": "embedding", "min_similarity": 0.85, "models": {}}


def test_the_judge_calibrates_on_the_answers_to_plain_misses_before_it_judges_any(
    serve: Callable[..., str], upstream: StandinUpstream, make_client: Callable[..., openai.OpenAI]
) -> None:
    url = serve()
    client = make_client(url)
    for question, _, answer in NEAR_MISSES:  # unrelated questions: misses with nothing to judge
        upstream.state.answers[question] = answer
        assert ask(client, question)[1]["x-semcache"] == "miss"
    state = judge_state(url, unrelated_pairs=20)
    assert state["unrelated_pairs"] >= 20 and state["same_at"] == 0.85  # plain answers read apart
    assert quality(url)["labels_total"] == 0

    # A namespace that does not learn has no use for labels: its answers are not read.
    pinned = serve(learn_threshold=False)
    for question, _, _ in NEAR_MISSES[:3]:
        ask(make_client(pinned), question)
    assert httpx.get(f"{pinned}/admin/namespaces/default/quality").json()["judge"]["models"] == {}


def refuted(url: str, prompt: str) -> bool:
    """Whether the entry for ``prompt`` was judged wrong for a near miss: its own threshold rose."""
    entries = httpx.get(f"{url}/admin/entries", params={"namespace": "default", "text": prompt[:20]}).json()
    [entry] = [e for e in entries["data"] if e["prompt"] == prompt]
    return bool(entry["min_similarity"])


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
    # Every kind of exploring (a would-be hit, a re-asked exact hit) draws on the one allowance.
    assert len(explored) <= 0.1 * (len(outcomes) + 2)  # within explore_share of the namespace's requests
    assert upstream.chat_calls() == 2 + len(explored)

    decisions = httpx.get(f"{url}/admin/decisions", params={"limit": 100}).json()["data"]
    would_be_hits = [d for d in decisions if d["explored"] and d["decision"].startswith("explored: answered")]
    assert would_be_hits
    budget = quality(url, labels=1 + len(would_be_hits))
    assert budget["explored"] == len(would_be_hits)
    assert budget["labels"]["explored"] == len(would_be_hits)  # each compared with the candidate's answer


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
