"""The ``numbers`` guard: the numbers differ, in digits or in words, with their units.

"2015" vs "2016", "3 months" vs "5 months" and "3 months" vs "3 years" differ; "three" and "3",
"22" and "twenty two", "2nd" and "second", "100g" and "100 grams" match. Each language's number
words, ordinals and units come from its table (``languages``); Chinese numerals are read as numbers
("十一月" is 11, "三百五十" is 350, "第二" is 2, "100毫克" is 100 mg). Superscripts are exponents:
"2³" is 2 and 3, never 23.

A "one" in a phrase of the language's ``one_as_pronoun`` ("how can one …", "which one", "no one"),
or at the end of a prompt, is a pronoun, no number: it must match only a 1 on the other side, and
may stand against no number at all. Every other one counts: "one pill" vs "pills", "one week" vs
"a few weeks", "1 day" vs "a day" and "the first king" vs "the king" differ.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from . import chinese
from .languages import CHINESE, Tables
from .reading import GuardResult, Prompt, tables_for

# Digits, then letters: "100g", "2nd", "1.5kg", "2e", "8a.m".
_WITH_SUFFIX = re.compile(r"(\d+(?:[.,]\d+)*)([^\W\d_]+(?:\.[^\W\d_]+)*)")
_GROUPED = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?")  # 1,000,000.5
_GROUPED_WITH_DOTS = re.compile(r"\d{1,3}(?:\.\d{3})+,\d+")  # 1.000,5
_DECIMAL_COMMA = re.compile(r"\d+,\d{1,2}|\d+,\d{4,}")  # 3,5: a comma before other than three digits


def number(digits: str) -> str:
    """Digits as one spelling of their value: "1,000" and "1000" alike, "3,5" as "3.5", "05" as "5"."""
    digits = digits.rstrip(".")
    if _GROUPED.fullmatch(digits):
        digits = digits.replace(",", "")
    elif _GROUPED_WITH_DOTS.fullmatch(digits):
        digits = digits.replace(".", "").replace(",", ".")
    elif _DECIMAL_COMMA.fullmatch(digits):
        digits = digits.replace(",", ".")
    else:
        digits = digits.replace(",", "")
    if not digits.isdecimal():
        return digits
    # The value's spelling without int(): a run of thousands of digits would raise past Python's limit.
    ascii_digits = "".join(str(unicodedata.decimal(char)) for char in digits)
    return ascii_digits.lstrip("0") or "0"


def quantity(word: str, tables: Tables) -> bool:
    """Whether a lower-cased word is digits with a unit attached ("8am", "100mg"). Not with an
    ordinal suffix: this guard reads "2nd" as 2, and "4o" or "7a" may be a model's name."""
    attached = _WITH_SUFFIX.fullmatch(word)
    return attached is not None and attached[2] in tables.units


def spelled(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _joined(values: list[float]) -> float:
    """Counting words as one number: "twenty two" 22, "two hundred" 200, "three thousand five hundred" 3500."""
    total = current = 0.0
    for value in values:
        if value >= 1000:
            total += max(current, 1) * value
            current = 0
        elif value == 100:
            current = max(current, 1) * value
        else:
            current += value
    return total + current


@dataclass(frozen=True)
class Numbers:
    """A prompt's numbers: ``soft`` holds a 1 read only from a pronoun "one" (see above)."""

    found: frozenset[str]
    soft: frozenset[str]

    def against(self, other: Numbers) -> frozenset[str]:
        """The numbers that must match ``other``'s: a soft one only where ``other`` says it too."""
        return self.found - (self.soft - other.found)


def values(prompt: Prompt, tables: Tables) -> Numbers:
    """The numbers of ``prompt``, each with its unit where one follows or is attached ("100 g")."""
    found = set(chinese.numbers(prompt.raw, CHINESE.UNITS)) if prompt.han else set()
    pronoun_one = False  # a "one" that stands for a person or a thing
    words = prompt.words
    position = 0

    def unit_after(at: int) -> tuple[str, int]:
        """The unit at ``at``, if one stands there, and the position after it."""
        if at < len(words) and words[at] in tables.units:
            return " " + tables.units[words[at]], at + 1
        return "", at

    while position < len(words):
        word = words[position]
        if prompt.han and (any(ch.isdigit() for ch in word) or chinese.has_han(word)):
            position += 1  # Chinese text's numerals and digits are read by ``chinese.numbers``
            continue
        if word.isdigit() or (any(ch.isdigit() for ch in word) and not any(ch.isalpha() for ch in word)):
            unit, position = unit_after(position + 1)
            found.add(number(word) + unit)
            continue
        attached = _WITH_SUFFIX.fullmatch(word)
        if attached:
            digits, suffix = attached.groups()
            if suffix not in tables.units and suffix not in tables.ordinal_suffixes:
                suffix = suffix.split(".", 1)[0]  # "8am.What": a sentence typed on without a space
            if suffix in tables.ordinal_suffixes:
                found.add(number(digits))
            else:
                found.add(f"{number(digits)} {tables.units.get(suffix, suffix)}")
            position += 1
            continue
        if word in tables.numbers:
            start, run = position, []
            while position < len(words) and words[position] in tables.numbers:
                run.append(tables.numbers[words[position]])
                position += 1
            unit, position = unit_after(position)
            if run == [1] and not unit and _in_pronoun_phrase(words, start, tables):
                pronoun_one = True
            else:
                found.add(spelled(_joined(run)) + unit)
            continue
        if word in tables.number_like or word in tables.ordinals:
            found.add(spelled(tables.number_like.get(word) or tables.ordinals[word]))
        position += 1
    soft = {"1"} if pronoun_one and "1" not in found else set()
    return Numbers(frozenset(found | soft), frozenset(soft))


def _in_pronoun_phrase(words: list[str], at: int, tables: Tables) -> bool:
    """Whether the "one" at ``at`` ends the prompt or stands in one of the language's phrases where
    it is a pronoun (at any of the phrase's words for one: "one by one")."""
    if at == len(words) - 1 and tables.one_as_pronoun:
        return True
    return any(
        at >= place and tuple(words[at - place : at - place + len(phrase)]) == phrase
        for phrase in tables.one_as_pronoun
        for place, word in enumerate(phrase)
        if word == words[at]
    )


def numbers(query: Prompt, cached: Prompt) -> GuardResult:
    tables = tables_for(query, cached)
    left, right = query.read(values, tables), cached.read(values, tables)
    if left.against(right) == right.against(left):
        return GuardResult("numbers", True)
    return GuardResult("numbers", False, f"{sorted(left.found)} vs {sorted(right.found)}")
