"""Vector index choice: search latency, build time, memory and recall of flat, HNSW and IVF.

    python -m benchmarks.index_search [--sizes 10000 100000] [--queries 500] [--plot index.png]

Vectors are synthetic unit vectors with cluster structure (384 dimensions, like all-MiniLM-L6-v2),
queries are noisy copies of stored vectors, as paraphrases are. Recall@1 is measured against exact
(flat) search. Single-query latency is what a cache lookup pays, so queries run one at a time.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path
from typing import Any

import faiss
import numpy as np
from rich.progress import Progress

from testkit.plots import pyplot

DIMENSION = 384


def synthetic(count: int, rng: np.random.Generator) -> np.ndarray:
    centres = rng.standard_normal((max(count // 50, 1), DIMENSION)).astype(np.float32)
    vectors = centres[rng.integers(0, len(centres), count)] + 0.6 * rng.standard_normal((count, DIMENSION)).astype(
        np.float32
    )
    faiss.normalize_L2(vectors)
    return vectors


def build(kind: str, vectors: np.ndarray) -> faiss.Index:
    if kind == "flat":
        index = faiss.IndexFlatIP(DIMENSION)
    elif kind == "hnsw32":
        index = faiss.IndexHNSWFlat(DIMENSION, 32, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = 80
        index.hnsw.efSearch = 64
    else:
        lists = 1024 if len(vectors) >= 100_000 else max(int(np.sqrt(len(vectors))), 16)
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(DIMENSION), DIMENSION, lists, faiss.METRIC_INNER_PRODUCT)
        index.train(vectors[: min(len(vectors), lists * 50)])
        index.nprobe = 8
    index.add(vectors)
    return index


def measure(
    kind: str, vectors: np.ndarray, queries: np.ndarray, truth: np.ndarray, search_threads: int | None = None
) -> dict[str, Any]:
    """Build ``kind`` over ``vectors`` with FAISS's current thread count, then search ``queries`` one
    at a time, with ``search_threads`` threads when given."""
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    index = build(kind, vectors)
    build_s = time.perf_counter() - started
    build_threads = faiss.omp_get_max_threads()
    if search_threads is not None:
        faiss.omp_set_num_threads(search_threads)
    latencies, found = [], []
    for query in queries:
        started = time.perf_counter()
        _, ids = index.search(query.reshape(1, -1), 1)
        latencies.append((time.perf_counter() - started) * 1000)
        found.append(ids[0, 0])
    faiss.omp_set_num_threads(build_threads)
    latencies.sort()
    return {
        "build_s": round(build_s, 2),
        "search_p50_ms": round(latencies[len(latencies) // 2], 4),
        "search_p99_ms": round(latencies[int(len(latencies) * 0.99)], 4),
        "recall_at_1": round(float(np.mean(np.asarray(found) == truth)), 4),
        "serialized_mb": round(len(faiss.serialize_index(index)) / 2**20, 1),
        "peak_rss_growth_mb": round(max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before, 0) / 1024, 1),
        "_latencies": latencies,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--kinds", nargs="+", default=["flat", "hnsw32", "ivf"])
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--threads", type=int, default=1, help="FAISS OpenMP threads (a lookup uses one)")
    parser.add_argument("--plot", type=Path)
    args = parser.parse_args()
    faiss.omp_set_num_threads(args.threads)
    rng = np.random.default_rng(7)
    results: dict[str, dict[str, Any]] = {}
    with Progress(transient=True) as progress:
        task = progress.add_task("building and searching", total=len(args.sizes) * len(args.kinds))
        for size in args.sizes:
            vectors = synthetic(size, rng)
            picks = rng.integers(0, size, args.queries)
            queries = vectors[picks] + 0.05 * rng.standard_normal((args.queries, DIMENSION)).astype(np.float32)
            faiss.normalize_L2(queries)
            exact = faiss.IndexFlatIP(DIMENSION)
            exact.add(vectors)
            truth = exact.search(queries, 1)[1][:, 0]
            for kind in args.kinds:
                progress.update(task, description=f"{kind} at {size:,}")
                results[f"{kind}@{size}"] = measure(kind, vectors, queries, truth)
                progress.advance(task)
    for result in results.values():
        result.pop("_latencies")
    if args.plot:
        _plot(results, args.plot)
    print(json.dumps(results, indent=2))


def _plot(results: dict[str, dict[str, Any]], path: Path) -> None:
    plt = pyplot()
    if plt is None:
        return
    figure, axis = plt.subplots(figsize=(7, 4))
    kinds = sorted({name.split("@")[0] for name in results})
    for kind in kinds:
        points = sorted(
            (int(n.split("@")[1]), r["search_p50_ms"]) for n, r in results.items() if n.startswith(kind + "@")
        )
        axis.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=kind)
    axis.set_xscale("log")
    axis.set_yscale("log")
    axis.set_xlabel("entries in one scope")
    axis.set_ylabel("p50 search latency (ms)")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
