"""Unit tests for semcache.embedders.BatchingEmbedder, in front of the hashing fake."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence

import numpy as np
import pytest

from semcache.embedders import BatchingEmbedder
from semcache.testing.fakes import HashingEmbedder

TEXTS = [f"question number {i} about topic {i % 7}" for i in range(50)]


class BrokenModel(HashingEmbedder):
    def embed(self, texts: Sequence[str]) -> np.ndarray:
        super().embed(texts)  # counted, then fails
        raise RuntimeError("the model fell over")


class SlowModel(HashingEmbedder):
    def embed(self, texts: Sequence[str]) -> np.ndarray:
        time.sleep(0.05)
        return super().embed(texts)


def direct(texts: Sequence[str]) -> np.ndarray:
    return HashingEmbedder().embed(texts)


@pytest.fixture
def model() -> HashingEmbedder:
    return HashingEmbedder()


@pytest.fixture
async def batcher(model: HashingEmbedder) -> AsyncIterator[BatchingEmbedder]:
    embedder = BatchingEmbedder(model)
    yield embedder
    await embedder.close()


async def test_concurrent_calls_share_few_model_calls(batcher: BatchingEmbedder, model: HashingEmbedder) -> None:
    await asyncio.gather(*(batcher.embed(text) for text in TEXTS))
    assert sum(model.calls) == 50
    assert len(model.calls) <= 5


async def test_each_caller_gets_the_vector_for_its_own_text(batcher: BatchingEmbedder) -> None:
    vectors = await asyncio.gather(*(batcher.embed(text) for text in TEXTS))
    np.testing.assert_allclose(np.vstack(vectors), direct(TEXTS))


async def test_requests_arriving_during_a_model_call_form_the_next_batch() -> None:
    model = SlowModel()
    batcher = BatchingEmbedder(model)
    try:
        first = asyncio.create_task(batcher.embed("first"))
        await asyncio.sleep(0.01)  # "first" is in the model now
        await asyncio.gather(*(batcher.embed(text) for text in TEXTS[:20]))
        await first
    finally:
        await batcher.close()
    assert model.calls == [1, 20]


async def test_a_batch_never_exceeds_max_batch(model: HashingEmbedder) -> None:
    batcher = BatchingEmbedder(model, max_batch=8)
    try:
        vectors = await asyncio.gather(*(batcher.embed(text) for text in TEXTS))
    finally:
        await batcher.close()
    assert max(model.calls) <= 8
    assert sum(model.calls) == 50
    np.testing.assert_allclose(np.vstack(vectors), direct(TEXTS))


async def test_on_batch_reports_each_batch(model: HashingEmbedder) -> None:
    reported: list[tuple[int, float]] = []
    batcher = BatchingEmbedder(model, on_batch=lambda size, s: reported.append((size, s)))
    try:
        await asyncio.gather(*(batcher.embed(text) for text in TEXTS[:10]))
    finally:
        await batcher.close()
    assert [size for size, _ in reported] == model.calls
    assert all(seconds >= 0 for _, seconds in reported)


async def test_a_failing_model_fails_every_waiter() -> None:
    model = BrokenModel()
    batcher = BatchingEmbedder(model)
    try:
        results = await asyncio.gather(*(batcher.embed(text) for text in TEXTS[:10]), return_exceptions=True)
        assert all(isinstance(r, RuntimeError) and str(r) == "the model fell over" for r in results)
        assert sum(model.calls) == 10

        # the batcher survives a failure: later calls reach the model again
        with pytest.raises(RuntimeError, match="fell over"):
            await batcher.embed("one more")
        assert sum(model.calls) == 11
    finally:
        await batcher.close()


async def test_embed_many_batches_by_max_batch(model: HashingEmbedder) -> None:
    batcher = BatchingEmbedder(model, max_batch=4)
    try:
        vectors = await batcher.embed_many(TEXTS[:10])
        nothing = await batcher.embed_many([])
    finally:
        await batcher.close()
    assert model.calls == [4, 4, 2]
    np.testing.assert_allclose(vectors, direct(TEXTS[:10]))
    assert nothing.shape == (0, model.dimension)


async def test_close_is_safe_before_and_after_use(model: HashingEmbedder) -> None:
    batcher = BatchingEmbedder(model)
    assert batcher.dimension == model.dimension
    vector = await batcher.embed("hello")
    assert vector.shape == (model.dimension,)
    await batcher.close()
    await batcher.close()
