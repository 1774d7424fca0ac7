"""Chinese for the guards: numerals as numbers, and swapped roles or direction."""

from __future__ import annotations

import pytest

from semcache.decision import guards
from semcache.decision.guards.chinese import numbers, swapped_roles


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("十一月二十日", ["11", "20"]),
        ("十一月29日是星期几", ["11", "29"]),
        ("三百五十块", ["350"]),
        ("一百零五", ["105"]),
        ("一千五", ["1500"]),  # spoken short form
        ("三万五千", ["35000"]),
        ("3万", ["30000"]),
        ("二零一五年", ["2015"]),
        ("九点五除以零点三", ["9.5", "0.3"]),
        ("1,000元", ["1000"]),
        ("第二次", ["2"]),
        ("看一下", []),  # a lone 一 is "a" or part of a word
        ("两个人", []),
        ("百度一下", []),
        ("千万不要", []),  # "by all means"
    ],
)
def test_numbers(text: str, expected: list[str]) -> None:
    assert numbers(text) == expected


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("男生送女生巧克力是什么意思？", "女生送男生巧克力什么意思"),
        ("如何把银行卡的钱转入支付宝", "如何把支付宝里的钱转入银行卡里"),
        ("今天你多大了能否告诉我", "今天我多大了能否告诉你"),
        ("帮我给妈妈打电话", "帮妈妈给我打电话"),
    ],
)
def test_swapped_roles_are_found(first: str, second: str) -> None:
    assert swapped_roles(first, second) is not None
    assert swapped_roles(second, first) is not None


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("最近深圳的天气怎样", "深圳最近的天气怎样？"),  # reordered, no verb between: a paraphrase
        ("天珠是什么", "什么是天珠"),  # the copula is symmetric
        ("给我推荐一部电影", "推荐一部电影给我"),
        ("男生送女生巧克力", "男生送女生巧克力是什么意思"),
        ("Are cats afraid of tigers?", "Are tigers afraid of cats?"),  # English is the order guard's
    ],
)
def test_paraphrases_keep_their_roles(first: str, second: str) -> None:
    assert swapped_roles(first, second) is None


def test_the_guards_read_chinese() -> None:
    dates = guards.check("十一月二十日是星期几", "十月二十日是星期几", ["numbers"])[0]
    assert not dates.passed and dates.detail == "['11', '20'] vs ['10', '20']"
    roles = guards.check("男生送女生巧克力是什么意思？", "女生送男生巧克力什么意思", ["roles"])[0]
    assert not roles.passed and "送" in roles.detail
    same = guards.check("如何做红烧肉", "红烧肉怎么做", guards.GUARD_NAMES)
    assert all(result.passed for result in same)


def test_english_numbers_are_read_as_before() -> None:
    assert guards.check("After 3 months?", "After three months?", ["numbers", "roles"])[0].passed
    assert not guards.check("In 2015?", "In 2016?", ["numbers"])[0].passed
