"""Reading labelled JSONL files, with errors that say which line is wrong."""

from __future__ import annotations

import json
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
