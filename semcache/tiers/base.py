from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

TierName = Literal["exact", "template", "semantic"]


@dataclass(frozen=True)
class Hit:
    tier: TierName
    answer: str
    matched_prompt: str
    entry_id: int | None = None  # None for templates
    similarity: float | None = None  # cosine, set on semantic and template matches
    tool_calls: list[dict[str, Any]] | None = None  # a cached tool-call answer
    verified: bool = False  # a semantic match under the certified line that a model approved
