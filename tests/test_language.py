"""Script detection, which picks a prompt's model, threshold and index partition."""

from __future__ import annotations

import pytest

from semcache.language import detect_script


@pytest.mark.parametrize(
    ("text", "script"),
    [
        ("How do I learn Python quickly?", "latin"),
        ("café au lait, s'il vous plaît", "latin"),
        ("如何通过语音助手接通电话？", "han"),
        ("你是happy", "han"),  # a hanzi weighs about a word
        ("iPhone 14怎么截屏", "han"),
        ("What does 你好 mean?", "latin"),
        ("東京の天気は", "other"),  # a third kana makes it Japanese
        ("テーマ翻译成中文是什么意思？", "han"),  # a quoted katakana word leaves it Chinese
        ("Привет, как дела?", "other"),
        ("안녕하세요", "other"),
        ("ｆｕｌｌ ｗｉｄｔｈ", "latin"),
        ("2024?", "latin"),  # no letters: as before
        ("", "latin"),
    ],
)
def test_detect_script(text: str, script: str) -> None:
    assert detect_script(text) == script
