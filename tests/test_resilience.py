"""Misses under load and a misbehaving upstream: coalescing, retries, the breaker, limits."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import openai
import pytest

from semcache.testing.standin_upstream import StandinUpstream
from semcache.testing.uvicorn_thread import free_port
from testkit.servers import SemcacheProcess

from .conftest import ask

pytestmark = pytest.mark.slow

QUESTION = "How do I learn Python quickly?"
PARAPHRASE = "How can I learn Python fast?"


def body(prompt: str, stream: bool = False) -> dict:
    return {"model": "test-model", "messages": [{"role": "user", "content": prompt}], "stream": stream}


async def streamed_text(client: httpx.AsyncClient, url: str, prompt: str) -> tuple[str, dict[str, str]]:
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body(prompt, stream=True)) as response:
        text = ""
        async for line in response.aiter_lines():
            if line.startswith("data: {"):
                for choice in json.loads(line[6:]).get("choices", []):
                    text += (choice.get("delta") or {}).get("content") or ""
        return text, dict(response.headers)


async def test_50_concurrent_identical_misses_make_one_upstream_call(service: str, upstream: StandinUpstream) -> None:
    upstream.state.base_latency_s = 0.5
    try:
        async with httpx.AsyncClient(timeout=30) as client:

            async def one(n: int) -> tuple[str, dict[str, str]]:
                if n % 2:
                    return await streamed_text(client, service, QUESTION)
                response = await client.post(f"{service}/v1/chat/completions", json=body(QUESTION))
                return response.json()["choices"][0]["message"]["content"], dict(response.headers)

            results = await asyncio.gather(*(one(n) for n in range(50)))
    finally:
        upstream.state.base_latency_s = 0.0
    assert [text for text, _ in results] == [f"Answer to: {QUESTION}"] * 50
    assert upstream.chat_calls() == 1
    outcomes = [(h["x-semcache"], h.get("x-semcache-coalesced")) for _, h in results]
    assert outcomes.count(("miss", None)) == 1 and outcomes.count(("hit", "true")) == 49
    async with httpx.AsyncClient() as client:
        stats = (await client.get(f"{service}/stats")).json()
    assert stats["coalesced"] == 49 and stats["entries"] == 1


async def test_followers_stream_from_the_leaders_stream_as_it_arrives(service: str, upstream: StandinUpstream) -> None:
    upstream.set_fault(chunk_delay_s=0.3)
    async with httpx.AsyncClient(timeout=30) as client:
        leader = asyncio.create_task(streamed_text(client, service, QUESTION))
        await asyncio.sleep(0.2)
        started = time.monotonic()
        first_chunk_after = None
        async with client.stream("POST", f"{service}/v1/chat/completions", json=body(QUESTION, True)) as response:
            assert response.headers["x-semcache-coalesced"] == "true"
            async for line in response.aiter_lines():
                if '"content":"' in line and first_chunk_after is None:
                    first_chunk_after = time.monotonic() - started
        whole = time.monotonic() - started
        await leader
    assert upstream.chat_calls() == 1
    assert first_chunk_after is not None and first_chunk_after < whole / 2  # relayed, not replayed at the end


async def test_a_semantic_match_waits_for_the_request_in_flight(service: str, upstream: StandinUpstream) -> None:
    upstream.state.base_latency_s = 0.6
    try:
        async with httpx.AsyncClient(timeout=30) as client:
            first = asyncio.create_task(client.post(f"{service}/v1/chat/completions", json=body(QUESTION)))
            await asyncio.sleep(0.2)
            second = await client.post(f"{service}/v1/chat/completions", json=body(PARAPHRASE))
            await first
    finally:
        upstream.state.base_latency_s = 0.0
    assert second.json()["choices"][0]["message"]["content"] == f"Answer to: {QUESTION}"
    assert (second.headers["x-semcache-tier"], second.headers["x-semcache-coalesced"]) == ("semantic", "true")
    assert upstream.chat_calls() == 1


async def test_a_match_in_flight_is_decided_and_logged_as_a_stored_one_would_be(
    service: str, upstream: StandinUpstream
) -> None:
    """One acceptance policy: threshold, guards and the decision log apply to a request in flight."""
    upstream.state.base_latency_s = 0.6
    year_2015, year_2016 = "What was the population of France in 2015?", "What was the population of France in 2016?"
    try:
        async with httpx.AsyncClient(timeout=30) as client:
            first = asyncio.create_task(client.post(f"{service}/v1/chat/completions", json=body(year_2015)))
            await asyncio.sleep(0.2)
            second = await client.post(f"{service}/v1/chat/completions", json=body(year_2016))
            await first
            first_paraphrase = asyncio.create_task(client.post(f"{service}/v1/chat/completions", json=body(QUESTION)))
            await asyncio.sleep(0.2)
            shared = await client.post(f"{service}/v1/chat/completions", json=body(PARAPHRASE))
            await first_paraphrase
            decisions = (await client.get(f"{service}/admin/decisions")).json()["data"]
    finally:
        upstream.state.base_latency_s = 0.0
    assert second.headers["x-semcache"] == "miss"  # the numbers guard vetoed the request in flight
    assert second.json()["choices"][0]["message"]["content"] == f"Answer to: {year_2016}"
    assert shared.headers.get("x-semcache-coalesced") == "true"
    in_flight = {d["query"]: d for d in decisions if d["candidate"] in (year_2015, QUESTION)}
    assert in_flight[year_2016]["decision"] == "rejected: guard numbers"
    assert in_flight[PARAPHRASE]["decision"] == "hit: a request in flight"


async def test_when_the_leader_fails_one_follower_retries(serve: Callable[..., str], upstream: StandinUpstream) -> None:
    url = serve(upstream_max_attempts=1)
    upstream.set_fault(status=500, times=1, latency_s=0.5)
    async with httpx.AsyncClient(timeout=30) as client:
        leader = asyncio.create_task(client.post(f"{url}/v1/chat/completions", json=body(QUESTION)))
        await asyncio.sleep(0.2)
        followers = await asyncio.gather(
            *(client.post(f"{url}/v1/chat/completions", json=body(QUESTION)) for _ in range(5))
        )
        assert (await leader).status_code == 500
    assert [f.status_code for f in followers] == [200] * 5
    assert {f.json()["choices"][0]["message"]["content"] for f in followers} == {f"Answer to: {QUESTION}"}
    assert upstream.chat_calls() == 2


def test_retries_honour_retry_after_then_succeed(client: openai.OpenAI, upstream: StandinUpstream) -> None:
    upstream.set_fault(status=429, retry_after=1, times=2)
    started = time.monotonic()
    answer, _ = ask(client, QUESTION)
    assert answer == f"Answer to: {QUESTION}" and upstream.chat_calls() == 3
    assert time.monotonic() - started >= 2.0  # waited what Retry-After asked, twice


def test_retries_stop_after_the_attempt_bound(client: openai.OpenAI, upstream: StandinUpstream) -> None:
    upstream.set_fault(status=503)
    with pytest.raises(openai.InternalServerError) as caught:
        ask(client, QUESTION)
    assert caught.value.status_code == 503 and upstream.chat_calls() == 3


def test_client_errors_are_not_retried(client: openai.OpenAI, upstream: StandinUpstream) -> None:
    upstream.set_fault(status=400)
    with pytest.raises(openai.BadRequestError):
        ask(client, QUESTION)
    assert upstream.chat_calls() == 1


def test_no_retry_once_bytes_were_streamed_and_nothing_partial_is_stored(
    client: openai.OpenAI, upstream: StandinUpstream
) -> None:
    upstream.set_fault(cut_after_chunks=2, times=1)
    with pytest.raises(openai.APIError):
        list(client.chat.completions.create(model="test-model", messages=[{"role": "user", "content": QUESTION}],
                                            stream=True))  # fmt: skip
    assert upstream.chat_calls() == 1
    assert ask(client, QUESTION)[1]["x-semcache"] == "miss"


def test_malformed_sse_is_an_error_and_is_not_cached(client: openai.OpenAI, upstream: StandinUpstream) -> None:
    upstream.set_fault(malformed_sse=True, times=1)
    with pytest.raises(openai.APIError):
        list(client.chat.completions.create(model="test-model", messages=[{"role": "user", "content": QUESTION}],
                                            stream=True))  # fmt: skip
    assert ask(client, QUESTION)[1]["x-semcache"] == "miss"


def test_circuit_breaker_opens_fails_fast_and_closes(
    serve: Callable[..., str], make_client, upstream: StandinUpstream
) -> None:
    url = serve(upstream_max_attempts=1, breaker_failure_threshold=3, breaker_reset_after_s=1.0)
    client = make_client(url)
    ask(client, "What is the speed of light?")  # cached while healthy
    upstream.set_fault(status=500)
    for n in range(3):
        with pytest.raises(openai.InternalServerError):
            ask(client, f"Question number {n} about rivers?")
    calls = upstream.chat_calls()
    with pytest.raises(openai.InternalServerError) as caught:
        ask(client, "Yet another question about rivers?")
    assert caught.value.status_code == 503 and caught.value.response.headers["retry-after"] == "1"
    assert caught.value.response.json()["error"]["code"] == "circuit_open"
    assert upstream.chat_calls() == calls  # failed fast, without calling
    assert ask(client, "What is the speed of light?")[1]["x-semcache"] == "hit"  # hits keep flowing
    upstream.reset()
    time.sleep(1.1)
    assert ask(client, "A probe question about rivers?")[0] == "Answer to: A probe question about rivers?"
    assert ask(client, "And one more about lakes in Canada?")[1]["x-semcache"] == "miss"  # closed again


async def test_a_full_upstream_queue_answers_429_with_retry_after(
    serve: Callable[..., str], upstream: StandinUpstream
) -> None:
    url = serve(upstream_max_concurrent=1, upstream_max_queued=1)
    upstream.state.base_latency_s = 0.5
    try:
        async with httpx.AsyncClient(timeout=30) as client:
            prompts = ["What is a prime number?", "Who painted the Mona Lisa?", "Where is Mount Everest located?"]
            responses = await asyncio.gather(
                *(client.post(f"{url}/v1/chat/completions", json=body(p)) for p in prompts)
            )
    finally:
        upstream.state.base_latency_s = 0.0
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200, 200, 429]
    refused = next(r for r in responses if r.status_code == 429)
    assert refused.headers["retry-after"] == "1" and refused.json()["error"]["code"] == "upstream_queue_full"


def test_an_upstream_that_hangs_gets_a_fast_504(
    serve: Callable[..., str], make_client, upstream: StandinUpstream
) -> None:
    client = make_client(serve(upstream_first_byte_timeout_s=0.5, upstream_max_attempts=1))
    upstream.set_fault(hang_before_first_byte=True)
    started = time.monotonic()
    with pytest.raises(openai.APIStatusError) as caught:
        ask(client, QUESTION)
    assert caught.value.status_code == 504 and time.monotonic() - started < 10


async def test_a_client_that_disconnects_midway_does_not_poison_the_cache(
    service: str, upstream: StandinUpstream
) -> None:
    upstream.set_fault(chunk_delay_s=0.2, times=1)
    async with httpx.AsyncClient(timeout=30) as client:
        async with client.stream("POST", f"{service}/v1/chat/completions", json=body(QUESTION, True)) as response:
            async for line in response.aiter_lines():
                if '"content":"' in line:
                    break  # leave after the first piece of the answer
        await asyncio.sleep(1.5)
        again = await client.post(f"{service}/v1/chat/completions", json=body(QUESTION))
    assert again.headers["x-semcache"] == "miss"


def test_the_rate_limit_answers_429_with_retry_after_per_namespace_without_a_key_file(
    serve: Callable[..., str], make_client, upstream: StandinUpstream
) -> None:
    """Without a key file semcache accepts no credential: the bucket is the namespace's, whatever
    Authorization value each request carries (tests/test_hostile_http.py covers the key file)."""
    url = serve(rate_limit_per_s=0.5, rate_limit_burst=3)
    alice, bob = make_client(url, "sk-alice"), make_client(url, "sk-bob")
    for _ in range(3):
        ask(alice, QUESTION)
    with pytest.raises(openai.RateLimitError) as caught:
        ask(alice, QUESTION)
    assert caught.value.response.headers["retry-after"] == "2"
    assert caught.value.response.json()["error"]["code"] == "rate_limit_exceeded"
    with pytest.raises(openai.RateLimitError):
        ask(bob, QUESTION)  # another Authorization value is no other client
    other_namespace = {"X-Semcache-Namespace": "other"}
    assert ask(bob, QUESTION, extra_headers=other_namespace)[1]["x-semcache"] == "miss"  # a bucket of its own


def test_an_over_long_prompt_is_a_clear_400_or_trimmed_when_configured(
    serve: Callable[..., str], make_client, upstream: StandinUpstream
) -> None:
    long_history = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "word " * 400},
        {"role": "assistant", "content": "noted " * 400},
        {"role": "user", "content": QUESTION},
    ]
    strict = make_client(serve(context_limits={"test-model": 300}))
    with pytest.raises(openai.BadRequestError) as caught:
        ask(strict, "", messages=long_history)
    assert caught.value.response.json()["error"]["code"] == "context_length_exceeded"
    assert upstream.chat_calls() == 0

    trimming = make_client(serve(context_limits={"test-model": 300}, trim_oldest_turns=True))
    assert ask(trimming, "", messages=long_history)[0] == f"Answer to: {QUESTION}"
    sent = upstream.calls[-1]["json"]["messages"]
    assert [m["role"] for m in sent] == ["system", "user"] and sent[-1]["content"] == QUESTION


async def test_a_tool_call_answer_is_never_rebuilt_for_a_follower_in_the_other_mode(
    service: str, upstream: StandinUpstream
) -> None:
    upstream.set_fault(tool_calls=True, latency_s=0.5)
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    request = {**body(QUESTION), "tools": tools}
    async with httpx.AsyncClient(timeout=30) as client:
        streamed = asyncio.create_task(client.post(f"{service}/v1/chat/completions", json={**request, "stream": True}))
        await asyncio.sleep(0.2)
        plain = await client.post(f"{service}/v1/chat/completions", json=request)
        await streamed
    message = plain.json()["choices"][0]["message"]
    assert message["tool_calls"] and plain.json()["choices"][0]["finish_reason"] == "tool_calls"
    assert plain.headers["x-semcache"] == "miss" and upstream.chat_calls() == 2


TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]


def test_tool_call_answers_are_not_cached_by_default(client: openai.OpenAI, upstream: StandinUpstream) -> None:
    upstream.set_fault(tool_calls=True)
    ask_tools = {"model": "test-model", "messages": [{"role": "user", "content": QUESTION}], "tools": TOOLS}
    client.chat.completions.create(**ask_tools)
    again = client.chat.completions.with_raw_response.create(**ask_tools)
    assert again.headers["x-semcache"] == "miss" and upstream.chat_calls() == 2


def test_tool_call_answers_are_cached_when_configured_and_served_on_exact_matches_only(
    serve: Callable[..., str], make_client, upstream: StandinUpstream
) -> None:
    client = make_client(serve(cache_tool_calls=True))
    upstream.set_fault(tool_calls=True)
    ask_tools = {"model": "test-model", "messages": [{"role": "user", "content": QUESTION}], "tools": TOOLS}
    first = client.chat.completions.create(**ask_tools, stream=True)
    calls: dict[int, dict] = {}
    for chunk in first:
        for call in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            entry = calls.setdefault(call.index, {"id": call.id, "name": "", "arguments": ""})
            entry["name"] += call.function.name or ""
            entry["arguments"] += call.function.arguments or ""
    hit = client.chat.completions.with_raw_response.create(**ask_tools)
    assert hit.headers["x-semcache-tier"] == "exact"
    message = hit.parse().choices[0].message
    assert hit.parse().choices[0].finish_reason == "tool_calls"
    assert [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls] == [
        (calls[0]["id"], calls[0]["name"], calls[0]["arguments"])
    ]
    streamed_hit = list(client.chat.completions.create(**ask_tools, stream=True))
    assert streamed_hit[-1].choices[0].finish_reason == "tool_calls"
    paraphrased = {**ask_tools, "messages": [{"role": "user", "content": PARAPHRASE}]}
    assert client.chat.completions.with_raw_response.create(**paraphrased).headers["x-semcache"] == "miss"
    assert upstream.chat_calls() == 2


async def test_a_client_that_leaves_releases_its_upstream_slot(
    serve: Callable[..., str], upstream: StandinUpstream
) -> None:
    url = serve(upstream_max_concurrent=1, upstream_max_queued=0)
    upstream.set_fault(chunk_delay_s=0.5, times=1)
    async with httpx.AsyncClient(timeout=30) as client:
        async with client.stream("POST", f"{url}/v1/chat/completions", json=body(QUESTION, True)) as response:
            async for line in response.aiter_lines():
                if '"content":"' in line:
                    break  # leave while the upstream is still streaming
        await asyncio.sleep(0.3)
        after = await client.post(f"{url}/v1/chat/completions", json=body("Who painted the Mona Lisa?"))
    assert after.status_code == 200  # the slot was free again, not a 429


def test_an_sdk_call_against_a_dead_upstream_fails_fast_naming_it(tmp_path: Path) -> None:
    """A closed port behind ``semcache serve``: each openai SDK call, with the SDK's own default
    retries, ends within seconds with a 503 that names the upstream, the first, the next, and the
    one that meets the breaker's probe after its reset time; and no request's log ends "retrying"."""
    dead = f"http://127.0.0.1:{free_port()}"
    reset_after_s = 3.0
    log_path = tmp_path / "semcache.log"
    settings = {"SEMCACHE_BREAKER_RESET_AFTER_S": str(reset_after_s), "SEMCACHE_LOG_FORMAT": "json"}
    with (
        SemcacheProcess(data_dir=tmp_path / "data", upstream_url=f"{dead}/v1", env=settings, log_path=log_path) as s,
        openai.OpenAI(base_url=f"{s.url}/v1", api_key="sk-test") as sdk,  # the SDK's default retries
    ):
        timings = []
        for call in range(4):
            if call == 3:
                time.sleep(reset_after_s)  # past the reset: this call probes the upstream again
            started = time.monotonic()
            with pytest.raises(openai.InternalServerError) as caught:
                sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": f"Question {call}?"}])
            timings.append(time.monotonic() - started)
            error = caught.value.response.json()["error"]
            assert caught.value.status_code == 503 and error["code"] == "circuit_open", error
            assert error["message"].startswith(f"the upstream at {dead} is failing"), error
    assert max(timings) < 15, timings
    last_upstream_line: dict[str, str] = {}
    for line in log_path.read_text().splitlines():
        record = json.loads(line) if line.startswith("{") else {}
        if record.get("logger") == "semcache.upstream" and record.get("request_id"):
            last_upstream_line[record["request_id"]] = record["message"]
    assert last_upstream_line and not [m for m in last_upstream_line.values() if "retrying" in m]
