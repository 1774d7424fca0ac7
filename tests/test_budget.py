"""Error budgets: the decision line each namespace learns from labelled evidence (a verifier's
approvals among it, at their audited error rate), its estimate of the wrong share, exploration's
bounds, and the evidence's trip through SQLite and Redis."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from semcache.decision.budget import BudgetRule, ErrorBudgets, conservative_start, share_evidence
from semcache.stores import SQLiteStore
from semcache.stores.redis import RedisStore
from testkit.redis_server import RedisServer

RULE = BudgetRule(prior=0.91, target_error=0.01)


def true_error(similarity: float, midpoint: float) -> float:
    """Traffic whose wrong share falls from 50% at ``midpoint`` to next to nothing 0.1 above it."""
    return 1 / (1 + math.exp((similarity - midpoint) / 0.02))


def replay(budgets: ErrorBudgets, midpoint: float, lookups: int, seed: int = 7, rule: BudgetRule = RULE) -> None:
    """Lookups as the semantic tier makes them: traffic everywhere, near misses labelled, hits
    explored when the budget asks."""
    rng = random.Random(seed)
    for _ in range(lookups):
        similarity = rng.uniform(0.45, 1.0)
        line = budgets.line("ns", "latin", rule)
        budgets.note_request("ns")
        budgets.candidate_seen("ns", "latin", similarity, rule, line)
        correct = rng.random() >= true_error(similarity, midpoint)
        if line - 1.5 * (1 - rule.prior) <= similarity < line:
            budgets.label("ns", "latin", similarity, correct, "near_miss")
        elif similarity >= line and budgets.should_explore("ns", "latin", rule):
            budgets.label("ns", "latin", similarity, correct, "explored")


def served_error(midpoint: float, line: float) -> float:
    points = [line + (1.0 - line) * k / 999 for k in range(1000)]
    return sum(true_error(p, midpoint) for p in points) / len(points)


def test_until_it_has_enough_labels_a_namespace_decides_by_the_prior_and_never_explores() -> None:
    budgets = ErrorBudgets(min_labels=50, rng=random.Random(1))
    for _ in range(49):
        budgets.label("ns", "latin", 0.80, True, "near_miss")
    for _ in range(200):
        budgets.note_request("ns")
    assert budgets.line("ns", "latin", RULE) == 0.91
    assert not any(budgets.should_explore("ns", "latin", RULE) for _ in range(100))


def test_traffic_whose_answers_stay_right_far_below_the_prior_gets_a_lower_line_within_budget() -> None:
    budgets = ErrorBudgets(rng=random.Random(2))
    replay(budgets, midpoint=0.62, lookups=6000)  # a help desk: paraphrases are right down to ~0.7
    line = budgets.line("ns", "latin", RULE)
    assert line < 0.85
    assert served_error(0.62, line) <= RULE.target_error


def test_traffic_that_is_wrong_at_the_prior_raises_the_line_above_it() -> None:
    budgets = ErrorBudgets(rng=random.Random(3))
    replay(budgets, midpoint=0.88, lookups=8000)  # look-alike questions: wrong well above 0.91
    line = budgets.line("ns", "latin", RULE)
    assert 0.91 < line < 1.0
    assert served_error(0.88, line) <= 0.02
    assert budgets.estimate("ns", "latin", RULE).hits_given_up > 0


def test_the_estimate_brackets_the_true_wrong_share_at_the_line() -> None:
    budgets = ErrorBudgets(rng=random.Random(4))
    replay(budgets, midpoint=0.70, lookups=8000)
    estimate = budgets.estimate("ns", "latin", RULE)
    truth = served_error(0.70, estimate.line)
    assert estimate.learning and estimate.labels_total > 500
    assert estimate.interval[0] <= truth + 0.005 and truth <= estimate.interval[1]
    assert abs(estimate.estimated_error - truth) < 0.02
    assert estimate.labels["near_miss"] > 0 and estimate.labels["explored"] > 0


def test_a_pinned_or_unlearned_rule_keeps_the_threshold_whatever_the_evidence() -> None:
    budgets = ErrorBudgets(rng=random.Random(5))
    pinned = BudgetRule(prior=0.91, target_error=0.01, learn=False)
    replay(budgets, midpoint=0.60, lookups=3000, rule=pinned)
    assert budgets.line("ns", "latin", pinned) == 0.91
    assert not budgets.should_explore("ns", "latin", pinned)
    assert budgets.estimate("ns", "latin", pinned, pinned=True).pinned


@pytest.mark.parametrize("idle_requests", [0, 100_000])  # an idle namespace saves up no burst
def test_exploration_stays_within_its_share_of_requests(idle_requests: int) -> None:
    budgets = ErrorBudgets(explore_share=0.05, rng=random.Random(6))
    for _ in range(idle_requests):  # a long time before it learns
        budgets.note_request("ns")
    for _ in range(60):
        budgets.label("ns", "latin", 0.95, True, "near_miss")
    explored = 0
    for _ in range(2000):
        budgets.note_request("ns")
        explored += budgets.should_explore("ns", "latin", RULE)
    assert 0 < explored <= 0.05 * 2000 + 2  # at most two saved up


def test_evidence_outside_the_bins_is_ignored() -> None:
    budgets = ErrorBudgets()
    budgets.label("ns", "latin", 0.1, False, "feedback")
    budgets.candidate_seen("ns", "latin", 0.1, RULE, 0.91)
    assert budgets.estimate("ns", "latin", RULE).labels_total == 0


# -- a verifier's approvals ------------------------------------------------------------------------

LEARNING = BudgetRule(prior=0.91, target_error=0.01, start=conservative_start(0.91))  # starts at 0.98


def verified_traffic(approvals: int = 0, audits: int = 0, wrong_audits: int = 0) -> ErrorBudgets:
    """A namespace that learns, whose judges labelled only its explored hits at the top (and four
    wrong near misses far below), and whose verifier approved ``approvals`` candidates in the band
    between them; ``audits`` of its verified hits were judged, ``wrong_audits`` of them wrong."""
    budgets = ErrorBudgets(confidence=0.9, rng=random.Random(11))
    rng = random.Random(12)
    for _ in range(60):
        budgets.label("ns", "latin", rng.uniform(0.98, 1.0), True, "explored")
    for _ in range(4):
        budgets.label("ns", "latin", 0.82, False, "near_miss")
    for _ in range(3000):
        budgets.candidate_seen("ns", "latin", rng.uniform(0.80, 1.0), LEARNING, 0.98)
    for _ in range(approvals):
        budgets.verdict("ns", "latin", rng.uniform(0.85, 0.98))
    for number in range(audits):
        budgets.audited("ns", "latin", correct=number >= wrong_audits)
    return budgets


def test_approvals_count_for_nothing_until_audits_vouch_for_the_verifier() -> None:
    judged_only = verified_traffic().line("ns", "latin", LEARNING)
    assert judged_only == pytest.approx(0.98, abs=0.005)  # nothing vouches for the band
    budgets = verified_traffic(approvals=4000)
    assert budgets.line("ns", "latin", LEARNING) == judged_only
    estimate = budgets.estimate("ns", "latin", LEARNING)
    assert (estimate.verdicts, estimate.verdict_labels, estimate.verifier_error_bound) == (4000, 0, 1.0)
    assert estimate.labels_total == 64  # approvals are no judge's labels


def test_approvals_bring_the_line_down_at_the_verifiers_certified_error_rate() -> None:
    budgets = verified_traffic(approvals=4000, audits=200)  # none wrong: the bound is about 0.008
    estimate = budgets.estimate("ns", "latin", LEARNING)
    assert estimate.verdict_labels == 4000 and estimate.verifier_error_bound == pytest.approx(0.0081, abs=0.0002)
    line = budgets.line("ns", "latin", LEARNING)
    assert 0.85 <= line < 0.9  # into the band they approved, not down to the wrong near misses
    assert estimate.interval[1] <= LEARNING.target_error
    # Each approval weighs as 0.8% of a wrong label: 2,000 of them cannot yet vouch for 1%.
    assert verified_traffic(approvals=2000, audits=200).line("ns", "latin", LEARNING) == pytest.approx(0.98, abs=0.005)
    as_dict = estimate.as_dict()
    assert as_dict["verdict_labels"] == 4000 and as_dict["verifier_audits"] == 200
    assert as_dict["labels_total"] == 64 and set(as_dict["labels"]) == {"near_miss", "explored", "feedback"}


def test_a_verifier_whose_audits_go_wrong_teaches_nothing_and_approvals_never_start_learning() -> None:
    judged_only = verified_traffic().line("ns", "latin", LEARNING)
    budgets = verified_traffic(approvals=4000, audits=200, wrong_audits=5)
    estimate = budgets.estimate("ns", "latin", LEARNING)
    assert estimate.verifier_error_bound > LEARNING.target_error and estimate.verdict_labels == 0
    assert budgets.line("ns", "latin", LEARNING) == judged_only
    fresh = ErrorBudgets(confidence=0.9)  # approvals and audits alone: the line has no labels to learn from
    for _ in range(1000):
        fresh.verdict("ns", "latin", 0.9)
    for _ in range(400):
        fresh.audited("ns", "latin", correct=True)
    assert fresh.line("ns", "latin", LEARNING) == LEARNING.starting_line
    assert not fresh.estimate("ns", "latin", LEARNING).learning
    assert not fresh.should_explore("ns", "latin", LEARNING)


# -- the evidence in the stores -------------------------------------------------------------------


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with RedisServer(tmp_path_factory.mktemp("redis")) as server:
        yield server


async def test_evidence_survives_a_restart_in_sqlite(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "entries.sqlite3")
    await store.open()
    budgets = ErrorBudgets()
    for _ in range(3):
        budgets.label("support", "latin", 0.80, True, "near_miss")
    budgets.label("support", "han", 0.99, False, "feedback")
    await share_evidence(budgets, store)
    budgets.label("support", "latin", 0.80, True, "near_miss")
    await share_evidence(budgets, store)
    await store.close()

    reopened = SQLiteStore(tmp_path / "entries.sqlite3")
    await reopened.open()
    later = ErrorBudgets()
    await share_evidence(later, reopened)
    await reopened.close()
    assert later.estimate("support", "latin", RULE).labels == {"near_miss": 4, "explored": 0, "feedback": 0}
    assert later.estimate("support", "han", RULE).labels_total == 1


async def test_approvals_and_audits_travel_through_sqlite_and_redis(tmp_path: Path, redis_server: RedisServer) -> None:
    sqlite = SQLiteStore(tmp_path / "entries.sqlite3")
    await sqlite.open()
    for store in (sqlite, RedisStore(redis_server.url, prefix="budget-verdicts")):
        budgets = verified_traffic(approvals=4000, audits=200, wrong_audits=1)
        await share_evidence(budgets, store)
        later = ErrorBudgets(confidence=0.9)
        await share_evidence(later, store)
        estimate = later.estimate("ns", "latin", LEARNING)
        assert (estimate.verdicts, estimate.verifier_audits, estimate.verifier_audits_wrong) == (4000, 200, 1)
        assert later.line("ns", "latin", LEARNING) == budgets.line("ns", "latin", LEARNING)
        await store.close()


async def test_replicas_on_one_redis_add_up_their_evidence(redis_server: RedisServer) -> None:
    stores = [RedisStore(redis_server.url, prefix="budget-test") for _ in range(2)]
    replicas = [ErrorBudgets(), ErrorBudgets()]
    for replica, count in zip(replicas, (30, 25), strict=True):
        for _ in range(count):
            replica.label("shared", "latin", 0.85, True, "explored")
    for replica, store in zip(replicas, stores, strict=True):
        await share_evidence(replica, store)
    await share_evidence(replicas[0], stores[0])  # the first catches up with the second
    for replica in replicas:
        assert replica.estimate("shared", "latin", RULE).labels["explored"] == 55
    for store in stores:
        await store.close()


async def test_evidence_the_store_cannot_take_is_kept_for_the_next_time(tmp_path: Path) -> None:
    class Refusing:
        async def add_evidence(self, batch_id: str, deltas: dict[tuple[str, str], dict[str, int]]) -> None:
            raise OSError("disk full")

        async def evidence(self) -> dict[tuple[str, str], dict[str, int]]:
            return {}

    budgets = ErrorBudgets()
    budgets.label("ns", "latin", 0.9, True, "near_miss")
    with pytest.raises(OSError):
        await share_evidence(budgets, Refusing())
    assert budgets.estimate("ns", "latin", RULE).labels_total == 1  # still counted here
    store = SQLiteStore(tmp_path / "entries.sqlite3")
    await store.open()
    await share_evidence(budgets, store)
    assert (await store.evidence())[("ns", "latin")]["src:near_miss"] == 1
    await store.close()


async def test_a_batch_sent_twice_counts_once_in_sqlite_and_in_redis(tmp_path: Path, redis_server: RedisServer) -> None:
    sqlite = SQLiteStore(tmp_path / "entries.sqlite3")
    await sqlite.open()
    redis = RedisStore(redis_server.url, prefix="budget-twice")
    for store in (sqlite, redis):
        budgets = ErrorBudgets()
        for _ in range(10):
            budgets.label("ns", "latin", 0.9, True, "near_miss")
        batch = budgets.pending_batch()
        assert batch is not None
        await store.add_evidence(batch.id, batch.deltas)  # it landed, but the caller never heard back
        await share_evidence(budgets, store)  # so it is sent again, under the same id
        assert (await store.evidence())[("ns", "latin")]["src:near_miss"] == 10
        assert budgets.estimate("ns", "latin", RULE).labels_total == 10
    await sqlite.close()
    await redis.close()


def test_client_chosen_namespaces_cannot_grow_the_budgets_without_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("semcache.decision.budget.MAX_BUDGETS", 3)
    budgets = ErrorBudgets()
    for number in range(10):
        budgets.note_request(f"ns{number}")
        budgets.label(f"ns{number}", "latin", 0.9, True, "near_miss")
    assert len(budgets.keys()) == 3
    assert budgets.estimate("ns9", "latin", RULE).labels_total == 0  # it keeps the prior
    batch = budgets.pending_batch()
    assert batch is not None and len(batch.deltas) == 3


def test_the_line_never_goes_below_the_labels_nor_far_below_the_prior() -> None:
    budgets = ErrorBudgets(rng=random.Random(8))
    for _ in range(150):
        budgets.label("ns", "latin", 0.93, True, "near_miss")
    for step in range(400):
        budgets.candidate_seen("ns", "latin", 0.93 + 0.0001 * step, RULE, 0.91)
    assert budgets.line("ns", "latin", RULE) == 0.91  # nothing vouches for what lies below the labels
    rng = random.Random(9)
    for _ in range(5000):  # right answers all the way down: the line stops at its floor
        similarity = rng.uniform(0.4, 0.93)
        budgets.candidate_seen("ns", "latin", similarity, RULE, 0.91)
        budgets.label("ns", "latin", similarity, True, "near_miss")
    assert budgets.line("ns", "latin", RULE) == pytest.approx(0.91 - 3 * 0.09, abs=0.005)


def test_easy_hits_above_do_not_excuse_bad_ones_at_the_line() -> None:
    budgets = ErrorBudgets(rng=random.Random(10))
    for _ in range(70):
        budgets.label("ns", "latin", 0.82, False, "near_miss")
    for _ in range(160):
        budgets.label("ns", "latin", 0.82, True, "near_miss")
    for _ in range(400):
        budgets.label("ns", "latin", 0.99, True, "explored")
    for _ in range(20_000):
        budgets.candidate_seen("ns", "latin", 0.99, RULE, 0.91)
    for _ in range(200):
        budgets.candidate_seen("ns", "latin", 0.82, RULE, 0.91)
    assert budgets.line("ns", "latin", RULE) > 0.82


async def test_an_operator_can_forget_one_namespaces_evidence(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "entries.sqlite3")
    await store.open()
    budgets = ErrorBudgets()
    for namespace in ("kept", "reset"):
        budgets.label(namespace, "latin", 0.9, True, "near_miss")
    await share_evidence(budgets, store)
    budgets.forget("reset")
    await store.clear_evidence("reset")
    await share_evidence(budgets, store)
    assert budgets.keys() == [("kept", "latin")]
    assert set(await store.evidence()) == {("kept", "latin")}
    await store.close()


def test_a_label_moves_the_line_in_the_labelling_task_not_in_the_next_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    """A lookup reads a line worked out already: the label that moved it paid for the work."""
    budgets = ErrorBudgets(rng=random.Random(3))
    replay(budgets, midpoint=0.62, lookups=3000)
    before = budgets.line("ns", "latin", RULE)
    for _ in range(60):
        budgets.label("ns", "latin", 0.93, False, "explored")  # wrong answers well above the line
    worked_out: list[float] = []
    learned = budgets._learned_line
    monkeypatch.setattr(budgets, "_learned_line", lambda *args: worked_out.append(1) or learned(*args))
    after = budgets.line("ns", "latin", RULE)
    assert worked_out == []  # the lookup computed nothing
    fresh = ErrorBudgets(rng=random.Random(3))
    fresh.load({("ns", "latin"): budgets.pending_batch().deltas[("ns", "latin")]})  # type: ignore[union-attr]
    assert after == fresh.line("ns", "latin", RULE) and after > before
