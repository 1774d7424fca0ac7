"""p50/p99 latency through HTTP for exact hits, semantic hits and misses, against the stand-in.

    python -m benchmarks.latency [--requests 200] [--upstream-latency-ms 0] [--plot latency.png]

Starts the stand-in upstream and ``semcache serve`` as separate processes on loopback, so the
client, the cache and the upstream do not share one interpreter. Prints JSON. Speeds are also
reported as ratios to calling the stand-in directly, measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from rich.progress import Progress

from testkit.plots import pyplot
from testkit.servers import SemcacheProcess, standin_process

SUBJECTS = [
    "Python",
    "Rust",
    "chess",
    "the violin",
    "Spanish",
    "calculus",
    "watercolour painting",
    "SQL",
    "machine learning",
    "public speaking",
    "photography",
    "knitting",
    "statistics",
    "Japanese",
    "the guitar",
    "algebra",
    "swimming",
    "typing",
    "economics",
    "cooking",
]
QUESTIONS = [
    "How do I learn {} quickly?",
    "What is the best book to learn {}?",
    "Why is {} hard for beginners?",
    "How long does it take to get good at {}?",
    "What are common mistakes when learning {}?",
]
# Rewordings that stay above the default threshold for these questions.
PARAPHRASES = [
    "How can I learn {} quickly?",
    "What's the best book to learn {}?",
    "Why is {} so hard for beginners?",
    "How long does it take to become good at {}?",
    "What are the common mistakes when learning {}?",
]


def percentiles(samples_ms: list[float]) -> dict[str, float]:
    ordered = sorted(samples_ms)
    if not ordered:
        return {"count": 0}
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {
        "count": len(ordered),
        "p50_ms": round(statistics.median(ordered), 3),
        "p90_ms": round(pick(0.9), 3),
        "p99_ms": round(pick(0.99), 3),
        "mean_ms": round(statistics.fmean(ordered), 3),
    }


def timed_post(client: httpx.Client, url: str, prompt: str) -> tuple[float, httpx.Response]:
    body = {"model": "bench-model", "messages": [{"role": "user", "content": prompt}]}
    started = time.perf_counter()
    response = client.post(url, json=body)
    return (time.perf_counter() - started) * 1000, response


def run(requests: int, upstream_latency_ms: float) -> dict[str, Any]:
    prompts = [q.format(s) for s in SUBJECTS for q in QUESTIONS][:requests]
    paraphrases = [p.format(s) for s in SUBJECTS for p in PARAPHRASES][:requests]
    samples: dict[str, list[float]] = {"direct_upstream": [], "miss": [], "exact_hit": [], "semantic_hit": []}
    tiers_seen: dict[str, int] = {}
    with (
        standin_process(upstream_latency_ms / 1000) as upstream_url,
        tempfile.TemporaryDirectory() as data,
        SemcacheProcess(data_dir=Path(data), upstream_url=upstream_url) as service,
        httpx.Client(timeout=60) as client,
        Progress(transient=True) as progress,
    ):
        cache_url = f"{service.url}/v1/chat/completions"
        for prompt in prompts[:5]:  # warm up both servers and the connection pool
            timed_post(client, f"{upstream_url}/chat/completions", "warm-up " + prompt)
            timed_post(client, cache_url, "warm-up " + prompt)
        task = progress.add_task("measuring", total=len(prompts) * 4)
        for prompt in prompts:
            samples["direct_upstream"].append(timed_post(client, f"{upstream_url}/chat/completions", prompt)[0])
            progress.advance(task)
        for phase, batch in (("miss", prompts), ("exact_hit", prompts), ("semantic_hit", paraphrases)):
            for prompt in batch:
                elapsed, response = timed_post(client, cache_url, prompt)
                outcome = response.headers.get("x-semcache-tier") or response.headers.get("x-semcache", "error")
                tiers_seen[f"{phase}:{outcome}"] = tiers_seen.get(f"{phase}:{outcome}", 0) + 1
                expected = {"miss": "miss", "exact_hit": "exact", "semantic_hit": "semantic"}[phase]
                if outcome == expected:
                    samples[phase].append(elapsed)
                progress.advance(task)
        stats = client.get(f"{service.url}/stats").json()
    result: dict[str, Any] = {name: percentiles(values) for name, values in samples.items()}
    direct = result["direct_upstream"].get("p50_ms") or 1.0
    result["miss_overhead_ratio_p50"] = round(result["miss"].get("p50_ms", 0) / direct, 3)
    result["outcomes"] = tiers_seen
    result["upstream_latency_ms"] = upstream_latency_ms
    result["embedding"] = stats.get("embedding")
    result["_samples"] = samples
    return result


def plot(samples: dict[str, list[float]], path: Path) -> None:
    plt = pyplot()
    if plt is None:
        return
    figure, axis = plt.subplots(figsize=(8, 4.5))
    for name, values in samples.items():
        if values:
            axis.hist(values, bins=60, alpha=0.55, label=f"{name} (p50 {statistics.median(values):.2f} ms)")
    axis.set_xscale("log")
    axis.set_xlabel("latency through HTTP (ms, log scale)")
    axis.set_ylabel("requests")
    axis.set_title("semcache latency by outcome")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    print(f"plot written to {path}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=100, help="prompts per phase (at most 100)")
    parser.add_argument("--upstream-latency-ms", type=float, default=0.0, help="delay the stand-in adds")
    parser.add_argument("--plot", type=Path, help="write a latency histogram to this PNG")
    args = parser.parse_args()
    result = run(args.requests, args.upstream_latency_ms)
    samples = result.pop("_samples")
    if args.plot:
        plot(samples, args.plot)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
