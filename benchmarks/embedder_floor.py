"""The embedder's own speed, the floor under a semantic hit: one prompt per call, and in batches.

    python -m benchmarks.embedder_floor [--rounds 3]

Loads the embedder from the same settings (``SEMCACHE_*`` environment, ``--config``) and in the
same way as ``semcache serve``, so a semantic hit's latency and throughput can be read as ratios to
it. One-prompt time is the median of single-prompt calls; batched throughput embeds the prompts
in batches of ``embed_batch_size``, as the server's micro-batcher does under load. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from semcache.protocols import Embedder
from semcache.settings import Settings

from .http_load import Workload


def configured_embedder(settings: Settings) -> Embedder:
    """The embedder ``semcache serve`` loads for English prompts with these settings (as server/app.py)."""
    from semcache.embedders import load_embedder

    return load_embedder(
        settings.embedding_model, settings.embed_threads, settings.embedding_backend, settings.embedding_export_dir
    )


def describe(settings: Settings, embedder: Embedder) -> dict[str, Any]:
    return {
        "model": getattr(embedder, "name", settings.embedding_model),
        "backend": settings.embedding_backend,
        "class": type(embedder).__name__,
        "threads": getattr(embedder, "threads", settings.embed_threads),
        "batch_size": settings.embed_batch_size,
    }


def measure(embedder: Embedder, prompts: list[str], batch_size: int, rounds: int) -> dict[str, Any]:
    """One-prompt latency over every prompt, ``rounds`` times; batched throughput over them all."""
    embedder.embed(prompts[:batch_size])  # warm up: first calls allocate and tune
    for prompt in prompts[:5]:
        embedder.embed([prompt])
    single_ms = []
    for _ in range(rounds):
        for prompt in prompts:
            started = time.perf_counter()
            embedder.embed([prompt])
            single_ms.append((time.perf_counter() - started) * 1000)
    batched_s, texts = 0.0, 0
    for _ in range(rounds):
        for start in range(0, len(prompts), batch_size):
            batch = prompts[start : start + batch_size]
            started = time.perf_counter()
            embedder.embed(batch)
            batched_s += time.perf_counter() - started
            texts += len(batch)
    ordered = sorted(single_ms)
    return {
        "one_prompt_p50_ms": round(statistics.median(ordered), 3),
        "one_prompt_p99_ms": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 3),
        "one_prompt_count": len(ordered),
        "batched_texts_per_s": round(texts / batched_s, 1),
        "batched_texts": texts,
        "batch_size": batch_size,
    }


def run(rounds: int = 3) -> dict[str, Any]:
    settings = Settings()
    embedder = configured_embedder(settings)
    workload = Workload.default()
    prompts = workload.stored + workload.paraphrases
    return {"embedder": describe(settings, embedder), **measure(embedder, prompts, settings.embed_batch_size, rounds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="passes over the 200 workload prompts")
    args = parser.parse_args()
    print(json.dumps(run(args.rounds)))


if __name__ == "__main__":
    main()
