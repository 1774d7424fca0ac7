"""Chat Completions (``/v1/chat/completions``): the dialect every other one is looked up as."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from ..protocols import UpstreamApi
from ..tokens import TokenCounter
from ..wire import ChatCompletionRequest, chat_chunk, chat_completion, completion_id, usage_chunk
from . import HitReply, message_usage, replay_pieces
from .untrusted import dict_field, dicts_of, fits, is_first_choice, utf8_bytes


class ChatDialect:
    api: UpstreamApi = "chat"
    named_events = False
    ends_with_done = True
    key_detail = None
    semantic = True
    shares_upstream_response = True

    def upstream_body(self, request: ChatCompletionRequest) -> dict[str, Any]:
        return request.upstream_body()

    def new_id(self) -> str:
        return completion_id()

    def clean_answer(self, response: dict[str, Any], max_bytes: int) -> str | None:
        return clean_answer(response, max_bytes)

    def tool_call_answer(self, response: dict[str, Any], max_bytes: int) -> tuple[str, list[dict[str, Any]]] | None:
        calls = tool_call_answer(response, max_bytes)
        return None if calls is None else (message_text(response), calls)

    def streamed_answer(self, max_bytes: int) -> StreamedChatAnswer:
        return StreamedChatAnswer(max_bytes)

    def usage(self, tokens: TokenCounter, request: ChatCompletionRequest, answer: str) -> dict[str, int]:
        return message_usage(tokens, request, answer)

    def hit_response(self, reply: HitReply) -> dict[str, Any]:
        calls = reply.tool_calls
        return chat_completion(
            response_id=reply.response_id, model=reply.model, content=reply.answer, usage=reply.usage,
            finish_reason="tool_calls" if calls else "stop", tool_calls=calls,
        )  # fmt: skip

    async def hit_events(self, reply: HitReply, include_usage: bool) -> AsyncIterator[dict[str, Any]]:
        response_id, model, created = reply.response_id, reply.model, int(time.time())
        finish_reason = "stop"
        yield chat_chunk(
            response_id=response_id, model=model, created=created, delta={"role": "assistant", "content": ""}
        )
        async for piece in replay_pieces(reply.answer):
            yield chat_chunk(response_id=response_id, model=model, created=created, delta={"content": piece})
        if reply.tool_calls:
            calls = [{"index": n, **call} for n, call in enumerate(reply.tool_calls)]
            yield chat_chunk(response_id=response_id, model=model, created=created, delta={"tool_calls": calls})
            finish_reason = "tool_calls"
        yield chat_chunk(response_id=response_id, model=model, created=created, delta={}, finish_reason=finish_reason)
        if include_usage:
            yield usage_chunk(response_id=response_id, model=model, created=created, usage=reply.usage)


CHAT = ChatDialect()


class StreamedChatAnswer:
    """What a stream said so far, and whether it may be cached.

    Only a clean answer may be: one choice, index 0, with nothing after its ``finish_reason`` (in the
    same chunk as the last content is fine), and at most ``max_bytes`` of text. Once it cannot be
    cached, its text is no longer kept: a huge or malformed stream is relayed, never held.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.pieces: list[str] = []
        self.kept_bytes = 0  # UTF-8 bytes of the text and tool call arguments kept
        self.finish_reasons: list[str] = []
        self.tool_calls = False  # anything but plain text: tool or function calls, a refusal
        self.other = False  # a function call or a refusal: never cached
        self.calls: dict[int, dict[str, Any]] = {}  # tool calls assembled from their deltas
        self.too_large = False  # more than max_bytes
        self.malformed = False  # a choice other than index 0, or a delta after the finish_reason

    def add(self, chunk: dict[str, Any]) -> None:
        choices = dicts_of(chunk.get("choices"))
        if len(choices) > 1:  # two choices in one event: never one answer, whatever their indexes say
            self.malformed = True
            self._stop_keeping()
        for choice in choices:
            delta = dict_field(choice, "delta")
            content = delta.get("content")
            if (
                not is_first_choice(choice)
                or (self.finish_reasons and carries_anything(delta))
                or not isinstance(content, str | None)  # text the client was sent, but not as text
            ):
                self.malformed = True
                self._stop_keeping()
            if self.malformed or self.too_large:
                return  # it will not be cached: nothing more to learn from the rest
            if isinstance(content, str) and self._keep(content):
                self.pieces.append(content)
            self.other = self.other or bool(delta.get("function_call") or delta.get("refusal"))
            self.tool_calls = self.tool_calls or self.other or bool(delta.get("tool_calls"))
            for piece in dicts_of(delta.get("tool_calls")):
                self._merge_call(piece)
            if choice.get("finish_reason"):
                self.finish_reasons.append(choice["finish_reason"])

    def _keep(self, text: str) -> bool:
        """Count ``text`` in; False once the answer is too large to keep."""
        self.kept_bytes += utf8_bytes(text)
        if self.kept_bytes > self.max_bytes and not self.too_large:
            self.too_large = True
            self._stop_keeping()
        return not self.too_large

    def _stop_keeping(self) -> None:
        """It will not be cached: let go of what was kept."""
        self.pieces.clear()
        self.calls.clear()

    def _merge_call(self, piece: dict[str, Any]) -> None:
        call = self.calls.setdefault(int(piece.get("index") or 0), {"function": {"name": "", "arguments": ""}})
        for field_name in ("id", "type"):
            if piece.get(field_name):
                call[field_name] = piece[field_name]
        function = dict_field(piece, "function")
        for part in ("name", "arguments"):
            if isinstance(function.get(part), str) and self._keep(function[part]):
                call["function"][part] += function[part]

    def tool_call_answer(self) -> list[dict[str, Any]] | None:
        """The tool calls, when the stream ended cleanly with nothing but them (and maybe text)."""
        if self.finish_reasons != ["tool_calls"] or self.other or self.malformed or self.too_large or not self.calls:
            return None
        calls = [self.calls[index] for index in sorted(self.calls)]
        return calls if all(c.get("id") and c["function"]["name"] for c in calls) else None

    def text(self) -> str:
        return "".join(self.pieces)

    def cacheable(self) -> bool:
        clean = not (self.tool_calls or self.malformed or self.too_large)
        return clean and self.finish_reasons == ["stop"] and any(self.pieces)


def tool_call_answer(response: dict[str, Any], max_bytes: int) -> list[dict[str, Any]] | None:
    """The tool calls of a completion that ended cleanly with them, or None."""
    choices = dicts_of(response.get("choices"))
    if len(choices) != 1 or not is_first_choice(choices[0]) or choices[0].get("finish_reason") != "tool_calls":
        return None
    if response.get("error"):
        return None  # an answer and an error at once: not one to hand anyone else
    message = dict_field(choices[0], "message")
    calls = dicts_of(message.get("tool_calls"))
    if not calls or message.get("refusal") or message.get("function_call"):
        return None
    if not all(isinstance(c.get("function"), dict) and c.get("id") for c in calls):
        return None
    arguments = [c["function"].get("arguments") for c in calls]
    left = max_bytes
    for text in (message_text(response), *(a for a in arguments if isinstance(a, str))):
        if not fits(text, left):
            return None
        left -= utf8_bytes(text)
    return calls


def message_text(response: dict[str, Any]) -> str:
    choices = dicts_of(response.get("choices"))
    content = dict_field(choices[0], "message").get("content") if choices else None
    return content if isinstance(content, str) else ""


def clean_answer(response: dict[str, Any], max_bytes: int) -> str | None:
    """The text of a completion that is safe to cache: one choice (index 0), finished with ``stop``,
    no tool calls, no refusal and no error beside it, and at most ``max_bytes`` of UTF-8."""
    choices = response.get("choices")
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        return None
    if response.get("error"):
        return None  # an answer and an error at once: not one to hand anyone else
    choice = choices[0]
    message = choice.get("message") or {}
    content = message.get("content")
    if choice.get("finish_reason") != "stop" or message.get("tool_calls") or message.get("function_call"):
        return None
    if message.get("refusal"):  # the model declined: not an answer to hand anyone else
        return None
    if not is_first_choice(choice) or not isinstance(content, str) or not content:
        return None
    return content if fits(content, max_bytes) else None


def carries_anything(delta: dict[str, Any]) -> bool:
    """Whether a stream's delta adds anything: content, a tool call, a role, ... (not just empty fields)."""
    return any(value not in (None, "", [], {}) for value in delta.values())
