"""Tests for the stand-in OpenAI-compatible upstream server."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from semcache.testing.standin_upstream import (
    AFTER_FINISH_TEXT,
    GARBAGE_SSE_EVENT,
    HUGE_PIECE_CHARS,
    Fault,
    StandinState,
    StandinUpstream,
    extra_choice_text,
    huge_answer,
    huge_answer_pieces,
    last_user_text,
    split_pieces,
)

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def server() -> Iterator[StandinUpstream]:
    with StandinUpstream() as upstream:
        yield upstream


@pytest.fixture
def standin(server: StandinUpstream) -> Iterator[StandinUpstream]:
    server.reset()
    server.state.answers.clear()
    yield server
    server.reset()


@pytest.fixture
def client(standin: StandinUpstream) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=standin.base_url, api_key="x", max_retries=0, timeout=10) as sdk:
        yield sdk


def ask(client: openai.OpenAI, prompt: str, **kwargs: object):
    return client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": prompt}], **kwargs)


def chat_body(prompt: str, **extra: object) -> dict[str, object]:
    return {"model": "gpt-test", "messages": [{"role": "user", "content": prompt}], **extra}


def raw_sse_lines(standin: StandinUpstream, body: dict[str, object]) -> list[str]:
    with httpx.stream("POST", f"{standin.base_url}/chat/completions", json=body, timeout=10) as response:
        return [line for line in response.iter_lines() if line]


# ---------------------------------------------------------------- helpers


def test_split_pieces_round_trip() -> None:
    for text in ["Answer to: hello  world ", " lead", "", "one", "a\nb\tc"]:
        assert "".join(split_pieces(text)) == text
    assert split_pieces("Answer to: hi") == ["Answer ", "to: ", "hi"]


def test_last_user_text_handles_parts_and_roles() -> None:
    messages = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "reply"},
        {"role": "user", "content": [{"type": "text", "text": "second"}]},
        {"role": "system", "content": "ignored"},
    ]
    assert last_user_text(messages) == "second"
    assert last_user_text([]) == ""


def test_fault_rejects_unknown_fields() -> None:
    with pytest.raises(ValueError):
        Fault.from_dict({"statuz": 429})
    with pytest.raises(ValueError):
        Fault(status=42)


def test_latency_jitter_is_fixed_per_prompt_and_within_its_range() -> None:
    state = StandinState(base_latency_s=0.3, base_latency_jitter_s=0.5)
    delays = {prompt: state.base_delay_s(prompt) for prompt in (f"question {n}" for n in range(50))}
    assert all(0.3 <= delay <= 0.8 for delay in delays.values())
    assert len(set(delays.values())) > 40  # spread over the range, not one value
    assert all(state.base_delay_s(prompt) == delay for prompt, delay in delays.items())
    assert StandinState(base_latency_s=0.3).base_delay_s("question 1") == 0.3


# ---------------------------------------------------------------- normal answers


def test_non_stream_answer(client: openai.OpenAI) -> None:
    completion = ask(client, "What is 2+2?")
    assert completion.object == "chat.completion"
    assert completion.model == "gpt-test"
    choice = completion.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == "Answer to: What is 2+2?"
    assert choice.finish_reason == "stop"
    assert completion.usage is not None and completion.usage.total_tokens > 0


def test_canned_answers(client: openai.OpenAI, standin: StandinUpstream) -> None:
    standin.state.answers["capital of France?"] = "Paris."
    assert ask(client, "capital of France?").choices[0].message.content == "Paris."
    assert ask(client, "capital of Spain?").choices[0].message.content == "Answer to: capital of Spain?"


def test_stream_assembles_to_same_text(client: openai.OpenAI) -> None:
    prompt = "Tell me   a story, please"
    expected = ask(client, prompt).choices[0].message.content
    stream = ask(client, prompt, stream=True, stream_options={"include_usage": True})
    pieces, finish_reasons, usage, roles = [], [], None, []
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            roles.append(choice.delta.role)
            pieces.append(choice.delta.content or "")
            finish_reasons.append(choice.finish_reason)
    assert "".join(pieces) == expected
    assert len([p for p in pieces if p]) > 3
    assert roles[0] == "assistant"
    assert finish_reasons[-1] == "stop"
    assert usage is not None and usage.completion_tokens > 0


def test_stream_wire_format(standin: StandinUpstream) -> None:
    lines = raw_sse_lines(standin, chat_body("hi", stream=True, stream_options={"include_usage": True}))
    assert all(line.startswith("data: ") for line in lines)
    assert lines[-1] == "data: [DONE]"
    events = [json.loads(line[6:]) for line in lines[:-1]]
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert events[-2]["choices"][0] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}
    assert events[-1]["choices"] == [] and events[-1]["usage"]["total_tokens"] > 0
    assert {e["object"] for e in events} == {"chat.completion.chunk"}


def test_stream_without_usage_has_no_usage_chunk(standin: StandinUpstream) -> None:
    lines = raw_sse_lines(standin, chat_body("hi", stream=True))
    events = [json.loads(line[6:]) for line in lines[:-1]]
    assert all(event["choices"] for event in events)
    assert events[-1]["choices"][0]["finish_reason"] == "stop"


def test_models_endpoint(client: openai.OpenAI) -> None:
    assert [model.id for model in client.models.list()] == ["standin-model"]


# ---------------------------------------------------------------- recording


def test_calls_are_recorded(client: openai.OpenAI, standin: StandinUpstream) -> None:
    ask(client, "one")
    list(ask(client, "two", stream=True))
    client.models.list()  # not a chat call
    assert standin.chat_calls() == 2
    first = standin.calls[0]
    assert first["path"] == "/v1/chat/completions"
    assert first["json"]["messages"][0]["content"] == "one"
    assert first["headers"]["authorization"] == "Bearer x"
    assert isinstance(first["time"], float)

    payload = httpx.get(f"{standin.root_url}/_calls").json()
    assert payload["count"] == 2
    assert payload["calls"][1]["json"]["stream"] is True


def test_invalid_json_is_recorded_and_rejected(standin: StandinUpstream) -> None:
    response = httpx.post(f"{standin.base_url}/chat/completions", content=b"{nope")
    assert response.status_code == 400
    assert "error" in response.json()
    assert standin.chat_calls() == 1 and standin.calls[0]["json"] is None


# ---------------------------------------------------------------- faults


def test_429_with_retry_after(standin: StandinUpstream, client: openai.OpenAI) -> None:
    standin.set_fault(status=429, retry_after=2, times=1)
    response = httpx.post(f"{standin.base_url}/chat/completions", json=chat_body("hi"))
    assert response.status_code == 429
    assert response.headers["retry-after"] == "2"
    error = response.json()["error"]
    assert set(error) >= {"message", "type", "code"}
    # times=1: the next request is back to normal.
    assert ask(client, "hi").choices[0].message.content == "Answer to: hi"


def test_status_fault_seen_by_sdk(standin: StandinUpstream, client: openai.OpenAI) -> None:
    standin.set_fault(status=503)  # times=None: forever
    for _ in range(2):
        with pytest.raises(openai.InternalServerError) as info:
            ask(client, "hi")
        assert info.value.status_code == 503
    standin.set_fault(status=429, retry_after=1)
    with pytest.raises(openai.RateLimitError):
        ask(client, "hi")
    assert standin.chat_calls() == 3


def test_cut_stream_ends_without_finish(standin: StandinUpstream, client: openai.OpenAI) -> None:
    standin.set_fault(cut_after_chunks=2)
    seen: list[str] = []
    finish_reasons: list[str | None] = []
    raised = False
    try:
        for chunk in ask(client, "a long enough prompt to cut", stream=True):
            for choice in chunk.choices:
                seen.append(choice.delta.content or "")
                finish_reasons.append(choice.finish_reason)
    except openai.APIConnectionError:  # the SDK wraps the dropped connection
        raised = True
    assert raised or not any(finish_reasons)
    assert "stop" not in finish_reasons
    assert "".join(seen) == "Answer to: "  # role chunk + exactly 2 content chunks


def test_cut_stream_raw_has_no_done(standin: StandinUpstream) -> None:
    standin.set_fault(cut_after_chunks=1)
    with pytest.raises(httpx.RemoteProtocolError):
        raw_sse_lines(standin, chat_body("hello there", stream=True))


def test_cut_non_stream_truncates(standin: StandinUpstream, client: openai.OpenAI) -> None:
    standin.set_fault(cut_after_chunks=0)
    with pytest.raises(openai.APIConnectionError):
        ask(client, "hi")
    with pytest.raises(httpx.RemoteProtocolError):
        httpx.post(f"{standin.base_url}/chat/completions", json=chat_body("hi"))


def test_malformed_sse(standin: StandinUpstream) -> None:
    standin.set_fault(malformed_sse=True)
    lines = raw_sse_lines(standin, chat_body("one two three four", stream=True))
    garbage = GARBAGE_SSE_EVENT.decode().strip()
    assert garbage in lines
    assert 1 < lines.index(garbage) < len(lines) - 2  # somewhere midway
    assert lines[-1] == "data: [DONE]"


def test_finish_reason_override(standin: StandinUpstream, client: openai.OpenAI) -> None:
    standin.set_fault(finish_reason="length")
    assert ask(client, "hi").choices[0].finish_reason == "length"
    finish = [c.choices[0].finish_reason for c in ask(client, "hi", stream=True) if c.choices]
    assert finish[-1] == "length"


def test_tool_calls(standin: StandinUpstream, client: openai.OpenAI) -> None:
    standin.set_fault(tool_calls=True)
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    choice = ask(client, "weather?", tools=tools).choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    call = choice.message.tool_calls[0]
    assert call.function.name == "lookup"
    assert json.loads(call.function.arguments) == {"prompt": "weather?"}

    arguments, names, finish = "", [], None
    for chunk in ask(client, "weather?", tools=tools, stream=True):
        for choice in chunk.choices:
            for delta_call in choice.delta.tool_calls or []:
                names.append(delta_call.function.name)
                arguments += delta_call.function.arguments or ""
            finish = choice.finish_reason or finish
    assert names[0] == "lookup"
    assert json.loads(arguments) == {"prompt": "weather?"}
    assert finish == "tool_calls"


def test_latency(standin: StandinUpstream, client: openai.OpenAI) -> None:
    standin.set_fault(latency_s=0.3, chunk_delay_s=0.05)
    start = time.monotonic()
    ask(client, "hi")
    assert time.monotonic() - start >= 0.3
    start = time.monotonic()
    list(ask(client, "one two three", stream=True))
    assert time.monotonic() - start >= 0.3 + 3 * 0.05


def test_hang_before_first_byte(standin: StandinUpstream) -> None:
    standin.set_fault(hang_before_first_byte=True, times=1)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{standin.base_url}/chat/completions", json=chat_body("hi"), timeout=0.3)
    assert httpx.post(f"{standin.base_url}/chat/completions", json=chat_body("hi")).status_code == 200


def test_match_scoping(standin: StandinUpstream, client: openai.OpenAI) -> None:
    standin.set_fault(status=500, match="boom", times=1)
    assert ask(client, "harmless").choices[0].message.content == "Answer to: harmless"
    with pytest.raises(openai.InternalServerError):
        ask(client, "please boom now")
    # times only counts matching requests, and is now used up.
    assert ask(client, "please boom now").choices[0].message.content == "Answer to: please boom now"


def test_times_counts_down(standin: StandinUpstream, client: openai.OpenAI) -> None:
    standin.set_fault(status=502, times=2)
    for _ in range(2):
        with pytest.raises(openai.APIStatusError):
            ask(client, "hi")
    assert ask(client, "hi").choices[0].message.content == "Answer to: hi"
    assert standin.state.fault is None


def test_fault_set_directly_on_state(standin: StandinUpstream, client: openai.OpenAI) -> None:
    standin.state.fault = Fault(finish_reason="length")
    assert ask(client, "hi").choices[0].finish_reason == "length"


# ---------------------------------------------------------------- hostile answers


def sse_events(lines: list[str]) -> list[dict[str, object]]:
    assert all(line.startswith("data: ") for line in lines)
    return [json.loads(line[6:]) for line in lines if line != "data: [DONE]"]


def test_huge_answer_pieces_make_the_whole_answer() -> None:
    text = huge_answer(100_003)
    assert len(text) == len(text.encode()) == 100_003  # ASCII: its bytes are its characters
    assert "".join(huge_answer_pieces(100_003, 777)) == text
    assert json.dumps(text) == f'"{text}"'  # nothing JSON escapes
    assert huge_answer(0) == ""


def test_a_huge_answer_is_sent_in_pieces_streamed_and_not(standin: StandinUpstream) -> None:
    size = 3 * HUGE_PIECE_CHARS + 5
    standin.set_fault(answer_bytes=size)
    response = httpx.post(f"{standin.base_url}/chat/completions", json=chat_body("big"), timeout=10)
    assert "content-length" not in response.headers  # sent in pieces as they are made
    assert response.json()["choices"][0]["message"]["content"] == huge_answer(size)
    assert response.json()["choices"][0]["finish_reason"] == "stop"

    lines = raw_sse_lines(standin, chat_body("big", stream=True))
    assert lines[-1] == "data: [DONE]"
    deltas = [event["choices"][0]["delta"].get("content") for event in sse_events(lines)]  # type: ignore[index]
    assert "".join(d for d in deltas if d) == huge_answer(size)
    assert len([d for d in deltas if d]) == 4


def test_content_after_finish_reason(standin: StandinUpstream) -> None:
    standin.set_fault(content_after_finish=True)
    lines = raw_sse_lines(standin, chat_body("hi", stream=True))
    assert lines[-1] == "data: [DONE]"
    choices = [event["choices"][0] for event in sse_events(lines)]  # type: ignore[index]
    finished_at = next(n for n, choice in enumerate(choices) if choice["finish_reason"] == "stop")
    assert [c["delta"] for c in choices[finished_at + 1 :]] == [{"content": AFTER_FINISH_TEXT}]


def test_extra_choices_and_the_choice_index(standin: StandinUpstream, client: openai.OpenAI) -> None:
    standin.set_fault(extra_choices=1)
    completion = ask(client, "hi")
    assert [c.index for c in completion.choices] == [0, 1]
    assert completion.choices[1].message.content == extra_choice_text(1)

    events = sse_events(raw_sse_lines(standin, chat_body("hi", stream=True)))
    second = [event["choices"][0] for event in events if event["choices"][0]["index"] == 1]  # type: ignore[index]
    assert second == [
        {"index": 1, "delta": {"role": "assistant", "content": extra_choice_text(1)}, "logprobs": None,
         "finish_reason": None}
    ]  # fmt: skip

    standin.set_fault(choice_index=2)
    assert [c.index for c in ask(client, "hi").choices] == [2]
    events = sse_events(raw_sse_lines(standin, chat_body("hi", stream=True)))
    assert {event["choices"][0]["index"] for event in events} == {2}  # type: ignore[index]


def test_errors_that_echo_the_authorization(standin: StandinUpstream) -> None:
    url, headers = f"{standin.base_url}/chat/completions", {"Authorization": "Bearer sk-echoed-1234"}
    standin.set_fault(echo_authorization=True)  # no status: a 401
    response = httpx.post(url, json=chat_body("hi"), headers=headers)
    assert response.status_code == 401
    assert response.json()["error"]["message"] == "Incorrect API key provided: Bearer sk-echoed-1234"

    standin.set_fault(status=403, echo_authorization=True)
    response = httpx.post(url, json=chat_body("hi", stream=True), headers=headers)
    assert response.status_code == 403 and "Bearer sk-echoed-1234" in response.json()["error"]["message"]

    standin.set_fault(error_after_chunks=1, echo_authorization=True)
    with httpx.stream("POST", url, json=chat_body("one two three", stream=True), headers=headers) as streamed:
        lines = [line for line in streamed.iter_lines() if line]
    events = sse_events(lines)
    assert "data: [DONE]" not in lines
    assert [event["choices"][0]["delta"] for event in events[1:-1]] == [{"content": "Answer "}]  # type: ignore[index]
    assert events[-1]["error"]["message"] == "Incorrect API key provided: Bearer sk-echoed-1234"  # type: ignore[index]


def test_hostile_faults_are_validated() -> None:
    for bad in ({"answer_bytes": -1}, {"extra_choices": -1}, {"choice_index": "0"}, {"error_after_chunks": 1.5}):
        with pytest.raises(ValueError):
            Fault.from_dict(bad)


# ---------------------------------------------------------------- control API


def test_control_api_over_http(standin: StandinUpstream, client: openai.OpenAI) -> None:
    response = httpx.post(f"{standin.root_url}/_control", json={"status": 429, "retry_after": 1, "times": 1})
    assert response.status_code == 200 and response.json()["fault"]["status"] == 429
    assert httpx.get(f"{standin.root_url}/_control").json()["fault"]["times"] == 1
    with pytest.raises(openai.RateLimitError):
        ask(client, "hi")
    assert httpx.get(f"{standin.root_url}/_calls").json()["count"] == 1

    assert httpx.post(f"{standin.root_url}/_control", json={"status": 503}).status_code == 200
    assert httpx.post(f"{standin.root_url}/_reset").json() == {"ok": True}
    assert httpx.get(f"{standin.root_url}/_calls").json() == {"count": 0, "calls": []}
    assert ask(client, "hi").choices[0].message.content == "Answer to: hi"


def test_control_api_sets_hostile_faults(standin: StandinUpstream, client: openai.OpenAI) -> None:
    fault = {"answer_bytes": 1000, "content_after_finish": True, "extra_choices": 1, "echo_authorization": False}
    response = httpx.post(f"{standin.root_url}/_control", json=fault)
    assert response.status_code == 200 and response.json()["fault"]["answer_bytes"] == 1000
    completion = ask(client, "hi")
    assert completion.choices[0].message.content == huge_answer(1000) and len(completion.choices) == 2


def test_control_api_rejects_bad_faults(standin: StandinUpstream) -> None:
    assert httpx.post(f"{standin.root_url}/_control", json={"bogus": 1}).status_code == 400
    assert httpx.post(f"{standin.root_url}/_control", json={"answer_bytes": -5}).status_code == 400
    assert httpx.post(f"{standin.root_url}/_control", json={"status": "nope"}).status_code == 400
    assert standin.state.fault is None


# ---------------------------------------------------------------- lifecycle


def test_stop_interrupts_hanging_request() -> None:
    upstream = StandinUpstream(state=StandinState(fault=Fault(hang_before_first_byte=True)))
    upstream.start()
    url = f"{upstream.base_url}/chat/completions"
    outcome: list[object] = []

    def call() -> None:
        try:
            outcome.append(httpx.post(url, json=chat_body("hi"), timeout=30).status_code)
        except httpx.HTTPError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=call)
    thread.start()
    deadline = time.monotonic() + 5
    while upstream.chat_calls() == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    start = time.monotonic()
    upstream.stop()
    thread.join(5)
    assert time.monotonic() - start < 5
    assert not thread.is_alive() and outcome
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{upstream.root_url}/v1/models", timeout=1)


def test_restart_after_stop() -> None:
    upstream = StandinUpstream()
    with upstream:
        first_url = upstream.base_url
        assert httpx.get(f"{first_url}/models").status_code == 200
    with upstream:
        assert httpx.get(f"{upstream.base_url}/models").status_code == 200


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_cli_runs_in_foreground() -> None:
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    command = [sys.executable, "-m", "semcache.testing.standin_upstream", "--port", str(port), "--latency-s", "0.2"]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                response = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=chat_body("cli"), timeout=5)
                break
            except httpx.ConnectError:
                assert process.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
        assert response.json()["choices"][0]["message"]["content"] == "Answer to: cli"
        start = time.monotonic()
        httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=chat_body("cli"), timeout=5)
        assert time.monotonic() - start >= 0.2
    finally:
        process.terminate()
        process.wait(10)
