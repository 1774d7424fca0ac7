"""semcache eval: pairs and trace on small samples of ../shared/data, through the real model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from semcache.cli import app
from semcache.evaluation.data import is_pairs, trace_from_pairs

from .conftest import SHARED_DATA

pytestmark = pytest.mark.slow


def sample(tmp_path: Path, name: str, rows: int) -> Path:
    lines = (SHARED_DATA / name).read_text().splitlines()[:rows]
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def run(*args: str) -> dict:
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.shared_data
def test_eval_pairs_reports_precision_recall_and_the_best_threshold(tmp_path: Path) -> None:
    pairs = sample(tmp_path, "qqp_dev.jsonl", 120)
    report = run("eval", "pairs", str(pairs), "--plot", str(tmp_path / "pairs.png"))
    scores = report["at_policy"]
    assert 0.5 <= scores["precision"] <= 1.0 and 0.0 < scores["recall"] <= 1.0
    assert scores["positives"] == sum(json.loads(line)["duplicate"] for line in pairs.read_text().splitlines())
    assert report["policy"]["threshold"] == 0.91 and "numbers" in report["policy"]["guards"]
    assert len(report["curve"]) == 30
    recalls = [point["recall"] for point in report["curve"]]
    assert recalls == sorted(recalls, reverse=True)  # a higher threshold never finds more
    if report["best_threshold"] is not None:
        assert report["best"]["precision"] >= 0.95
    assert (tmp_path / "pairs.png").stat().st_size > 10_000


TRAPS = Path(__file__).parents[1] / "benchmarks" / "trap_pairs.jsonl"  # look-alikes of our own writing


def test_look_alike_traps_are_rarely_served_and_hardly_ever_on_their_score_alone() -> None:
    report = run("eval", "pairs", str(TRAPS))
    scores, verification = report["at_policy"], report["verification"]
    assert scores["positives"] == 0 and report["pairs"] >= 200
    # The stand-in verifier accepts about one look-alike in ten; the score alone must serve almost none.
    assert scores["accepted"] <= 0.12 * report["pairs"]
    assert scores["accepted"] - verification["approved_wrong"] <= 2
    assert verification["asked"] >= 0.4 * report["pairs"]  # most that pass the guards are put to the model


@pytest.mark.shared_data
def test_eval_pairs_flags_override_the_shipped_settings(tmp_path: Path) -> None:
    pairs = sample(tmp_path, "mqp_dev.jsonl", 60)
    loose = run("eval", "pairs", str(pairs), "--threshold", "0.5", "--guards", "none")
    strict = run("eval", "pairs", str(pairs), "--threshold", "0.95")
    assert loose["policy"]["guards"] == [] and loose["at_policy"]["recall"] >= strict["at_policy"]["recall"]
    assert set(loose["by_source"]) == {"mqp"}


@pytest.mark.shared_data
def test_eval_trace_replays_through_the_pipeline(tmp_path: Path) -> None:
    trace = sample(tmp_path, "trace_qqp_dev.jsonl", 300)
    report = run("eval", "trace", str(trace), "--threshold", "0.85", "--static")
    rows = [json.loads(line) for line in trace.read_text().splitlines()]
    assert report["requests"] == 300 and not report["learned"]
    assert report["possible_hits"] == sum(r["duplicate_of"] is not None for r in rows)
    assert report["hits"] == report["correct_hits"] + report["wrong_hits"] == sum(report["tiers"].values())
    assert report["misses"] + report["hits"] == 300
    assert report["upstream_calls"] == report["misses"] and report["extra_upstream_calls"] == 0
    assert report["correct_hits"] > 0
    assert set(report["second_half"]) == {"wrong_hit_rate", "served_share"}


@pytest.mark.shared_data
def test_eval_trace_replays_again_the_same_for_one_seed_and_otherwise_for_another(tmp_path: Path) -> None:
    trace = sample(tmp_path, "trace_faq_dev.jsonl", 200)
    first, again = (run("eval", "trace", str(trace), "--seed", "7") for _ in range(2))
    other = run("eval", "trace", str(trace), "--seed", "8")
    assert first["seed"] == again["seed"] == 7 and other["seed"] == 8
    first.pop("seconds"), again.pop("seconds"), other.pop("seconds")
    assert first == again
    # Another seed words the stand-in's answers otherwise: the judge reads them otherwise.
    assert first["judge_cutoff"] != other["judge_cutoff"]


def test_labelled_pairs_become_one_arrival_order_trace_drawn_from_the_seed() -> None:
    pairs = [
        {"q1": "How common is gout?", "q2": "Is gout a common illness?", "duplicate": True},
        {"q1": "How common is gout?", "q2": "How is gout treated?", "duplicate": False},
        {"q1": "Is gout a common illness?", "q2": "Do many people get gout?", "duplicate": True},
        {"q1": "What causes hiccups?", "q2": "Why do hiccups happen?", "duplicate": True},
        {"q1": "What causes hiccups?", "q2": "How do I stop hiccups?", "duplicate": False},
    ]
    trace = trace_from_pairs(pairs, seed=1)
    prompts = [row["prompt"] for row in trace]
    assert sorted(prompts) == sorted({p[q] for p in pairs for q in ("q1", "q2")})  # every text, once
    assert [row["idx"] for row in trace] == list(range(len(trace)))
    cluster = {row["prompt"]: row["cluster"] for row in trace}
    gout = {"How common is gout?", "Is gout a common illness?", "Do many people get gout?"}
    assert len({cluster[text] for text in gout}) == 1  # duplicates join, through a shared question too
    assert len(set(cluster.values())) == 4
    for row in trace:  # a possible hit points at its cluster's first text; the first is none
        earlier = [r for r in trace[: row["idx"]] if r["cluster"] == row["cluster"]]
        assert row["duplicate_of"] == (earlier[0]["idx"] if earlier else None)
    treated = next(row for row in trace if row["prompt"] == "How is gout treated?")
    common = prompts.index("How common is gout?")
    assert treated["hard_negative_of"] == ([common] if common < treated["idx"] else [])
    assert is_pairs(pairs) and not is_pairs(trace)
    assert trace_from_pairs(pairs, seed=1) == trace
    assert any(trace_from_pairs(pairs, seed=s) != trace for s in range(2, 6))  # another seed, another order


def test_eval_trace_replays_labelled_pairs_as_a_trace(tmp_path: Path) -> None:
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps(row) + "\n" for row in [
        {"q1": "How do I learn Python quickly?", "q2": "How can I learn Python fast?", "duplicate": True},
        {"q1": "How do I learn Python quickly?", "q2": "How do I learn Rust quickly?", "duplicate": False},
        {"q1": "What is the capital of France?", "q2": "Which city is the capital of France?", "duplicate": True},
    ]))  # fmt: skip
    report = run("eval", "trace", str(pairs), "--static")
    assert report["from_pairs"] and report["requests"] == 5 and report["possible_hits"] == 2
    assert report["hits"] == report["correct_hits"] + report["wrong_hits"]
    assert report["misses"] + report["hits"] == 5


def test_eval_reports_bad_files_without_a_traceback(tmp_path: Path) -> None:
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"q1": "a", "q2": "b"}\n')
    result = CliRunner().invoke(app, ["eval", "pairs", str(broken)])
    assert result.exit_code == 2 and "missing ['duplicate']" in result.output


@pytest.mark.shared_data
def test_eval_trace_simulated_feedback_teaches_the_cache(tmp_path: Path) -> None:
    trace = sample(tmp_path, "trace_qqp_dev.jsonl", 400)
    without = run("eval", "trace", str(trace), "--threshold", "0.8", "--guards", "none")
    reported = run("eval", "trace", str(trace), "--threshold", "0.8", "--guards", "none", "--feedback-rate", "1")
    assert without["reported_wrong"] == 0
    assert reported["reported_wrong"] == reported["wrong_hits"] > 0
    assert reported["wrong_hits"] <= without["wrong_hits"]


@pytest.mark.shared_data
def test_eval_trace_keeps_the_line_alone_within_the_error_budget_on_both_kinds_of_traffic() -> None:
    # The line alone, nothing verified: what the budget learns from near misses and exploration, as
    # the embedding judge labels them on answers worded like a model's, and on answers that share
    # most of their sentences across topics. Where the judge cannot tell a paraphrase's answer from a
    # look-alike's, it errs towards "different": the line serves less, never more wrong hits.
    for name, budget in (("trace_faq_dev.jsonl", 0.01), ("trace_qqp_dev.jsonl", 0.02)):
        for common_share in ("0.3", "0.8"):
            replay = run("eval", "trace", str(SHARED_DATA / name), "--verify", "off", "--common-share", common_share)
            case = f"{name} --common-share {common_share}"
            assert replay["learned"] and replay["common_share"] == float(common_share), case
            assert replay["budget"]["labels"]["near_miss"] > 0 and replay["budget"]["hits_given_up"] > 0, case
            assert replay["wrong_hits"] <= max(1, budget * replay["hits"]), case
            # "The same" said of a wrong candidate's answer is the label that talks a line down: rare.
            assert replay["judge"].get("wrong_different", 0) <= 0.02 * replay["budget"]["labels_total"], case
            assert replay["misses"] + replay["hits"] + replay["explored"] == replay["requests"], case
            assert replay["upstream_calls"] == replay["misses"] + replay["explored"], case
            assert replay["extra_upstream_share"] <= 0.10, case
            assert replay["curve"][-1]["requests"] == replay["requests"], case


@pytest.mark.shared_data
def test_eval_trace_verifies_under_the_line_and_serves_most_paraphrases_within_budget() -> None:
    """At the shipped defaults, with a stand-in verifier that errs like a model."""
    for name, most_wrong, least_served in (("trace_faq_dev.jsonl", 0.01, 0.70), ("trace_qqp_dev.jsonl", 0.02, 0.60)):
        replay = run("eval", "trace", str(SHARED_DATA / name))
        plain = run("eval", "trace", str(SHARED_DATA / name), "--verify", "off")
        verification = replay["verification"]
        assert verification["mode"] == "sync" and verification["asked"] > 0, name
        assert verification["verdicts"].get("yes_wrong", 0) > 0 or name.startswith("trace_faq"), name  # it errs
        assert replay["wrong_hit_rate"] <= most_wrong and replay["served_share"] >= least_served, name
        assert replay["served_share"] > 2 * plain["served_share"], name
        assert replay["extra_upstream_share"] <= 0.10, name
        # Verifications are calls of their own: never full answers.
        assert replay["upstream_calls"] == replay["misses"] + replay["explored"], name
