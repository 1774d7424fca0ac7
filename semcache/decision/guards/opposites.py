"""The ``antonyms`` guard: one side says a word where the other says its opposite ("enable" vs
"disable", "best" vs "worst", "增加" vs "减少"), from each language's table of opposites."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from types import MappingProxyType

from .languages import CHINESE
from .reading import GuardResult, Prompt, tables_for

_CHINESE: dict[str, set[str]] = {}
for _left, _right in CHINESE.OPPOSITES:
    _CHINESE.setdefault(_left, set()).add(_right)
    _CHINESE.setdefault(_right, set()).add(_left)
_CHINESE_WORDS = sorted(_CHINESE, key=len, reverse=True)


def _chinese_words(text: str) -> Counter[str]:
    """The table's words in Chinese text, longest first, each character read once."""
    found: Counter[str] = Counter()
    for word in _CHINESE_WORDS:
        found[word] += text.count(word)
        text = text.replace(word, " ")
    return +found


def _counted(prompt: Prompt) -> Mapping[str, int]:
    """The prompt's words, and in Chinese text the table's words, counted."""
    counted = Counter(prompt.words)
    return MappingProxyType(counted + _chinese_words(prompt.raw) if prompt.han else counted)


def antonyms(query: Prompt, cached: Prompt) -> GuardResult:
    tables = tables_for(query, cached)
    left, right = query.read(_counted), cached.read(_counted)
    if query.han or cached.han:
        opposites = {**tables.opposites, **{w: frozenset(o) for w, o in _CHINESE.items()}}
    else:
        opposites = tables.opposites
    # The words one side says more often than the other; the left side's in its order.
    only_left = [word for word, count in left.items() if count > right.get(word, 0)]
    only_right = {word for word, count in right.items() if count > left.get(word, 0)}
    for word in only_left:
        opposite = opposites.get(word, frozenset()) & only_right
        if opposite:
            return GuardResult("antonyms", False, f"{word!r} vs {sorted(opposite)[0]!r}")
    return GuardResult("antonyms", True)
