"""The embedder's own speed, the floor under a semantic hit: one prompt per call, and in batches.

    python -m benchmarks.embedder_floor [--rounds 3]
    python -m benchmarks.embedder_floor --serve     # one-prompt timings on demand (paired runs)

Loads the embedder from the same settings (``SEMCACHE_*`` environment, ``--config``) and in the
same way as ``semcache serve``, so a semantic hit's latency and throughput can be read as ratios to
it. One-prompt time is the median of single-prompt calls. Batched throughput embeds the prompts in
batches of 16, 32 and 64 (and ``embed_batch_size``), as the server's micro-batcher does under
load, and the best of them is the floor: the server's batches are whatever size the load makes
them. Both are measured on the prompts a semantic hit embeds: the paraphrases the semantic-hit
phase sends (they are longer than the stored questions, and take longer to embed).
The stored questions' one-prompt time is reported beside it, and one-prompt time after an idle
wait (``--idle-ms``): a call that follows a pause runs on cold caches, as a miss's embedding does
when it arrives at a server that has been waiting on the upstream. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

from semcache.protocols import Embedder
from semcache.settings import Settings

from .http_load import Workload


def configured_embedder(settings: Settings) -> Embedder:
    """The embedder ``semcache serve`` loads for English prompts with these settings (as server/app.py)."""
    from semcache.embedders import load_configured_embedder

    return load_configured_embedder(settings.embedding_model, settings)


def describe(settings: Settings, embedder: Embedder) -> dict[str, Any]:
    return {
        "model": getattr(embedder, "name", settings.embedding_model),
        "backend": settings.embedding_backend,
        "class": type(embedder).__name__,
        "threads": getattr(embedder, "threads", settings.embed_threads),
        "batch_size": settings.embed_batch_size,
        "batch_tokens": getattr(embedder, "batch_tokens", None),
    }


# Batch sizes the batched throughput is measured at. The floor is the best of them: the server's
# batches take whatever size the load gives them, and a bigger batch is not always faster per
# prompt (it runs at the width of its longest text).
BATCH_SIZES = (16, 32, 64)


def measure(embedder: Embedder, prompts: list[str], batch_size: int, rounds: int) -> dict[str, Any]:
    """One-prompt latency over every prompt, ``rounds`` times; batched throughput over them all,
    at each of ``BATCH_SIZES`` and the configured ``batch_size``, the best of which is the floor."""
    embedder.embed(prompts[:batch_size])  # warm up: first calls allocate and tune
    for prompt in prompts[:5]:
        embedder.embed([prompt])
    single_ms = measure_one_prompt(embedder, prompts, rounds)
    by_size = batched_throughput(embedder, prompts, sorted({*BATCH_SIZES, batch_size}), rounds)
    best = max(by_size, key=by_size.__getitem__)
    ordered = sorted(single_ms)
    return {
        "one_prompt_p50_ms": round(statistics.median(ordered), 3),
        "one_prompt_p99_ms": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 3),
        "one_prompt_count": len(ordered),
        "batched_texts_per_s": by_size[best],
        "batched_best_size": best,
        "batched_by_size": {str(size): rate for size, rate in by_size.items()},
        "batched_texts": len(prompts) * rounds,
        "batch_size": batch_size,
    }


# How many paraphrases the after-idle time is measured on (each call waits first), and the wait:
# the shortest upstream delay of ``python -m benchmarks run``.
IDLE_PROMPTS = 30
IDLE_MS = 300.0


def measure_one_prompt(embedder: Embedder, prompts: list[str], rounds: int, idle_s: float = 0.0) -> list[float]:
    """Milliseconds per call, one prompt per call, over ``prompts`` ``rounds`` times; with
    ``idle_s``, each call after that long a pause (not timed)."""
    single_ms = []
    for _ in range(rounds):
        for prompt in prompts:
            if idle_s > 0:
                time.sleep(idle_s)
            started = time.perf_counter()
            embedder.embed([prompt])
            single_ms.append((time.perf_counter() - started) * 1000)
    return single_ms


def batched_throughput(embedder: Embedder, prompts: list[str], sizes: list[int], rounds: int) -> dict[int, float]:
    """Prompts per second at each batch size, embedding ``prompts`` in batches of it, ``rounds``
    times. The sizes take turns in each round, as the machine's speed drifts over minutes: measured
    one after the other, batches of 16, 32 and 64 questions, which all ran as the same calls of 16
    (256 tokens), once came to 680, 726 and 980/s in one run."""
    seconds = dict.fromkeys(sizes, 0.0)
    texts = dict.fromkeys(sizes, 0)
    for _ in range(rounds):
        for size in sizes:
            for start in range(0, len(prompts), size):
                batch = prompts[start : start + size]
                started = time.perf_counter()
                embedder.embed(batch)
                seconds[size] += time.perf_counter() - started
                texts[size] += len(batch)
    return {size: round(texts[size] / seconds[size], 1) for size in sizes}


def run(rounds: int = 3, idle_ms: float = IDLE_MS) -> dict[str, Any]:
    settings = Settings()
    embedder = configured_embedder(settings)
    workload = Workload.default()
    measured = measure(embedder, workload.paraphrases, settings.embed_batch_size, rounds)
    stored = measure_one_prompt(embedder, workload.stored, rounds)
    after_idle = measure_one_prompt(embedder, workload.paraphrases[:IDLE_PROMPTS], 1, idle_s=idle_ms / 1000)
    return {"embedder": describe(settings, embedder), "prompts": "paraphrases", **measured,
            "stored_one_prompt_p50_ms": round(statistics.median(stored), 3),
            "after_idle": {"idle_ms": idle_ms, "one_prompt_p50_ms": round(statistics.median(after_idle), 3),
                           "count": len(after_idle)}}  # fmt: skip


def serve() -> None:
    """One-prompt timings on demand, for a measurement paired with the HTTP one: prints ``ready``,
    then answers each line ``N`` on stdin with the milliseconds of the next N paraphrases, embedded
    one per call, as a JSON list, each line that is a JSON list of texts with theirs (the new
    prompts a miss phase sent, which are longer than the paraphrases), each line that is a JSON
    object ``{"texts": [...], "idle_s": S}`` with theirs, each call after a pause of S seconds (a
    miss's embedding follows the server's wait on the upstream), and each line ``batched``
    with the paraphrases' prompts/s in batches of each size, once over them, as a JSON object. The
    machine's speed drifts over minutes; timings taken between the chunks of an HTTP phase drift
    with it."""
    settings = Settings()
    embedder = configured_embedder(settings)
    prompts = Workload.default().paraphrases
    measure_one_prompt(embedder, prompts[:10], 1)  # warm up
    print("ready", flush=True)
    taken = 0
    for line in sys.stdin:
        if line.startswith("batched"):
            rates = batched_throughput(embedder, prompts, sorted({*BATCH_SIZES, settings.embed_batch_size}), 1)
            print(json.dumps({str(size): rate for size, rate in rates.items()}), flush=True)
            continue
        idle_s = 0.0
        if line.lstrip().startswith("{"):
            asked = json.loads(line)
            chosen, idle_s = [str(text) for text in asked["texts"]], float(asked["idle_s"])
        elif line.lstrip().startswith("["):
            chosen = [str(text) for text in json.loads(line)]
        else:
            count = int(line)
            chosen = [prompts[(taken + n) % len(prompts)] for n in range(count)]
            taken += count
        print(json.dumps([round(ms, 3) for ms in measure_one_prompt(embedder, chosen, 1, idle_s)]), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="passes over the workload's 100 paraphrases")
    parser.add_argument("--idle-ms", type=float, default=IDLE_MS,
                        help=f"the pause before each after-idle call (default {IDLE_MS:g}: the shortest upstream "
                        "wait of python -m benchmarks run)")  # fmt: skip
    parser.add_argument("--serve", action="store_true", help="answer 'N' lines on stdin with N one-prompt timings")
    args = parser.parse_args()
    if args.serve:
        serve()
        return
    print(json.dumps(run(args.rounds, args.idle_ms)))


if __name__ == "__main__":
    main()
