"""OpenAI Chat Completions request and response shapes, at the HTTP edge.

Requests are validated strictly enough to give clear 400s, and loosely enough that fields this
module does not know about pass through to the upstream untouched.
"""

from __future__ import annotations

import re
import secrets
import time
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import from_json

from .errors import InvalidRequest

# Ceilings that keep validation itself cheap: pydantic checks a list's length before its items only
# when it has one, and with fail_fast stops at a list's first bad item instead of collecting an error
# for each of a million. The limits in force are settings (max_messages, max_tools), at most these.
MAX_MESSAGES = 10_000
MAX_TOOLS = 1024
MAX_CONTENT_PARTS = 1024
MAX_STOP_SEQUENCES = 64
# pydantic-core's JSON parser refuses nesting much deeper than this by itself; max_json_depth stays under it.
MAX_JSON_DEPTH = 128
# Arrays and objects in one body: far more than 2,048 messages with their parts and 128 tools use.
DEFAULT_MAX_JSON_CONTAINERS = 50_000

# The longest model name a request may give.
MAX_MODEL_CHARS = 256


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = None


class Message(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | Annotated[list[ContentPart], Field(max_length=MAX_CONTENT_PARTS, fail_fast=True)] | None = None
    name: str | None = None


class ChatCompletionRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1, max_length=MAX_MODEL_CHARS)
    messages: list[Message] = Field(min_length=1, max_length=MAX_MESSAGES, fail_fast=True)
    stream: bool = False
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    n: int | None = Field(None, ge=1, le=128)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stop: str | Annotated[list[str], Field(max_length=MAX_STOP_SEQUENCES, fail_fast=True)] | None = None
    seed: int | None = None
    tools: list[dict[str, Any]] | None = Field(None, max_length=MAX_TOOLS, fail_fast=True)
    tool_choice: str | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    stream_options: dict[str, Any] | None = None
    user: str | None = None

    def upstream_body(self) -> dict[str, Any]:
        """The body to forward: what the client sent, minus unset optional fields."""
        return self.model_dump(exclude_unset=True, exclude_none=False)

    def include_usage_in_stream(self) -> bool:
        return bool(self.stream_options and self.stream_options.get("include_usage"))

    def content_chars(self) -> int:
        """Characters of text in every message: strings, and the text of content parts."""
        total = 0
        for message in self.messages:
            if isinstance(message.content, str):
                total += len(message.content)
            elif message.content is not None:
                total += sum(len(part.text or "") for part in message.content)
        return total


class CompletionRequest(BaseModel):
    """A legacy Completions request (``/v1/completions``); fields it does not name pass through."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1, max_length=MAX_MODEL_CHARS)
    prompt: str | list[str] | list[int] | list[list[int]] = Field(
        description="One text is cached; token ids or several prompts are passed on untouched."
    )
    stream: bool = False


class ResponsesRequest(BaseModel):
    """A Responses API request (``/v1/responses``); fields it does not name pass through."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1, max_length=MAX_MODEL_CHARS)
    input: str | Annotated[list[dict[str, Any]], Field(max_length=MAX_MESSAGES, fail_fast=True)] | None = None
    instructions: str | None = None
    previous_response_id: str | None = None
    stream: bool = False


def parse_json_body(raw: bytes, max_depth: int, max_containers: int = DEFAULT_MAX_JSON_CONTAINERS) -> Any:
    """The JSON value of a request body, or a 400 that says what is wrong with it.

    Stricter than ``json.loads``: the body must be UTF-8, with no NaN or Infinity and no lone
    surrogate escapes (text that cannot be hashed, stored or forwarded), nested at most ``max_depth``
    levels deep, with at most ``max_containers`` arrays and objects. pydantic-core's parser stops on
    its own at about 200 levels, so a 100,000-deep ``[[[...]]]`` costs microseconds, never the stack;
    but it builds every container it reads while holding the GIL, so a few MB of ``[[],[],...]``
    would hold the event loop for seconds: they are counted first, outside strings, in one pass.
    """
    if _containers(raw) > max_containers:
        raise InvalidRequest(
            f"the JSON body holds more than {max_containers} arrays and objects", code="json_too_large"
        )
    try:
        value = from_json(raw, allow_inf_nan=False)
    except ValueError as exc:
        if "recursion limit" in str(exc):
            raise _too_deep(max_depth) from exc
        raise InvalidRequest(f"the request body is not valid JSON: {exc}", code="invalid_json") from exc
    if _nested_deeper_than(value, max_depth):
        raise _too_deep(max_depth)
    return value


# A JSON string, escapes and all, matched without backtracking.
_JSON_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+"')


def _containers(raw: bytes) -> int:
    """How many arrays and objects a JSON text opens (the brackets outside its strings)."""
    bare = _JSON_STRING.sub(b"", raw)
    return bare.count(b"[") + bare.count(b"{")


def _too_deep(max_depth: int) -> InvalidRequest:
    return InvalidRequest(f"the JSON body is nested more than {max_depth} levels deep", code="json_too_deep")


def _nested_deeper_than(value: Any, max_depth: int) -> bool:
    """Level by level, with no recursion: the cost of a flat million-item list is one pass over it."""
    level = [value] if isinstance(value, dict | list) else []
    depth = 0
    while level:
        depth += 1
        if depth > max_depth:
            return True
        level = [
            child
            for node in level
            for child in (node.values() if isinstance(node, dict) else node)
            if isinstance(child, dict | list)
        ]
    return False


def completion_id() -> str:
    return f"chatcmpl-sc{secrets.token_hex(12)}"  # 96 random bits, as 24 hex digits


def chat_completion(
    *,
    response_id: str,
    model: str,
    content: str,
    usage: dict[str, int],
    finish_reason: str = "stop",
    tool_calls: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
    if tool_calls:
        message.update(content=content or None, tool_calls=tool_calls)
    return {
        "id": response_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": None,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason,
            }
        ],
        "usage": usage,
    }


def chat_chunk(
    *, response_id: str, model: str, created: int, delta: dict[str, Any], finish_reason: str | None = None
) -> dict[str, Any]:
    return {
        "id": response_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "system_fingerprint": None,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
    }


def usage_chunk(*, response_id: str, model: str, created: int, usage: dict[str, int]) -> dict[str, Any]:
    return {
        "id": response_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [],
        "usage": usage,
    }
