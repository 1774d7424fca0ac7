"""The ``dates`` guard: the months or weekdays named differ ("in May" vs "in June", "15 mars" vs
"15 avril", "am Montag" vs "am Dienstag"), from each language's table. A month name that is a
common word too ("may", "march") counts beside a number or after a word like "in" ("in May"). Days and
years are numbers: the ``numbers`` guard reads them, and Chinese dates ("十一月", "星期二") too.
"""

from __future__ import annotations

from .languages import Tables
from .reading import GuardResult, Prompt, tables_for


def _beside_a_number(words: list[str], position: int) -> bool:
    return any(0 <= at < len(words) and words[at][:1].isdigit() for at in (position - 1, position + 1))


def named(prompt: Prompt, tables: Tables) -> frozenset[str]:
    found = set()
    for position, word in enumerate(prompt.words):
        kind, number = (
            ("month", tables.months.get(word)) if word in tables.months else ("day", tables.weekdays.get(word))
        )
        if number is None:
            continue
        if word in tables.ambiguous_dates and not (
            _beside_a_number(prompt.words, position)
            or (position > 0 and prompt.words[position - 1] in tables.date_words)
        ):
            continue
        found.add(f"{kind} {number}")
    return frozenset(found)


def dates(query: Prompt, cached: Prompt) -> GuardResult:
    tables = tables_for(query, cached)
    left, right = query.read(named, tables), cached.read(named, tables)
    if left == right:
        return GuardResult("dates", True)
    return GuardResult("dates", False, f"{sorted(left)} vs {sorted(right)}")
