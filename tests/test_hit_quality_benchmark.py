"""benchmarks.hit_quality_http on a slice of a labelled trace: its figures add up (speed is not judged)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import hit_quality_http
from benchmarks.__main__ import build_parser, options_from
from semcache.decision.verification import VerificationCase, verification_messages

pytestmark = [pytest.mark.slow, pytest.mark.shared_data]

REQUESTS = 30


def test_the_model_like_upstream_words_each_answer_anew_and_judges_the_quoted_prompts() -> None:
    rows = hit_quality_http.read_trace(hit_quality_http.SHARED_DATA, "faq", None)
    by_cluster: dict[str, list[str]] = {}
    for row in rows:
        by_cluster.setdefault(str(row["cluster"]), []).append(str(row["prompt"]))
    same = next(p for p in by_cluster.values() if len(p) > 1)
    other = next(p for p in by_cluster.values() if p is not same)
    upstream = hit_quality_http.ModelLikeUpstream(
        rows, boilerplate=True, seed=1, similarity=hit_quality_http.Similarity()
    )
    first, second = upstream.answer(same[0]), upstream.answer(same[0])
    assert first != second and upstream.cluster_of_answer[first] == upstream.cluster_of_answer[second]
    assert upstream.prompt_of_answer[first] == same[0]
    shared = set(first.split(". ")) & set(upstream.answer(other[0]).split(". "))
    assert len(shared) >= 3  # boilerplate: most sentences are the same whatever the topic

    def message(query: str, cached: str) -> str:
        case = VerificationCase("ns", "latin", query, "k", 1, cached, first, "m", 0.8)
        return verification_messages(case)[-1]["content"]

    upstream.judge(message(same[1], same[0]))
    upstream.judge(message(other[0], same[0]))
    asked = upstream.verifications
    expected = [(same[1], same[0], True), (other[0], same[0], False)]
    assert [(v["query"], v["cached"], v["same"]) for v in asked] == expected
    assert upstream.verifier.calls == 2 and upstream.unparsed_verifications == 0
    assert upstream.judge("no quoted prompts") == "no" and upstream.unparsed_verifications == 1


def test_a_slice_of_the_faq_trace_over_http_reports_figures_that_add_up(tmp_path: Path) -> None:
    results = hit_quality_http.run(["faq"], ["verify", "off-boilerplate"], REQUESTS, tmp_path, say=lambda _: None)
    rows = hit_quality_http.read_trace(hit_quality_http.SHARED_DATA, "faq", REQUESTS)
    possible = sum(r["duplicate_of"] is not None for r in rows)
    assert [r["mode"] for r in results["runs"]] == ["verify", "off-boilerplate"]
    for run in results["runs"]:
        assert run["requests"] == REQUESTS and run["possible_hits"] == possible
        assert run["hits"] + run["misses"] + run["explored"] + run["bypassed"] == REQUESTS
        assert run["correct_hits"] + run["wrong_hits"] == run["hits"] == sum(run["tiers"].values())
        assert run["served_share"] == round(run["correct_hits"] / possible, 4)
        assert run["wrong_share"] <= run["wrong_share_upper95"] <= 1.0
        # Every request that is not a hit is one full answer from the upstream, and nothing else is.
        assert run["upstream_full_answers"] == run["misses"] + run["explored"]
        assert run["extra_full_answers"] == run["upstream_full_answers"] - run["misses"]
        assert run["verifications"] == sum(run["verifier_verdicts"].values()) + run["unparsed_verifications"]
        assert run["verified_hits"] <= min(run["hits"], run["verifications"])
        how = run["wrong_by"]["how_served"]
        assert sum(kind["hits"] for kind in how.values()) == run["hits"]
        assert sum(kind["wrong"] for kind in how.values()) == run["wrong_hits"]
        assert {t["status"] for t in run["targets"]} <= {"PASS", "MISS", "not measured"}
    verify, off = results["runs"]
    assert verify["verifications"] > 0 and verify["unparsed_verifications"] == 0
    assert off["verifications"] == 0 and off["verified_hits"] == 0
    written = json.loads((tmp_path / "hit_quality.json").read_text())
    assert written["runs"] == results["runs"] and written["limit"] == REQUESTS
    text = (tmp_path / "hit_quality.txt").read_text()
    assert "off-boilerplate" in text and (tmp_path / "hit_quality.png").stat().st_size > 0


def test_the_suite_runs_hit_quality_only_when_named(tmp_path: Path) -> None:
    parser = build_parser()
    default = options_from(parser.parse_args(["run", "--out", str(tmp_path)]), parser, [])
    assert default.chosen == set()
    argv = ["run", "--only", "hit_quality", "--hit-quality-limit", "50", "--out", str(tmp_path)]
    only = options_from(parser.parse_args(argv), parser, argv)
    assert only.chosen == {"hit_quality"} and only.hit_quality_limit == 50
    assert only.skip == {"embedder", "http", "lag", "gptcache", "litellm", "index", "start"}
