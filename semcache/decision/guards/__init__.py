"""Guards: cheap checks that veto a semantic candidate whose meaning differs in a way embeddings
miss. Each guard compares the incoming prompt with the cached prompt and is on or off in config;
one module per guard, and the words each reads per language in ``languages`` (English, German,
French, Spanish, Italian, Portuguese, Dutch and Chinese), which a contributor extends without
touching the logic.

- ``numbers``: the numbers differ, in digits or words, with their units ("2015" vs "2016",
  "100g" vs "200g", "3 months" vs "3 years", "zwei" vs "drei", "2nd" vs "3rd"; "three" and "3" match).
- ``negation``: one side is negated and the other is not ("can" vs "can't", "nicht", "ne ... pas", "不").
- ``antonyms``: one side says a word where the other says its opposite ("enable" vs "disable").
- ``dates``: the months or weekdays named differ ("in May" vs "in June", "mars" vs "avril").
- ``direction``: two words trade the sides of "from" and "to" ("Celsius to Fahrenheit" vs
  "Fahrenheit to Celsius", "von Euro nach Dollar" vs "von Dollar nach Euro").
- ``entities``: a name, acronym or model code in one side is absent from the other.
- ``order``: the same two names or words in swapped roles ("Kobe ... LeBron" vs "LeBron ... Kobe").
- ``roles``: Chinese text whose two sides trade places around a verb of giving or moving.
- ``literals``: code, command-line flags, identifiers and math must match exactly.
- ``template``: prompts of several lines that share most of them and differ after them.

``entities`` and ``order`` are off by default: they flag many paraphrases too (casing is erratic,
rewordings reorder words). Where verification is on they still doubt: a candidate they flag is put
to the verifier even above the certified line, since a swapped pair or another name scores as high
as a paraphrase ("Can a dog eat cat food?" and "Can a cat eat dog food?" sit at 0.99).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import lru_cache

from ...settings import GUARD_NAMES, validate_guards
from .dates import dates
from .direction import direction
from .entities import entities, named
from .literals import literals
from .negation import negation
from .numbers import numbers
from .opposites import antonyms
from .order import order, roles
from .reading import GuardResult, Prompt
from .template import template

__all__ = ["DOUBTING", "GUARD_NAMES", "GuardResult", "check", "doubting", "named_entities", "validate"]

validate = validate_guards
# Guards that, where they are not enabled to veto, send a candidate they flag to verification.
DOUBTING = ("entities", "order")

_GUARDS: dict[str, Callable[[Prompt, Prompt], GuardResult]] = {
    "numbers": numbers,
    "negation": negation,
    "antonyms": antonyms,
    "dates": dates,
    "direction": direction,
    "entities": entities,
    "order": order,
    "roles": roles,
    "literals": literals,
    "template": template,
}
assert tuple(_GUARDS) == GUARD_NAMES, "every guard an operator may name, and no other"


def named_entities(text: str) -> list[str]:
    """Names, acronyms and codes in ``text``, lower-cased."""
    return list(named(Prompt.of(text)))


def doubting(enabled: Iterable[str]) -> tuple[str, ...]:
    """The doubting guards that ``enabled`` leaves to doubt: those it does not run as vetoes."""
    vetoes = set(enabled)
    return tuple(name for name in DOUBTING if name not in vetoes)


def check(query: str, cached: str, enabled: Iterable[str]) -> list[GuardResult]:
    """Run the enabled guards; a candidate may be served only if every result passed."""
    left, right = _kept_or_read(query), _kept_or_read(cached)
    return [_GUARDS[name](left, right) for name in enabled]


# A stored prompt is a candidate again and again, and a query is checked against each of its
# candidates (then, after a miss, stored): reading them is a share of every check. Short ones are
# kept, a bounded number of them, with what each guard read in them (``Prompt.read``; a reading
# never changes).
_KEPT_READINGS = 1024
_KEPT_READING_CHARS = 1_000


def _kept_or_read(text: str) -> Prompt:
    return _kept_reading(text) if len(text) <= _KEPT_READING_CHARS else Prompt.of(text)


@lru_cache(maxsize=_KEPT_READINGS)
def _kept_reading(text: str) -> Prompt:
    return Prompt.of(text)
