"""The stand-in upstream's legacy Completions (``/v1/completions``) and Responses API
(``/v1/responses``), streamed and not, with the chat route's faults where they apply: an error
status, latency, a stream cut or ended by an error event, another finish, a tool call instead of text.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from .standin_upstream import (
    DONE_SSE_EVENT,
    MODEL_ID,
    Fault,
    StandinState,
    _AbortableStreamingResponse,
    _AbortStream,
    _error_body,
    _error_response,
    _fault_message,
    _read_json,
    _record,
    _sse,
    _wait_before_answer,
    rough_tokens,
    split_pieces,
)


def add_dialect_routes(app: FastAPI, state: StandinState) -> None:
    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await _answer(state, request, _completion_prompt, _completion_reply)

    @app.post("/v1/responses")
    async def responses(request: Request) -> Response:
        return await _answer(state, request, _responses_prompt, _responses_reply)


async def _answer(state: StandinState, request: Request, prompt_of: Any, reply: Any) -> Response:
    body = await _read_json(request)
    _record(state, request, body)
    if not isinstance(body, dict):
        return _error_response(400, "Request body must be a JSON object.")
    prompt = prompt_of(body)
    fault = state.take_fault(prompt) or Fault()

    async def client_gone() -> bool:
        return state.stopping.is_set() or await request.is_disconnected()

    if not await _wait_before_answer(state, fault, prompt, client_gone):
        return Response(status_code=499)
    if (status := fault.sends_error_status) is not None:
        return _error_response(status, _fault_message(fault, request, f"HTTP {status}"), retry_after=fault.retry_after)
    answer = state.answer_for(prompt)
    events, whole = reply(body, answer, fault, _fault_message(fault, request, "error mid-stream"))
    if body.get("stream"):
        return _AbortableStreamingResponse(_cut(events, fault), media_type="text/event-stream")
    return JSONResponse(whole)


async def _cut(events: Iterator[bytes], fault: Fault) -> AsyncIterator[bytes]:
    """The events, dropping the connection after ``cut_after_chunks`` of them."""
    for number, event in enumerate(events):
        if fault.cut_after_chunks is not None and number >= fault.cut_after_chunks:
            raise _AbortStream
        yield event


# -- legacy completions --------------------------------------------------------------------


def _completion_prompt(body: dict[str, Any]) -> str:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    return prompt if isinstance(prompt, str) else json.dumps(prompt)


def _completion_reply(
    body: dict[str, Any], answer: str, fault: Fault, error: str
) -> tuple[Iterator[bytes], dict[str, Any]]:
    text = f"Completion of: {answer.removeprefix('Answer to: ')}"
    head = {"id": f"cmpl-{uuid.uuid4().hex[:12]}", "object": "text_completion", "created": int(time.time()),
            "model": body.get("model", MODEL_ID)}  # fmt: skip
    finish = fault.finish_reason or "stop"
    tokens = rough_tokens(_completion_prompt(body))
    usage = {"prompt_tokens": tokens, "completion_tokens": rough_tokens(text),
             "total_tokens": tokens + rough_tokens(text)}  # fmt: skip

    def choice(piece: str, finish_reason: str | None) -> dict[str, Any]:
        return {"index": fault.choice_index, "text": piece, "logprobs": None, "finish_reason": finish_reason}

    def events() -> Iterator[bytes]:
        for number, piece in enumerate(split_pieces(text)):
            if fault.error_after_chunks is not None and number >= fault.error_after_chunks:
                yield _sse(_error_body(502, error))
                return
            yield _sse({**head, "choices": [choice(piece, None)]})
        yield _sse({**head, "choices": [choice("", finish)]})
        yield DONE_SSE_EVENT

    return events(), {**head, "choices": [choice(text, finish)], "usage": usage}


# -- the Responses API ---------------------------------------------------------------------


def _responses_prompt(body: dict[str, Any]) -> str:
    """The text of the last user message of ``input``."""
    value = body.get("input")
    if isinstance(value, str):
        return value
    for item in reversed(value if isinstance(value, list) else []):
        if isinstance(item, dict) and item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, str):
                return content
            parts = content if isinstance(content, list) else []
            return "\n".join(str(p.get("text", "")) for p in parts if isinstance(p, dict))
    return ""


def _responses_reply(
    body: dict[str, Any], answer: str, fault: Fault, error: str
) -> tuple[Iterator[bytes], dict[str, Any]]:
    response_id = f"resp_{uuid.uuid4().hex}"
    incomplete = fault.finish_reason not in (None, "stop")
    if fault.tool_calls:
        item: dict[str, Any] = {"id": f"fc_{uuid.uuid4().hex[:12]}", "type": "function_call", "status": "completed",
                                "call_id": f"call_{uuid.uuid4().hex[:12]}", "name": "standin_tool",
                                "arguments": json.dumps({"prompt": _responses_prompt(body)})}  # fmt: skip
    else:
        item = {"id": f"msg_{uuid.uuid4().hex[:12]}", "type": "message", "status": "completed", "role": "assistant",
                "content": [{"type": "output_text", "text": answer, "annotations": []}]}  # fmt: skip
    tokens = rough_tokens(_responses_prompt(body))
    base = {"id": response_id, "object": "response", "created_at": int(time.time()),
            "model": body.get("model", MODEL_ID), "error": None, "incomplete_details": None,
            "instructions": body.get("instructions"), "output": []}  # fmt: skip
    final = {**base, "status": "incomplete" if incomplete else "completed", "output": [item],
             "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
             "usage": {"input_tokens": tokens, "output_tokens": rough_tokens(answer),
                       "total_tokens": tokens + rough_tokens(answer)}}  # fmt: skip

    def named(event: dict[str, Any]) -> bytes:
        return f"event: {event['type']}\n".encode() + _sse(event)

    def events() -> Iterator[bytes]:
        sequence = itertools.count()

        def event(kind: str, **fields: Any) -> bytes:
            return named({"type": kind, "sequence_number": next(sequence), **fields})

        yield event("response.created", response={**base, "status": "in_progress"})
        yield event("response.in_progress", response={**base, "status": "in_progress"})
        yield event("response.output_item.added", output_index=0, item={**item, "status": "in_progress"}
                    | ({"content": []} if item["type"] == "message" else {}))  # fmt: skip
        if item["type"] == "message":
            where = {"item_id": item["id"], "output_index": 0, "content_index": 0}
            yield event("response.content_part.added", **where, part={"type": "output_text", "text": ""})
            for number, piece in enumerate(split_pieces(answer)):
                if fault.error_after_chunks is not None and number >= fault.error_after_chunks:
                    yield named({"type": "error", "sequence_number": next(sequence), "code": "server_error",
                                 "message": error, "param": None})  # fmt: skip
                    return
                yield event("response.output_text.delta", **where, delta=piece, logprobs=[])
            yield event("response.output_text.done", **where, text=answer, logprobs=[])
            yield event("response.content_part.done", **where, part=item["content"][0])
        yield event("response.output_item.done", output_index=0, item=item)
        yield event("response.incomplete" if incomplete else "response.completed", response=final)

    return events(), final
