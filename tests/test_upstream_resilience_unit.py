"""ResilientUpstream and CircuitBreaker against a small fake upstream (no network)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from semcache.errors import InvalidRequest, UpstreamError, UpstreamStatusError, UpstreamUnavailable
from semcache.metrics import Metrics
from semcache.upstreams.resilience import CircuitBreaker, ResilientUpstream, RetryPolicy


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeUpstream:
    """Answers with whatever ``behaviour`` says: an exception to raise, 'hang', or an answer."""

    def __init__(self) -> None:
        self.behaviour: Any = {"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}]}
        self.calls = 0

    async def complete(self, body: dict[str, Any], headers: dict[str, str], api: str = "chat") -> dict[str, Any]:
        self.calls += 1
        if self.behaviour == "hang":
            await asyncio.sleep(3600)
        if isinstance(self.behaviour, BaseException):
            raise self.behaviour
        return dict(self.behaviour)

    async def stream(self, body: dict[str, Any], headers: dict[str, str], api: str = "chat") -> Any:
        yield await self.complete(body, headers)

    async def embed(self, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        return await self.complete(body, headers)

    async def list_models(self, headers: dict[str, str]) -> dict[str, Any]:
        return {"data": []}

    async def close(self) -> None:
        return None


def resilient(inner: FakeUpstream, clock: Clock, **retry: Any) -> ResilientUpstream:
    async def no_sleep(_: float) -> None:
        return None

    return ResilientUpstream(
        inner, retry=RetryPolicy(**{"max_attempts": 1, **retry}),
        breaker=CircuitBreaker(failure_threshold=2, reset_after_s=10, clock=clock), sleep=no_sleep,
    )  # fmt: skip


async def open_breaker(upstream: ResilientUpstream, inner: FakeUpstream) -> None:
    inner.behaviour = UpstreamUnavailable("down")
    for _ in range(2):
        with pytest.raises(UpstreamUnavailable):
            await upstream.complete({}, {})
    assert upstream.breaker.state == "open"


async def test_a_cancelled_probe_does_not_keep_the_circuit_open_forever() -> None:
    clock, inner = Clock(), FakeUpstream()
    upstream = resilient(inner, clock)
    await open_breaker(upstream, inner)
    clock.now = 11  # half-open: one probe may pass
    inner.behaviour = "hang"
    probe = asyncio.create_task(upstream.complete({}, {}))
    await asyncio.sleep(0.01)
    probe.cancel()
    with pytest.raises(asyncio.CancelledError):
        await probe
    inner.behaviour = {"choices": []}
    assert await upstream.complete({}, {}) == {"choices": []}  # the next call probed, and closed it
    assert upstream.breaker.state == "closed"


async def test_a_probe_refused_before_the_upstream_does_not_wedge_the_breaker() -> None:
    clock, inner = Clock(), FakeUpstream()
    upstream = resilient(inner, clock)
    await open_breaker(upstream, inner)
    clock.now = 11
    inner.behaviour = InvalidRequest("tools are not supported here")
    with pytest.raises(InvalidRequest):
        await upstream.complete({}, {})
    inner.behaviour = {"choices": []}
    assert await upstream.complete({}, {}) == {"choices": []}


async def test_an_open_circuit_fails_fast_with_retry_after() -> None:
    clock, inner = Clock(), FakeUpstream()
    upstream = resilient(inner, clock)
    await open_breaker(upstream, inner)
    calls = inner.calls
    with pytest.raises(UpstreamError) as caught:
        await upstream.complete({}, {})
    assert caught.value.code == "circuit_open" and caught.value.headers["Retry-After"] == "10"
    assert inner.calls == calls


@pytest.mark.parametrize("call", ["complete", "embed"])
async def test_retries_stop_at_the_attempt_bound_and_client_errors_are_not_retried(call: str) -> None:
    clock, inner = Clock(), FakeUpstream()
    upstream = resilient(inner, clock, max_attempts=3)
    upstream.breaker.failure_threshold = 100
    inner.behaviour = UpstreamError("busy", status_code=503)
    with pytest.raises(UpstreamError):
        await getattr(upstream, call)({}, {})
    assert inner.calls == 3
    inner.behaviour = UpstreamError("bad request", status_code=400)
    with pytest.raises(UpstreamError):
        await getattr(upstream, call)({}, {})
    assert inner.calls == 4


async def test_failed_attempts_are_counted_for_metrics_but_the_breakers_refusals_are_not() -> None:
    async def no_sleep(_: float) -> None:
        return None

    inner, metrics = FakeUpstream(), Metrics()
    upstream = ResilientUpstream(
        inner, retry=RetryPolicy(max_attempts=3, base_delay_s=0),
        breaker=CircuitBreaker(failure_threshold=2, reset_after_s=10, clock=Clock()), sleep=no_sleep, observer=metrics,
    )  # fmt: skip
    inner.behaviour = UpstreamUnavailable("down")
    with pytest.raises(UpstreamUnavailable):
        await upstream.complete({}, {})  # its second failure opened the circuit: no third attempt
    assert inner.calls == 2
    with pytest.raises(UpstreamError) as caught:
        await upstream.complete({}, {})
    assert caught.value.code == "circuit_open"  # refused without reaching the upstream
    assert caught.value.headers["X-Should-Retry"] == "false"
    assert caught.value.message.startswith("the upstream is failing, so the circuit breaker is open")
    assert caught.value.message.endswith("after 2 failures in a row (the last: down)")
    inner.behaviour = UpstreamStatusError("no such model", status_code=404)
    by_status = ResilientUpstream(inner, sleep=no_sleep, observer=metrics)
    with pytest.raises(UpstreamStatusError):
        await by_status.complete({}, {})
    errors = {
        (sample.labels["status"], sample.labels["kind"]): sample.value
        for family in text_string_to_metric_families(metrics.exposition()[0].decode())
        for sample in family.samples
        if sample.name == "semcache_upstream_errors_total"
    }
    assert errors == {("502", "unavailable"): 2, ("404", "status"): 1}


async def test_embeddings_share_the_breaker_with_completions() -> None:
    clock, inner = Clock(), FakeUpstream()
    upstream = resilient(inner, clock)
    await open_breaker(upstream, inner)  # completions failing: embeddings wait too
    with pytest.raises(UpstreamError) as caught:
        await upstream.embed({"input": ["a"]}, {})
    assert caught.value.code == "circuit_open"
