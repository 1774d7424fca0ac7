"""Making any upstream survive misbehaviour: retries, a circuit breaker, a concurrency cap, and a
deadline. ``ResilientUpstream`` wraps another ``Upstream`` and speaks the same protocol.

- Retries: connection errors, timeouts, 429, 500, 502, 503 and 504 are retried with exponential
  backoff and full jitter, waiting at least what ``Retry-After`` asks, within a bound on attempts
  and on total time. A stream is retried only until its first chunk has been passed on, and an
  answer too large to relay never.
- Circuit breaker: after ``failure_threshold`` consecutive failures the circuit opens and calls
  fail fast with a 503 that names the upstream and its last failure, with ``Retry-After`` and
  ``X-Should-Retry: false`` (the openai SDKs would otherwise wait out ``Retry-After`` on each of
  their own retries, and meet the same open circuit); after ``reset_after_s`` one probe is let
  through (half-open), and its success closes the circuit again. A call whose failure opened the
  circuit is not retried.
- Concurrency cap: at most ``max_concurrent`` calls run at once and at most ``max_queued`` wait;
  beyond that a call is refused at once with a 429 and ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from ..errors import SemcacheError, UnusableAnswer, UpstreamError, UpstreamUnavailable
from ..observer import NullObserver, Observer
from ..protocols import Relayed, RelayRequest, Upstream, UpstreamApi
from ..wording import counted

log = logging.getLogger("semcache.upstream")
T = TypeVar("T")
RETRYABLE_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 3
    base_delay_s: float = 0.2
    max_delay_s: float = 5.0
    max_total_s: float = 30.0  # no new attempt starts after this much time

    def delay(self, attempt: int, retry_after_s: float | None) -> float:
        """Full jitter on an exponential backoff, but never sooner than ``Retry-After``."""
        backoff = random.uniform(0, min(self.max_delay_s, self.base_delay_s * 2**attempt))
        return max(backoff, retry_after_s or 0.0)


CircuitState = Literal["closed", "open", "half_open"]


class CircuitBreaker:
    def __init__(self, failure_threshold: int = 5, reset_after_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic, upstream: str = "the upstream") -> None:  # fmt: skip
        """``upstream`` names what it guards in its errors and log lines ("the upstream at
        http://host:port"): never a URL's credentials or query."""
        self.failure_threshold = failure_threshold
        self.reset_after_s = reset_after_s
        self.upstream = upstream
        self._clock = clock
        self._failures = 0
        self._opened_at: float | None = None
        self._probing = False
        self._last_failure: str | None = None
        self.opened = 0  # how many times it opened, for metrics

    @property
    def state(self) -> CircuitState:
        if self._opened_at is None:
            return "closed"
        return "half_open" if self._clock() - self._opened_at >= self.reset_after_s else "open"

    def before_call(self) -> None:
        """Raise a fast 503 while open; in half-open, let exactly one probe through."""
        state = self.state
        if state == "closed":
            return
        if state == "half_open" and not self._probing:
            self._probing = True
            return
        assert self._opened_at is not None
        wait = max(1, math.ceil(self.reset_after_s - (self._clock() - self._opened_at)))
        last = f" (the last: {self._last_failure})" if self._last_failure else ""
        raise UpstreamError(
            f"{self.upstream} is failing, so the circuit breaker is open: calls to it fail at once for {wait} s "
            f"more, after {counted(self._failures, 'failure')} in a row{last}",
            status_code=503, code="circuit_open", headers={"Retry-After": str(wait), "X-Should-Retry": "false"},
        )  # fmt: skip

    def release_probe(self) -> None:
        """A probe that ended without a verdict (cancelled): the next call may probe again."""
        self._probing = False

    def record_success(self) -> None:
        self._failures = 0
        self._opened_at = None
        self._probing = False

    def record_failure(self, reason: str | None = None) -> None:
        """One more failure in a row; ``reason`` (the error's message) is quoted while the circuit is open."""
        self._failures += 1
        self._last_failure = reason or self._last_failure
        if self._probing or self._failures >= self.failure_threshold:
            if self._opened_at is None or self._probing:
                self.opened += 1
                log.warning(
                    "%s failed %s in a row (the last: %s): the circuit breaker is open, and calls to it "
                    "fail at once for %g s", self.upstream, counted(self._failures, "time"), self._last_failure,
                    self.reset_after_s,
                )  # fmt: skip
            self._opened_at = self._clock()
            self._probing = False


class ConcurrencyLimit:
    def __init__(self, max_concurrent: int, max_queued: int, retry_after_s: int = 1) -> None:
        self._semaphore = asyncio.Semaphore(max_concurrent)
        self._max_queued = max_queued
        self._waiting = 0
        self._retry_after_s = retry_after_s

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        if self._semaphore.locked() and self._waiting >= self._max_queued:
            raise UpstreamError(
                "too many requests are waiting for the upstream; try again shortly", status_code=429,
                code="upstream_queue_full", headers={"Retry-After": str(self._retry_after_s)},
            )  # fmt: skip
        self._waiting += 1
        try:
            await self._semaphore.acquire()
        finally:
            self._waiting -= 1
        try:
            yield
        finally:
            self._semaphore.release()


class ResilientUpstream:
    def __init__(
        self,
        inner: Upstream,
        *,
        retry: RetryPolicy | None = None,
        breaker: CircuitBreaker | None = None,
        limit: ConcurrencyLimit | None = None,
        total_timeout_s: float | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        observer: Observer | None = None,
    ) -> None:
        self.inner = inner
        self.retry = retry or RetryPolicy()
        self.breaker = breaker or CircuitBreaker()
        self.limit = limit or ConcurrencyLimit(64, 256)
        self.total_timeout_s = total_timeout_s
        self._sleep = sleep
        self._observer = observer or NullObserver()
        self.retries = 0  # attempts beyond the first, for metrics

    async def complete(
        self, body: dict[str, Any], headers: dict[str, str], api: UpstreamApi = "chat"
    ) -> dict[str, Any]:
        async with self.limit.slot():
            return await self._deadline(self._with_retries(lambda: self.inner.complete(body, headers, api)))

    async def stream(
        self, body: dict[str, Any], headers: dict[str, str], api: UpstreamApi = "chat"
    ) -> AsyncIterator[dict[str, Any]]:
        async with self.limit.slot():
            deadline = None if self.total_timeout_s is None else time.monotonic() + self.total_timeout_s
            chunks, first = await self._deadline(self._with_retries(lambda: self._open_stream(body, headers, api)))
            yield first
            try:
                while True:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise UpstreamUnavailable("the upstream took longer than the total timeout", status_code=504)
                    try:
                        # In this task, not wait_for's own: a client that leaves cancels the read
                        # here, and ``chunks`` has stopped when the ``finally`` below closes it.
                        async with asyncio.timeout(remaining):
                            chunk = await anext(chunks)
                    except StopAsyncIteration:
                        break
                    except TimeoutError as exc:
                        raise UpstreamUnavailable("the upstream took longer than the total timeout",
                                                  status_code=504) from exc  # fmt: skip
                    yield chunk
            except UpstreamError as exc:
                self._count_error(exc)
                if _upstream_fault(exc):
                    self.breaker.record_failure(exc.message)  # bytes are out: no retry, but the breaker learns
                raise
            finally:
                await _close(chunks)

    async def _open_stream(
        self, body: dict[str, Any], headers: dict[str, str], api: UpstreamApi
    ) -> tuple[AsyncIterator[dict[str, Any]], dict[str, Any]]:
        """Start a stream and wait for its first chunk: failures up to here can still be retried."""
        chunks = aiter(self.inner.stream(body, headers, api))
        try:
            first = await anext(chunks)
        except StopAsyncIteration as exc:
            raise UpstreamUnavailable("the upstream stream ended before its first chunk") from exc
        except BaseException:
            await _close(chunks)
            raise
        return chunks, first

    async def relay(self, request: RelayRequest, headers: dict[str, str]) -> Relayed:
        """Relayed once, never retried (it may act: an upload, a deletion), within the total timeout
        until the answer starts; the breaker learns from it as from any call."""
        async with self.limit.slot():
            return await self._deadline(self._relay_once(request, headers))

    async def _relay_once(self, request: RelayRequest, headers: dict[str, str]) -> Relayed:
        self.breaker.before_call()
        try:
            relayed = await self.inner.relay(request, headers)
        except UpstreamError as exc:
            self._count_error(exc)
            if _upstream_fault(exc):
                self.breaker.record_failure(exc.message)
            else:
                self.breaker.record_success()
            raise
        except BaseException:
            self.breaker.release_probe()
            raise
        self.breaker.record_success()
        return relayed

    async def embed(self, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        """Retried as ``complete`` is: embeddings act on nothing, and an answer is the same each time."""
        async with self.limit.slot():
            return await self._deadline(self._with_retries(lambda: self.inner.embed(body, headers)))

    async def list_models(self, headers: dict[str, str]) -> dict[str, Any]:
        return await self._with_retries(lambda: self.inner.list_models(headers))

    async def close(self) -> None:
        await self.inner.close()

    async def _deadline(self, call: Awaitable[T]) -> T:
        if self.total_timeout_s is None:
            return await call
        try:
            return await asyncio.wait_for(call, self.total_timeout_s)
        except TimeoutError as exc:
            error = UpstreamUnavailable("the upstream took longer than the total timeout", status_code=504)
            self._count_error(error)
            raise error from exc

    def _count_error(self, error: UpstreamError) -> None:
        """Errors of the upstream itself; the breaker's and the queue's own refusals are not among them."""
        self._observer.upstream_error(
            error.status_code, "unavailable" if isinstance(error, UpstreamUnavailable) else "status"
        )

    async def _with_retries(self, call: Callable[[], Awaitable[T]]) -> T:
        started = time.monotonic()
        attempt = 0
        while True:
            self.breaker.before_call()
            try:
                result = await call()
            except UpstreamError as exc:
                self._count_error(exc)
                if _upstream_fault(exc):
                    self.breaker.record_failure(exc.message)
                else:
                    self.breaker.record_success()  # it answered: the client's request was at fault
                delay = self._retry_delay(exc, attempt, started)
                fields = {"upstream_status": exc.status_code, "attempt": attempt + 1}
                if delay is None:
                    log.warning("upstream call failed: %s; not retried", exc.message, extra=fields)
                    raise
                log.warning("upstream call failed: %s; retrying in %.2f s", exc.message, delay, extra=fields)
                attempt += 1
                self.retries += 1
                await self._sleep(delay)
                continue
            except SemcacheError:
                self.breaker.record_success()  # refused before reaching the upstream: says nothing of it
                raise
            except BaseException:
                self.breaker.release_probe()  # cancelled or broken mid-call: let the next call probe
                raise
            self.breaker.record_success()
            return result

    def _retry_delay(self, error: UpstreamError, attempt: int, started: float) -> float | None:
        """Seconds to wait before the next attempt, or None when this error must not be retried."""
        if error.status_code not in RETRYABLE_STATUSES and not isinstance(error, UpstreamUnavailable):
            return None
        if isinstance(error, UnusableAnswer):
            return None  # another try would fetch another answer like it
        if error.code == "circuit_open" or attempt + 1 >= self.retry.max_attempts:
            return None
        if self.breaker.state != "closed":
            return None  # this failure opened the circuit: another attempt would only meet it
        delay = self.retry.delay(attempt, _retry_after_s(error))
        if time.monotonic() - started + delay > self.retry.max_total_s:
            return None
        return delay


async def _close(chunks: AsyncIterator[Any]) -> None:
    close = getattr(chunks, "aclose", None)
    if close is not None:
        await close()


def _upstream_fault(error: UpstreamError) -> bool:
    """Errors that say the upstream is unwell (not that the request was bad). An answer it gave that
    semcache does not relay is not one: else a few requests for long answers (or a client whose key
    the upstream quotes) would open the circuit for everyone."""
    if isinstance(error, UnusableAnswer):
        return False
    return isinstance(error, UpstreamUnavailable) or error.status_code >= 500


def _retry_after_s(error: UpstreamError) -> float | None:
    value = error.headers.get("Retry-After")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: rare from APIs; fall back to the backoff
