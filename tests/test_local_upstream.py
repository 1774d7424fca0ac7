"""Tests for semcache.upstreams.local.LocalUpstream, on a tiny random GPT-2 built on the spot (no download)."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from semcache.errors import InvalidRequest, UpstreamError, UpstreamUnavailable
from semcache.protocols import Upstream
from semcache.upstreams.local import LocalUpstream, transcript
from testkit.tiny_model import build_tiny_causal_lm

PROMPTS = [
    "hi",
    "the cat sat on the mat and then",
    "hello world",
    "a dog ran in the park",
    "semantic caches answer repeated questions about dogs and cats",
    "x",
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_causal_lm(tmp_path_factory.mktemp("tiny-gpt2"))


@pytest.fixture
async def upstream(model_dir: Path) -> AsyncIterator[LocalUpstream]:
    local = LocalUpstream(model_dir, batch_window_ms=100, max_new_tokens_default=16)
    yield local
    await local.close()


class Steps:
    """Forward passes of the model, counted from the model thread."""

    def __init__(self) -> None:
        self.count = 0
        self.started = threading.Event()

    async def wait_started(self) -> None:
        assert await asyncio.to_thread(self.started.wait, 10)


@pytest.fixture
def slow_steps(upstream: LocalUpstream) -> Iterator[Steps]:
    """Make each forward pass take 10 ms, so a client can act while its batch runs."""
    steps = Steps()

    def hook(*_: Any) -> None:
        steps.count += 1
        steps.started.set()
        time.sleep(0.01)

    handle = upstream.model.register_forward_hook(hook)
    yield steps
    handle.remove()


def chat(prompt: str, **extra: Any) -> dict[str, Any]:
    return {"model": "anything", "messages": [{"role": "user", "content": prompt}], **extra}


def content(answer: dict[str, Any]) -> str:
    return str(answer["choices"][0]["message"]["content"])


async def collect(chunks: AsyncIterator[dict[str, Any]]) -> list[dict[str, Any]]:
    return [chunk async for chunk in chunks]


def assembled(chunks: list[dict[str, Any]]) -> str:
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


async def solo(upstream: LocalUpstream, prompt: str, **extra: Any) -> dict[str, Any]:
    """One request alone in its batch."""
    calls = upstream.generate_calls
    answer = await upstream.complete(chat(prompt, **extra), {})
    assert upstream.generate_calls == calls + 1
    return answer


# ---------------------------------------------------------------------- batching


@pytest.mark.slow
async def test_concurrent_completions_share_generate_calls(upstream: LocalUpstream) -> None:
    answers = await asyncio.gather(*(upstream.complete(chat(p, max_tokens=12), {}) for p in PROMPTS))
    assert upstream.generate_calls < len(PROMPTS)
    assert upstream.generate_calls == 1  # all six arrived within one batch window
    alone = [await solo(upstream, p, max_tokens=12) for p in PROMPTS]
    assert [content(a) for a in answers] == [content(a) for a in alone]
    assert len({content(a) for a in alone}) > 1  # the prompts lead somewhere different


@pytest.mark.slow
async def test_completion_is_in_the_openai_shape(upstream: LocalUpstream) -> None:
    answer = await upstream.complete(chat("hello world", max_tokens=7), {})
    assert answer["id"].startswith("chatcmpl-")
    assert answer["object"] == "chat.completion"
    assert isinstance(answer["created"], int)
    assert answer["model"] == upstream.model_name == answer["model"]
    choice = answer["choices"][0]
    assert choice["index"] == 0
    assert choice["message"]["role"] == "assistant"
    assert choice["finish_reason"] == "length"
    prompt_tokens = len(upstream.prompt_ids([{"role": "user", "content": "hello world"}]))
    assert answer["usage"] == {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": 7,
        "total_tokens": prompt_tokens + 7,
    }


@pytest.mark.slow
async def test_greedy_and_sampled_requests_share_a_batch(upstream: LocalUpstream) -> None:
    greedy = [content(await solo(upstream, p, max_tokens=8)) for p in PROMPTS[:3]]
    calls = upstream.generate_calls
    torch.manual_seed(1)
    answers = await asyncio.gather(
        upstream.complete(chat(PROMPTS[0], max_tokens=8), {}),
        upstream.complete(chat(PROMPTS[1], max_tokens=8, temperature=1.5, top_p=1e-6), {}),  # only the best token
        upstream.complete(chat(PROMPTS[2], max_tokens=8, temperature=0.9), {}),
        upstream.complete(chat(PROMPTS[2], max_tokens=8, temperature=2, top_p=0.5), {}),
    )
    assert upstream.generate_calls == calls + 1
    assert content(answers[0]) == greedy[0]  # a greedy row in a sampled batch still takes the argmax
    assert content(answers[1]) == greedy[1]  # top_p tiny: sampling can only pick the likeliest token
    assert all(answer["usage"]["completion_tokens"] == 8 for answer in answers)


async def test_temperature_spreads_the_choices(upstream: LocalUpstream) -> None:
    torch.manual_seed(2)
    hot = await asyncio.gather(*(upstream.complete(chat("hi", max_tokens=8, temperature=2), {}) for _ in range(4)))
    assert len({content(answer) for answer in hot}) > 1


# ---------------------------------------------------------------------- streaming


@pytest.mark.slow
async def test_concurrent_streams_each_get_their_own_answer(upstream: LocalUpstream) -> None:
    alone = [content(await solo(upstream, p, max_tokens=10)) for p in PROMPTS[:4]]
    calls = upstream.generate_calls
    streams = await asyncio.gather(*(collect(upstream.stream(chat(p, max_tokens=10), {})) for p in PROMPTS[:4]))
    assert upstream.generate_calls == calls + 1
    assert [assembled(chunks) for chunks in streams] == alone
    for chunks in streams:
        assert len({chunk["id"] for chunk in chunks}) == 1
        assert len(chunks) > 3  # role, several pieces, finish: the text arrived token by token


@pytest.mark.slow
async def test_stream_starts_with_a_role_and_ends_with_finish_then_usage(upstream: LocalUpstream) -> None:
    chunks = await collect(
        upstream.stream(chat("hello world", max_tokens=6, stream_options={"include_usage": True}), {})
    )
    assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(chunk["choices"][0]["finish_reason"] is None for chunk in chunks[:-2])
    assert chunks[-2]["choices"][0] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "length"}
    assert chunks[-1]["choices"] == []
    prompt_tokens = len(upstream.prompt_ids([{"role": "user", "content": "hello world"}]))
    assert chunks[-1]["usage"] == {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": 6,
        "total_tokens": prompt_tokens + 6,
    }

    plain = await collect(upstream.stream(chat("hello world", max_tokens=6), {}))
    assert plain[-1]["choices"][0]["finish_reason"] == "length"
    assert all(chunk["choices"] for chunk in plain)
    assert assembled(plain) == assembled(chunks)


# ---------------------------------------------------------------------- limits and stops


@pytest.mark.slow
async def test_max_tokens_cuts_with_length(upstream: LocalUpstream) -> None:
    short, longer = await asyncio.gather(
        upstream.complete(chat("hello world", max_tokens=3), {}),
        upstream.complete(chat("hello world", max_completion_tokens=9, max_tokens=3), {}),
    )
    assert upstream.generate_calls == 1  # one batch runs for its greediest member
    assert short["choices"][0]["finish_reason"] == longer["choices"][0]["finish_reason"] == "length"
    assert short["usage"]["completion_tokens"] == 3
    assert longer["usage"]["completion_tokens"] == 9  # max_completion_tokens wins over max_tokens


@pytest.mark.slow
async def test_default_length_is_max_new_tokens_default(upstream: LocalUpstream) -> None:
    answer = await upstream.complete(chat("hello world"), {})
    assert answer["usage"]["completion_tokens"] == upstream.max_new_tokens_default == 16


@pytest.mark.slow
async def test_stop_string_truncates_with_stop(upstream: LocalUpstream) -> None:
    full = content(await solo(upstream, "the cat sat on the mat and then", max_tokens=16))
    stop = full[6:9]
    expected = full[: full.find(stop)]
    answer = await upstream.complete(
        chat("the cat sat on the mat and then", max_tokens=16, stop=[stop, "never seen"]), {}
    )
    assert content(answer) == expected
    assert answer["choices"][0]["finish_reason"] == "stop"
    chunks = await collect(upstream.stream(chat("the cat sat on the mat and then", max_tokens=16, stop=stop), {}))
    assert assembled(chunks) == expected
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


@pytest.mark.slow
async def test_end_of_sequence_finishes_with_stop(upstream: LocalUpstream, model_dir: Path, tmp_path: Path) -> None:
    messages = [{"role": "user", "content": "hello world"}]
    prompt = torch.tensor([upstream.prompt_ids(messages)], device=upstream.model.device)
    with torch.no_grad():
        generated = upstream.model.generate(  # type: ignore[operator]
            input_ids=prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=6,
            do_sample=False,
            pad_token_id=upstream.pad_token_id,
        )[0, -6:].tolist()
    # A copy of the model whose end-of-sequence token is one that greedy decoding reaches.
    eos = generated[3]
    first = generated.index(eos)
    copy = tmp_path / "eos-model"
    shutil.copytree(model_dir, copy)
    (copy / "generation_config.json").write_text(json.dumps({"eos_token_id": eos, "pad_token_id": 1}))
    with_eos = LocalUpstream(copy, batch_window_ms=0)
    try:
        answer = await with_eos.complete({"messages": messages, "max_tokens": 12}, {})
    finally:
        await with_eos.close()
    assert answer["choices"][0]["finish_reason"] == "stop"
    assert answer["usage"]["completion_tokens"] == first + 1  # the end-of-sequence token counts
    if first:
        assert content(answer) == content(await upstream.complete({"messages": messages, "max_tokens": first}, {}))
    else:
        assert content(answer) == ""


# ---------------------------------------------------------------------- cancellation


@pytest.mark.slow
@pytest.mark.usefixtures("slow_steps")
async def test_a_cancelled_stream_does_not_disturb_its_batch(upstream: LocalUpstream) -> None:
    prompts = PROMPTS[:3]
    alone = [content(await solo(upstream, p, max_tokens=20)) for p in prompts]
    calls = upstream.generate_calls
    quitter = upstream.stream(chat("a dog ran in the park", max_tokens=20), {})

    async def read_two_then_leave() -> list[dict[str, Any]]:
        chunks = [await anext(quitter), await anext(quitter)]
        await quitter.aclose()  # what the HTTP layer does when the client disconnects
        return chunks

    *streams, left = await asyncio.gather(
        *(collect(upstream.stream(chat(p, max_tokens=20), {})) for p in prompts), read_two_then_leave()
    )
    assert upstream.generate_calls == calls + 1  # the leaver really was in the batch
    assert [assembled(chunks) for chunks in streams] == alone
    assert all(chunks[-1]["choices"][0]["finish_reason"] == "length" for chunks in streams)
    assert len(left) == 2


@pytest.mark.slow
async def test_a_batch_whose_clients_all_left_stops_early(upstream: LocalUpstream, slow_steps: Steps) -> None:
    stream = upstream.stream(chat("hello world", max_tokens=100), {})
    await anext(stream)  # the role chunk
    await anext(stream)  # the first piece of text: generation is under way
    await stream.aclose()
    await upstream.close()  # waits for the model thread to go idle
    assert slow_steps.count < 20


@pytest.mark.slow
async def test_a_cancelled_completion_leaves_the_queue(upstream: LocalUpstream, slow_steps: Steps) -> None:
    task = asyncio.create_task(upstream.complete(chat("hello world", max_tokens=100), {}))
    await slow_steps.wait_started()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    answer = await upstream.complete(chat("hi", max_tokens=2), {})  # the next request is served promptly
    assert answer["usage"]["completion_tokens"] == 2
    assert slow_steps.count < 30


# ---------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (chat("hi", n=2), "n must be 1"),
        (chat("hi", tools=[{"type": "function", "function": {"name": "f"}}]), "tools"),
        (chat("hi", max_tokens=0), "max_tokens"),
        (chat("hi", max_tokens=True), "max_tokens"),
        (chat("hi", temperature=3), "temperature"),
        (chat("hi", top_p="high"), "top_p"),
        (chat("hi", stop=["a", "b", "c", "d", "e"]), "at most 4"),
        (chat("hi", stop=[1]), "stop"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}, "text only"),
    ],
)
async def test_unsupported_requests_are_invalid(upstream: LocalUpstream, body: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        await upstream.complete(body, {})
    with pytest.raises(InvalidRequest, match=message):
        await anext(upstream.stream(body, {}))
    assert upstream.generate_calls == 0


async def test_a_prompt_longer_than_the_context_is_invalid(upstream: LocalUpstream) -> None:
    with pytest.raises(InvalidRequest, match="context holds 128") as caught:
        await upstream.complete(chat("the cat sat on the mat " * 30), {})
    assert caught.value.code == "context_length_exceeded"
    with pytest.raises(InvalidRequest, match="context holds 128"):
        await anext(upstream.stream(chat("the cat sat on the mat " * 30), {}))
    with pytest.raises(InvalidRequest, match="max_tokens asks for 120 more"):
        await upstream.complete(chat("the cat sat on the mat", max_tokens=120), {})
    assert upstream.generate_calls == 0


@pytest.mark.slow
async def test_a_model_failure_is_an_upstream_error(upstream: LocalUpstream, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(**_: Any) -> None:
        raise RuntimeError("the model fell over")

    monkeypatch.setattr(upstream.model, "generate", broken)
    with pytest.raises(UpstreamError, match="the local model failed: RuntimeError") as caught:
        await upstream.complete(chat("hi"), {})
    assert caught.value.status_code == 500
    assert isinstance(caught.value.__cause__, RuntimeError)
    monkeypatch.undo()
    assert content(await upstream.complete(chat("hi", max_tokens=2), {})) is not None  # the backend still works


@pytest.mark.slow
async def test_close_fails_waiting_requests_and_refuses_new_ones(upstream: LocalUpstream, slow_steps: Steps) -> None:
    running = asyncio.create_task(upstream.complete(chat("hello world", max_tokens=100), {}))
    await slow_steps.wait_started()
    await upstream.close()
    with pytest.raises(UpstreamUnavailable, match="shut down during the request"):
        await running
    with pytest.raises(UpstreamUnavailable, match="has been shut down"):
        await upstream.complete(chat("hi"), {})


def test_a_missing_model_folder_is_reported(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no model folder"):
        LocalUpstream(tmp_path / "nowhere")


# ---------------------------------------------------------------------- prompts and models


async def test_list_models(upstream: LocalUpstream, model_dir: Path) -> None:
    seam: Upstream = upstream  # mypy checks that LocalUpstream fits the protocol
    assert await seam.list_models({}) == {
        "object": "list",
        "data": [{"id": model_dir.name, "object": "model", "owned_by": "local"}],
    }


def test_without_a_chat_template_the_prompt_is_a_transcript(upstream: LocalUpstream) -> None:
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    assert transcript(messages) == "system: be brief\nuser: hi\nassistant:"
    assert upstream.prompt_ids(messages) == upstream.tokenizer(transcript(messages))["input_ids"]


def test_a_chat_template_builds_the_prompt(upstream: LocalUpstream) -> None:
    upstream.tokenizer.chat_template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>"
    expected = upstream.tokenizer("<user>hi<assistant>", add_special_tokens=False)["input_ids"]
    assert upstream.prompt_ids([{"role": "user", "content": "hi"}]) == expected


async def test_a_template_that_refuses_the_messages_is_an_invalid_request(upstream: LocalUpstream) -> None:
    upstream.tokenizer.chat_template = "{{ raise_exception('system messages are not supported') }}"
    with pytest.raises(InvalidRequest, match="system messages are not supported"):
        await upstream.complete({"messages": [{"role": "system", "content": "hi"}]}, {})
