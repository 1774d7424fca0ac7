"""A hostile upstream that hands back the key it was sent, in successful answers of every route.

Each answer quotes the Bearer token of the request (``Your key is <key>, keep it safe.``) in a
*shape* the prompt names (``shape:<name>`` anywhere in it): split across stream events
(``split-events``, ``one-char``, ``with-finish``), cut between network writes inside one event
(``split-chunks``), behind JSON ``\\u`` escapes (``escaped``), in other fields (``fields``), in tool
call arguments (``tool``), in two interleaved choices (``two-choices``); ``big`` quotes it
throughout a large answer, and ``none`` not at all. Model lists, pass-through JSON and audio quote it
too. Run it in its own process: ``python -m testkit.key_echo_upstream --port N``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse

WRITE_GAP_S = 0.02  # between the writes of a cut event, so that they arrive as separate chunks
BIG_REPEATS = 4000  # how many times ``big`` quotes the key


def answer_text(key: str) -> str:
    return f"Your key is {key}, keep it safe."


def scrubbed_text() -> str:
    """What a client must read instead of ``answer_text``."""
    return "Your key is [redacted], keep it safe."


def escaped(text: str) -> str:
    """``text`` as a JSON string's inside, every character a ``\\u`` escape."""
    return "".join(f"\\u{ord(char):04X}" for char in text)


def _key(request: Request) -> str:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def _shape(text: str) -> str:
    found = re.search(r"shape:([a-z-]+)", text)
    return found.group(1) if found else "split-events"


def _pieces(shape: str, key: str) -> list[str]:
    text = answer_text(key)
    if shape == "one-char":
        return list(text)
    if shape in ("split-chunks", "none"):
        return [text if shape != "none" else "Nothing secret here."]
    if shape == "big":
        halves = ((f"Piece {n}: your key is {key[: n % 9 + 1]}", f"{key[n % 9 + 1 :]}, keep it safe. ")
                  for n in range(BIG_REPEATS))  # fmt: skip
        return [half for pair in halves for half in pair]
    return ["Your key is ", key[:4], key[4:11], key[11:], ", keep it safe."]


def _dumps(value: Any, key: str, escape: bool) -> bytes:
    """JSON; with ``escape``, each whole key and each piece of it spelled with ``\\u`` escapes."""
    data = json.dumps(value)
    if escape and key:
        data = re.sub(r'"((?:[^"\\]|\\.)*)"', lambda m: '"' + _escape_key_parts(m.group(1), key) + '"', data)
    return data.encode()


def _escape_key_parts(inside: str, key: str) -> str:
    if inside and inside in key:
        return escaped(inside)
    return inside.replace(key, escaped(key))


async def _writes(parts: list[bytes]) -> AsyncIterator[bytes]:
    for number, part in enumerate(parts):
        if number:
            await asyncio.sleep(WRITE_GAP_S)
        yield part


def _cut_in_key(data: bytes, key: str) -> list[bytes]:
    """``data`` in writes cut inside each quote of the key (a few characters into it)."""
    if not key:
        return [data]
    parts, start = [], 0
    for found in re.finditer(re.escape(key[:9].encode()), data):
        parts.append(data[start : found.start() + 5])
        start = found.start() + 5
    return [*parts, data[start:]]


def _sse(events: list[dict[str, Any]], key: str, shape: str, named: bool = False, done: bool = True) -> Response:
    escape = shape == "escaped"
    blocks = []
    for event in events:
        head = f"event: {event['type']}\n".encode() if named else b""
        blocks.append(head + b"data: " + _dumps(event, key, escape) + b"\n\n")
    if done:
        blocks.append(b"data: [DONE]\n\n")
    if shape == "split-chunks":
        body = _writes(_cut_in_key(b"".join(blocks), key))
    elif shape == "big":
        body = _writes([b"".join(blocks[i : i + 200]) for i in range(0, len(blocks), 200)])
    else:
        body = _writes(blocks)
    return StreamingResponse(body, media_type="text/event-stream")


def _json(value: Any, key: str, shape: str) -> Response:
    data = _dumps(value, key, shape == "escaped")
    if shape == "split-chunks":
        return StreamingResponse(_writes(_cut_in_key(data, key)), media_type="application/json")
    return Response(data, media_type="application/json")


def _chat(body: dict[str, Any], key: str) -> Response:
    prompt = str(body.get("messages", [{}])[-1].get("content", ""))
    shape = _shape(prompt)
    head = {"id": "chatcmpl-echo", "object": "chat.completion.chunk", "created": int(time.time()),
            "model": body.get("model", "echo")}  # fmt: skip
    if not body.get("stream"):
        message: dict[str, Any] = {"role": "assistant", "content": "".join(_pieces(shape, key))}
        finish = "stop"
        extra: dict[str, Any] = {}
        if shape == "fields":
            message["content"] = "Nothing to see."
            extra = {"system_fingerprint": key, "echo": {key: [f"Bearer {key}"]}}
        elif shape == "tool":
            message = {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
                       "function": {"name": "remember", "arguments": json.dumps({"key": key})}}]}  # fmt: skip
            finish = "tool_calls"
        choice = {"index": 0, "message": message, "finish_reason": finish}
        return _json({**head, "object": "chat.completion", "choices": [choice], **extra}, key, shape)
    events = []

    def chunk(index: int, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": index, "delta": delta, "finish_reason": finish}]}

    if shape == "tool":
        arguments = json.dumps({"key": key})
        cut = arguments.index(key) + 6
        events.append(chunk(0, {"role": "assistant", "tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                "function": {"name": "remember", "arguments": arguments[:cut]}}]}))  # fmt: skip
        events.append(chunk(0, {"tool_calls": [{"index": 0, "function": {"arguments": arguments[cut:]}}]}))
        events.append(chunk(0, {}, "tool_calls"))
    elif shape == "two-choices":
        first, second = _pieces("split-events", key), _pieces("one-char", key)
        for number in range(max(len(first), len(second))):
            for index, pieces in ((0, first), (1, second)):
                if number < len(pieces):
                    events.append(chunk(index, {"content": pieces[number]}))
        events += [chunk(0, {}, "stop"), chunk(1, {}, "stop")]
    elif shape == "with-finish":
        text = answer_text(key)
        cut = text.index(key) + 6
        events += [chunk(0, {"role": "assistant", "content": text[:cut]}), chunk(0, {"content": text[cut:]}, "stop")]
    else:
        events += [chunk(0, {"content": piece}) for piece in _pieces(shape, key)]
        events.append(chunk(0, {}, "stop"))
    return _sse(events, key, shape)


def _completion(body: dict[str, Any], key: str) -> Response:
    shape = _shape(str(body.get("prompt", "")))
    head = {"id": "cmpl-echo", "object": "text_completion", "created": int(time.time()),
            "model": body.get("model", "echo")}  # fmt: skip

    def choice(text: str, finish: str | None) -> dict[str, Any]:
        return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}

    pieces = _pieces(shape, key)
    if not body.get("stream"):
        return _json({**head, "choices": [choice("".join(pieces), "stop")]}, key, shape)
    events = [{**head, "choices": [choice(piece, None)]} for piece in pieces]
    return _sse([*events, {**head, "choices": [choice("", "stop")]}], key, shape)


def _responses(body: dict[str, Any], key: str) -> Response:
    shape = _shape(json.dumps(body.get("input", "")))
    pieces = _pieces(shape, key)
    text = "".join(pieces)
    item = {"id": "msg_echo", "type": "message", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}  # fmt: skip
    base = {"id": "resp_echo", "object": "response", "created_at": int(time.time()), "model": body.get("model", "echo"),
            "error": None, "incomplete_details": None, "output": []}  # fmt: skip
    final = {**base, "status": "completed", "output": [item],
             "usage": {"input_tokens": 5, "output_tokens": 10, "total_tokens": 15}}  # fmt: skip
    if not body.get("stream"):
        return _json(final, key, shape)
    where = {"item_id": "msg_echo", "output_index": 0, "content_index": 0}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": {**base, "status": "in_progress"}},
        {"type": "response.output_item.added", "output_index": 0, "item": {**item, "content": []}},
        {"type": "response.content_part.added", **where, "part": {"type": "output_text", "text": ""}},
        *({"type": "response.output_text.delta", **where, "delta": piece, "logprobs": []} for piece in pieces),
        {"type": "response.output_text.done", **where, "text": text, "logprobs": []},
        {"type": "response.content_part.done", **where, "part": item["content"][0]},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {"type": "response.completed", "response": final},
    ]
    for number, event in enumerate(events):
        event["sequence_number"] = number
    return _sse(events, key, shape, named=True, done=False)


def create_app() -> FastAPI:
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        return _chat(await request.json(), _key(request))

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return _completion(await request.json(), _key(request))

    @app.post("/v1/responses")
    async def responses(request: Request) -> Response:
        return _responses(await request.json(), _key(request))

    @app.get("/v1/models")
    async def models(request: Request) -> Response:
        key = _key(request)
        data = [{"id": "echo-model", "object": "model", "owned_by": key},
                {"id": key, "object": "model", "owned_by": "echo"},
                {"id": "echo-escaped", "object": "model", "owned_by": escaped(key)},
                {"id": "echo-keyed", "object": "model", "owned_by": "echo", "permissions": {key: True}}]  # fmt: skip
        raw = json.dumps({"object": "list", "data": data}).replace(json.dumps(escaped(key)), f'"{escaped(key)}"')
        return Response(raw.encode(), media_type="application/json")

    @app.get("/v1/models/{model}")
    async def model(model: str, request: Request) -> Response:
        key = _key(request)
        return _json({"id": model, "object": "model", "owned_by": f"whoever holds {key}"}, key, _shape(model))

    @app.post("/v1/moderations")
    async def moderations(request: Request) -> Response:
        body, key = await request.json(), _key(request)
        shape = _shape(str(body.get("input", "")))
        if shape == "big":
            results = [{"flagged": False, "note": f"{n}: {escaped(key)} and {key}"} for n in range(BIG_REPEATS * 10)]
            raw = json.dumps({"id": "modr-echo", "results": results}).replace("\\\\u", "\\u")
            return StreamingResponse(_writes([raw[i : i + 65536].encode() for i in range(0, len(raw), 65536)]),
                                     media_type="application/json")  # fmt: skip
        return _json({"id": "modr-echo", "results": [{"flagged": False, "note": answer_text(key)}]}, key, shape)

    @app.post("/v1/embeddings")
    async def embeddings(request: Request) -> Response:
        body, key = await request.json(), _key(request)
        answer = {"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": [0.6, 0.8]}],
                  "model": key, "usage": {"prompt_tokens": 1, "total_tokens": 1}}  # fmt: skip
        return _json(answer, key, _shape(str(body.get("input", ""))))

    @app.post("/v1/audio/speech")
    async def speech(request: Request) -> Response:
        key = _key(request).encode()
        audio = bytes(range(256)) + key + bytes(range(255, -1, -1)) + key + b"\xff\xfe"
        return StreamingResponse(_writes(_cut_in_key(audio, key.decode())), media_type="audio/mpeg")

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(create_app(), host="127.0.0.1", port=args.port, log_level="warning", lifespan="off")


if __name__ == "__main__":
    main()
