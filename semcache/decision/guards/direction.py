"""The ``direction`` guard: two words trade the sides of a direction ("Celsius to Fahrenheit" vs
"Fahrenheit to Celsius", "from Paris to Berlin" vs "from Berlin to Paris", "von Euro nach Dollar"
vs "von Dollar nach Euro"). Each language's words for "from" and "to" come from its table; Chinese
("从北京到上海") is the ``roles`` guard's.

The word after "from", and the word before "to", are where something goes from; the word after
"to" is where it goes. A prompt is vetoed only when two words both swap: one goes from in one
prompt and to in the other, and the other the other way round.
"""

from __future__ import annotations

from .languages import Tables
from .reading import STOPWORDS, GuardResult, Prompt, stem, tables_for

_REACH = 3  # words looked at on each side of "from" or "to"


def _content(word: str, tables: Tables) -> bool:
    return not (
        word in STOPWORDS
        or word in tables.function_words
        or word in tables.negations
        or word in tables.from_words
        or word in tables.to_words
        or (len(word) < 2 and not word.isdigit())
    )


def roles(prompt: Prompt, tables: Tables) -> tuple[frozenset[str], frozenset[str]]:
    """The words something goes from, and the words it goes to."""
    words = prompt.words
    sources: set[str] = set()
    targets: set[str] = set()

    def nearest(positions: range) -> str | None:
        for at in positions:
            if 0 <= at < len(words) and _content(words[at], tables):
                return stem(words[at])
        return None

    for position, word in enumerate(words):
        if word in tables.to_words:
            before = nearest(range(position - 1, position - 1 - _REACH, -1))
            after = nearest(range(position + 1, position + 1 + _REACH))
            if before and after:
                sources.add(before)
                targets.add(after)
        if word in tables.from_words:
            after = nearest(range(position + 1, position + 1 + _REACH))
            if after:
                sources.add(after)
    return frozenset(sources - targets), frozenset(targets - sources)


def direction(query: Prompt, cached: Prompt) -> GuardResult:
    if query.han and cached.han:
        return GuardResult("direction", True)
    tables = tables_for(query, cached)
    (from_left, to_left), (from_right, to_right) = query.read(roles, tables), cached.read(roles, tables)
    there, back = from_left & to_right, to_left & from_right
    if there and back and there != back:
        return GuardResult("direction", False, f"{sorted(there)[0]!r} and {sorted(back)[0]!r} swap directions")
    return GuardResult("direction", True)
