"""Unit tests for semcache.tokens.TokenCounter: offline loading and known token counts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import tiktoken
import tiktoken.load
import tiktoken.registry

from semcache.tokens import TokenCounter

JAPANESE = "お誕生日おめでとう"  # OpenAI's cookbook: 9 tokens in cl100k_base, 8 in o200k_base


def _go_offline(patch: pytest.MonkeyPatch, cache: Path) -> None:
    """No network, an empty tiktoken cache folder, and no encodings already loaded in this process."""
    patch.setenv("TIKTOKEN_CACHE_DIR", str(cache))

    def no_network(blobpath: str) -> bytes:
        raise AssertionError(f"tiktoken tried to download {blobpath}")

    patch.setattr(tiktoken.load, "read_file", no_network)
    patch.setattr(tiktoken.registry, "ENCODINGS", {})
    TokenCounter._encoding.cache_clear()


@pytest.fixture
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    _go_offline(monkeypatch, tmp_path / "tiktoken")
    yield tmp_path / "tiktoken"
    TokenCounter._encoding.cache_clear()


@pytest.fixture(scope="module")
def counter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TokenCounter]:
    """One counter for the counting tests (loading the encodings takes a moment), built offline."""
    cache = tmp_path_factory.mktemp("tiktoken")
    with pytest.MonkeyPatch.context() as patch:
        _go_offline(patch, cache)
        yield TokenCounter(cache)
    TokenCounter._encoding.cache_clear()


def test_loads_both_encodings_without_network(offline: Path) -> None:
    TokenCounter(offline)
    assert set(tiktoken.registry.ENCODINGS) == {"cl100k_base", "o200k_base"}
    assert len(list(offline.iterdir())) == 2  # one file per encoding, no leftovers


def test_an_operators_cache_folder_wins(tmp_path: Path, offline: Path) -> None:
    TokenCounter(tmp_path / "ignored")
    assert not (tmp_path / "ignored").exists()
    assert len(list(offline.iterdir())) == 2


def test_without_tiktoken_cache_dir_the_given_folder_is_used(
    tmp_path: Path, offline: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR")
    chosen = tmp_path / "data" / "tiktoken"
    counter = TokenCounter(chosen)
    assert len(list(chosen.iterdir())) == 2
    assert counter.count_text("hello world", "gpt-4o") == 2


def test_a_second_start_reuses_the_seeded_files(offline: Path) -> None:
    TokenCounter(offline)
    before = {p.name: p.stat().st_mtime_ns for p in offline.iterdir()}
    TokenCounter(offline)
    assert {p.name: p.stat().st_mtime_ns for p in offline.iterdir()} == before


@pytest.mark.parametrize("model", ["gpt-4", "gpt-4-0613", "gpt-3.5-turbo"])
def test_counts_for_cl100k_models(counter: TokenCounter, model: str) -> None:
    assert counter.count_text("hello world", model) == 2
    assert counter.count_text("tiktoken is great!", model) == 6
    assert counter.count_text(JAPANESE, model) == 9


@pytest.mark.parametrize("model", ["gpt-4o", "gpt-4o-mini"])
def test_counts_for_o200k_models(counter: TokenCounter, model: str) -> None:
    assert counter.count_text("hello world", model) == 2
    assert counter.count_text(JAPANESE, model) == 8


def test_unknown_models_count_like_the_newest_openai_models(counter: TokenCounter) -> None:
    assert counter.count_text(JAPANESE, "my-local-llama") == 8


def test_models_with_an_encoding_not_shipped_fall_back_to_cl100k(counter: TokenCounter) -> None:
    assert counter.count_text(JAPANESE, "text-davinci-003") == 9  # p50k_base is not bundled


def test_special_tokens_in_text_are_counted_as_text(counter: TokenCounter) -> None:
    assert counter.count_text("<|endoftext|>", "gpt-4") > 1


def test_usage_of_a_chat(counter: TokenCounter) -> None:
    messages = [{"role": "user", "content": "hello world"}]
    usage = counter.usage(messages, "tiktoken is great!", "gpt-4")
    # 3 per message + "user" (1) + "hello world" (2) + 3 to prime the reply
    assert usage == {"prompt_tokens": 9, "completion_tokens": 6, "total_tokens": 15}
