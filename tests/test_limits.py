"""Limits toward clients: the token bucket and the context-length guard."""

from __future__ import annotations

from pathlib import Path

import pytest

from semcache.errors import InvalidRequest, RateLimited
from semcache.limits import RateLimiter, fit_context
from semcache.tokens import TokenCounter
from semcache.wire import ChatCompletionRequest


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_bucket_allows_a_burst_then_refills_at_the_rate() -> None:
    clock = Clock()
    limiter = RateLimiter(rate_per_s=2, burst=3, clock=clock)
    for _ in range(3):
        limiter.admit("alice")
    with pytest.raises(RateLimited) as caught:
        limiter.admit("alice")
    assert caught.value.status_code == 429 and caught.value.headers["Retry-After"] == "1"
    limiter.admit("bob")  # every client has its own bucket
    clock.now = 0.5
    limiter.admit("alice")  # one token back after half a second at 2/s


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> TokenCounter:
    return TokenCounter(tmp_path_factory.mktemp("tiktoken"))


def request(*messages: dict) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"model": "gpt-4o-mini", "messages": list(messages)})


def test_a_request_within_the_limit_is_untouched(tokens: TokenCounter) -> None:
    short = request({"role": "user", "content": "hello"})
    assert fit_context(short, tokens, 100, trim_oldest_turns=False) is short
    assert fit_context(short, tokens, None, trim_oldest_turns=False) is short


def test_over_the_limit_is_a_400_unless_trimming(tokens: TokenCounter) -> None:
    long = request(
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "word " * 200},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
                                                             "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "result " * 50},
        {"role": "user", "content": "And now?"},
    )  # fmt: skip
    with pytest.raises(InvalidRequest) as caught:
        fit_context(long, tokens, 60, trim_oldest_turns=False)
    assert caught.value.code == "context_length_exceeded"
    trimmed = fit_context(long, tokens, 60, trim_oldest_turns=True)
    assert [m.role for m in trimmed.messages] == ["system", "user"]  # the tool result went with its call


def test_trimming_cannot_drop_the_prompt_itself(tokens: TokenCounter) -> None:
    huge = request({"role": "user", "content": "word " * 500})
    with pytest.raises(InvalidRequest):
        fit_context(huge, tokens, 50, trim_oldest_turns=True)


def test_token_counter_cache_is_seeded_offline(tmp_path: Path, tokens: TokenCounter) -> None:
    assert tokens.count_text("hello world", "gpt-4o-mini") == 2
