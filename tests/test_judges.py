"""Answer-equivalence judges: the labels the error budgets learn from. Real answers to one
question are worded differently, and answers to neighbouring questions share many words."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from semcache.judges import EmbeddingJudge, JudgeCase, TextJudge, UpstreamJudge, normalised
from semcache.protocols import Embedder


def case(fresh: str, cached: str) -> JudgeCase:
    return JudgeCase(question="How do I reset my password?", fresh_answer=fresh,
                     cached_question="I forgot my password", cached_answer=cached,
                     embedding_model="all-MiniLM-L6-v2", model="gpt-4o-mini")  # fmt: skip


def test_normalised_text_leaves_out_case_punctuation_and_spacing() -> None:
    assert normalised("Open  Settings, then  *Reset*!") == normalised("open settings then reset")


async def test_the_text_judge_says_same_only_for_the_same_words_and_abstains_otherwise() -> None:
    judge = TextJudge()
    assert await judge.same_answer(case("Open Settings, then Reset.", "open settings then reset")) is True
    assert await judge.same_answer(case("Open Settings.", "Call support.")) is None


@pytest.fixture(scope="module")
def embed(minilm: Embedder) -> Any:
    async def embed(text: str, model: str) -> np.ndarray:
        return minilm.embed([text])[0]

    return embed


@pytest.mark.slow
async def test_the_embedding_judge_tells_a_reworded_answer_from_a_neighbours(embed: Any) -> None:
    judge = EmbeddingJudge(embed, min_similarity=0.85)
    reworded = case(
        "To reset your password, open Settings, choose Security and press 'Reset password'; a link arrives by email.",
        "Open Settings, pick Security, then click 'Reset password'. We email you a reset link.",
    )
    neighbour = case(
        "To reset your password, open Settings, choose Security and press 'Reset password'; a link arrives by email.",
        "To delete your account, open Settings, choose Privacy and press 'Delete account'; it is gone in 30 days.",
    )
    assert await judge.same_answer(reworded) is True
    assert await judge.same_answer(neighbour) is False


class FakeModel:
    """The upstream a judge asks: answers each call with the next reply, or fails."""

    def __init__(self, *replies: str | Exception) -> None:
        self.replies = list(replies)
        self.bodies: list[dict[str, Any]] = []

    async def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        self.bodies.append(body)
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return {"choices": [{"message": {"role": "assistant", "content": reply}}]}


async def test_the_upstream_judge_reads_yes_and_no_and_asks_with_both_questions_and_answers() -> None:
    model = FakeModel("YES", "No.")
    judge = UpstreamJudge(model, fallback=TextJudge())
    assert await judge.same_answer(case("Open Settings.", "Use the app.")) is True
    assert await judge.same_answer(case("Open Settings.", "Use the app.")) is False
    prompt = model.bodies[0]["messages"][0]["content"]
    assert "I forgot my password" in prompt and "How do I reset my password?" in prompt
    assert model.bodies[0]["model"] == "gpt-4o-mini" and model.bodies[0]["temperature"] == 0
    assert judge.calls == 2


async def test_the_upstream_judge_falls_back_when_the_model_fails_or_rambles() -> None:
    judge = UpstreamJudge(FakeModel(RuntimeError("503"), "It depends."), fallback=TextJudge())
    assert await judge.same_answer(case("Open settings", "open Settings!")) is True  # the fallback's verdict
    assert await judge.same_answer(case("Open settings", "Call us")) is None
