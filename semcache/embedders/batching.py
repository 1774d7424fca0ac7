"""Micro-batching: concurrent requests share one model call, run off the event loop."""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

from ..protocols import Embedder
from .routing import as_routed

_T = TypeVar("_T")
_Result = tuple[np.ndarray, Any] | Exception  # (vector, what its follow-up returned), or why it failed


@dataclass(frozen=True)
class FollowUp(Generic[_T]):
    """Work on prompts' vectors in the embedding thread, right after the model: ``run`` takes the
    vectors of every prompt of one batch whose follow-ups share ``group``, as one (n, d) array,
    and returns one result for each row, in order.

    One call for the group, not one per prompt: a call into C (a FAISS search) releases the GIL,
    and under load each release cost the thread a wait for the event loop to hand the GIL back.
    """

    group: Hashable  # follow-ups of one group do the same work: one ``run`` serves them all
    run: Callable[[np.ndarray], Sequence[_T]]


@dataclass
class _Prompt:
    text: str
    model: str | None  # None: by its script
    then: FollowUp[Any] | None  # run on the vector, in the embedding thread
    waiter: asyncio.Future[tuple[np.ndarray, Any]]


class BatchingEmbedder:
    """Embeds prompts in one thread of its own, which takes every prompt waiting (up to
    ``max_batch``) each time it is free, and embeds them in one model call.

    A lone prompt goes to the model at once; under load, prompts pile up while the model works and
    form the next batch, so batches grow by themselves. The thread starts the next batch as soon as
    it has finished one, before the event loop has even woken the last batch's callers: the model
    never waits for the loop. With ``max_wait_s`` above 0, a batch waits that long for company.

    ``model`` names one model of a ``RoutedEmbedder`` (the request's, by namespace and script);
    without it each text goes to its script's model, or to the only model there is.
    """

    def __init__(
        self,
        embedder: Embedder,
        *,
        max_batch: int = 64,
        max_wait_s: float = 0.0,
        on_batch: Callable[[int, float], None] | None = None,
    ) -> None:
        self.embedder = embedder
        self.router = as_routed(embedder)
        self.dimension = embedder.dimension
        self._max_batch = max_batch
        self._max_wait_s = max_wait_s
        self._on_batch = on_batch
        self._prompts: queue.SimpleQueue[_Prompt | None] = queue.SimpleQueue()  # None: stop
        self._thread: threading.Thread | None = None
        self._closed = False

    async def embed(self, text: str, model: str | None = None) -> np.ndarray:
        vector, _ = await self._submit(text, model, None)
        return vector

    async def embed_then(self, text: str, model: str | None, then: FollowUp[_T]) -> tuple[np.ndarray, _T]:
        """The vector and its row of ``then.run``, which runs in the embedding thread right after
        the model: work that needs the vector (an index search) costs no second trip off the loop."""
        vector, result = await self._submit(text, model, then)
        return vector, result

    async def embed_many(self, texts: list[str], model: str | None = None) -> np.ndarray:
        """Embed a known list in batches of ``max_batch`` (for loading, not for requests), one
        batch at a time, so that requests arriving meanwhile are not queued behind all of it."""
        parts = [
            np.vstack(await asyncio.gather(*(self.embed(text, model) for text in texts[i : i + self._max_batch])))
            for i in range(0, len(texts), self._max_batch)
        ]
        return np.vstack(parts) if parts else np.zeros((0, self.dimension), dtype=np.float32)

    async def close(self) -> None:
        """Stop the thread; callers still waiting are cancelled. Safe to call twice."""
        self._closed = True
        while True:
            try:
                prompt = self._prompts.get_nowait()
            except queue.Empty:
                break
            if prompt is not None:
                prompt.waiter.cancel()
        self._prompts.put(None)  # the thread stops once it has finished the batch in hand

    async def _submit(self, text: str, model: str | None, then: FollowUp[Any] | None) -> Any:
        if self._closed:
            raise RuntimeError("the embedder is closed")
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="semcache-embed", daemon=True)
            self._thread.start()
        waiter: asyncio.Future[tuple[np.ndarray, Any]] = asyncio.get_running_loop().create_future()
        self._prompts.put(_Prompt(text, model, then, waiter))
        return await waiter

    # -- in the embedding thread -------------------------------------------------------------

    def _serve(self) -> None:
        while (batch := self._next_batch()) is not None:
            batch = [prompt for prompt in batch if not prompt.waiter.done()]  # callers gone: skip them
            if not batch:
                continue
            started = time.perf_counter()
            try:
                vectors = self._embed([p.text for p in batch], [p.model for p in batch])
            except Exception as exc:  # the model failed: every caller learns why
                self._reply(batch, [exc] * len(batch), time.perf_counter() - started)
                continue
            seconds = time.perf_counter() - started
            self._reply(batch, _follow_up(batch, vectors), seconds)

    def _next_batch(self) -> list[_Prompt] | None:
        """Wait for a prompt, then take what else is waiting; None once closed."""
        first = self._prompts.get()
        if first is None:
            return None
        batch = [first]
        deadline = time.monotonic() + self._max_wait_s
        while len(batch) < self._max_batch:
            try:
                remaining = deadline - time.monotonic()
                prompt = self._prompts.get(timeout=remaining) if remaining > 0 else self._prompts.get_nowait()
            except queue.Empty:
                break
            if prompt is None:
                self._prompts.put(None)  # stop after this batch
                break
            batch.append(prompt)
        return batch

    def _reply(self, batch: list[_Prompt], results: list[_Result], seconds: float) -> None:
        """Hand the results to the event loop(s) the callers wait on."""
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[_Prompt, _Result]]] = {}
        for prompt, result in zip(batch, results, strict=True):
            by_loop.setdefault(prompt.waiter.get_loop(), []).append((prompt, result))
        for loop, answers in by_loop.items():
            with contextlib.suppress(RuntimeError):  # the loop is closed: no one is waiting any more
                loop.call_soon_threadsafe(self._settle, answers, seconds)

    def _embed(self, texts: list[str], models: list[str | None]) -> np.ndarray:
        """One call per model in the batch."""
        if all(model is None for model in models):
            return self.embedder.embed(texts)
        vectors = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for model in dict.fromkeys(models):
            rows = [row for row, name in enumerate(models) if name == model]
            part = [texts[row] for row in rows]
            vectors[rows] = self.embedder.embed(part) if model is None else self.router.embed_with(model, part)
        return vectors

    # -- back on the event loop --------------------------------------------------------------

    def _settle(self, answers: list[tuple[_Prompt, _Result]], seconds: float) -> None:
        if self._on_batch is not None:
            self._on_batch(len(answers), seconds)
        for prompt, result in answers:
            if prompt.waiter.done():
                continue  # its caller went away
            if isinstance(result, Exception):
                prompt.waiter.set_exception(result)
            else:
                prompt.waiter.set_result(result)


def _follow_up(batch: list[_Prompt], vectors: np.ndarray) -> list[_Result]:
    """Each prompt's (vector, follow-up result): one ``run`` per group of follow-ups."""
    results: list[_Result] = [(vector, None) for vector in vectors]
    groups: dict[Hashable, list[int]] = {}
    for row, prompt in enumerate(batch):
        if prompt.then is not None and not prompt.waiter.done():  # a caller gone needs no search
            groups.setdefault(prompt.then.group, []).append(row)
    for rows in groups.values():
        follow_up = batch[rows[0]].then
        assert follow_up is not None
        try:
            found = follow_up.run(vectors[rows])
            if len(found) != len(rows):
                raise ValueError(f"a follow-up returned {len(found)} results for {len(rows)} vectors")
        except Exception as exc:  # only the callers of this group fail
            for row in rows:
                results[row] = exc
            continue
        for row, result in zip(rows, found, strict=True):
            results[row] = (vectors[row], result)
    return results
