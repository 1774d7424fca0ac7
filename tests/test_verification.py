"""Verified hits: a candidate under the certified line is put to the upstream model before it is
served (or in the background, or never), its verdict remembered, its cost counted; a guard vetoes
first and a failure is a miss. Unit tests with small fakes, then the service over real HTTP with
the openai SDK and the stand-in upstream."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest

from semcache.decision.budget import ErrorBudgets
from semcache.decision.quality import Decision, NamespacePolicies, QualityPolicy
from semcache.decision.verification import (
    VERIFICATION_MARK,
    UpstreamVerifier,
    Verification,
    VerificationCase,
    VerifierReply,
    band_start,
    verdict_of,
    verification_messages,
)
from semcache.entries import CacheEntry
from semcache.index import ScopedVectorIndex
from semcache.keys import cache_api_key
from semcache.testing.standin_upstream import StandinUpstream
from semcache.tiers.semantic import SemanticTier
from testkit.servers import SemcacheProcess

from .conftest import ask

QUESTION = "How do I learn Python quickly?"
PARAPHRASE = "How can I learn Python fast?"  # under the line a new namespace starts with
LOOK_ALIKE = "How do I learn Python quickly for data science jobs?"  # another question, in the band


def case(
    query: str = PARAPHRASE, entry_id: int = 1, similarity: float = 0.9, namespace: str = "ns"
) -> VerificationCase:
    return VerificationCase("ns", "latin", query, f"key:{query}", entry_id, QUESTION, "Practise daily.", "m",
                            similarity)  # fmt: skip


class CountingVerifier:
    def __init__(self, verdict: str = "yes") -> None:
        self.verdict = verdict
        self.asked: list[VerificationCase] = []

    async def verify(self, case: VerificationCase, headers: Mapping[str, str]) -> VerifierReply:
        self.asked.append(case)
        return VerifierReply(self.verdict, "m", 100, 1)  # type: ignore[arg-type]


# -- the verdict and the request -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "verdict"),
    [("yes", "yes"), ("Yes.", "yes"), ("YES, it does", "yes"), (" no", "no"), ("No!", "no"), ("\n\nno", "no"),
     ("Maybe", "failed"), ("", "failed"), (None, "failed"), ("I would say yes", "failed"), ("yesterday", "failed"),
     (["yes"], "failed")],
)  # fmt: skip
def test_the_first_word_decides_and_anything_else_is_no_verdict(reply: object, verdict: str) -> None:
    assert verdict_of(reply) == verdict


def test_the_request_quotes_both_prompts_whole_and_verbatim_in_plain_strings() -> None:
    long_prompt = "Explain this:\n" + "x = {'a': [1, 2]}  # <<< tricky >>>\n" * 500
    messages = verification_messages(case(query=long_prompt))
    assert all(isinstance(m["content"], str) for m in messages)
    text = "".join(m["content"] for m in messages)
    assert long_prompt in text and QUESTION in text and "Practise daily." in text
    assert messages[-1]["role"] == "user" and "yes or no" in messages[-1]["content"]


def test_the_upstream_verifier_asks_a_short_call_and_fails_closed() -> None:
    sent: list[tuple[dict[str, Any], dict[str, str]]] = []

    async def complete(body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        sent.append((body, headers))
        return {"choices": [{"message": {"content": "Yes"}}], "usage": {"prompt_tokens": 90, "completion_tokens": 1}}

    verifier = UpstreamVerifier(complete, model=None, timeout_s=1.0, max_tokens=16)
    reply = asyncio.run(verifier.verify(case(), {"authorization": "Bearer k"}))
    assert reply == VerifierReply("yes", "m", 90, 1)
    body, headers = sent[0]
    assert body["model"] == "m" and body["temperature"] == 0 and body["max_completion_tokens"] == 16
    assert headers[VERIFICATION_MARK] == "true" and headers["authorization"] == "Bearer k"

    async def slow(body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        await asyncio.sleep(5)
        return {}

    async def broken(body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        raise RuntimeError("upstream down")

    for complete_with in (slow, broken):
        verifier = UpstreamVerifier(complete_with, model="small", timeout_s=0.1, max_tokens=16)
        started = time.monotonic()
        assert asyncio.run(verifier.verify(case(), {})).verdict == "failed"
        assert time.monotonic() - started < 2


# -- remembering and the band ---------------------------------------------------------------------


def test_a_verdict_is_remembered_for_its_pair_and_a_failure_is_not() -> None:
    inner = CountingVerifier("yes")
    verification = Verification(inner)
    assert asyncio.run(verification.verify(case(), {})) == "yes"
    assert asyncio.run(verification.verify(case(), {})) == "yes"
    assert len(inner.asked) == 1  # the repeat cost nothing
    asyncio.run(verification.verify(case(entry_id=2), {}))  # another entry is another pair
    assert len(inner.asked) == 2

    inner.verdict = "failed"
    asyncio.run(verification.verify(case(query="Another question?"), {}))
    asyncio.run(verification.verify(case(query="Another question?"), {}))
    assert len(inner.asked) == 4


def test_remembered_verdicts_are_bounded_per_namespace() -> None:
    inner = CountingVerifier("yes")
    verification = Verification(inner)
    for number in range(600):
        asyncio.run(verification.verify(case(query=f"question {number}"), {}))
    assert verification.remembered(case(query="question 599")) == "yes"
    assert verification.remembered(case(query="question 0")) is None
    assert verification.describe("ns", "latin", 0.91)["remembered"] <= 512


def test_the_band_rises_to_where_candidates_stop_passing_in_that_namespace_alone() -> None:
    inner = CountingVerifier("no")
    verification = Verification(inner)
    start = band_start(0.91)
    assert verification.lower_edge("ns", "latin", 0.91) == start
    for number in range(40):  # the lowest part of the band never passes
        asyncio.run(verification.verify(case(query=f"low {number}", similarity=start + 0.005), {}))
    inner.verdict = "yes"
    for number in range(40):
        asyncio.run(verification.verify(case(query=f"high {number}", similarity=0.85), {}))
    assert start < verification.lower_edge("ns", "latin", 0.91) <= 0.85
    assert verification.lower_edge("other", "latin", 0.91) == start
    verification.forget("ns")
    assert verification.lower_edge("ns", "latin", 0.91) == start


def test_the_band_comes_back_down_where_candidates_pass_again() -> None:
    inner = CountingVerifier("no")
    verification = Verification(inner)
    start = band_start(0.91)
    for number in range(30):  # an unlucky start: every candidate low in the band refused
        asyncio.run(verification.verify(case(query=f"early {number}", similarity=start + 0.005), {}))
    assert verification.lower_edge("ns", "latin", 0.91) > start
    inner.verdict = "yes"
    for number in range(40):  # later verdicts there pass: most of them, in all
        asyncio.run(verification.verify(case(query=f"later {number}", similarity=start + 0.005), {}))
    assert verification.lower_edge("ns", "latin", 0.91) == start


def test_audited_verified_hits_that_go_wrong_narrow_the_band_and_then_stop_verification() -> None:
    verification = Verification(CountingVerifier("yes"))
    start = band_start(0.91)
    z = 1.2816
    for _ in range(30):  # right where audited: the band stays, and its wrong share is certified
        verification.audited("ns", "latin", 0.93, True, 0.01, z)
    audit = verification.describe("ns", "latin", 0.91, 0.01, z)["audit"]
    assert audit == {"audited": 30, "wrong": 0, "wrong_upper_bound": audit["wrong_upper_bound"], "certified": False}
    for _ in range(200):
        verification.audited("ns", "latin", 0.93, True, 0.01, z)
    assert verification.describe("ns", "latin", 0.91, 0.01, z)["audit"]["certified"]
    assert verification.lower_edge("ns", "latin", 0.91) == start

    for number in range(12):  # the low part of the band: one audited hit in three is wrong
        verification.audited("ns", "latin", start + 0.01, number % 3 != 0, 0.01, z)
    assert start + 0.01 < verification.lower_edge("ns", "latin", 0.91) <= start + 0.04
    for _ in range(20):  # then everywhere else too: no band is left
        verification.audited("ns", "latin", 0.93, False, 0.01, z)
    assert verification.lower_edge("ns", "latin", 0.91) >= 0.94
    assert verification.lower_edge("other", "latin", 0.91) == start
    verification.forget("ns")
    assert verification.lower_edge("ns", "latin", 0.91) == start


class OneEntry:
    """A store that holds one entry."""

    def __init__(self, entry: CacheEntry) -> None:
        self.entry = entry

    async def get(self, entry_id: int) -> CacheEntry | None:
        return self.entry if entry_id == self.entry.id else None

    async def get_by_exact_key(self, exact_key: str) -> CacheEntry | None:
        return None


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_approval_is_the_budgets_evidence_once_however_often_its_pair_is_served(mode: str) -> None:
    key = cache_api_key("ns", PARAPHRASE, {})
    entry = CacheEntry("ns", key.scope, "cached-key", "m", QUESTION, "Practise daily.", 0.0, None, id=7)
    inner, budgets = CountingVerifier("yes"), ErrorBudgets()
    policies = NamespacePolicies(QualityPolicy(threshold=0.91, verify=mode))  # type: ignore[arg-type]
    tier = SemanticTier(ScopedVectorIndex(4), OneEntry(entry), policies, Verification(inner), budgets=budgets)
    vector = np.zeros(4, dtype=np.float32)

    async def lookups() -> list[bool]:
        served = []
        for _ in range(3):  # under the line (0.98 for a new namespace), in the band
            result = await tier.lookup(key, vector, 0.0, [(7, 0.9)], explore=False)
            served.append(result.hit is not None and result.hit.verified)
            await tier.verification.settled()
        return served

    served = asyncio.run(lookups())
    tier.close()
    assert served == ([True] * 3 if mode == "sync" else [False, True, True])  # async: from the next time on
    assert len(inner.asked) == 1
    estimate = budgets.estimate("ns", "latin", tier.rule("ns", "latin"))
    assert estimate.verdicts == 1 and estimate.labels_total == 0


def test_under_the_edge_a_few_candidates_are_verified_in_the_background_and_never_served() -> None:
    entry_key = cache_api_key("ns", QUESTION, {})
    entry = CacheEntry("ns", entry_key.scope, "cached-key", "m", QUESTION, "Practise daily.", 0.0, None, id=7)
    inner = CountingVerifier("no")
    policies = NamespacePolicies(QualityPolicy(threshold=0.91, verify="sync"))
    tier = SemanticTier(ScopedVectorIndex(4), OneEntry(entry), policies, Verification(inner), budgets=ErrorBudgets())
    vector = np.zeros(4, dtype=np.float32)
    low = 0.72  # in the band as it starts (0.676), under the edge its refusals teach
    for number in range(25):
        asyncio.run(tier.verification.verify(case(query=f"refused {number}", entry_id=7, similarity=low), {}))
    edge = tier.verification.lower_edge("ns", "latin", 0.91)
    assert low < edge

    async def lookup(number: int) -> bool:
        key = cache_api_key("ns", f"{PARAPHRASE} ({number})", {})
        result = await tier.lookup(key, vector, 0.0, [(7, low)], explore=False)
        await tier.verification.settled()
        return result.hit is not None

    assert not any(asyncio.run(lookup(number)) for number in range(8))
    assert len(inner.asked) == 25 + 2  # a quarter of them, none served
    inner.verdict = "yes"  # the candidates there pass now: the edge comes down, and they are served
    served_at = next((n for n in range(8, 400) if asyncio.run(lookup(n))), None)
    tier.close()
    assert served_at is not None
    assert tier.verification.lower_edge("ns", "latin", 0.91) <= low


class Entries:
    def __init__(self, *entries: CacheEntry) -> None:
        self.entries = {entry.id: entry for entry in entries}

    async def get(self, entry_id: int) -> CacheEntry | None:
        return self.entries.get(entry_id)

    async def get_by_exact_key(self, exact_key: str) -> CacheEntry | None:
        return None


def test_a_doubted_candidate_above_the_line_is_verified_and_a_refusal_lets_a_certified_one_answer() -> None:
    stored, paraphrase = "Is Germany bigger than Poland?", "Is Poland larger than Germany?"
    key = cache_api_key("ns", "Is Poland bigger than Germany?", {})  # `order` doubts the first entry
    swapped = CacheEntry("ns", key.scope, "k1", "m", stored, "Yes, Germany is bigger.", 0.0, None, id=1)
    certified = CacheEntry("ns", key.scope, "k2", "m", paraphrase, "No, Germany is bigger.", 0.0, None, id=2)
    inner, budgets = CountingVerifier("no"), ErrorBudgets()
    policies = NamespacePolicies(QualityPolicy(threshold=0.91, guards=("numbers", "negation")))
    tier = SemanticTier(ScopedVectorIndex(4), Entries(swapped, certified), policies, Verification(inner),
                        budgets=budgets)  # fmt: skip
    vector = np.zeros(4, dtype=np.float32)
    assert tier.line("ns", "latin") == pytest.approx(0.98, abs=0.001)  # a new namespace's line

    def lookup(query: str, candidates: list[tuple[int, float]]) -> Any:
        return asyncio.run(tier.lookup(cache_api_key("ns", query, {}), vector, 0.0, candidates, explore=False))

    result = lookup("Is Poland bigger than Germany?", [(1, 0.995), (2, 0.985)])
    assert result.hit is not None and result.hit.entry_id == 2 and not result.hit.verified
    assert [(c.cached_prompt, c.doubted) for c in inner.asked] == [(stored, True)]

    inner.verdict = "yes"
    result = lookup("Is Poland bigger than Germany then?", [(1, 0.99)])
    assert result.hit is not None and result.hit.entry_id == 1 and result.hit.verified
    # Its approval is no evidence of where candidates stop passing, nor of the line.
    assert budgets.estimate("ns", "latin", tier.rule("ns", "latin")).verdicts == 0
    assert tier.verification.describe("ns", "latin", 0.91)["verified"] == 0

    # Under the line, a doubt is no pass past the band's edge: refusals raise it over 0.72 first.
    inner.verdict = "no"
    for number in range(25):
        asyncio.run(tier.verification.verify(case(query=f"refused {number}", entry_id=1, similarity=0.72), {}))
    assert tier.verification.lower_edge("ns", "latin", 0.91) > 0.72
    inner.verdict = "yes"
    assert lookup("Is Poland bigger than Germany, really?", [(1, 0.72)]).hit is None
    tier.close()


def test_a_request_in_flight_is_verified_as_doubted_only_where_a_guard_doubted_it_above_the_line() -> None:
    """The doubt is decided when the answer in flight is accepted, not read again from a line that
    moves while the answer is awaited; a doubted approval teaches nothing, a band approval does."""
    inner, budgets = CountingVerifier("yes"), ErrorBudgets()
    policies = NamespacePolicies(QualityPolicy(threshold=0.91, guards=("numbers", "negation")))
    decisions: list[Decision] = []
    tier = SemanticTier(ScopedVectorIndex(4), Entries(), policies, Verification(inner), budgets=budgets,
                        on_decision=decisions.append)  # fmt: skip
    vector = np.zeros(4, dtype=np.float32)
    swapped = cache_api_key("ns", "Is Poland bigger than Germany?", {})  # `order` doubts it
    paraphrase = cache_api_key("ns", PARAPHRASE, {})

    async def accept(key: Any, candidate: str, similarity: float) -> Any:
        return await tier.accepts_in_flight(key, vector, candidate, similarity)

    async def verify(key: Any, candidate: str, similarity: float, accepted: Any) -> bool:
        return await tier.verify_in_flight(key, candidate, "An answer.", similarity, accepted, {})

    doubted = asyncio.run(accept(swapped, "Is Germany bigger than Poland?", 0.99))
    in_band = asyncio.run(accept(paraphrase, QUESTION, 0.95))
    assert (doubted.action, doubted.doubted, in_band.action, in_band.doubted) == ("verify", True, "verify", False)
    assert doubted.line == in_band.line == pytest.approx(0.98, abs=0.001)
    # While the answers are awaited the line comes down under both: neither changes what it teaches.
    policies.set("ns", {"threshold": 0.9, "learn": False})
    assert tier.line("ns", "latin") < 0.95
    assert asyncio.run(verify(swapped, "Is Germany bigger than Poland?", 0.99, doubted))
    assert budgets.estimate("ns", "latin", tier.rule("ns", "latin")).verdicts == 0
    assert asyncio.run(verify(paraphrase, QUESTION, 0.95, in_band))
    assert budgets.estimate("ns", "latin", tier.rule("ns", "latin")).verdicts == 1
    assert [c.doubted for c in inner.asked] == [True, False]
    logged = [d for d in decisions if d.decision == "hit: a request in flight"]
    assert [d.threshold for d in logged] == [doubted.line, in_band.line]  # the lines they were accepted under
    tier.close()


# -- through the service --------------------------------------------------------------------------


def verifications(upstream: StandinUpstream) -> list[dict[str, Any]]:
    return upstream.verification_calls()


def settle(predicate: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.slow
def test_a_paraphrase_under_the_line_is_verified_then_served(
    service: str, client: openai.OpenAI, upstream: StandinUpstream
) -> None:
    assert ask(client, QUESTION)[1]["x-semcache"] == "miss"
    answer, headers = ask(client, PARAPHRASE, model="test-model")
    assert headers["x-semcache"] == "hit" and headers["x-semcache-tier"] == "semantic"
    assert headers["x-semcache-verified"] == "true"
    assert answer == f"Answer to: {QUESTION}"
    (call,) = verifications(upstream)
    assert call["headers"]["x-semcache-verification"] == "true"
    assert call["headers"]["authorization"] == "Bearer sk-test"  # the client's own credentials
    body = call["json"]
    assert body["model"] == "test-model" and body["temperature"] == 0 and body["max_completion_tokens"] == 16
    assert all(isinstance(m["content"], str) for m in body["messages"])
    quoted = "".join(m["content"] for m in body["messages"])
    assert PARAPHRASE in quoted and QUESTION in quoted and f"Answer to: {QUESTION}" in quoted
    assert upstream.chat_calls() == 1  # one full answer; the verification is apart

    ask(client, PARAPHRASE)  # a repeat: the verdict is remembered
    assert len(verifications(upstream)) == 1
    decisions = httpx.get(f"{service}/admin/decisions?limit=5").json()["data"]
    assert any(d["decision"] == "hit" and d["verification"] == "yes" for d in decisions)

    stats = httpx.get(f"{service}/stats").json()["verification"]
    assert stats["asked"] == 1 and stats["yes"] == 1 and stats["no"] == stats["failed"] == 0
    assert stats["prompt_tokens"] > 0
    metrics = httpx.get(f"{service}/metrics").text
    assert 'semcache_verifications_total{namespace="default",verdict="yes"} 1.0' in metrics
    assert 'semcache_verifier_approvals_total{language="latin",namespace="default"} 1.0' in metrics
    # One approval, no audit yet: it is not the budget's label until audits vouch for the verifier.
    assert 'semcache_verifier_approvals_counted{language="latin",namespace="default"} 0.0' in metrics
    assert 'semcache_verifier_audits_total{language="latin",namespace="default",outcome="wrong"} 0.0' in metrics
    assert 'semcache_verifier_wrong_share_upper{language="latin",namespace="default"} 1.0' in metrics
    scripts = httpx.get(f"{service}/admin/namespaces/default/quality").json()["scripts"]
    edge = next(s for s in scripts if s["language"] == "latin")["verification"]["lower_edge"]
    assert f'semcache_verification_band_edge{{language="latin",namespace="default"}} {edge}' in metrics


@pytest.mark.slow
def test_a_verifier_that_says_no_fails_or_times_out_makes_a_miss(
    serve: Callable[..., str], make_client: Callable[..., openai.OpenAI], upstream: StandinUpstream
) -> None:
    url = serve(verify_timeout_s=0.5)
    client = make_client(url)
    ask(client, QUESTION)
    answer, headers = ask(client, LOOK_ALIKE)  # the stand-in's verifier reads the changed word
    assert headers["x-semcache"] == "miss" and "x-semcache-verified" not in headers
    assert answer == f"Answer to: {LOOK_ALIKE}" and len(verifications(upstream)) == 1

    for number, fault in enumerate(({"status": 500}, {"latency_s": 3.0}, {"answer_bytes": 5_000})):
        upstream.set_fault(match="Cached question", **fault)
        started = time.monotonic()
        prompt = ("How can I learn Python fast, please?", "So how can I learn Python fast?",
                  "How can I learn Python fast then?")[number]  # fmt: skip
        answer, headers = ask(client, prompt, extra_headers={"Cache-Control": "no-store"})
        assert headers["x-semcache"] == "miss", fault
        assert answer == f"Answer to: {prompt}"
        assert time.monotonic() - started < 5
    upstream.set_fault()
    stats = httpx.get(f"{url}/stats").json()["verification"]
    assert stats["no"] == 1 and stats["failed"] >= 2


@pytest.mark.slow
def test_async_answers_a_miss_now_and_serves_the_approved_pair_next_time(
    serve: Callable[..., str], make_client: Callable[..., openai.OpenAI], upstream: StandinUpstream
) -> None:
    client = make_client(serve(verify="async"))
    ask(client, QUESTION)
    no_store = {"Cache-Control": "no-store"}  # so that the next answer can only come from the verdict
    answer, headers = ask(client, PARAPHRASE, extra_headers=no_store)
    assert headers["x-semcache"] == "miss" and answer == f"Answer to: {PARAPHRASE}"
    settle(lambda: len(verifications(upstream)) == 1)
    time.sleep(0.2)  # the verdict is remembered once the call returns
    answer, headers = ask(client, PARAPHRASE, extra_headers=no_store)
    assert headers["x-semcache"] == "hit" and headers["x-semcache-verified"] == "true"
    assert answer == f"Answer to: {QUESTION}" and len(verifications(upstream)) == 1


@pytest.mark.slow
def test_guards_veto_before_any_verification_and_off_never_verifies(
    service: str, client: openai.OpenAI, upstream: StandinUpstream
) -> None:
    ask(client, QUESTION)
    assert ask(client, "How do I not learn Python quickly?")[1]["x-semcache"] == "miss"  # negation guard
    assert verifications(upstream) == []

    configured = httpx.put(f"{service}/admin/namespaces/plain/config", json={"verify": "off"})
    assert configured.status_code == 200, configured.text
    assert configured.json()["config"]["verify"] == "off"
    plain = {"X-Semcache-Namespace": "plain"}
    ask(client, QUESTION, extra_headers=plain)
    assert ask(client, PARAPHRASE, extra_headers=plain)[1]["x-semcache"] == "miss"
    assert verifications(upstream) == []
    metrics = httpx.get(f"{service}/metrics").text
    assert 'semcache_verification_band_edge{language="latin",namespace="plain"} 1.0' in metrics
    bad = httpx.put(f"{service}/admin/namespaces/plain/config", json={"verify": "sometimes"})
    assert bad.status_code == 400 and bad.json()["error"]["message"]


@pytest.mark.slow
def test_a_swapped_look_alike_scoring_above_the_line_is_verified_and_teaches_no_band(
    service: str, client: openai.OpenAI, upstream: StandinUpstream
) -> None:
    stored, swapped = "Is Germany bigger than Poland?", "Is Poland bigger than Germany?"  # cosine about 0.99
    ask(client, stored)
    upstream.state.verdict = "no"  # a model reads the swap; the stand-in's word-set verifier would not
    try:
        answer, headers = ask(client, swapped)
    finally:
        upstream.state.verdict = None
    assert headers["x-semcache"] == "miss" and answer == f"Answer to: {swapped}"
    (call,) = verifications(upstream)
    assert stored in "".join(m["content"] for m in call["json"]["messages"])
    decisions = httpx.get(f"{service}/admin/decisions?limit=5").json()["data"]
    doubted = next(d for d in decisions if d["candidate"] == stored)
    assert doubted["similarity"] >= doubted["threshold"]  # the score alone would have served it
    assert doubted["verification"] == "no"
    assert {"guard": "order", "passed": False, "doubt": True}.items() <= next(
        g for g in doubted["guards"] if g["guard"] == "order"
    ).items()
    scripts = httpx.get(f"{service}/admin/namespaces/default/quality").json()["scripts"]
    band = next(s for s in scripts if s["language"] == "latin")["verification"]
    assert band["verified"] == 0  # its verdict is not evidence about where candidates stop passing

    approving = {"X-Semcache-Namespace": "approving"}
    ask(client, stored, extra_headers=approving)
    answer, headers = ask(client, swapped, extra_headers=approving)  # the stand-in says yes
    assert headers["x-semcache"] == "hit" and headers["x-semcache-verified"] == "true"
    assert answer == f"Answer to: {stored}" and len(verifications(upstream)) == 2
    scripts = httpx.get(f"{service}/admin/namespaces/approving/quality").json()["scripts"]
    assert next(s for s in scripts if s["language"] == "latin")["verification"]["verified"] == 0
    metrics = httpx.get(f"{service}/metrics").text
    assert 'semcache_verifier_approvals_total{language="latin",namespace="approving"} 1.0' not in metrics

    # Where nothing verifies, the guards decide alone: `order` enabled vetoes the swap.
    ordered = {"X-Semcache-Namespace": "ordered"}
    config = {"verify": "off", "guards": ["numbers", "negation", "order"]}
    assert httpx.put(f"{service}/admin/namespaces/ordered/config", json=config).status_code == 200
    ask(client, stored, extra_headers=ordered)
    assert ask(client, swapped, extra_headers=ordered)[1]["x-semcache"] == "miss"
    assert len(verifications(upstream)) == 2


@pytest.mark.slow
def test_a_verification_never_quotes_another_namespace_and_a_client_cannot_pose_as_one(
    service: str, client: openai.OpenAI, upstream: StandinUpstream
) -> None:
    ask(client, QUESTION, extra_headers={"X-Semcache-Namespace": "tenant-a"})
    headers = ask(client, PARAPHRASE, extra_headers={"X-Semcache-Namespace": "tenant-b"})[1]
    assert headers["x-semcache"] == "miss" and verifications(upstream) == []

    # A client's own verification header goes nowhere: its miss is an ordinary call, answered in full.
    prompt = "What is the capital of France?"
    answer, headers = ask(client, prompt, extra_headers={"X-Semcache-Verification": "true"})
    assert answer == f"Answer to: {prompt}" and verifications(upstream) == []


@pytest.mark.slow
def test_a_file_naming_the_old_verifier_settings_starts_with_a_warning(
    tmp_path: Path, upstream: StandinUpstream
) -> None:
    config = tmp_path / "semcache.yaml"
    config.write_text("verifier: none\nverify_below: 0.9\nverifier-min-score: 0.5\n")
    log = tmp_path / "serve.log"
    with SemcacheProcess("--config", str(config), data_dir=tmp_path / "data", upstream_url=upstream.base_url,
                         log_path=log) as server:  # fmt: skip
        assert httpx.get(f"{server.url}/healthz").status_code == 200
    output = log.read_text()
    for name in ("verifier", "verify_below", "verifier_min_score"):
        assert f"'{name}' is no longer used" in output


@pytest.mark.slow
def test_a_few_verified_hits_are_audited_and_a_few_exact_hits_reasked_within_the_explore_share(
    serve: Callable[..., str], make_client: Callable[..., openai.OpenAI], upstream: StandinUpstream
) -> None:
    url = serve(explore_share=0.1)
    client = make_client(url)
    ask(client, QUESTION)
    no_store = {"Cache-Control": "no-store"}  # every repeat finds the cached question, not itself
    outcomes = []
    for _ in range(90):  # one verified hit in 50 comes due for an audit, taken by chance within the share
        answer, headers = ask(client, PARAPHRASE, extra_headers=no_store)
        outcomes.append((headers["x-semcache"], headers.get("x-semcache-explored"), answer))
    audited = [o for o in outcomes if o[1] == "true"]
    # Audited: answered from the upstream, as a miss would be; the rest served verified, within the share.
    assert audited and all(o[0] == "miss" and o[2] == f"Answer to: {PARAPHRASE}" for o in audited)
    assert len(audited) <= 0.1 * len(outcomes) + 2
    assert sum(o[0] == "hit" for o in outcomes) == len(outcomes) - len(audited)
    assert len(verifications(upstream)) == 1  # the verdict was remembered throughout
    decisions = httpx.get(f"{url}/admin/decisions?limit=100").json()["data"]
    assert any(d["decision"].startswith("explored: a verified hit") and d["verification"] == "yes" for d in decisions)
    script = httpx.get(f"{url}/admin/namespaces/default/quality").json()["scripts"][0]
    assert set(script["verification"]["audit"]) == {"audited", "wrong", "wrong_upper_bound", "certified"}

    # A user's word on a hit: the namespace has a label, so the judge's verdicts count from now on.
    raw = client.chat.completions.with_raw_response.create(
        model="test-model", messages=[{"role": "user", "content": PARAPHRASE}], extra_headers=no_store
    )
    assert raw.headers["x-semcache"] == "hit"
    feedback = httpx.post(f"{url}/v1/semcache/feedback", json={"id": raw.parse().id, "correct": True})
    assert feedback.status_code == 200
    calls = upstream.chat_calls()
    reasked = 0
    for _ in range(60):  # an exact hit now and then goes upstream, for the judge to see two answers
        _, headers = ask(client, QUESTION)
        reasked += headers["x-semcache"] == "miss"
    assert 1 <= reasked <= 0.1 * 60 + 2 and upstream.chat_calls() == calls + reasked

    def reasked_pairs() -> int:
        models = httpx.get(f"{url}/admin/namespaces/default/quality").json()["judge"]["models"]
        return sum(model["reasked_pairs"] for model in models.values())

    settle(lambda: reasked_pairs() == reasked)  # the judge saw each pair of answers to the one question
