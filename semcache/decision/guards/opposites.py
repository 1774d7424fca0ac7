"""The ``antonyms`` guard: one side says a word where the other says its opposite ("enable" vs
"disable", "best" vs "worst", "增加" vs "减少"), from each language's table of opposites."""

from __future__ import annotations

from collections import Counter

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


def antonyms(query: Prompt, cached: Prompt) -> GuardResult:
    tables = tables_for(query, cached)
    left, right = Counter(query.words), Counter(cached.words)
    if query.han or cached.han:
        left, right = left + _chinese_words(query.raw), right + _chinese_words(cached.raw)
        opposites = {**tables.opposites, **{w: frozenset(o) for w, o in _CHINESE.items()}}
    else:
        opposites = tables.opposites
    only_left, only_right = left - right, right - left
    for word in only_left:
        opposite = opposites.get(word, frozenset()) & only_right.keys()
        if opposite:
            return GuardResult("antonyms", False, f"{word!r} vs {sorted(opposite)[0]!r}")
    return GuardResult("antonyms", True)
