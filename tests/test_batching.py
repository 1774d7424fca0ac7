"""Unit tests for semcache.embedders.BatchingEmbedder, in front of the hashing fake."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Sequence

import numpy as np
import pytest

from semcache.embedders import BatchingEmbedder, FollowUp
from testkit.fakes import HashingEmbedder

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


async def busy_with_first(batcher: BatchingEmbedder) -> asyncio.Task[np.ndarray]:
    """Send "first" to a batcher in front of a ``SlowModel``; returns once it is in the model."""
    first = asyncio.create_task(batcher.embed("first"))
    await asyncio.sleep(0.01)
    return first


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
        first = await busy_with_first(batcher)
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


async def test_embed_then_runs_the_follow_up_in_the_embedding_thread(batcher: BatchingEmbedder) -> None:
    def follow_up(vectors: np.ndarray) -> list[tuple[str, float]]:
        return [(threading.current_thread().name, float(vector @ vector)) for vector in vectors]

    vector, (thread, norm) = await batcher.embed_then("hello", None, FollowUp("norms", follow_up))
    np.testing.assert_allclose(vector, direct(["hello"])[0])
    assert thread == "semcache-embed"  # the same trip off the loop as the embedding
    assert norm == pytest.approx(1.0, abs=1e-5)


async def test_a_batchs_follow_ups_of_one_group_share_one_call_and_each_caller_gets_its_row() -> None:
    """One call per group and batch (a FAISS search releases the GIL, and each release cost the
    embedding thread a wait under load): every caller still gets the result of its own vector."""
    calls: list[tuple[str, int]] = []

    def tagged(tag: str) -> FollowUp[tuple[str, np.ndarray]]:
        def run(vectors: np.ndarray) -> list[tuple[str, np.ndarray]]:
            calls.append((tag, len(vectors)))
            return [(tag, vector) for vector in vectors]

        return FollowUp(tag, run)

    batcher = BatchingEmbedder(SlowModel())
    try:
        first = await busy_with_first(batcher)  # the others queue up behind it, and form one batch
        texts = ["one", "two", "three", "four"]
        results = await asyncio.gather(*(batcher.embed_then(t, None, tagged("ab"[n % 2])) for n, t in enumerate(texts)))
        await first
    finally:
        await batcher.close()
    assert sorted(calls) == [("a", 2), ("b", 2)]
    for n, (text, (vector, (tag, followed))) in enumerate(zip(texts, results, strict=True)):
        assert tag == "ab"[n % 2]
        np.testing.assert_allclose(vector, direct([text])[0])
        np.testing.assert_allclose(followed, vector)


async def test_a_failing_follow_up_fails_only_the_callers_of_its_group(batcher: BatchingEmbedder) -> None:
    def broken(vectors: np.ndarray) -> list[None]:
        raise ValueError("the search fell over")

    results = await asyncio.gather(
        batcher.embed_then("one", None, FollowUp("broken", broken)), batcher.embed("two"), return_exceptions=True
    )
    assert isinstance(results[0], ValueError)
    np.testing.assert_allclose(results[1], direct(["two"])[0])


async def test_a_caller_that_went_away_is_not_embedded() -> None:
    model = SlowModel()
    batcher = BatchingEmbedder(model)
    try:
        first = await busy_with_first(batcher)
        gone = asyncio.create_task(batcher.embed("gone"))
        await asyncio.sleep(0)  # queued behind "first"
        gone.cancel()
        await asyncio.gather(first, batcher.embed("last"), return_exceptions=True)
    finally:
        await batcher.close()
    assert model.calls == [1, 1]  # "first", then "last" alone: "gone" was skipped
    assert gone.cancelled()


async def test_close_cancels_callers_still_waiting_and_refuses_new_ones() -> None:
    batcher = BatchingEmbedder(SlowModel())
    first = await busy_with_first(batcher)
    waiting = asyncio.create_task(batcher.embed("waiting"))
    await asyncio.sleep(0)
    await batcher.close()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    np.testing.assert_allclose(await first, direct(["first"])[0])  # the batch in the model still ends
    with pytest.raises(RuntimeError, match="closed"):
        await batcher.embed("after")


def test_callers_on_a_later_event_loop_still_get_their_vectors(model: HashingEmbedder) -> None:
    """Answers go to the loop each caller waits on, not to the loop of the first caller."""
    batcher = BatchingEmbedder(model)
    first = asyncio.run(batcher.embed("one"))
    second = asyncio.run(batcher.embed("two"))
    asyncio.run(batcher.close())
    np.testing.assert_allclose(np.vstack([first, second]), direct(["one", "two"]))
