"""How the guards read a prompt: once per prompt, shared by every guard."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from functools import cached_property
from typing import Any, TypeVar

from . import chinese, languages
from .languages import Tables

_T = TypeVar("_T")
_TOKEN = re.compile(r"[^\W_]+(?:[.,'’][^\W_]+)*", re.UNICODE)
_CONTRACTED_NOT = re.compile(r"n['’]t\b")
_SENTENCE_MARK = re.compile(r"[.?!:]")
# Superscripts and subscripts written out before NFKC, which would read "2³" as "23" and "H₂" as "H2".
_SCRIPT_FORMS = str.maketrans(
    {ch: "^" + unicodedata.normalize("NFKC", ch) for ch in "⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁼⁽⁾ⁱⁿ"}
    | {ch: "_" + unicodedata.normalize("NFKC", ch) for ch in "₀₁₂₃₄₅₆₇₈₉₊₋₌₍₎ₐₑₒₓₕₖₗₘₙₚₛₜ"}
)
STOPWORDS = frozenset(
    (
        "a an the and or but if then so of to in on at by for with from into onto about as is are was were be "
        "been being am do does did doing have has had having i me my mine we us our you your he him his she "
        "her it its they them their what which who whom whose when where why how this that these those there "
        "here can could should would will shall may might must some any all each every more very much many "
        "such than too also just only own same other another get got getting make made one's someone "
        "something anyone anything up out over s t don't doesn't isn't aren't wasn't weren't "
    ).split()
)


@dataclass(frozen=True)
class GuardResult:
    guard: str
    passed: bool
    detail: str = ""


@dataclass(frozen=True)
class Prompt:
    raw: str  # NFKC, superscripts written out
    tokens: list[str]  # lower-cased, in order
    cased: list[str]  # original case, in order
    original: str  # as sent: the ``literals`` guard reads case, layout and every mark
    # Per token: whether a sentence mark (".?!:") stands between it and the token before it.
    after_mark: list[bool]

    @classmethod
    def of(cls, text: str) -> Prompt:
        normal = unicodedata.normalize("NFKC", text.translate(_SCRIPT_FORMS)).replace('""', '"')
        spelled = _CONTRACTED_NOT.sub(" not", normal)
        cased: list[str] = []
        after_mark: list[bool] = []
        end = 0
        for match in _TOKEN.finditer(spelled):
            cased.append(match.group())
            after_mark.append(_SENTENCE_MARK.search(spelled, end, match.start()) is not None)
            end = match.end()
        return cls(normal, [t.lower() for t in cased], cased, text, after_mark)

    @cached_property
    def han(self) -> bool:
        return chinese.has_han(self.raw)

    @cached_property
    def cased_words(self) -> list[str]:
        """The tokens with elisions split off ("l'heure" is "l" and "heure"), as written."""
        words: list[str] = []
        for token in self.cased:
            split = languages.elided(token)
            words.extend(split if split else (token,))
        return words

    @cached_property
    def words(self) -> list[str]:
        """``cased_words`` case-folded and without accents, as the language tables are."""
        return [languages.fold(word) for word in self.cased_words]

    @cached_property
    def languages(self) -> frozenset[str]:
        return languages.detect(self.words)

    def read(self, reader: Callable[..., _T], *args: Hashable) -> _T:
        """``reader(self, *args)``, worked out once for this prompt: a stored prompt is a candidate
        for query after query, and what a guard reads in it never changes. Every later caller gets
        the same value, so no caller may change it: readers return frozen values."""
        key = (reader, *args)
        readings = self._readings
        if key not in readings:
            readings[key] = reader(self, *args)
        return readings[key]

    @cached_property
    def _readings(self) -> dict[tuple[Any, ...], Any]:
        return {}


def tables_for(query: Prompt, cached: Prompt) -> Tables:
    """The tables of every language either prompt is in: both are read with the same words."""
    return languages.tables(query.languages | cached.languages)


def stem(word: str) -> str:
    """One form for a word's singular and plural, compared only with other stems: "causes" and
    "cause" are both "caus", "headaches" and "headache" both "headach", "glasses" and "glass" both
    "glass". A final "e" goes, since a plural's "es" may be its own ("boxes") or the word's
    ("phones"); so "dane" and "dan" meet too, a price paid for every "-e" word's plural."""
    if len(word) > 5 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 4 and word.endswith("es"):
        base = word[:-2]
    elif len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        base = word[:-1]
    else:
        base = word
    return base[:-1] if len(base) > 3 and base.endswith("e") else base
