"""The ``entities`` guard: a name, acronym or model code in one side is absent from the other
("Idaho" vs "Montana", "UK" vs "US", "Rockrider 340" vs "Rockrider 300")."""

from __future__ import annotations

from .languages import en
from .numbers import quantity
from .reading import STOPWORDS, GuardResult, Prompt, tables_for

_NUMBER_WORDS = frozenset(en.NUMBERS) | frozenset(en.NUMBER_LIKE) | frozenset(en.ORDINALS)
_SHORT_NAME = 3  # letters: a name this short is matched only as it is


def named(text: Prompt) -> tuple[str, ...]:
    """Names, acronyms and codes: capitalised words past the first, all-caps words, letter-digit mixes.
    A number's unit, attached or after it ("8am", "100mg", "8 PM"), is the ``numbers`` guard's."""
    found = []
    tables = tables_for(text, text)
    for position, word in enumerate(text.cased):
        lower = word.lower()
        if lower in STOPWORDS or lower in _NUMBER_WORDS:
            continue
        if position > 0 and text.cased[position - 1].isdigit() and lower in tables.units:
            continue
        mixed = any(c.isdigit() for c in word) and any(c.isalpha() for c in word) and not quantity(lower, tables)
        acronym = len(word) >= 2 and word.isupper()
        capitalised = position > 0 and word[:1].isupper() and not text.after_mark[position]
        if mixed or acronym or capitalised:
            found.append(lower)
    return tuple(found)


def vocabulary(text: Prompt) -> frozenset[str]:
    """The prompt's words, lower-cased."""
    return frozenset(text.tokens)


def _forms(name: str) -> frozenset[str]:
    """A name and its plural or singular ("Toyota", "Toyotas", "Rockies", "Rocky"): not the shared
    stem, which would make "Dane" and "Dan" one name. A short one only as it is: "CSS" is not "CS"."""
    if len(name) <= _SHORT_NAME:
        return frozenset((name,))
    forms = {name, name + "s", name + "es", name.removesuffix("s"), name.removesuffix("es")}
    if name.endswith("ies"):
        forms.add(name[:-3] + "y")
    elif name.endswith("y"):
        forms.add(name[:-1] + "ies")
    return frozenset(forms)


def entities(query: Prompt, cached: Prompt) -> GuardResult:
    for mine, other in ((query, cached), (cached, query)):
        words = other.read(vocabulary)
        missing = [e for e in mine.read(named) if not _forms(e) & words]
        if missing:
            return GuardResult("entities", False, f"{missing[0]!r} only on one side")
    return GuardResult("entities", True)
