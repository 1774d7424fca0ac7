"""Reading what the upstream sent, which is not trusted to be well-formed: every dialect's answers."""

from __future__ import annotations

from typing import Any


def is_first_choice(choice: dict[str, Any]) -> bool:
    """Whether a choice is the first (index 0, or no index): the only one a cached answer may have."""
    index = choice.get("index", 0)
    return index is None or (type(index) is int and index == 0)


def fits(text: str, max_bytes: int) -> bool:
    """Whether ``text`` takes at most ``max_bytes`` in UTF-8, encoding it only when its length cannot
    tell (each character takes one to four bytes): a huge answer is never encoded just to be measured."""
    if len(text) > max_bytes:
        return False
    return len(text) * 4 <= max_bytes or utf8_bytes(text) <= max_bytes


def utf8_bytes(text: str) -> int:
    """The length of ``text`` in UTF-8; an ASCII text's is its length, known without encoding it."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def dicts_of(items: object) -> list[dict[str, Any]]:
    """The dicts of a list from the upstream, which is not trusted to be well-formed."""
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


def dict_field(item: dict[str, Any], name: str) -> dict[str, Any]:
    """``item[name]`` when it is a dict, else an empty one: upstream JSON is not trusted."""
    value = item.get(name)
    return value if isinstance(value, dict) else {}
