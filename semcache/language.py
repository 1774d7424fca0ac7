"""Cheap script detection: which writing system a prompt is mostly in.

The script picks the embedding model and the threshold (similarity scales differ between models),
and non-Latin scripts get their own index partitions. Counting characters is enough for that and
costs microseconds; a language identifier would cost more and is not needed to pick a model.
"""

from __future__ import annotations

import unicodedata
from typing import Literal

Script = Literal["latin", "han", "other"]
SCRIPTS: tuple[Script, ...] = ("latin", "han", "other")


def is_han(char: str) -> bool:
    """A CJK ideograph (Chinese hanzi, Japanese kanji), in the main blocks and their extensions."""
    code = ord(char)
    return (
        0x4E00 <= code <= 0x9FFF  # CJK Unified Ideographs
        or 0x3400 <= code <= 0x4DBF  # Extension A
        or 0x20000 <= code <= 0x3134F  # Extensions B-G
        or 0xF900 <= code <= 0xFAFF  # Compatibility Ideographs
        or code == 0x3007  # 〇, the ideographic zero
    )


def _is_kana(char: str) -> bool:
    return 0x3040 <= ord(char) <= 0x30FF or 0x31F0 <= ord(char) <= 0x31FF


def detect_script(text: str) -> Script:
    """The script the text mostly consists of: "latin", "han" or "other".

    Han characters are counted one by one and other scripts by words, because a hanzi carries
    about as much as a Latin word: "你是happy" is Chinese, "What does 你好 mean?" is English.
    Han text with a third or more kana is Japanese ("other"); a quoted katakana word leaves Chinese
    Chinese. Ties go to the non-Latin script, whose multilingual model also reads the Latin part;
    text without letters stays "latin", as it always was.
    """
    if text.isascii():  # most prompts, at C speed: ASCII holds no Han, kana or other letters
        return "latin"
    latin_words = han = other_words = kana = 0
    previous = ""  # the script of the previous letter, to count words as runs
    for char in text:
        if is_han(char):
            han, previous = han + 1, "han"
        elif _is_kana(char):
            kana, previous = kana + 1, "kana"
        elif char.isalpha():
            script = "latin" if _is_latin_letter(char) else "other"
            if previous != script:
                latin_words += script == "latin"
                other_words += script == "other"
            previous = script
        else:
            previous = ""
    if kana and 3 * kana >= han + kana:  # Japanese: its kanji and kana count as one script
        other_words, han = other_words + han + kana, 0
    if han == other_words == 0:
        return "latin"
    if han >= max(latin_words, other_words):
        return "han"
    return "other" if other_words >= latin_words else "latin"


def _is_latin_letter(char: str) -> bool:
    return char.isascii() or "LATIN" in unicodedata.name(char, "")  # also full-width Ａ-Ｚ


def validate_thresholds(thresholds: object) -> dict[str, float]:
    """Per-script thresholds, checked: known scripts, cosines in 0-1."""
    if not isinstance(thresholds, dict):
        raise ValueError(f"thresholds must map scripts ({', '.join(SCRIPTS)}) to cosines")
    unknown = sorted(set(thresholds) - set(SCRIPTS))
    if unknown:
        raise ValueError(f"unknown scripts {unknown} in thresholds; choose from {list(SCRIPTS)}")
    for script, value in thresholds.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
            raise ValueError(f"thresholds.{script} must be between 0 and 1")
    return {script: float(value) for script, value in thresholds.items()}
