"""Swapped roles: the ``order`` guard (Latin text: the same two names or words in swapped roles,
"Kobe ... LeBron" vs "LeBron ... Kobe") and the ``roles`` guard (Chinese text whose two sides trade
places around a verb of giving or moving: "男生送女生" vs "女生送男生", "从北京到上海" vs "从上海到北京")."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from . import chinese
from .entities import named
from .languages import en
from .reading import STOPWORDS, GuardResult, Prompt, stem

_NEGATIONS = frozenset(en.NEGATIONS.split())


def order(query: Prompt, cached: Prompt) -> GuardResult:
    """Swapped roles: two words shared by both sides appear in opposite order."""
    left = query.read(_content_positions)
    right = cached.read(_content_positions)
    shared = [w for w in left if w in right]  # in the query's order
    if left.keys() != right.keys():  # only names count: the other words may have moved with the wording
        names = {stem(name) for name in (*query.read(named), *cached.read(named))} | _labels(left) | _labels(right)
        shared = [w for w in shared if w in names]
    swapped = _first_swap([right[w] for w in shared])
    if swapped is None:
        return GuardResult("order", True)
    first, second = swapped
    return GuardResult("order", False, f"{shared[first]!r} and {shared[second]!r} swap places")


def _first_swap(positions: list[int]) -> tuple[int, int] | None:
    """The first ``i`` (then the first ``j`` after it) whose position is greater than a later
    one's, or None when they ascend: one pass from the end and one scan, never every pair."""
    lowest_after: list[int] = [0] * len(positions)
    lowest = None
    for i in range(len(positions) - 1, -1, -1):
        lowest_after[i] = lowest if lowest is not None else positions[i]
        lowest = positions[i] if lowest is None else min(lowest, positions[i])
    for i, position in enumerate(positions[:-1]):
        if lowest_after[i] < position:
            return i, next(j for j in range(i + 1, len(positions)) if positions[j] < position)
    return None


def _content_positions(text: Prompt) -> MappingProxyType[str, int]:
    """Where each content word stands, by its stem; a word that comes twice has no one place."""
    positions: dict[str, int] = {}
    counts: dict[str, int] = {}
    for position, token in enumerate(text.tokens):
        if _is_label(text, position):
            word = f"{stem(text.tokens[position - 1])} {token}"  # "type A" and "type B": two things
        elif token in STOPWORDS or token in _NEGATIONS or len(token) < 2:
            continue
        else:
            word = stem(token)
        counts[word] = counts.get(word, 0) + 1
        positions.setdefault(word, position)
    return MappingProxyType({word: at for word, at in positions.items() if counts[word] == 1})


def _is_label(text: Prompt, position: int) -> bool:
    """A capital letter that names a kind after a word ("type A", "plan B", "vitamin D"): not the
    pronoun "I", and not an article opening a sentence ("A dog ...")."""
    letter = text.cased[position]
    return (
        len(letter) == 1 and "A" <= letter <= "Z" and letter != "I" and position > 0 and not text.after_mark[position]
    )


def _labels(positions: Mapping[str, int]) -> set[str]:
    return {word for word in positions if " " in word}


def roles(query: Prompt, cached: Prompt) -> GuardResult:
    """Swapped roles or direction in Chinese text; Latin text always passes (see ``order``)."""
    swapped = chinese.swapped_roles(query.raw, cached.raw)
    if swapped is None:
        return GuardResult("roles", True)
    first, second, marker = swapped
    return GuardResult("roles", False, f"{first!r} and {second!r} swap sides of {marker!r}")
