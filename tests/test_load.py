"""The load and soak test (``python -m reliability.load``): its traffic, its verdicts, and a short run.

The short run is CI's: 20 seconds, 8 users, a store small enough to fill during it. With
``SEMCACHE_RELIABILITY=full`` the same test runs the 30-minute soak.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from reliability.load.__main__ import parse_duration
from reliability.load.report import MIB, MemoryBounds, MemorySample, memory_analysis
from reliability.load.traffic import Traffic, Workload, api_keys_file_content, build_workload
from semcache import normalize
from testkit.reliability import full_mode

from .conftest import SHARED_DATA

ROOT = Path(__file__).resolve().parents[1]
BOUNDS = MemoryBounds(
    max_growth_bytes_per_1k_requests=1 * MIB, noise_floor_bytes=16 * MIB, min_warmup_s=5, min_requests_judged=2_000
)


def _draw(workload: Workload, count: int) -> list:
    traffic = Traffic(workload, random.Random(1))
    tenants = workload.tenants
    return [traffic.next_request(tenants[n % len(tenants)]) for n in range(count)]


@pytest.mark.shared_data
def test_traffic_mixes_short_questions_conversations_repeats_and_streams() -> None:
    workload = build_workload(SHARED_DATA)
    requests = _draw(workload, 4_000)
    kinds = Counter(r.kind for r in requests)
    intents = Counter(r.intent for r in requests if r.kind == "short")

    assert "trace_qqp_dev.jsonl" in workload.source
    assert 0.26 < kinds["conversation"] / len(requests) < 0.34
    assert 0.35 < sum(r.stream for r in requests) / len(requests) < 0.45
    # About a third of short questions were asked before, word for word or reworded.
    assert 0.28 < (intents["repeat"] + intents["paraphrase"]) / kinds["short"] < 0.45
    conversations = [r for r in requests if r.kind == "conversation" and r.intent == "new"]
    assert all(r.body["messages"][0]["role"] == "system" and len(r.body["messages"]) >= 6 for r in conversations)
    assert all(len(json.dumps(r.body)) > 1_500 for r in conversations)


def test_repeats_are_the_same_question_once_normalised_and_each_tenant_keeps_its_own() -> None:
    workload = build_workload(None)  # the generated questions: the fallback without the data folder
    requests = _draw(workload, 2_000)
    asked: dict[str, set[str]] = {}
    for request in requests:
        if request.kind == "short" and request.intent == "new":
            asked.setdefault(request.namespace, set()).add(normalize(request.last_user_message))
    repeats = [r for r in requests if r.kind == "short" and r.intent == "repeat"]

    assert "generated" in workload.source and repeats
    assert all(normalize(r.last_user_message) in asked[r.namespace] for r in repeats)
    # Some repeats are typed differently: the exact tier has to normalise them.
    assert any(r.last_user_message not in {q.text for q in workload.questions} for r in repeats)


def test_each_tenant_has_its_own_key_and_namespace_and_the_workload_survives_json() -> None:
    workload = build_workload(None)
    keys = api_keys_file_content(workload)

    assert len(keys) == len(workload.tenants) >= 3
    assert sorted(ns for namespaces in keys.values() for ns in namespaces) == sorted(
        t.namespace for t in workload.tenants
    )
    assert Workload.from_json(workload.to_json()) == workload


def _samples(rss_per_request: float, *, requests_per_s: int = 50, seconds: int = 600) -> list[MemorySample]:
    """The store fills in the first minute, then requests go on; RSS rises with entries while it
    fills, then by ``rss_per_request`` per request."""
    samples = []
    for t in range(0, seconds, 5):
        requests, entries = t * requests_per_s, min(1_000, t * 20)
        filled_at = 50 * requests_per_s
        rss = 500 * MIB + entries * 4096 + max(0, requests - filled_at) * rss_per_request
        rss += (t % 3) * MIB // 4  # allocator noise
        samples.append(MemorySample(t, int(rss), requests, entries, evicted=max(0, t * 20 - 1_000), tombstones=0))
    return samples


def test_flat_memory_after_the_store_fills_passes() -> None:
    result = memory_analysis(_samples(0), BOUNDS)

    assert result["verdict"] == "pass"
    assert result["warmup_s"] == 55
    assert abs(result["growth_mib_per_1k_requests"]) < 0.1
    assert 3_000 < result["rss_bytes_per_entry_while_filling"] < 5_500


def test_memory_that_grows_per_request_fails() -> None:
    result = memory_analysis(_samples(4096), BOUNDS)

    assert result["verdict"] == "fail"
    assert result["growth_mib_per_1k_requests"] == pytest.approx(3.9, abs=0.2)


def test_a_small_rise_is_noise_and_short_runs_or_a_store_that_never_filled_are_not_judged() -> None:
    small_rise = memory_analysis(_samples(1536, requests_per_s=10, seconds=300), BOUNDS)
    short_run = memory_analysis(_samples(4096, requests_per_s=5, seconds=120), BOUNDS)
    never_full = memory_analysis([MemorySample(t, 500 * MIB + t * MIB, t * 10, t, 0, 0) for t in range(30)], BOUNDS)

    assert small_rise["verdict"] == "pass"
    assert small_rise["growth_mib_per_1k_requests"] > 1 and small_rise["fitted_growth_after_warmup_mib"] < 16
    assert short_run["verdict"] == "not judged" and short_run["requests_after_warmup"] < 2_000
    assert never_full["verdict"] == "not judged"


def test_durations_read_like_locust_s() -> None:
    assert [parse_duration(text) for text in ("20s", "30m", "1h", "90")] == [20, 1_800, 3_600, 90]


@pytest.mark.slow
@pytest.mark.reliability
def test_load_run_serves_every_outcome_without_errors_leaks_or_secrets_in_logs(tmp_path: Path) -> None:
    """``python -m reliability.load`` end to end: Locust, semcache and the stand-in as processes."""
    if full_mode():
        args, timeout_s = ["--duration", "30m", "--users", "16"], 2_400
    else:
        args, timeout_s = ["--duration", "20s", "--users", "8", "--max-entries", "25"], 400
    out = tmp_path / "load"
    done = subprocess.run(
        [sys.executable, "-m", "reliability.load", *args, "--max-error-rate", "0", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())

    latency = summary["latency_by_outcome"]
    for outcome in ("miss", "exact", "semantic"):
        assert latency[outcome]["all"]["count"] > 0 and latency[outcome]["all"]["p99_ms"] > 0, outcome
    assert latency["exact"]["all"]["p50_ms"] < latency["miss"]["all"]["p50_ms"]
    assert summary["errors"]["errors"] == 0 and summary["errors"]["requests"] > 50
    memory = summary["memory"]
    assert memory["samples"] >= 10
    # A 20-second run may end before its small store has filled; the soak must be judged.
    assert memory["verdict"] == "pass" if full_mode() else memory["verdict"] in ("pass", "not judged")
    assert summary["secret_scan"]["lines_scanned"] > summary["errors"]["requests"]
    assert summary["secret_scan"]["findings"] == []
    assert {Path(p).name for p in summary["secret_scan"]["files_scanned"]} >= {
        "semcache.log",
        "standin.log",
        "locust.log",
    }
    assert (out / "summary.md").read_text().startswith("# Load run")
    assert (out / "memory.png").stat().st_size > 0
