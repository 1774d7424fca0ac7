"""Reading labelled JSONL files, with errors that say which line is wrong."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

# The replays' chances (the stand-ins' wording and verdicts, exploration) come from this seed.
DEFAULT_SEED = 20240601


def read_jsonl(path: Path, required: tuple[str, ...]) -> list[dict[str, Any]]:
    rows = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise ValueError(f"{path}:{number}: not valid JSON ({exc})") from exc
            missing = [field for field in required if field not in row]
            if not isinstance(row, dict) or missing:
                raise ValueError(f"{path}:{number}: needs the fields {list(required)}; missing {missing}")
            rows.append(row)
    if not rows:
        raise ValueError(f"{path}: no rows")
    return rows


def is_pairs(rows: list[dict[str, Any]]) -> bool:
    """Whether ``rows`` are labelled pairs (q1, q2, duplicate) rather than a trace."""
    return all(isinstance(r, dict) and {"q1", "q2", "duplicate"} <= r.keys() for r in rows)


def trace_from_pairs(rows: list[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
    """Labelled pairs as one arrival-order trace, in the format of ``trace_qqp_dev.jsonl``: every
    distinct text once, in an order drawn from ``seed``. Texts joined by duplicate pairs share a
    cluster; a non-duplicate pair makes each text a hard negative of the other. Two texts no pair
    joins were never compared by a person, and count as different, as in the traces."""
    texts = list(dict.fromkeys(str(r[field]).strip() for r in rows for field in ("q1", "q2")))
    parent = {text: text for text in texts}

    def root(text: str) -> str:
        while parent[text] != text:
            parent[text] = parent[parent[text]]
            text = parent[text]
        return text

    negatives: dict[str, set[str]] = {}
    for row in rows:
        first, second = str(row["q1"]).strip(), str(row["q2"]).strip()
        if row["duplicate"] is True:
            parent[root(first)] = root(second)
        else:
            negatives.setdefault(first, set()).add(second)
            negatives.setdefault(second, set()).add(first)
    random.Random(seed).shuffle(texts)
    position = {text: index for index, text in enumerate(texts)}
    first_of: dict[str, int] = {}
    trace = []
    for index, text in enumerate(texts):
        cluster = root(text)
        earlier = first_of.setdefault(cluster, index)
        trace.append({
            "idx": index, "prompt": text, "cluster": f"c{position[cluster]}",
            "duplicate_of": earlier if earlier != index else None,
            "hard_negative_of": sorted(position[n] for n in negatives.get(text, ()) if position[n] < index),
        })  # fmt: skip
    return trace
