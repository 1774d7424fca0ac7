"""The lookup pipeline on its own, with small fakes behind its seams: a bag-of-words embedder and
an upstream that answers from a dictionary and can fail. The store is the real embedded one, in a
temporary folder. The service tests drive the same pipeline over HTTP with the real model."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from semcache.decision.quality import NamespacePolicies, QualityPolicy
from semcache.embedders import BatchingEmbedder
from semcache.errors import UpstreamUnavailable
from semcache.index import ScopedVectorIndex
from semcache.pipeline import Pipeline, RequestControls
from semcache.protocols import Relayed, RelayRequest
from semcache.stores import SQLiteStore
from semcache.tiers import TemplateTier
from semcache.tiers.template import LiveTemplates
from semcache.tokens import TokenCounter
from semcache.wire import ChatCompletionRequest, chat_chunk, chat_completion, completion_id
from testkit.fakes import HashingEmbedder

MODEL = "test-model"


class DictionaryUpstream:
    """Answers each prompt from ``answers``; while ``failing``, every call fails; ``cut_after``
    chunks into a stream, the stream breaks."""

    def __init__(self, answers: dict[str, str]) -> None:
        self.answers = answers
        self.asked: list[str] = []
        self.failing = False
        self.cut_after: int | None = None

    def _answer(self, body: dict[str, Any]) -> str:
        prompt = body["messages"][-1]["content"]
        self.asked.append(prompt)
        if self.failing:
            raise UpstreamUnavailable("the upstream is down")
        return self.answers[prompt]

    async def complete(self, body: dict[str, Any], headers: dict[str, str], api: str = "chat") -> dict[str, Any]:
        answer = self._answer(body)
        return chat_completion(response_id=completion_id(), model=body["model"], content=answer, usage={})

    async def stream(
        self, body: dict[str, Any], headers: dict[str, str], api: str = "chat"
    ) -> AsyncIterator[dict[str, Any]]:
        answer = self._answer(body)
        response_id = completion_id()
        for number, word in enumerate(answer.split(" ")):
            if self.cut_after is not None and number >= self.cut_after:
                raise UpstreamUnavailable("the stream was cut")
            piece = word if number == 0 else " " + word
            yield chat_chunk(response_id=response_id, model=MODEL, created=0, delta={"content": piece})
        yield chat_chunk(response_id=response_id, model=MODEL, created=0, delta={}, finish_reason="stop")

    async def embed(self, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        raise NotImplementedError

    async def list_models(self, headers: dict[str, str]) -> dict[str, Any]:
        return {"object": "list", "data": []}

    async def relay(self, request: RelayRequest, headers: dict[str, str]) -> Relayed:
        raise NotImplementedError

    async def close(self) -> None:
        pass


@pytest.fixture
def upstream() -> DictionaryUpstream:
    return DictionaryUpstream(
        {
            "How do I bake sourdough bread at home?": "Feed the starter, mix, fold, proof overnight, bake hot.",
            "Bake sourdough bread at home: how do I?": "Proof it overnight and bake it in a hot oven.",
            "What is the capital of France?": "Paris.",
        }
    )


@pytest.fixture
def pipeline(tmp_path: Path, upstream: DictionaryUpstream) -> Iterator[Pipeline]:
    store = SQLiteStore(tmp_path / "entries.sqlite3")
    embedder = HashingEmbedder()
    built = Pipeline(
        store=store, index=ScopedVectorIndex(embedder.dimension), embedder=BatchingEmbedder(embedder),
        upstream=upstream, templates=LiveTemplates(TemplateTier([], 1.0)),
        tokens=TokenCounter(tmp_path / "tiktoken"),
        policies=NamespacePolicies(QualityPolicy(threshold=0.9, guards=("numbers",), learn=False)),
        default_ttl_s=3600, max_temperature=1.0,
    )  # fmt: skip
    yield built


def chat(prompt: str, **fields: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate(
        {"model": MODEL, "messages": [{"role": "user", "content": prompt}], **fields}
    )


async def ask(pipeline: Pipeline, prompt: str, **fields: Any) -> tuple[str | None, str]:
    """(the tier that answered, or None for the upstream; the answer)."""
    lookup = await pipeline.lookup(chat(prompt, **fields), "default", RequestControls())
    if lookup.hit is not None:
        response = await pipeline.hit_response(lookup)
        return lookup.hit.tier, response["choices"][0]["message"]["content"]
    response = await pipeline.forward(lookup, {})
    return None, response["choices"][0]["message"]["content"]


async def ask_streamed(pipeline: Pipeline, prompt: str) -> str:
    lookup = await pipeline.lookup(chat(prompt, stream=True), "default", RequestControls())
    assert lookup.hit is None
    pieces = [chunk["choices"][0]["delta"].get("content") or "" async for chunk in pipeline.forward_stream(lookup, {})]
    return "".join(pieces)


@pytest.fixture(autouse=True)
async def opened(pipeline: Pipeline) -> AsyncIterator[None]:
    await pipeline.store.open()  # type: ignore[attr-defined]
    yield
    pipeline.semantic.close()
    await pipeline.embedder.close()
    await pipeline.store.close()  # type: ignore[attr-defined]


async def test_a_miss_is_asked_once_then_the_same_prompt_is_an_exact_hit(
    pipeline: Pipeline, upstream: DictionaryUpstream
) -> None:
    question = "How do I bake sourdough bread at home?"
    assert await ask(pipeline, question) == (None, upstream.answers[question])
    assert await ask(pipeline, question) == ("exact", upstream.answers[question])
    assert upstream.asked == [question]


async def test_a_rewording_is_a_semantic_hit_with_the_first_answer(
    pipeline: Pipeline, upstream: DictionaryUpstream
) -> None:
    first = "How do I bake sourdough bread at home?"
    await ask(pipeline, first)
    tier, answer = await ask(pipeline, "Bake sourdough bread at home: how do I?")
    assert (tier, answer) == ("semantic", upstream.answers[first])
    assert upstream.asked == [first]


async def test_another_question_is_not_served_a_neighbours_answer(
    pipeline: Pipeline, upstream: DictionaryUpstream
) -> None:
    await ask(pipeline, "How do I bake sourdough bread at home?")
    assert await ask(pipeline, "What is the capital of France?") == (None, "Paris.")


async def test_a_failed_answer_is_not_cached(pipeline: Pipeline, upstream: DictionaryUpstream) -> None:
    question = "What is the capital of France?"
    upstream.failing = True
    with pytest.raises(UpstreamUnavailable):
        await ask(pipeline, question)
    upstream.failing = False
    assert await ask(pipeline, question) == (None, "Paris.")  # asked again: nothing was stored
    assert upstream.asked == [question, question]


async def test_a_cut_stream_is_not_cached_and_a_clean_one_is(pipeline: Pipeline, upstream: DictionaryUpstream) -> None:
    question = "How do I bake sourdough bread at home?"
    upstream.cut_after = 3
    with pytest.raises(UpstreamUnavailable):
        await ask_streamed(pipeline, question)
    upstream.cut_after = None
    assert await ask_streamed(pipeline, question) == upstream.answers[question]
    assert await ask(pipeline, question) == ("exact", upstream.answers[question])
    assert upstream.asked == [question, question]


async def test_a_semantic_hit_reported_wrong_is_never_served_to_that_query_again(
    pipeline: Pipeline, upstream: DictionaryUpstream
) -> None:
    await ask(pipeline, "How do I bake sourdough bread at home?")
    rewording = "Bake sourdough bread at home: how do I?"
    lookup = await pipeline.lookup(chat(rewording), "default", RequestControls())
    assert lookup.hit is not None and lookup.hit.tier == "semantic"
    served = await pipeline.hit_response(lookup)
    await pipeline.feedback(served["id"], "default", correct=False)
    assert await ask(pipeline, rewording) == (None, upstream.answers[rewording])


class StoreWatchingJudge:
    """A judge that notes, each time it is shown an answer, which prompts the store holds."""

    def __init__(self, store: SQLiteStore) -> None:
        self.store = store
        self.stored_when_observed: list[list[str]] = []

    async def observe(self, namespace: str, model: str, vector: Any, answer: str) -> None:
        self.stored_when_observed.append([prompt for _, _, prompt in await self.store.prompts()])

    async def same_answer(self, case: Any) -> bool | None:
        return None

    def wants_reasked(self, namespace: str, model: str) -> bool:
        return False

    def knows_same_answers(self, namespace: str, model: str) -> bool:
        return False

    async def observe_reasked(self, namespace: str, model: str, first: str, second: str) -> None:
        pass


async def test_a_misses_answer_is_judged_only_after_it_is_stored(tmp_path: Path, upstream: DictionaryUpstream) -> None:
    # The judging embeds the answer: run beside the write, it slows down the write the client waits for.
    store = SQLiteStore(tmp_path / "learning.sqlite3")
    await store.open()
    embedder = HashingEmbedder()
    judge = StoreWatchingJudge(store)
    learning = Pipeline(
        store=store, index=ScopedVectorIndex(embedder.dimension), embedder=BatchingEmbedder(embedder),
        upstream=upstream, templates=LiveTemplates(TemplateTier([], 1.0)),
        tokens=TokenCounter(tmp_path / "tiktoken"),
        policies=NamespacePolicies(QualityPolicy(threshold=0.9, guards=("numbers",), learn=True)),
        default_ttl_s=3600, max_temperature=1.0, judge=judge,  # type: ignore[arg-type]
    )  # fmt: skip
    try:
        question = "What is the capital of France?"
        assert await ask(learning, question) == (None, "Paris.")
        await learning.labels_settled()
        assert judge.stored_when_observed == [[question]]
    finally:
        learning.semantic.close()
        await learning.embedder.close()
        await store.close()
