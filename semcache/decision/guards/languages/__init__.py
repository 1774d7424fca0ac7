"""The words each language's guards read, one plain-data module per language.

To add a language, write a module like ``de.py`` and name it in ``LATIN``; to teach a language a word,
add it to its module. The guards' logic reads only what is loaded here. A Latin-script module holds:

- ``FUNCTION_WORDS``: common short words that tell the language apart (and carry no content);
- ``NEGATIONS``: words that negate; ``NEGATIVE_CONCORD``: True where several negation words make
  one negation ("no ... nada", "ne ... pas"), so that a prompt is negated when it holds any;
- ``NUMBERS`` (counting words, joined: "twenty two" is 22), ``NUMBER_LIKE`` ("half", "double"),
  ``ORDINALS`` ("second" is 2) and ``ORDINAL_SUFFIXES`` after digits ("2nd", "2e", "2º");
  ``ONE_AS_PRONOUN``: phrases in which the counting word for one is a pronoun, no number
  ("how can one", "which one");
- ``UNITS``: a unit's words and symbols to one symbol ("grams" and "g" to "g");
- ``MONTHS`` and ``WEEKDAYS`` to their numbers; ``AMBIGUOUS_DATES``: the names among them that are
  common words too ("may"), read only beside a number or after one of ``DATE_WORDS`` ("in May");
- ``OPPOSITES``: pairs, each side the space-separated forms of one word;
- ``FROM`` and ``TO``: the words of a direction ("from X to Y", "X to Y");
- ``ELISIONS``: what stands before an apostrophe and is a word of its own ("l'" in "l'heure").

Words are compared case-folded and without accents, so "deuxieme" reads as "deuxième".
Chinese (``zh.py``) is read by characters instead; see that module.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field
from functools import cache
from types import ModuleType

from . import de, en, es, fr, it, nl, pt, zh

LATIN: dict[str, ModuleType] = {"en": en, "de": de, "fr": fr, "es": es, "it": it, "pt": pt, "nl": nl}
CHINESE = zh


def fold(word: str) -> str:
    """Lower case without accents: "Größer" is "grosser", "deuxième" is "deuxieme"."""
    decomposed = unicodedata.normalize("NFKD", word.casefold())
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def _words(text: str) -> frozenset[str]:
    return frozenset(fold(word) for word in text.split())


def _values(table: dict[str, float]) -> dict[str, float]:
    return {fold(word): value for word, value in table.items()}


@dataclass(frozen=True, eq=False)
class Tables:
    """The words of one or more languages, folded, ready for the guards. Equal and hashed by
    identity: ``tables()`` makes one per set of languages, and a prompt's readings are kept by it."""

    function_words: frozenset[str] = frozenset()
    negations: frozenset[str] = frozenset()
    negative_concord: bool = False
    numbers: dict[str, float] = field(default_factory=dict)
    number_like: dict[str, float] = field(default_factory=dict)
    ordinals: dict[str, float] = field(default_factory=dict)
    ordinal_suffixes: frozenset[str] = frozenset()
    one_as_pronoun: frozenset[tuple[str, ...]] = frozenset()
    units: dict[str, str] = field(default_factory=dict)
    months: dict[str, int] = field(default_factory=dict)
    weekdays: dict[str, int] = field(default_factory=dict)
    ambiguous_dates: frozenset[str] = frozenset()
    date_words: frozenset[str] = frozenset()
    opposites: dict[str, frozenset[str]] = field(default_factory=dict)
    from_words: frozenset[str] = frozenset()
    to_words: frozenset[str] = frozenset()
    elisions: frozenset[str] = frozenset()

    @classmethod
    def of(cls, module: ModuleType) -> Tables:
        opposites: dict[str, set[str]] = {}
        for left, right in module.OPPOSITES:
            for one, other in ((left, right), (right, left)):
                for word in _words(one):
                    opposites.setdefault(word, set()).update(_words(other))
        return cls(
            function_words=_words(module.FUNCTION_WORDS),
            negations=_words(module.NEGATIONS),
            negative_concord=module.NEGATIVE_CONCORD,
            numbers=_values(module.NUMBERS),
            number_like=_values(module.NUMBER_LIKE),
            ordinals=_values(module.ORDINALS),
            ordinal_suffixes=_words(module.ORDINAL_SUFFIXES),
            one_as_pronoun=frozenset(tuple(fold(w) for w in phrase.split()) for phrase in module.ONE_AS_PRONOUN),
            units={fold(word): unit for word, unit in module.UNITS.items()},
            months={fold(word): n for word, n in module.MONTHS.items()},
            weekdays={fold(word): n for word, n in module.WEEKDAYS.items()},
            ambiguous_dates=_words(module.AMBIGUOUS_DATES),
            date_words=_words(module.DATE_WORDS),
            opposites={word: frozenset(others) for word, others in opposites.items()},
            from_words=_words(module.FROM),
            to_words=_words(module.TO),
            elisions=_words(module.ELISIONS),
        )

    def __or__(self, other: Tables) -> Tables:
        opposites = {w: self.opposites.get(w, frozenset()) | other.opposites.get(w, frozenset()) for w in
                     self.opposites.keys() | other.opposites.keys()}  # fmt: skip
        return Tables(
            function_words=self.function_words | other.function_words,
            negations=self.negations | other.negations,
            negative_concord=self.negative_concord or other.negative_concord,
            numbers=self.numbers | other.numbers,
            number_like=self.number_like | other.number_like,
            ordinals=self.ordinals | other.ordinals,
            ordinal_suffixes=self.ordinal_suffixes | other.ordinal_suffixes,
            one_as_pronoun=self.one_as_pronoun | other.one_as_pronoun,
            units=self.units | other.units,
            months=self.months | other.months,
            weekdays=self.weekdays | other.weekdays,
            ambiguous_dates=self.ambiguous_dates | other.ambiguous_dates,
            date_words=self.date_words | other.date_words,
            opposites=opposites,
            from_words=self.from_words | other.from_words,
            to_words=self.to_words | other.to_words,
            elisions=self.elisions | other.elisions,
        )


_TABLES = {code: Tables.of(module) for code, module in LATIN.items()}
# Words that say which language a prompt is in: its function words, negations and names of dates.
_MARKERS = {
    code: tables.function_words
    | tables.negations
    | (tables.months.keys() - tables.ambiguous_dates)
    | tables.weekdays.keys()
    for code, tables in _TABLES.items()
}
_ELISIONS = frozenset().union(*(tables.elisions for tables in _TABLES.values()))


def detect(words: list[str]) -> frozenset[str]:
    """The Latin-script languages ``words`` (folded) are most likely in: the ones whose function
    words, negations and month and day names it holds most of (several on a tie), or every one when
    it holds none."""
    scores = {code: sum(word in markers for word in words) for code, markers in _MARKERS.items()}
    best = max(scores.values())
    if best == 0:
        return frozenset(LATIN)
    return frozenset(code for code, score in scores.items() if score == best)


@cache
def tables(codes: frozenset[str]) -> Tables:
    """The tables of these languages together."""
    merged = Tables()
    for code in sorted(codes):
        merged = merged | _TABLES[code]
    return merged


def elided(word: str) -> tuple[str, str] | None:
    """("l", "heure") for "l'heure": the elided word and the rest, or None."""
    for mark in ("'", "’"):
        head, found, rest = word.partition(mark)
        if found and rest and fold(head) in _ELISIONS:
            return head, rest
    return None
