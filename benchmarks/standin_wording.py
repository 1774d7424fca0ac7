"""How hard the replays' stand-in upstream is for an answer judge: the cosine, by the shipped
embedding model, between two of its answers, for pairs of these kinds on the labelled traces:

- ``same prompt``: two answers to one prompt (a model asked the same question twice);
- ``same cluster``: answers to two prompts of one cluster (a question and its paraphrase);
- ``look-alike``: answers to two prompts of different clusters whose own cosine is at least 0.7
  (the wrong candidates that reach the verification band);
- ``nearest cluster``: answers to a cluster's first question and to the nearest other cluster's;
- ``hard negative``: answers to the Quora pairs that people labelled not duplicate;
- ``random``: answers to two clusters drawn at random.

A model words two answers to one question differently (MiniLM reads them at about 0.65-0.9), and
answers to look-alike questions read nearly as alike: an answer judge that sees a clean gap
between the two is being tested on something easier than a model's answers.

    python -m benchmarks.standin_wording                       # both traces, the default wording
    python -m benchmarks.standin_wording --common-share 0.8    # answers that share most sentences
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from semcache.evaluation.data import DEFAULT_SEED
from semcache.evaluation.trace import ClusterUpstream
from semcache.evaluation.wording import DEFAULT_COMMON_SHARE

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
TRACES = ("trace_faq_dev.jsonl", "trace_qqp_dev.jsonl")
LOOK_ALIKE = 0.7  # question cosine from which two prompts of different clusters are look-alikes
QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)

Embed = Callable[[Sequence[str]], np.ndarray]


def load_embed() -> Embed:
    """The shipped English model, as ``semcache eval`` loads it, returning unit vectors."""
    from semcache.evaluation.parts import load_evaluation_parts
    from semcache.settings import Settings

    embedder, _ = load_evaluation_parts(Settings())

    def embed(texts: Sequence[str]) -> np.ndarray:
        vectors = np.asarray(embedder.embedder.embed(list(texts)), dtype=np.float64)
        return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)

    return embed


def answer_cosines(upstream: ClusterUpstream, pairs: Sequence[tuple[str, str]], embed: Embed) -> np.ndarray:
    """The cosine between a fresh answer to each pair's first prompt and one to its second."""
    if not pairs:
        return np.zeros(0)
    answers = [(upstream.answer(first), upstream.answer(second)) for first, second in pairs]
    first = embed([a for a, _ in answers])
    second = embed([b for _, b in answers])
    return np.einsum("ij,ij->i", first, second)


def trace_pairs(rows: list[dict[str, Any]], embed: Embed, limit: int, seed: int) -> dict[str, list[tuple[str, str]]]:
    """Prompt pairs of each kind from one trace, at most ``limit`` of each."""
    chance = random.Random(seed)
    cluster_of = {str(r["prompt"]): str(r["cluster"]) for r in rows}
    prompts: dict[str, list[str]] = {}
    for row in rows:
        prompts.setdefault(str(row["cluster"]), []).append(str(row["prompt"]))
    clusters = list(prompts)
    firsts = [prompts[c][0] for c in clusters]
    between = embed(firsts) @ embed(firsts).T
    np.fill_diagonal(between, -1.0)
    picked = chance.sample(range(len(clusters)), min(limit, len(clusters)))
    pairs: dict[str, list[tuple[str, str]]] = {"same prompt": [], "same cluster": [], "look-alike": [],
                                               "nearest cluster": [], "hard negative": [], "random": []}  # fmt: skip
    for i in picked:
        own = prompts[clusters[i]]
        pairs["same prompt"].append((own[0], own[0]))
        if len(own) > 1:
            pairs["same cluster"].append((own[0], chance.choice(own[1:])))
        pairs["nearest cluster"].append((own[0], firsts[int(between[i].argmax())]))
        other = chance.choice([k for k in range(len(clusters)) if k != i])
        pairs["random"].append((own[0], firsts[other]))
    texts = list(cluster_of)
    alike = embed(texts) @ embed(texts).T
    looks = [(texts[i], texts[j]) for i in range(len(texts)) for j in range(i)
             if alike[i, j] >= LOOK_ALIKE and cluster_of[texts[i]] != cluster_of[texts[j]]]  # fmt: skip
    pairs["look-alike"] = chance.sample(looks, min(limit, len(looks)))
    by_idx = {r.get("idx"): str(r["prompt"]) for r in rows}
    negatives = [(str(r["prompt"]), by_idx[i]) for r in rows for i in r.get("hard_negative_of") or [] if i in by_idx]
    pairs["hard negative"] = chance.sample(negatives, min(limit, len(negatives)))
    return pairs


def measure(path: Path, embed: Embed, *, common_share: float, seed: int, limit: int) -> dict[str, Any]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    upstream = ClusterUpstream({str(r["prompt"]): str(r["cluster"]) for r in rows}, seed, common_share)
    kinds = {}
    for kind, pairs in trace_pairs(rows, embed, limit, seed).items():
        cosines = answer_cosines(upstream, pairs, embed)
        if len(cosines):
            quantiles = [round(float(q), 3) for q in np.quantile(cosines, QUANTILES)]
            kinds[kind] = {"pairs": len(cosines), "quantiles": quantiles,
                           "at_least_0.85": round(float(np.mean(cosines >= 0.85)), 3)}  # fmt: skip
    return {"trace": path.name, "common_share": common_share, "seed": seed, "kinds": kinds}


def table(results: list[dict[str, Any]]) -> str:
    lines = []
    for result in results:
        lines.append(f"{result['trace']} (common_share {result['common_share']}, seed {result['seed']})")
        lines.append(f"  {'pairs':16} {'n':>4}  " + "  ".join(f"p{round(100 * q):<4}" for q in QUANTILES) + "  >=0.85")
        for kind, figures in result["kinds"].items():
            quantiles = "  ".join(f"{q:<5.2f}" for q in figures["quantiles"])
            lines.append(f"  {kind:16} {figures['pairs']:>4}  {quantiles}  {figures['at_least_0.85']:.0%}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.standin_wording", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--data", type=Path, default=SHARED_DATA, help="the folder of the traces (../shared/data)")
    parser.add_argument("--common-share", type=float, default=DEFAULT_COMMON_SHARE)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--pairs", type=int, default=300, help="pairs of each kind per trace, at most")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    missing = [name for name in TRACES if not (args.data / name).is_file()]
    if missing:
        print(f"error: {args.data} lacks {', '.join(missing)}", file=sys.stderr)
        return 2
    embed = load_embed()
    results = [measure(args.data / name, embed, common_share=args.common_share, seed=args.seed, limit=args.pairs)
               for name in TRACES]  # fmt: skip
    print(json.dumps(results, indent=2) if args.json else table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
