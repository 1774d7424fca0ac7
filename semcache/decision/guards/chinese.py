"""Reading Chinese text for the guards: numerals, and who does what to whom.

Chinese has no spaces between words, so the English guards see a whole sentence as one token and
miss what differs inside it. Two cheap readers cover the hard negatives found in the labelled
Chinese question pairs (docs/hit-quality.md):

- ``numbers``: Arabic and Chinese numerals as values ("十一月" 11, "二十日" 20, "三百五十" 350,
  "九点五" 9.5), so "十一月29日" and "十月29日" differ;
- ``swapped_roles``: two sides that trade places around a verb of giving or moving
  ("男生送女生巧克力" vs "女生送男生巧克力", "银行卡的钱转入支付宝" vs "支付宝里的钱转入银行卡").
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping

from ...language import is_han

_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9}
_UNITS = {"十": 10, "百": 100, "千": 1000}
_SECTIONS = {"万": 10_000, "亿": 100_000_000}
_NUMERAL = "0-9零〇一二两三四五六七八九十百千万亿"
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3})")
# Runs of numerals longer than this are no numbers one says, and their value would take time
# quadratic in their length to work out.
_LONGEST_READ_NUMERAL = 32
_NUMBER = re.compile(f"[{_NUMERAL}]+(?:[.点][0-9零〇一二两三四五六七八九]+)?")
# Words whose numerals are not numbers: names ("百度", "三星"), "by all means" (千万), "in case"
# (万一), "very" (十分). A lone "一" is mostly "a" or part of a word ("一下", "一起"), never read.
_NOT_NUMBERS = re.compile(
    "百度|百科|百货|百合|百事|三星|一加|万达|千万|万一|十分|万物|万能|万岁|一一|三心二意|一心一意|九牛一毛|七上八下"
)


def has_han(text: str) -> bool:
    return not text.isascii() and any(is_han(char) for char in text)


def numbers(text: str, units: Mapping[str, str] | None = None) -> list[str]:
    """The numbers in ``text``, Arabic or Chinese, as plain decimals ("11", "9.5"); with ``units``
    (words to symbols), each with the unit that follows it ("100毫克" is "100 mg")."""
    found = []
    text = _THOUSANDS.sub("", _NOT_NUMBERS.sub(" ", text))
    ordered = sorted(units or {}, key=len, reverse=True)  # "毫克" before "克"
    for match in _NUMBER.finditer(text):
        run = match.group()
        ordinal = match.start() > 0 and text[match.start() - 1] == "第"  # "第一" is first
        if (run in ("一", "两") and not ordinal) or not any(c.isdigit() or c in _DIGITS or c in _UNITS for c in run):
            continue  # "一个", "两个" read as "a", "a couple"; lone 万 or 亿 are no number
        after = text[match.end() :].lstrip()
        unit = next((word for word in ordered if after.startswith(word)), None)
        found.append(_value(run) + (f" {units[unit]}" if units and unit else ""))
    return found


def _value(run: str) -> str:
    whole, _, fraction = run.replace("点", ".").partition(".")
    if len(whole) > _LONGEST_READ_NUMERAL:
        return run  # no number is written this long: kept as written, for the two sides to match exactly
    value = str(_integer(whole))
    if fraction:
        value += "." + "".join(str(_DIGITS.get(c, c)) for c in fraction)
    return value


def _integer(run: str) -> int:
    """A run of numerals as an integer: "三百五十" 350, "十一" 11, "二零一五" 2015, "3万" 30000."""
    total = section = number = 0
    unit = 1  # the unit just before the trailing digit: "一千五" is 1500, "一千零五" 1005
    for char in run:
        if char.isdigit() or char in _DIGITS:
            number = number * 10 + (int(char) if char.isdigit() else _DIGITS[char])
            unit = 1 if char in "零〇0" else unit
        elif char in _UNITS:
            section += (number or 1) * _UNITS[char]  # "十一": a bare 十 is ten
            number, unit = 0, _UNITS[char]
        elif char in _SECTIONS:
            total += ((section + number) or 1) * _SECTIONS[char]
            section = number = 0
            unit = _SECTIONS[char]
    if number < 10 and unit >= 100:  # spoken short form: the digit counts in the next unit down
        number *= unit // 10
    return total + section + number


# Verbs and prepositions whose two sides are different roles: the giver and the receiver, where
# money goes from and to. Symmetric ones (和, 跟, 与) and the copula 是 ("天珠是什么" = "什么是天珠")
# are left out. Longer markers first, so "转入" is read before "转".
_MARKERS = (
    "送给", "转入", "转到", "转给", "转出", "打给", "发给", "借给", "还给", "嫁给", "喜欢", "告诉", "吸引",
    "送", "给", "转", "到", "从", "向", "对", "把", "被", "比", "爱", "嫁", "娶", "借", "欠", "叫", "追", "帮",
)  # fmt: skip
# Characters of question and function words: a bigram with one of them is no role ("什么", "可以").
_FUNCTION = frozenset("的了吗呢吧啊么什怎哪谁几是在有和与及也都就很会能可以要想该应请如何样这那个些不没还")
_ROLE_CHARS = frozenset("我你您他她男女")
_MAX_CHARS = 200  # longer texts are not prompts this reading was measured on


def swapped_roles(first: str, second: str) -> tuple[str, str, str] | None:
    """Two parts that trade sides of the same marker, as (part, other part, marker), or None.

    A part counts as moved when it stands before the marker on one side and after it on the other,
    and nowhere else; both sides must move. "给我推荐一部电影" and "推荐一部电影给我" pass: nothing
    stands before 给 in the first.
    """
    if len(first) > _MAX_CHARS or len(second) > _MAX_CHARS or not (has_han(first) and has_han(second)):
        return None
    for marker in _MARKERS:
        if first.count(marker) != 1 or second.count(marker) != 1:
            continue
        before_a, after_a = (_units(part) for part in first.split(marker))
        before_b, after_b = (_units(part) for part in second.split(marker))
        forward = sorted((before_a & after_b) - before_b - after_a, key=lambda u: (-len(u), u))
        backward = sorted((after_a & before_b) - after_b - before_a, key=lambda u: (-len(u), u))
        if forward and backward:
            return forward[0], backward[0], marker
    return None


def _units(text: str) -> set[str]:
    """Han bigrams without function characters, and the single characters of persons."""
    units = {c for c in text if c in _ROLE_CHARS}
    for left, right in itertools.pairwise(text):
        if is_han(left) and is_han(right) and left not in _FUNCTION and right not in _FUNCTION:
            units.add(left + right)
    return units
