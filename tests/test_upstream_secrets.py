"""An upstream that quotes the key semcache sends it never hands that key to a client: not in an
error of any shape, not in an answer, streamed or not (docs/security.md, "Secrets stay put")."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from semcache.errors import UpstreamStatusError
from semcache.logs import Redactor
from semcache.scrubbing import SecretScrubber
from semcache.upstreams.remote import RemoteUpstream, parse_sse

KEY = "UPKEY-9f8e7d6c5b4a3210"  # no sk- prefix: only the literal match can catch it
REDACT = Redactor([KEY])
SCRUB = SecretScrubber([KEY])


async def events(*payloads: dict[str, Any]) -> AsyncIterator[bytes]:
    for payload in payloads:
        yield b"data: " + json.dumps(payload).encode() + b"\n\n"
    yield b"data: [DONE]\n\n"


def relayed(*payloads: dict[str, Any]) -> list[dict[str, Any]]:
    async def collect() -> list[dict[str, Any]]:
        return [chunk async for chunk in parse_sse(events(*payloads), REDACT, scrub=SCRUB)]

    return asyncio.run(collect())


def chunk(content: str, **extra: Any) -> dict[str, Any]:
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": content}}], **extra}


@pytest.mark.parametrize(
    "event",
    [
        {"error": {"message": f"Incorrect API key provided: Bearer {KEY}", "type": "auth", "code": None}},
        {"object": "error", "message": f"Incorrect API key {KEY}", "type": "BadRequestError", "code": 401},
    ],
    ids=["openai-shape", "vllm-shape"],
)
def test_an_error_event_of_either_shape_ends_the_stream_scrubbed(event: dict[str, Any]) -> None:
    with pytest.raises(UpstreamStatusError) as raised:
        relayed(chunk("Hello"), event)
    assert KEY not in json.dumps(raised.value.to_openai()) and KEY not in json.dumps(raised.value.body)


def test_the_key_in_any_field_of_a_stream_event_is_scrubbed() -> None:
    escaped = "".join(f"\\u{ord(c):04x}" for c in KEY)  # the key behind JSON escapes
    chunks = relayed(chunk(f"your key is {KEY}"), chunk("fine", warning=f"key {KEY}"), chunk("", note=escaped))
    text = json.dumps(chunks)
    assert KEY not in text and "[redacted]" in text
    assert KEY not in json.dumps(json.loads(json.dumps(chunks)))
    assert chunks[1]["choices"][0]["delta"]["content"] == "fine"  # other text is untouched


def test_a_non_streamed_answer_that_quotes_the_key_is_scrubbed() -> None:
    answer = {
        "id": "x",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": f"Sure: {KEY}"}, "finish_reason": "stop"}],
    }

    def reply(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=answer)

    async def ask() -> dict[str, Any]:
        upstream = RemoteUpstream("http://upstream.test/v1", api_key=KEY, redact=REDACT, scrub=SCRUB,
                                  transport=httpx.MockTransport(reply))  # fmt: skip
        try:
            return await upstream.complete({"model": "m", "messages": []}, {})
        finally:
            await upstream.close()

    result = asyncio.run(ask())
    assert KEY not in json.dumps(result)
    assert result["choices"][0]["message"]["content"] == "Sure: [redacted]"


def test_with_the_operators_key_a_client_chooses_no_organization_or_project() -> None:
    seen: list[httpx.Headers] = []

    def reply(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers)
        return httpx.Response(
            200, json={"choices": [{"index": 0, "message": {"content": "ok"}, "finish_reason": "stop"}]}
        )

    async def ask(api_key: str | None) -> None:
        upstream = RemoteUpstream("http://upstream.test/v1", api_key=api_key, transport=httpx.MockTransport(reply))
        client = {"authorization": "Bearer client-key", "openai-organization": "org-x", "openai-project": "proj-y"}
        try:
            await upstream.complete({"model": "m", "messages": []}, client)
        finally:
            await upstream.close()

    asyncio.run(ask(KEY))
    asyncio.run(ask(None))
    operators, clients = seen
    assert operators["authorization"] == f"Bearer {KEY}"
    assert "openai-organization" not in operators and "openai-project" not in operators
    assert (clients["authorization"], clients["openai-project"]) == ("Bearer client-key", "proj-y")
