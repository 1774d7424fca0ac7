"""The benchmark scripts run end to end in a quick mode, so they cannot rot (speed is not judged)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks import embedders, index_search, latency, miss_overhead, replication
from benchmarks import report as benchmark_report

pytestmark = pytest.mark.slow


def test_latency_benchmark_measures_every_outcome() -> None:
    result = latency.run(requests=6, upstream_latency_ms=0)
    for outcome in ("direct_upstream", "miss", "exact_hit", "semantic_hit"):
        assert result[outcome]["count"] > 0 and result[outcome]["p50_ms"] > 0
    assert result["_samples"]["exact_hit"]


def test_miss_overhead_benchmark_reports_ratios() -> None:
    result = miss_overhead.run(requests=4, upstream_latency_ms=10, chunk_delay_ms=1)
    for mode in ("non_stream", "stream"):
        assert result[mode]["ttfb_ratio"] > 0 and result[mode]["total_ratio"] > 0


def test_index_benchmark_measures_recall() -> None:
    import numpy as np

    rng = np.random.default_rng(0)
    vectors = index_search.synthetic(2_000, rng)
    queries = vectors[:50]
    result = index_search.measure("hnsw32", vectors, queries, np.arange(50))
    assert result["recall_at_1"] > 0.9 and result["search_p50_ms"] > 0


def test_replication_benchmark_reports_every_part(tmp_path: Path) -> None:
    out = tmp_path / "replication.json"
    result = replication.run([2_000], requests=6, rounds=1, lag_entries=10, catch_up_entries=50, json_out=out)
    cold = result["cold_start"]["2000"]
    assert cold["rebuild"]["index_after_join"] == "flat" and cold["rebuild"]["index_after_rebuild"] == "hnsw"
    assert cold["snapshot"]["index_after_load"] == "hnsw" and cold["snapshot"]["replayed_events"] == 50
    assert cold["snapshot"]["entries_indexed"] == 2_050
    memory = cold["replica_memory"]
    for figure in (
        cold["rebuild"]["join_s"], cold["rebuild"]["hnsw_rebuild_s"], cold["snapshot"]["ready_s"],
        cold["rebuild_over_snapshot"], cold["redis_memory"]["bytes_per_entry"],
        memory["snapshot_bytes_per_entry"], memory["rss_bytes_per_entry_snapshot_start"],
    ):  # fmt: skip
        assert figure > 0
    hits = result["hit_latency"]
    for store in ("embedded", "redis"):
        for phase in ("exact_hit", "semantic_hit"):
            assert hits[store][phase]["count"] > 0 and hits[store][phase]["p50_ms"] > 0
    assert set(hits["redis_over_embedded"]) == {
        "exact_hit_p50",
        "exact_hit_p99",
        "semantic_hit_p50",
        "semantic_hit_p99",
    }
    assert hits["redis_replica_reported_store"] == "redis"
    lag = result["replication_lag"]
    assert lag["missed"] == 0 and lag["observed"]["count"] == 10 and lag["observed"]["p50_ms"] > 0
    assert lag["indexed"]["count"] == 10
    written = json.loads(out.read_text())
    assert "_samples" not in written["hit_latency"] and written["cold_start"]["2000"]["entries"] == 2_000
    replication.plot(result, tmp_path / "replication.png")
    assert (tmp_path / "replication.png").stat().st_size > 0


def test_benchmarks_run_quick_writes_results_and_summary(tmp_path: Path) -> None:
    """The one command, as CI runs it. The throwaway GPTCache and LiteLLM venvs are used only when
    already built; either way their part says what happened."""
    out = tmp_path / "run"
    command = [sys.executable, "-m", "benchmarks", "run", "--quick", "--with", "start", "--out", str(out)]
    done = subprocess.run(command, cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]

    results = json.loads((out / "results.json").read_text())
    assert results["meta"]["mode"] == "quick"
    assert "by_concurrency" in results["semcache"], results["semcache"]
    for clients in ("1", "8", "64"):
        phases = results["semcache"]["by_concurrency"][clients]
        sent = {phase: sum(figures["outcomes"].values()) for phase, figures in phases.items()}
        assert phases["exact_hit"]["outcomes"] == {"exact": sent["exact_hit"]}
        assert phases["miss"]["outcomes"] == {"miss": sent["miss"]}
        assert phases["direct_upstream"]["outcomes"] == {"direct": sent["direct_upstream"]}
        assert phases["semantic_hit"]["outcomes"].get("semantic", 0) > 0
        for figures in phases.values():
            assert figures["p50_ms"] > 0 and figures["p99_ms"] >= figures["p50_ms"] and figures["throughput_rps"] > 0
    assert results["embedder"]["one_prompt_p50_ms"] > 0 and results["embedder"]["batched_texts_per_s"] > 0
    # One embedding after a pause, as a miss's follows the wait on the upstream: standalone, and
    # of the miss phase's own prompts.
    assert results["embedder"]["after_idle"]["one_prompt_p50_ms"] > 0
    assert results["semcache"]["paired_floor"]["miss_prompts"]["after_idle"]["one_prompt_p50_ms"] > 0
    # And the semantic hits' paraphrases, each after a pause as long as the exact hit's p50.
    after_pause = results["semcache"]["paired_floor"]["after_pause"]
    assert after_pause["one_prompt_p50_ms"] > 0
    assert after_pause["pause_ms"] == round(results["semcache"]["by_concurrency"]["1"]["exact_hit"]["p50_ms"], 3)
    steps = results["semcache"]["semantic_hit_steps"]  # where a one-client semantic hit's time went
    assert steps["semantic_hits"] > 0 and steps["server_mean_ms"] > 0
    assert all(step["mean_ms"] > 0 and step["calls_per_hit"] >= 1 for step in steps["steps"].values()), steps
    assert steps["server_mean_ms"] > steps["steps"]["embedding"]["mean_ms"]
    index = results["index"]["2000"]
    assert index["flat"]["recall_at_1"] == 1.0 and index["hnsw32"]["recall_at_1"] > 0.9
    for other in ("gptcache", "litellm"):
        assert "by_concurrency" in results[other] or "not built" in results[other]["skipped"]
    assert len(results["targets"]) == 9
    assert results["lag"]["healthz"]["count"] > 0 and results["lag"]["healthz"]["errors"] == 0
    assert results["start"]["entries"] == 2_000 and results["start"]["first_request"] == ["exact"]
    assert {t["status"] for t in results["targets"]} <= {"PASS", "MISS", "not measured"}
    assert set(results["ratios"]) == {"vs_embedder", "vs_gptcache", "vs_litellm", "miss_overhead"}

    summary = (out / "summary.md").read_text()
    for heading in ("## Targets", "## HTTP latency and throughput", "## Embedder floor",
                    "## Where a semantic hit's time goes",
                    "## Side by side: semcache, GPTCache, LiteLLM", "## Vector index",
                    "## The event loop under mixed load", "## Start-up on a large data folder"):  # fmt: skip
        assert heading in summary
    assert "latency.png" in summary and (out / "latency.png").stat().st_size > 0
    assert json.loads((out / "samples.json").read_text())["semcache"]["1"]["exact_hit"]


def test_targets_are_ratios_of_figures_from_the_same_run() -> None:
    def figures(p50_ms: float, rps: float) -> dict[str, float]:
        return {"p50_ms": p50_ms, "throughput_rps": rps}

    results = {
        "embedder": {"one_prompt_p50_ms": 5.0, "batched_texts_per_s": 400.0},
        "semcache": {"by_concurrency": {
            "1": {"exact_hit": figures(0.4, 900), "semantic_hit": figures(6.0, 100), "miss": figures(310.0, 3),
                  "direct_upstream": figures(300.0, 3)},
            "64": {"exact_hit": figures(20.0, 3000), "semantic_hit": figures(100.0, 380)},
        }},
        "gptcache": {"by_concurrency": {"1": {"exact_hit": figures(17.5, 55), "semantic_hit": figures(18.0, 55)}}},
        "litellm": {"skipped": "its venv is not built"},
        "start": {"entries": 1_000_000, "ready_p50_s": 4.2, "store": "sqlite (embedded)", "page_cache": "warm"},
        "lag": {"healthz": {"p99_ms": 25.0, "max_ms": 40.0, "count": 900}},
    }  # fmt: skip
    targets = benchmark_report.targets(results)
    assert [t["status"] for t in targets] == ["PASS", "PASS", "PASS", "MISS", "PASS", "MISS", "PASS", "PASS", "MISS"]
    # semantic p50 over one embedding; hits/s at the most clients over the batched rate; exact p50;
    # a miss's added ms (allowed: 2 ms + one embedding); the start; /healthz p99; then vs GPTCache.
    assert [t["value"] for t in targets] == [1.2, 0.95, 0.4, 10.0, 4.2, 25.0, 43.75, 3.0, 6.91]
    assert "allowed 7.0 ms" in targets[3]["measured"]
    assert benchmark_report.ratios(results)["vs_litellm"]["exact_hit_speedup_p50"] is None
    summary = benchmark_report.markdown({**results, "targets": targets})
    assert "| exact hits vs GPTCache, p50 | ≥ 15× faster | 43.75× | **PASS** |" in summary
    assert "LiteLLM proxy: skipped: its venv is not built." in summary


def test_the_miss_overhead_is_paired_prompt_by_prompt_when_the_pairs_are_there() -> None:
    phases = {
        "miss": {"p50_ms": 700.0, "added_over_direct": {"p50_ms": 4.0, "pairs": 40}},
        "direct_upstream": {"p50_ms": 550.0},
    }
    results: dict[str, Any] = {"embedder": {"one_prompt_p50_ms": 5.0},
                               "semcache": {"by_concurrency": {"1": phases}}}  # fmt: skip
    overhead = benchmark_report.ratios(results)["miss_overhead"]["1"]
    assert overhead == {"miss_over_direct_p50": 1.27, "added_p50_ms": 4.0, "paired_prompts": 40,
                        "p50_difference_ms": 150.0}  # fmt: skip
    miss_target = benchmark_report.targets(results)[3]
    assert miss_target["status"] == "PASS" and "4.0 ms over 40 prompts paired" in miss_target["measured"]
    assert "allowed 7.0 ms: 2 ms + one embedding of the paraphrases" in miss_target["measured"]
    # The miss phase's own prompts, embedded between its chunks, are the embedding a miss is held to.
    results["semcache"]["paired_floor"] = {"one_prompt_p50_ms": 5.0, "miss_prompts": {"one_prompt_p50_ms": 1.5}}
    miss_target = benchmark_report.targets(results)[3]
    assert miss_target["status"] == "MISS"
    assert "allowed 3.5 ms: 2 ms + one embedding of the miss prompts" in miss_target["measured"]
    # The same prompts embedded after a pause are reported beside the allowance, which stays as it is.
    results["semcache"]["paired_floor"]["miss_prompts"]["after_idle"] = {"idle_ms": 300.0, "one_prompt_p50_ms": 3.1}
    miss_target = benchmark_report.targets(results)[3]
    assert miss_target["status"] == "MISS" and "allowed 3.5 ms" in miss_target["measured"]
    assert "the same embedding after 300.0 ms idle, as a miss's follows a wait: 3.1 ms" in miss_target["measured"]


def test_the_semantic_hit_target_keeps_the_back_to_back_embedding_and_shows_the_one_after_a_pause() -> None:
    phases = {"exact_hit": {"p50_ms": 0.5}, "semantic_hit": {"p50_ms": 3.0}}
    results: dict[str, Any] = {"embedder": {"one_prompt_p50_ms": 1.0},
                               "semcache": {"by_concurrency": {"1": phases},
                                            "paired_floor": {"one_prompt_p50_ms": 1.5}}}  # fmt: skip
    target = benchmark_report.targets(results)[0]
    assert target["value"] == 2.0 and target["status"] == "MISS" and "pause" not in target["measured"]
    results["semcache"]["paired_floor"]["after_pause"] = {"pause_ms": 0.5, "one_prompt_p50_ms": 2.4}
    target = benchmark_report.targets(results)[0]
    assert target["value"] == 2.0 and target["status"] == "MISS"  # the goal is still held to 1.5 ms
    assert "after a pause as long as an exact hit (0.5 ms)" in target["measured"]
    assert "other work: 1.25× (2.4 ms)" in target["measured"]
    assert "each after a pause of 0.5 ms" in benchmark_report.markdown({**results, "targets": [target]})


def test_hits_per_second_are_held_to_the_batched_rate_measured_around_their_phase() -> None:
    results: dict[str, Any] = {
        "embedder": {"one_prompt_p50_ms": 5.0, "batched_texts_per_s": 400.0},
        "semcache": {"by_concurrency": {"64": {"semantic_hit": {"p50_ms": 100.0, "throughput_rps": 270.0}}}},
    }
    assert benchmark_report.targets(results)[1]["status"] == "MISS"  # 68% of the embedder part's rate
    results["semcache"]["paired_floor"] = {"batched": {"batched_texts_per_s": 300.0, "batched_by_size": {"64": 300.0}}}
    target = benchmark_report.targets(results)[1]
    assert target["status"] == "PASS"
    assert "90% (270.0/s vs 300.0/s, measured just before and after" in target["measured"]


def test_a_phase_counts_throughput_until_its_last_counted_answer_and_pairs_prompts() -> None:
    """Against a real server: the request that is not counted (slow) holds the phase open, but
    requests/s ends with the last counted answer; the pairs match prompts, whatever the order."""
    import asyncio

    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    from benchmarks.http_load import PhaseResult, client_pool, paired_added_ms, run_phase
    from semcache.testing.uvicorn_thread import ThreadedUvicorn

    async def answer(request: Request) -> Response:
        prompt = (await request.json())["messages"][0]["content"]
        if prompt == "slow":
            await asyncio.sleep(0.6)
            return JSONResponse({}, headers={"x-semcache": "miss"})
        return JSONResponse({}, headers={"x-semcache": "exact"})

    server = ThreadedUvicorn(Starlette(routes=[Route("/", answer, methods=["POST"])]))

    async def phase(url: str) -> PhaseResult:
        async with client_pool(2) as pool:
            prompts = ["slow", *(f"fast {n}" for n in range(9))]
            return await run_phase(pool, url, prompts, requests=10, expect="exact",
                                   outcome_of=lambda r: r.headers.get("x-semcache", "error"))  # fmt: skip

    with server:
        result = asyncio.run(phase(f"{server.url}/"))
    summary = result.summary()
    assert summary["outcomes"] == {"exact": 9, "miss": 1} and summary["count"] == 9
    assert result.wall_s >= 0.6 > result.counted_s > 0
    assert summary["throughput_rps"] == round(9 / result.counted_s, 1)
    assert sorted(result.prompts) == [f"fast {n}" for n in range(9)]

    direct = PhaseResult(samples_ms=[500.0, 300.0, 800.0], prompts=["a", "b", "c"])
    through = PhaseResult(samples_ms=[303.0, 810.0, 504.0, 9.0], prompts=["b", "c", "a", "not sent directly"])
    assert paired_added_ms(through, direct) == {"p50_ms": 4.0, "pairs": 3}


@pytest.mark.shared_data
def test_embedders_benchmark_compares_backends_with_torch(embedding_exports: Path) -> None:
    result = embedders.run(
        ["torch", "onnx-int8"], rounds=1, singles_per_round=3, batch_sizes=(8,), quality_texts=64,
        cache_dir=embedding_exports,
    )  # fmt: skip
    backends = result["backends"]
    assert set(backends) == {"torch", "onnx-int8"} and result["quality_texts"] == 64
    for figures in backends.values():
        assert figures["one_prompt_p50_ms"] > 0 and figures["batch8_texts_per_s"] > 0
        assert figures["one_prompt_count"] == 3
    assert backends["torch"]["cosine_vs_torch_min"] > 0.9999
    assert 0.95 < backends["onnx-int8"]["cosine_vs_torch_min"] < 1.0
    assert backends["onnx-int8"]["embedder_name"] == "all-MiniLM-L6-v2+int8-static"
    assert backends["onnx-int8"]["speedup_vs_torch"]["batch8"] > 0


def test_the_load_generators_client_reads_every_framing_and_outlives_a_closed_connection() -> None:
    """``HttpClient`` against a real server: a Content-Length answer, a chunked one, an answer that
    closes its connection, and a kept-alive connection the server closed while it was idle."""
    import asyncio

    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    from benchmarks.http_load import HttpClient
    from semcache.testing.uvicorn_thread import ThreadedUvicorn

    async def answer(request: Request) -> Response:
        kind = (await request.json())["kind"]
        if kind == "chunked":
            return StreamingResponse(iter([b'{"a":', b" 1}"]), headers={"x-kind": kind})
        return JSONResponse({"a": 1}, headers={"x-kind": kind, **({"connection": "close"} if kind == "close" else {})})

    server = ThreadedUvicorn(Starlette(routes=[Route("/", answer, methods=["POST"])]))
    server.server.config.timeout_keep_alive = 1  # closes an idle connection after a second

    async def exchange(url: str) -> list[tuple[int, str]]:
        client = HttpClient(headers={"authorization": "Bearer x"})
        replies = [await client.post_json(url, {"kind": kind}) for kind in ("length", "chunked", "close", "length")]
        await asyncio.sleep(1.5)  # the server closes the kept-alive connection meanwhile
        replies.append(await client.post_json(url, {"kind": "after idle"}))
        await client.close()
        return [(reply.status, reply.headers["x-kind"]) for reply in replies]

    with server:
        replies = asyncio.run(exchange(f"{server.url}/"))
    assert replies == [(200, "length"), (200, "chunked"), (200, "close"), (200, "length"), (200, "after idle")]


def test_token_features_benchmark_scores_pairs_with_and_without_the_worst_token(tmp_path: Path) -> None:
    from benchmarks import token_features

    pairs = [
        {"q1": "How do I reset my password?", "q2": "How can I reset my password?", "duplicate": True},
        {"q1": "How do I bake bread at home?", "q2": "How can I bake bread at home?", "duplicate": True},
        {"q1": "What is the capital of France?", "q2": "What is the capital of Spain?", "duplicate": False},
        {"q1": "How do I learn Python?", "q2": "Where can I buy a cheap car?", "duplicate": False},
    ]
    file = tmp_path / "pairs.jsonl"
    file.write_text("".join(json.dumps(pair) + "\n" for pair in pairs))
    result = token_features.run([file], precision=0.95)
    assert set(result["scores"]) == {"cosine", *(f"cosine + {w} * worst token" for w in token_features.WEIGHTS)}
    assert result["scores"]["cosine"]["pooled_recall"] == 1.0  # both paraphrases outrank both others
    assert result["bytes_per_entry"]["token_vectors_float16"] > result["bytes_per_entry"]["vector_today"]
    token_features.plot(result, tmp_path / "curves.png")
    assert (tmp_path / "curves.png").stat().st_size > 0


def test_recall_at_precision_takes_the_lowest_line_that_keeps_precision() -> None:
    import numpy as np

    from benchmarks.token_features import recall_at_precision

    score = np.array([0.99, 0.98, 0.97, 0.96, 0.5])
    duplicate = np.array([True, True, False, True, True])
    assert recall_at_precision(score, duplicate, 0.8) == (1.0, 0.5)  # 4 right of all 5
    assert recall_at_precision(score, duplicate, 0.85) == (0.5, 0.98)  # the top 3 or 4 fall short


def test_the_semantic_hit_target_names_this_machines_floor_beside_its_ratio() -> None:
    phases = {"exact_hit": {"p50_ms": 0.4}, "semantic_hit": {"p50_ms": 1.8}}
    results: dict[str, Any] = {"embedder": {"one_prompt_p50_ms": 1.0}, "semcache": {"by_concurrency": {"1": phases}}}
    target = benchmark_report.targets(results)[0]
    # 1.4× no semantic hit can beat here (an exact hit's 0.4 ms on a 1 ms embedding): 1.8× misses 1.3×.
    assert target["status"] == "MISS"
    assert "1.8× (1.8 ms vs 1.0 ms" in target["measured"]
    assert "an exact hit plus one embedding, this machine's floor: 1.4×" in target["measured"]
