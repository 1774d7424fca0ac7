"""Micro-batching: concurrent requests share one model call, run off the event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextvars import Context

import numpy as np

from ..protocols import Embedder
from .routing import as_routed

_Item = tuple[str, str | None, "asyncio.Future[np.ndarray]"]  # text, model (None: by its script), waiter


class BatchingEmbedder:
    """Collects prompts for at most ``max_wait_s`` or ``max_batch`` items, then embeds them at once.

    While one batch runs in the worker thread, the next one fills up, so under load batches grow
    by themselves and the model sees few, large calls. With ``max_wait_s=0`` (the default) a lone
    request never waits: it takes whatever is queued and goes.

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
        self._queue: asyncio.Queue[_Item] = asyncio.Queue()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="semcache-embed")
        self._worker: asyncio.Task[None] | None = None

    async def embed(self, text: str, model: str | None = None) -> np.ndarray:
        if self._worker is None:
            # A fresh context: the worker outlives the request that happened to start it, and must
            # not carry that request's id into its log lines.
            self._worker = asyncio.create_task(self._run(), name="semcache-embed-batcher", context=Context())
        future: asyncio.Future[np.ndarray] = asyncio.get_running_loop().create_future()
        await self._queue.put((text, model, future))
        return await future

    async def embed_many(self, texts: list[str], model: str | None = None) -> np.ndarray:
        """Embed a known list directly, in batches of ``max_batch`` (for loading, not for requests)."""
        loop = asyncio.get_running_loop()
        parts = [
            await loop.run_in_executor(
                self._executor,
                self._embed,
                texts[i : i + self._max_batch],
                [model] * len(texts[i : i + self._max_batch]),
            )
            for i in range(0, len(texts), self._max_batch)
        ]
        return np.vstack(parts) if parts else np.zeros((0, self.dimension), dtype=np.float32)

    async def close(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.gather(self._worker, return_exceptions=True)
            self._worker = None
        while not self._queue.empty():
            _, _, future = self._queue.get_nowait()
            if not future.done():
                future.cancel()
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = await self._collect_batch()
            if not batch:
                continue
            texts, models = [text for text, _, _ in batch], [model for _, model, _ in batch]
            started = loop.time()
            try:
                vectors = await loop.run_in_executor(self._executor, self._embed, texts, models)
            except Exception as exc:  # the model failed: every waiter learns why
                for _, _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            if self._on_batch is not None:
                self._on_batch(len(batch), loop.time() - started)
            for (_, _, future), vector in zip(batch, vectors, strict=True):
                if not future.done():
                    future.set_result(vector)

    def _embed(self, texts: list[str], models: list[str | None]) -> np.ndarray:
        """One call per model in the batch; in the worker thread."""
        if all(model is None for model in models):
            return self.embedder.embed(texts)
        vectors = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for model in dict.fromkeys(models):
            rows = [row for row, name in enumerate(models) if name == model]
            part = [texts[row] for row in rows]
            vectors[rows] = self.embedder.embed(part) if model is None else self.router.embed_with(model, part)
        return vectors

    async def _collect_batch(self) -> list[_Item]:
        batch = [await self._queue.get()]
        await asyncio.sleep(0)  # let requests that arrived in the same tick join
        deadline = asyncio.get_running_loop().time() + self._max_wait_s
        while len(batch) < self._max_batch:
            if not self._queue.empty():
                batch.append(self._queue.get_nowait())
                continue
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                break
            try:
                batch.append(await asyncio.wait_for(self._queue.get(), remaining))
            except TimeoutError:
                break
        return [item for item in batch if not item[2].cancelled()]
