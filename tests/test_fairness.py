"""Sharing bounds between namespaces (semcache.fairness), and per-namespace state that stays
bounded however many namespaces clients name."""

from __future__ import annotations

import random

from semcache.decision.budget import MAX_BUDGETS, BudgetRule, ErrorBudgets
from semcache.fairness import OTHER_NAMESPACES, FairRecency, NamespaceLabels, fair_cuts
from semcache.limits import RateLimiter
from semcache.metrics import Metrics
from semcache.stats import Stats

MANY = 50_000


def one_at_a_time(sizes: dict[str, int], keep: int) -> dict[str, int]:
    """The rule as written: take from the namespace holding the most until ``keep`` remain."""
    left = dict(sizes)
    while sum(left.values()) > keep:
        largest = max(left, key=lambda name: left[name])
        left[largest] -= 1
    return left


def test_fair_cuts_leave_what_taking_from_the_largest_one_at_a_time_leaves() -> None:
    rng = random.Random(7)
    for _ in range(500):
        sizes = {f"ns{n}": rng.randint(1, 40) for n in range(rng.randint(1, 8))}
        keep = rng.randint(0, sum(sizes.values()) + 5)
        cuts = fair_cuts(sizes, keep)
        left = {name: size - cuts.get(name, 0) for name, size in sizes.items()}
        assert sum(left.values()) == min(keep, sum(sizes.values()))
        assert sorted(left.values()) == sorted(one_at_a_time(sizes, keep).values()), (sizes, keep)
        share = keep // len(sizes)
        assert all(name not in cuts for name, size in sizes.items() if size <= share)  # within its share


def test_fair_recency_takes_from_the_largest_by_count_and_by_weight() -> None:
    values: FairRecency[int] = FairRecency(capacity=10, max_weight=100, weigh=lambda value: value)
    for n in range(3):  # within its share of 10 between three namespaces
        values.put(f"a{n}", "a", 1)
    for n in range(MANY // 10):  # one namespace floods, many values
        values.put(f"b{n}", "b", 1)
    assert [values.get(f"a{n}") for n in range(3)] == [1, 1, 1]
    assert values.count_in("b") == 7 and values.get(f"b{MANY // 10 - 1}") == 1
    for n in range(20):  # another floods with heavy values
        values.put(f"c{n}", "c", 45)
    assert [values.get(f"a{n}") for n in range(3)] == [1, 1, 1]
    assert values.weight <= 100 and len(values) <= 10 and values.count_in("c") == 2


def test_fair_recency_stays_fast_with_many_namespaces() -> None:
    values: FairRecency[int] = FairRecency(capacity=1000, max_weight=10**9, weigh=lambda value: 1)
    for n in range(MANY):
        values.put(f"v{n}", f"ns{n}", 1)
    assert len(values) == 1000 and values.namespaces() == 1000
    assert len(values._by_count) + len(values._by_weight) <= 4 * 1000 + 64  # the heaps are compacted


def test_per_namespace_state_stays_bounded_when_clients_name_fifty_thousand_namespaces() -> None:
    stats = Stats(max_namespaces=100)
    metrics = Metrics(max_namespaces=10)
    labels = NamespaceLabels(20)
    limiter = RateLimiter(1000.0, 10, max_clients=1000)
    budgets = ErrorBudgets()
    rule = BudgetRule(prior=0.91, target_error=0.02, learn=True, start=0.98)
    for n in range(MANY):
        namespace = f"tenant-{n}"
        stats.request(namespace, "miss")
        stats.saved(namespace, 10, 5, 0.0001)
        stats.feedback(namespace, correct=False)
        metrics.request(namespace, "miss", None)
        labels(namespace)
        limiter.admit(namespace)
        budgets.note_request(namespace)
        budgets.line(namespace, "latin", rule)
        budgets.candidate_seen(namespace, "latin", 0.95, rule, 0.98)
    snapshot = stats.snapshot()
    assert len(snapshot["by_namespace"]) == 101 and snapshot["by_namespace"][OTHER_NAMESPACES]["requests"] == MANY - 100
    assert snapshot["requests"] == MANY
    assert len({name.rsplit(":", 1)[0] for name in stats.counts() if name.startswith("ns:")}) == 101
    assert len(stats._cost_carry) <= 2 * 101
    exposition = metrics.exposition()[0].decode().splitlines()
    named = {line.split('namespace="')[1].split('"')[0] for line in exposition if 'namespace="' in line}
    assert len(named) == 11 and OTHER_NAMESPACES in named
    assert len(labels) == 20
    assert len(limiter._buckets) <= 1000
    assert len(budgets._allowance) <= MAX_BUDGETS and len(budgets._evidence) <= MAX_BUDGETS
    assert len(budgets._lines) <= MAX_BUDGETS
