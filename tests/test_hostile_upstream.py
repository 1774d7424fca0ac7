"""Part of the hostile suite for issue 16's upstream findings: a real ``semcache serve`` in front
of a stand-in upstream that misbehaves on purpose.

- Answers of any size: one over ``max_answer_bytes`` reaches its client whole but is never stored;
  a stored one near the limit is served while ``/healthz`` keeps answering; a 150 MB one neither
  exhausts memory nor keeps ``semcache serve`` from stopping on SIGTERM.
- Malformed streams: content after ``finish_reason``, and choices the request did not ask for, are
  relayed as sent but never cached.
- ``X-Semcache-TTL`` is bounded: 1e308 is a 400, and ten years works on SQLite and on Redis.
- An upstream error that quotes the credential it refused reaches the client without it.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from semcache.coalescing import InFlight
from semcache.dialects.chat import StreamedChatAnswer as _StreamedAnswer
from semcache.dialects.chat import clean_answer as _clean_answer
from semcache.errors import UpstreamAnswerTooLarge, UpstreamStatusError
from semcache.keys import request_key
from semcache.logs import Redactor
from semcache.testing.standin_upstream import (
    AFTER_FINISH_TEXT,
    StandinUpstream,
    extra_choice_text,
    huge_answer,
)
from semcache.upstreams import RemoteUpstream
from semcache.upstreams.resilience import ResilientUpstream, RetryPolicy
from semcache.wire import ChatCompletionRequest
from testkit.redis_server import RedisServer
from testkit.servers import SemcacheProcess

pytestmark = pytest.mark.slow

UPSTREAM_KEY = f"upstream-key-{secrets.token_hex(16)}"
MAX_ANSWER_BYTES = 12_000_000  # what the shared process stores at most (SEMCACHE_MAX_ANSWER_BYTES)
TEN_YEARS_S = 315_360_000
HUGE_BYTES = 150_000_000
RSS_BOUND_BYTES = 1_500_000_000
RSS_GROWTH_BOUND_BYTES = 300_000_000  # while a 150 MB answer passes through: it is never held whole
HEALTHZ_BOUND_S = 1.0  # every /healthz polled while a big hit is served answers within this
SIGTERM_BOUND_S = 30.0  # the shutdown grace and the lifespan's own shutdown, with room to spare
MODES = ["stream", "json"]


# -- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def standin_server() -> Iterator[StandinUpstream]:
    with StandinUpstream() as upstream:
        yield upstream


@pytest.fixture
def standin(standin_server: StandinUpstream) -> Iterator[StandinUpstream]:
    standin_server.reset()
    yield standin_server
    standin_server.reset()


def _process(work: Path, standin: StandinUpstream, *args: str, **env: str) -> SemcacheProcess:
    environment = {"SEMCACHE_UPSTREAM_API_KEY": UPSTREAM_KEY, "SEMCACHE_LOG_LEVEL": "warning", **env}
    return SemcacheProcess(
        *args, data_dir=work / "data", upstream_url=standin.base_url, env=environment, log_path=work / "semcache.log"
    )


@pytest.fixture(scope="module")
def service(
    tmp_path_factory: pytest.TempPathFactory, standin_server: StandinUpstream, embedding_exports: Path
) -> Iterator[SemcacheProcess]:
    """One ``semcache serve`` on the embedded (SQLite) store, holding the upstream key."""
    process = _process(
        tmp_path_factory.mktemp("hostile"), standin_server, SEMCACHE_MAX_ANSWER_BYTES=str(MAX_ANSWER_BYTES)
    )
    with process:
        yield process


@pytest.fixture(scope="module")
def redis_service(
    tmp_path_factory: pytest.TempPathFactory, standin_server: StandinUpstream, embedding_exports: Path
) -> Iterator[SemcacheProcess]:
    """``semcache serve`` on a real redis-server of its own."""
    work = tmp_path_factory.mktemp("hostile-redis")
    redis_server = RedisServer(work / "redis", appendonly=False)
    with redis_server, _process(work, standin_server, "--store", "redis", "--redis-url", redis_server.url) as process:
        yield process


@pytest.fixture
def fresh_service(tmp_path: Path, standin: StandinUpstream, embedding_exports: Path) -> Iterator[SemcacheProcess]:
    """A process of its own, for tests that may exhaust it or stop it."""
    process = _process(tmp_path, standin).start()
    yield process
    process.kill()


@pytest.fixture
def namespace() -> str:
    """Each test's own namespace: nothing another test stored can answer it."""
    return f"hostile-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def sdk(service: SemcacheProcess, namespace: str) -> Iterator[openai.OpenAI]:
    with _sdk(service, namespace) as client:
        yield client


def _sdk(service: SemcacheProcess, namespace: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{service.url}/v1", api_key="sk-client-key", max_retries=0, timeout=120,
        default_headers={"X-Semcache-Namespace": namespace},
    )  # fmt: skip


# -- helpers -----------------------------------------------------------------------------------


def messages(prompt: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": prompt}]


def ask(sdk: openai.OpenAI, prompt: str, mode: str, **kwargs: Any) -> tuple[str, str]:
    """The answer's text and the ``X-Semcache`` outcome, asked through the openai SDK."""
    raw = sdk.chat.completions.with_raw_response.create(
        model="test-model", messages=messages(prompt), stream=mode == "stream", **kwargs
    )  # type: ignore[call-overload]
    if mode == "stream":
        text = "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices)
    else:
        text = raw.parse().choices[0].message.content or ""
    return text, raw.headers["x-semcache"]


def raw_chat(
    service: SemcacheProcess, prompt: str, mode: str, namespace: str, **headers: str
) -> tuple[httpx.Response, list[dict[str, Any]]]:
    """One request over plain HTTP: the response (read) and, for a stream, its events in order."""
    body = {"model": "test-model", "messages": messages(prompt), "stream": mode == "stream"}
    headers = {"Authorization": "Bearer sk-client-key", "X-Semcache-Namespace": namespace, **headers}
    response = httpx.post(f"{service.url}/v1/chat/completions", json=body, headers=headers, timeout=120)
    events: list[dict[str, Any]] = []
    if mode == "stream" and response.headers.get("content-type", "").startswith("text/event-stream"):
        lines = [line for line in response.text.split("\n") if line.startswith("data: ")]
        events = [json.loads(line[6:]) for line in lines if line != "data: [DONE]"]
    return response, events


def answer_text(response: httpx.Response, events: list[dict[str, Any]], mode: str) -> str:
    """The first choice's text, from a response ``raw_chat`` read."""
    if mode == "stream":
        return "".join(c["delta"].get("content") or "" for e in events for c in e.get("choices", []) if not c["index"])
    return str(response.json()["choices"][0]["message"]["content"])


def rss_bytes(process: SemcacheProcess, field: str = "VmRSS") -> int:
    """The process's resident memory now (``VmRSS``) or at its peak (``VmHWM``), from /proc."""
    assert process.process is not None
    for line in Path(f"/proc/{process.process.pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} in /proc/{process.process.pid}/status")


class HealthProbe:
    """Polls ``/healthz`` from a thread while the test does something else; records each wait."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.waits: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        with httpx.Client(timeout=30) as client:
            while not self._stop.is_set():
                started = time.perf_counter()
                try:
                    ok = client.get(f"{self.url}/healthz").status_code == 200
                except httpx.HTTPError:
                    ok = False
                self.waits.append(time.perf_counter() - started if ok else float("inf"))
                self._stop.wait(0.02)

    def __enter__(self) -> HealthProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(60)


# -- finding 5: answers of any size ------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_an_answer_over_max_answer_bytes_reaches_the_client_but_is_not_stored(
    sdk: openai.OpenAI, standin: StandinUpstream, mode: str
) -> None:
    size = MAX_ANSWER_BYTES + 100_000
    standin.set_fault(answer_bytes=size)
    for _ in range(2):  # the second is a miss too: nothing was stored
        text, outcome = ask(sdk, "Write me the longest essay you can.", mode)
        assert outcome == "miss"
        assert text == huge_answer(size)
    assert standin.chat_calls() == 2


@pytest.mark.parametrize("mode", MODES)
def test_a_stored_answer_near_the_limit_is_served_while_healthz_answers_promptly(
    sdk: openai.OpenAI, service: SemcacheProcess, standin: StandinUpstream, namespace: str, mode: str
) -> None:
    size = MAX_ANSWER_BYTES - 1000
    standin.set_fault(answer_bytes=size)
    prompt = "Recite the whole reference manual."
    assert ask(sdk, prompt, mode) == (huge_answer(size), "miss")
    standin.set_fault()
    with HealthProbe(service.url) as probe:
        time.sleep(0.1)
        # Read as fast as it comes: a slow reader would hold the server back by flow control alone.
        response, events = raw_chat(service, prompt, mode, namespace)
    assert response.headers["x-semcache"] == "hit"
    assert answer_text(response, events, mode) == huge_answer(size)
    assert len(probe.waits) >= 3
    assert max(probe.waits) < HEALTHZ_BOUND_S, f"/healthz waited {max(probe.waits):.2f} s during the hit"
    assert standin.chat_calls() == 1


def _read_stream_watching_memory(service: SemcacheProcess, response: httpx.Response) -> tuple[int, bool]:
    """Content characters and whether [DONE] came; fails as soon as the process outgrows the bounds."""
    received, done, lines = 0, False, 0
    start = rss_bytes(service)
    for line in response.iter_lines():
        if not line.startswith("data: "):
            continue
        if line == "data: [DONE]":
            done = True
            continue
        event = json.loads(line[6:])
        received += sum(len(choice["delta"].get("content") or "") for choice in event.get("choices", []))
        lines += 1
        if lines % 50 == 0:
            _assert_memory_bounded(service, start)
    return received, done


def _assert_memory_bounded(service: SemcacheProcess, start: int) -> None:
    now = rss_bytes(service)
    assert now < RSS_BOUND_BYTES, f"semcache grew to {now / 1e9:.2f} GB"
    assert now - start < RSS_GROWTH_BOUND_BYTES, f"semcache grew by {(now - start) / 1e6:.0f} MB"


def _wait_watching_memory(service: SemcacheProcess, call: Callable[[], httpx.Response]) -> httpx.Response:
    """``call()`` in a thread; kills the process (and fails) if it outgrows the bounds meanwhile."""
    outcome: list[httpx.Response | BaseException] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as exc:
            outcome.append(exc)

    start = rss_bytes(service)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    while thread.is_alive():
        try:
            _assert_memory_bounded(service, start)
        except AssertionError:
            service.kill()
            raise
        thread.join(0.02)
    result = outcome[0]
    if isinstance(result, BaseException):
        raise result
    return result


@pytest.mark.parametrize("mode", MODES)
def test_a_150_mb_answer_neither_exhausts_memory_nor_keeps_sigterm_from_stopping_semcache(
    fresh_service: SemcacheProcess, standin: StandinUpstream, mode: str
) -> None:
    service = fresh_service
    url = f"{service.url}/v1/chat/completions"
    body = {"model": "test-model", "messages": messages("Everything, please."), "stream": mode == "stream"}
    standin.set_fault(answer_bytes=HUGE_BYTES)
    if mode == "stream":  # relayed whole, chunk by chunk
        with httpx.stream("POST", url, json=body, timeout=120) as response:
            assert response.status_code == 200
            received, done = _read_stream_watching_memory(service, response)
        assert (received, done) == (HUGE_BYTES, True)
    else:  # too large to relay at all: a 502 that says so
        response = _wait_watching_memory(service, lambda: httpx.post(url, json=body, timeout=120))
        assert response.status_code == 502
        assert "too large" in response.json()["error"]["message"]
    assert rss_bytes(service, "VmHWM") < RSS_BOUND_BYTES
    assert httpx.get(f"{service.url}/healthz", timeout=5).status_code == 200

    # The same answer again, sent slowly: SIGTERM while semcache relays it.
    standin.set_fault(answer_bytes=HUGE_BYTES, chunk_delay_s=0.05)
    calls_before = standin.chat_calls()
    threading.Thread(target=_drain, args=(url, body), daemon=True).start()
    deadline = time.monotonic() + 30
    while standin.chat_calls() == calls_before and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # well into the relay
    assert service.process is not None and service.process.poll() is None
    stopped_at = time.monotonic()
    service.process.send_signal(signal.SIGTERM)
    try:
        service.process.wait(SIGTERM_BOUND_S)
    except Exception:
        pytest.fail(f"semcache serve was still running {SIGTERM_BOUND_S} s after SIGTERM")
    assert time.monotonic() - stopped_at < SIGTERM_BOUND_S


def _drain(url: str, body: dict[str, Any]) -> None:
    """Read a response to its end, or until the connection goes."""
    try:
        with httpx.stream("POST", url, json=body, timeout=120) as response:
            for _ in response.iter_bytes():
                pass
    except httpx.HTTPError:
        pass


def test_a_flight_that_stops_sharing_keeps_only_what_its_followers_have_not_read() -> None:
    async def main() -> None:
        inflight = InFlight()
        key = request_key(
            ChatCompletionRequest.model_validate({"model": "m", "messages": messages("Everything.")}), "default"
        )
        flight = inflight.lead(key, None, streamed=True)
        follower = aiter(flight.follow())
        await flight.publish({"n": 0})
        assert await anext(follower) == {"n": 0}
        flight.stop_sharing()  # the answer outgrew the cache
        assert inflight.get(key.exact) is None  # no one joins from now on
        for n in range(1, 4):
            await flight.publish({"n": n})
        assert len(flight.chunks) == 3  # kept for the follower, which has read only the first
        assert [await anext(follower) for _ in range(3)] == [{"n": 1}, {"n": 2}, {"n": 3}]
        await flight.publish({"n": 4})
        assert flight.chunks == [{"n": 4}]  # what every follower read is let go
        await flight.finish(response=None, text="", cacheable=False)
        assert [chunk async for chunk in follower] == [{"n": 4}]
        await flight.publish({"n": 5})
        assert flight.chunks == []  # no follower left: nothing is kept

    asyncio.run(main())


def test_the_remote_upstream_refuses_a_body_over_its_bound_with_or_without_a_length(standin: StandinUpstream) -> None:
    async def main() -> None:
        remote = RemoteUpstream(standin.base_url, max_response_bytes=4096)
        upstream = ResilientUpstream(remote, retry=RetryPolicy(max_attempts=3, base_delay_s=0))
        body = {"model": "m", "messages": messages("Long, please.")}
        try:
            standin.set_fault(answer_bytes=5000)  # sent in pieces: counted as it arrives
            with pytest.raises(UpstreamAnswerTooLarge):
                await upstream.complete(body, {})
            standin.set_fault()
            standin.state.answers["Long, please."] = "x" * 5000  # one body with its Content-Length
            with pytest.raises(UpstreamAnswerTooLarge) as refused:
                await upstream.complete(body, {})
            assert refused.value.status_code == 502 and "too large" in refused.value.to_openai()["error"]["message"]
            assert standin.chat_calls() == 2  # never retried
            assert upstream.breaker.state == "closed"
            standin.state.answers["Long, please."] = "x" * 3000
            assert (await upstream.complete(body, {}))["choices"][0]["message"]["content"] == "x" * 3000
        finally:
            standin.state.answers.clear()
            await upstream.close()

    asyncio.run(main())


def test_the_remote_upstream_scrubs_what_its_errors_relay(standin: StandinUpstream) -> None:
    async def main() -> None:
        secret = "plain-words-secret"  # no pattern knows it: only the configured secrets do
        remote = RemoteUpstream(standin.base_url, api_key=secret, redact=Redactor([secret]))
        body = {"model": "m", "messages": messages("Who am I?")}
        try:
            standin.set_fault(status=429, echo_authorization=True, retry_after="1, sk-not-a-date")
            with pytest.raises(UpstreamStatusError) as refused:
                await remote.complete(body, {})
            message = refused.value.to_openai()["error"]["message"]
            assert secret not in message and message.startswith("Incorrect API key provided:")
            assert "Retry-After" not in refused.value.headers  # neither seconds nor a date
            standin.set_fault(error_after_chunks=1, echo_authorization=True)
            with pytest.raises(UpstreamStatusError) as mid_stream:
                async for _ in remote.stream(body, {}):
                    pass
            assert secret not in json.dumps(mid_stream.value.to_openai())
        finally:
            await remote.close()

    asyncio.run(main())


# -- finding 6: malformed streams --------------------------------------------------------------


def test_content_after_finish_reason_is_relayed_but_not_cached(sdk: openai.OpenAI, standin: StandinUpstream) -> None:
    standin.set_fault(content_after_finish=True)
    prompt = "What colour is the sky?"
    for _ in range(2):
        text, outcome = ask(sdk, prompt, "stream")
        assert (text, outcome) == (f"Answer to: {prompt}{AFTER_FINISH_TEXT}", "miss")
    standin.set_fault()  # a clean answer to the same prompt is stored, and served
    assert ask(sdk, prompt, "stream") == (f"Answer to: {prompt}", "miss")
    assert ask(sdk, prompt, "json") == (f"Answer to: {prompt}", "hit")


@pytest.mark.parametrize("mode", MODES)
def test_a_second_choice_nobody_asked_for_is_relayed_but_not_cached(
    service: SemcacheProcess, standin: StandinUpstream, namespace: str, mode: str
) -> None:
    standin.set_fault(extra_choices=1)
    prompt = "Name a prime number."
    for _ in range(2):
        response, events = raw_chat(service, prompt, mode, namespace)
        assert response.status_code == 200 and response.headers["x-semcache"] == "miss"
        if mode == "stream":
            relayed = {c["index"]: c["delta"].get("content") for e in events for c in e["choices"] if c["index"]}
        else:
            relayed = {c["index"]: c["message"]["content"] for c in response.json()["choices"] if c["index"]}
        assert relayed == {1: extra_choice_text(1)}
    assert standin.chat_calls() == 2


@pytest.mark.parametrize("mode", MODES)
def test_a_lone_choice_with_another_index_is_relayed_but_not_cached(
    service: SemcacheProcess, standin: StandinUpstream, namespace: str, mode: str
) -> None:
    standin.set_fault(choice_index=1)
    prompt = "Name an even number."
    for _ in range(2):
        response, events = raw_chat(service, prompt, mode, namespace)
        assert response.status_code == 200 and response.headers["x-semcache"] == "miss"
        choices = [c for e in events for c in e["choices"]] if mode == "stream" else response.json()["choices"]
        assert {c["index"] for c in choices} == {1}
    assert standin.chat_calls() == 2


def test_the_stream_check_allows_a_finish_reason_beside_the_last_content() -> None:
    def chunk(delta: dict[str, Any], finish_reason: str | None = None, index: int = 0) -> dict[str, Any]:
        return {"choices": [{"index": index, "delta": delta, "finish_reason": finish_reason}]}

    def answer(*chunks: dict[str, Any]) -> _StreamedAnswer:
        streamed = _StreamedAnswer(max_bytes=1000)
        for each in chunks:
            streamed.add(each)
        return streamed

    assert answer(chunk({"role": "assistant", "content": "Hi"}), chunk({"content": "!"}, "stop")).cacheable()
    assert answer(chunk({"content": "Hi"}, "stop"), {"choices": [], "usage": {"total_tokens": 3}}).cacheable()
    assert answer(chunk({"content": "Hi"}, "stop"), chunk({})).cacheable()  # an empty delta carries nothing
    assert not answer(chunk({"content": "Hi"}, "stop"), chunk({"content": "!"})).cacheable()
    assert not answer(chunk({"content": "Hi"}, "stop"), chunk({"role": "assistant"})).cacheable()
    call = {"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "f", "arguments": ""}}]}
    late_call = answer(chunk({"content": "Hi"}), chunk(call, "tool_calls"), chunk({"content": "x"}))
    assert late_call.tool_call_answer() is None
    assert not answer(chunk({"content": "Hi"}, "stop", index=1)).cacheable()
    assert not answer(chunk({"content": "x" * 600}), chunk({"content": "y" * 600}, "stop")).cacheable()
    assert _clean_answer({"choices": [{"message": {"content": "Hi"}, "finish_reason": "stop"}]}, 1000) == "Hi"
    one = {"index": 1, "message": {"content": "Hi"}, "finish_reason": "stop"}
    assert _clean_answer({"choices": [one]}, 1000) is None
    assert _clean_answer({"choices": [{**one, "index": 0, "message": {"content": "é" * 501}}]}, 1000) is None


def test_index_less_choices_odd_content_and_refusals_are_not_cached() -> None:
    def answer(*chunks: dict[str, Any]) -> _StreamedAnswer:
        streamed = _StreamedAnswer(max_bytes=1000)
        for each in chunks:
            streamed.add(each)
        return streamed

    two_without_index = {"choices": [{"delta": {"content": "ALPHA "}}, {"delta": {"content": "BETA "}}]}
    stop = {"choices": [{"delta": {}, "finish_reason": "stop"}]}
    assert not answer(two_without_index, stop).cacheable()
    for odd in (["HIDDEN"], 12345, {"text": "x"}):  # relayed to the client, but not as text
        assert not answer({"choices": [{"delta": {"content": "Hi"}}]}, {"choices": [{"delta": {"content": odd}}]},
                          stop).cacheable()  # fmt: skip
    refused = {"content": "Here is why not.", "refusal": "I cannot help with that."}
    assert _clean_answer({"choices": [{"index": 0, "message": refused, "finish_reason": "stop"}]}, 1000) is None


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("status", [206, 203])
def test_an_answer_with_a_success_status_other_than_200_is_neither_relayed_nor_cached(
    service: SemcacheProcess, standin: StandinUpstream, namespace: str, mode: str, status: int
) -> None:
    """A 206 is part of an answer and a 203 one a proxy changed: a 502 that says so, never a 200
    passed on as if whole, never stored, and never retried (another try would get the same)."""
    standin.set_fault(answer_status=status)
    prompt = f"Is an HTTP {status} a whole answer?"
    for _ in range(2):
        response, _ = raw_chat(service, prompt, mode, namespace)
        assert response.status_code == 502 and response.headers["x-semcache"] == "miss"
        assert response.json()["error"]["code"] == "upstream_unexpected_status"
        assert f"HTTP {status}" in response.json()["error"]["message"]
    assert standin.chat_calls() == 2
    standin.set_fault()  # the same prompt answered with a 200 is stored, and served
    assert [raw_chat(service, prompt, mode, namespace)[0].headers["x-semcache"] for _ in range(2)] == ["miss", "hit"]


def test_an_answer_with_an_error_beside_its_choices_is_relayed_but_not_cached(
    sdk: openai.OpenAI, standin: StandinUpstream
) -> None:
    standin.set_fault(error_beside_answer=True)
    prompt = "Did the model finish?"
    assert [ask(sdk, prompt, "json") for _ in range(2)] == [(f"Answer to: {prompt}", "miss")] * 2
    assert standin.chat_calls() == 2
    assert _clean_answer({"choices": [{"index": 0, "message": {"content": "Hi"}, "finish_reason": "stop"}],
                          "error": {"message": "failed part-way"}}, 1000) is None  # fmt: skip


@pytest.fixture(scope="module")
def open_service(
    tmp_path_factory: pytest.TempPathFactory, standin_server: StandinUpstream, embedding_exports: Path
) -> Iterator[SemcacheProcess]:
    """``semcache serve`` with no upstream key: each client's own key goes upstream (the quick start)."""
    work = tmp_path_factory.mktemp("hostile-open")
    with SemcacheProcess(data_dir=work / "data", upstream_url=standin_server.base_url,
                         env={"SEMCACHE_LOG_LEVEL": "warning"}, log_path=work / "semcache.log") as process:  # fmt: skip
        yield process


@pytest.mark.parametrize("mode", MODES)
def test_a_client_cannot_choose_a_key_that_cuts_a_piece_out_of_an_answer_others_are_served(
    open_service: SemcacheProcess, standin: StandinUpstream, namespace: str, mode: str
) -> None:
    """Its key is what went upstream, and an answer that quotes it is never relayed with the key
    taken out, nor cached: else a client whose "key" is a URL the answer holds would have the
    URL cut out of the answer everyone after it is served."""
    url = "https://download.example.org/whl/cu121"
    prompt = f"Which index serves the CUDA 12.1 wheels? {url}"

    def chat(key: str) -> tuple[httpx.Response, list[dict[str, Any]]]:
        return raw_chat(open_service, prompt, mode, namespace, Authorization=f"Bearer {key}")

    planted, events = chat(url)
    if planted.status_code == 200:  # a stream whose first events went out: it ends on the error, no [DONE]
        assert mode == "stream" and "[DONE]" not in planted.text
        error = events[-1]["error"]
    else:
        assert planted.status_code == 502
        error = planted.json()["error"]
    assert error["code"] == "upstream_quoted_credential"
    assert url not in answer_text(planted, events, mode) if events else url not in planted.text
    victim, again = chat("sk-victims-own-key-0123456789"), chat("sk-victims-own-key-0123456789")
    assert [victim[0].headers["x-semcache"], again[0].headers["x-semcache"]] == ["miss", "hit"]
    for response, events in (victim, again):
        assert answer_text(response, events, mode) == f"Answer to: {prompt}"
    assert standin.chat_calls() == 2  # the refused answer was not retried


def test_a_stream_led_with_a_key_its_answer_quotes_never_cuts_short_another_clients(
    open_service: SemcacheProcess, standin: StandinUpstream, namespace: str
) -> None:
    """Where each client's own key goes upstream, a stream is followed live only by requests sent
    with the same key: else a client whose "key" the answer holds near its end would end, with its
    own stream, the streams of everyone who asked the same meanwhile. Same-key streams still share."""
    url = f"https://docs.example.org/library/{uuid.uuid4().hex[:8]}"
    prompt = f"Where are the docs? They are at {url}"
    standin.set_fault(chunk_delay_s=0.15)  # a stream of a few seconds, long enough to be joined
    results: dict[str, tuple[httpx.Response, list[dict[str, Any]]]] = {}

    def stream(name: str, key: str, after_s: float) -> threading.Thread:
        def run() -> None:
            time.sleep(after_s)
            results[name] = raw_chat(open_service, prompt, "stream", namespace, Authorization=f"Bearer {key}")

        thread = threading.Thread(target=run)
        thread.start()
        return thread

    for thread in [stream("planter", url, 0.0), stream("victim", "sk-victims-own-key-0123456789", 0.5)]:
        thread.join(120)
    planted, planted_events = results["planter"]
    assert planted_events[-1]["error"]["code"] == "upstream_quoted_credential" and "[DONE]" not in planted.text
    victim, victim_events = results["victim"]
    assert victim.status_code == 200 and victim.text.rstrip().endswith("data: [DONE]")
    assert answer_text(victim, victim_events, "stream") == f"Answer to: {prompt}"
    assert standin.chat_calls() == 2  # the victim asked the upstream itself
    # Two streams sent with one key still share one upstream call.
    standin.reset()
    standin.set_fault(chunk_delay_s=0.15)
    prompt = f"Is coalescing on, {namespace}?"
    threads = []
    for after_s in (0.0, 0.5):
        threads.append(threading.Thread(target=lambda after_s=after_s: (time.sleep(after_s), results.__setitem__(
            str(after_s), raw_chat(open_service, prompt, "stream", namespace)))))  # fmt: skip
        threads[-1].start()
    for thread in threads:
        thread.join(120)
    assert [answer_text(*results[k], "stream") for k in ("0.0", "0.5")] == [f"Answer to: {prompt}"] * 2
    assert standin.chat_calls() == 1


# -- finding 7: X-Semcache-TTL -----------------------------------------------------------------


@pytest.mark.parametrize("store", ["sqlite", "redis"])
def test_the_ttl_header_is_bounded_and_ten_years_works(
    request: pytest.FixtureRequest, standin: StandinUpstream, namespace: str, store: str
) -> None:
    service: SemcacheProcess = request.getfixturevalue("service" if store == "sqlite" else "redis_service")
    for refused in ("1e308", str(TEN_YEARS_S + 1), "inf", "-1"):
        response, _ = raw_chat(service, "How long is a decade?", "json", namespace, **{"X-Semcache-TTL": refused})
        assert response.status_code == 400, refused
        assert response.json()["error"]["code"] == "invalid_ttl"
    assert standin.chat_calls() == 0
    for expected in ("miss", "hit"):
        response, _ = raw_chat(
            service, "How long is a decade?", "json", namespace, **{"X-Semcache-TTL": str(TEN_YEARS_S)}
        )
        assert response.status_code == 200 and response.headers["x-semcache"] == expected
        assert response.json()["choices"][0]["message"]["content"] == "Answer to: How long is a decade?"
    assert standin.chat_calls() == 1


# -- finding 10: upstream errors that quote a credential ---------------------------------------


def _assert_no_upstream_key(response: httpx.Response) -> None:
    assert UPSTREAM_KEY not in response.text
    assert UPSTREAM_KEY[-16:] not in response.text  # nor a recognisable part of it


@pytest.mark.parametrize(("mode", "status"), [("json", 401), ("stream", 403)])
def test_an_upstream_error_that_quotes_the_key_reaches_the_client_without_it(
    service: SemcacheProcess, standin: StandinUpstream, namespace: str, mode: str, status: int
) -> None:
    """Non-streamed, and streamed before the first byte: the upstream's HTTP error, relayed."""
    standin.set_fault(status=status, echo_authorization=True)
    response, _ = raw_chat(service, f"Who am I, asked as {mode}?", mode, namespace)
    assert response.status_code == status
    assert standin.calls[-1]["headers"]["authorization"] == f"Bearer {UPSTREAM_KEY}"  # what it quoted
    _assert_no_upstream_key(response)
    assert response.json()["error"]["message"].startswith("Incorrect API key provided:")


def test_an_in_band_error_mid_stream_reaches_the_client_without_the_key(
    service: SemcacheProcess, standin: StandinUpstream, namespace: str
) -> None:
    standin.set_fault(error_after_chunks=2, echo_authorization=True)
    response, events = raw_chat(service, "Tell me a long story about keys.", "stream", namespace)
    assert response.status_code == 200
    _assert_no_upstream_key(response)
    assert events[-1]["error"]["message"].startswith("Incorrect API key provided:")
    assert "data: [DONE]" not in response.text
