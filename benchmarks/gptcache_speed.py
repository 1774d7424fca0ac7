"""Lookup speed of GPTCache's recommended semantic setup, on the workload semcache is measured with.

Used by ``python -m benchmarks run``. GPTCache runs in its throwaway venv (see
``benchmarks.quality_vs_gptcache`` for how it is built and made to work offline), through the worker
``benchmarks/_gptcache_worker.py``: the same ``init_similar_cache`` setup (SBERT on the local
all-MiniLM-L6-v2, sqlite + faiss, ``SearchDistanceEvaluation``, ``Config()``), filled with the
workload's stored prompts, then asked them again (exact), their paraphrases (semantic) and new
prompts (misses) from 1, 8 and 64 threads.

GPTCache is a library: its figures are in-process ``get`` calls, with no HTTP, serialisation or
upstream in them, while semcache's go through HTTP. That favours GPTCache.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from rich.progress import Progress

from .http_load import Workload
from .latency import percentiles
from .quality_vs_gptcache import GPTCACHE_MAX_SIZE, job_files, run_worker


def job(workload: Workload, concurrency: list[int], requests: dict[str, int], misses: list[str]) -> dict[str, Any]:
    answers = [f"answer:{number}" for number in range(len(workload.stored))]
    phases = {
        "exact_hit": [[prompt, answer] for prompt, answer in zip(workload.stored, answers, strict=True)],
        "semantic_hit": [[prompt, answer] for prompt, answer in zip(workload.paraphrases, answers, strict=True)],
        "miss": [[prompt, None] for prompt in misses],
    }
    speed = {"stored": workload.stored, "phases": phases, "requests": requests, "concurrency": concurrency}
    return {"speed": speed, "max_size": GPTCACHE_MAX_SIZE}


def measure(
    python: Path,
    workload: Workload,
    concurrency: list[int],
    requests: dict[str, int],
    misses: list[str],
    progress: Progress,
) -> tuple[dict[str, Any], dict[str, dict[str, list[float]]]]:
    """(results by concurrency and phase, with GPTCache's setup; latency samples by concurrency and phase)."""
    with job_files(job(workload, concurrency, requests, misses)) as (job_path, log_path):
        reported = run_worker(python, job_path, log_path, progress)
    results: dict[str, Any] = {"config": reported["config"], "seconds": reported["seconds"]}
    samples: dict[str, dict[str, list[float]]] = {}
    for level, phases in reported["runs"].items():
        results[level], samples[level] = {}, {}
        for phase, run in phases.items():
            expected = "miss" if phase == "miss" else "hit"
            kept = [ms for ms, outcome in zip(run["latencies_ms"], run["outcomes"], strict=True) if outcome == expected]
            results[level][phase] = {
                **percentiles(kept),
                "throughput_rps": round(len(kept) / run["wall_s"], 1) if run["wall_s"] > 0 else 0.0,
                "wall_s": round(run["wall_s"], 3),
                "outcomes": dict(Counter(run["outcomes"])),
            }
            samples[level][phase] = kept
    return results, samples
