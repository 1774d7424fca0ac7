"""Words for what semcache prints and logs to people."""

from __future__ import annotations


def counted(count: int, singular: str, plural: str | None = None) -> str:
    """``count`` and its noun, in the singular for one: "1 entry", "2 entries", "0 templates"."""
    if count == 1:
        return f"1 {singular}"
    if plural is None:
        consonant_y = singular.endswith("y") and singular[-2:-1] not in ("a", "e", "i", "o", "u")
        plural = f"{singular[:-1]}ies" if consonant_y else f"{singular}s"
    return f"{count} {plural}"
