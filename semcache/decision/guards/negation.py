"""The ``negation`` guard: one side is negated and the other is not ("can" vs "can't").

Each language's negation words come from its table (``languages``). English, German and Dutch
count them (two negations cancel); in French, Spanish, Italian and Portuguese several make one
("no ... nada", "ne ... pas"), so a prompt is negated when it holds any. Chinese negators
(不, 没, 别, 未, 无, 非 ...) are read as characters, past the words that hold one and negate nothing
("非常", "未来", "是否") and past an A-not-A question ("是不是", "有没有"), which asks.
"""

from __future__ import annotations

import re

from .languages import CHINESE
from .reading import GuardResult, Prompt, tables_for

_NOT_NEGATIONS = re.compile("|".join(sorted(CHINESE.NOT_NEGATIONS.split(), key=len, reverse=True)))
# "是不是", "有没有", "可不可以": a verb, a negator, the verb again.
_A_NOT_A = re.compile(rf"(\w)[{CHINESE.NEGATORS}]\1")
# A negator that ends a clause asks a question: "可以不", "在不", "有没有" cut short to "有没".
_ASKING = re.compile(r"[不没]有?(?=[吗呢啊吧]?(?:[？?！!。，,；;\s]|$))")


def chinese_negators(text: str) -> int:
    text = _ASKING.sub(" ", _A_NOT_A.sub(" ", _NOT_NEGATIONS.sub(" ", text)))
    return sum(text.count(negator) for negator in CHINESE.NEGATORS)


def negated(prompt: Prompt, words: frozenset[str], concord: bool) -> bool:
    count = sum(map(words.__contains__, prompt.words))
    if prompt.han:
        return bool(count or chinese_negators(prompt.raw))
    return bool(count) if concord else count % 2 == 1


def negation(query: Prompt, cached: Prompt) -> GuardResult:
    tables = tables_for(query, cached)
    left = query.read(negated, tables.negations, tables.negative_concord)
    right = cached.read(negated, tables.negations, tables.negative_concord)
    return GuardResult("negation", left == right, "" if left == right else "negated on one side only")
