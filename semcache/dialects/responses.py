"""The Responses API (``/v1/responses``), stateless requests only.

A request is looked up as a chat request: ``instructions`` as the system message, ``input`` (a
string, or messages of text) as the turns, and every other field that shapes the answer
(``model``, ``text``, ``temperature``, ``top_p``, ``reasoning``, ``max_output_tokens``, ``tools``,
...) in the scope, which no chat request shares. A stateful request (``previous_response_id`` of the
upstream's, ``conversation``, ``background``, a reusable ``prompt``) or one whose tools act (web
search, file search, code, MCP: anything but functions) is passed on untouched.

A hit's id (``resp_sc...``) was never issued by the upstream. semcache remembers the hits it served
(``IssuedResponses``): a later request whose ``previous_response_id`` names one is sent on as that
conversation written out in ``input``, so the client can go on from a hit as from any response.
"""

from __future__ import annotations

import itertools
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidRequest
from ..protocols import UpstreamApi
from ..recent import RecentById
from ..tokens import TokenCounter
from ..wire import ChatCompletionRequest
from . import HitReply, chat_view_of, message_usage, replay_pieces
from .untrusted import dict_field, dicts_of, fits, utf8_bytes

# The prefix of the ids semcache gives the responses it answers from its cache.
ISSUED_ID_PREFIX = "resp_sc"
# Fields that go upstream but do not shape the answer, or that the chat view reads another way.
_OUT_OF_SCOPE = {"input", "instructions", "user", "safety_identifier", "prompt_cache_key", "previous_response_id"}
# Request fields a Response object repeats back.
_ECHOED = ("instructions", "max_output_tokens", "metadata", "parallel_tool_calls", "reasoning", "store",
           "temperature", "text", "tool_choice", "tools", "top_p", "truncation", "user")  # fmt: skip
# Content parts that are text, in what a client sends and what a model said, and the roles of
# messages. Tuples, not sets: a client may send a list or an object there, which a set cannot look up.
_TEXT_PARTS = ("input_text", "output_text", "text")
_ROLES = ("user", "assistant", "system", "developer")


@dataclass(frozen=True)
class IssuedResponse:
    namespace: str
    owner: str | None  # who asked, with scope_per_user: only they may go on from it
    input: list[dict[str, Any]]  # the conversation up to the hit, as input messages
    answer: str

    def chars(self) -> int:
        return len(self.answer) + sum(len(str(message.get("content", ""))) for message in self.input)


class IssuedResponses(RecentById[IssuedResponse]):
    """The most recent hits served as Responses, by id: what a later ``previous_response_id`` naming
    one goes on from. At most ``capacity`` of them, holding at most ``max_chars`` of text together
    (a conversation is up to max_prompt_chars long); past either, the namespace holding the most
    forgets its oldest. Kept in this process only."""

    def __init__(self, capacity: int = 10_000, max_chars: int = 64 * 1024 * 1024) -> None:
        super().__init__(capacity, weigh=IssuedResponse.chars, max_weight=max_chars)


class ResponsesDialect:
    api: UpstreamApi = "responses"
    named_events = True
    ends_with_done = False
    key_detail = None
    semantic = True
    shares_upstream_response = False  # a Response repeats its request's user, metadata, ...

    def __init__(self, body: dict[str, Any], namespace: str, owner: str | None, issued: IssuedResponses) -> None:
        """``owner``: who asks, when the namespace scopes answers per user; None when it does not."""
        self.body = body
        self.namespace = namespace
        self.owner = owner
        self.issued = issued
        self.bypass_reason: str | None = None
        self._conversation: list[dict[str, Any]] = []

    def chat_view(self) -> ChatCompletionRequest:
        """The request as the tiers read it; sets ``bypass_reason`` when it may not be cached. A
        ``previous_response_id`` naming one of semcache's hits is written out into ``input`` first."""
        self.body = self._go_on_from_hit(self.body)
        body = self.body
        self.bypass_reason = _stateful(body)
        messages = _input_messages(body.get("input"))
        if messages is None:
            self.bypass_reason = self.bypass_reason or "input holds items other than messages of text"
            messages = [{"role": "user", "content": ""}]
        self._conversation = messages
        instructions = body.get("instructions")
        if isinstance(instructions, str) and instructions:
            messages = [{"role": "system", "content": instructions}, *messages]
        view = {key: value for key, value in body.items() if key not in _OUT_OF_SCOPE}
        view.update(messages=messages, stream=bool(body.get("stream")))
        return chat_view_of(view)

    def _go_on_from_hit(self, body: dict[str, Any]) -> dict[str, Any]:
        previous = body.get("previous_response_id")
        if not isinstance(previous, str) or not is_issued_id(previous):
            return body
        issued = self.issued.get(previous.strip(), self.namespace)
        if issued is None or issued.owner != self.owner:
            raise InvalidRequest(
                f"previous_response_id {previous!r} names an answer semcache served from its cache that cannot be "
                "gone on from here: semcache keeps the latest ones, in the replica that served them, for the "
                "namespace (and with scope_per_user, the user) it was served to. Send the conversation in input "
                "instead",
                code="previous_response_not_found",
            )
        new_input = body.get("input")
        if isinstance(new_input, str):
            new_input = [{"role": "user", "content": new_input}]
        if not isinstance(new_input, list):
            raise InvalidRequest("input: a string or a list of input items", code="invalid_input")
        earlier = [*issued.input, {"role": "assistant", "content": issued.answer}]
        rest = {key: value for key, value in body.items() if key != "previous_response_id"}
        return {**rest, "input": [*earlier, *new_input]}

    def upstream_body(self, request: ChatCompletionRequest) -> dict[str, Any]:
        return dict(self.body)

    def new_id(self) -> str:
        return f"{ISSUED_ID_PREFIX}{secrets.token_hex(12)}"

    def clean_answer(self, response: dict[str, Any], max_bytes: int) -> str | None:
        """The text of a completed response whose output is one completed assistant message of text (and
        perhaps the model's reasoning): no refusal, no tool call, no error, at most ``max_bytes``."""
        if response.get("status") != "completed" or response.get("error") or response.get("incomplete_details"):
            return None
        items = dicts_of(response.get("output"))
        if len(items) != len(response.get("output") or []):
            return None
        messages = [item for item in items if item.get("type") == "message"]
        if len(messages) != 1 or any(item.get("type") not in ("message", "reasoning") for item in items):
            return None
        message = messages[0]
        parts = message.get("content")
        if message.get("role") != "assistant" or not isinstance(parts, list) or not parts:
            return None
        if message.get("status", "completed") != "completed":
            return None
        texts = [part.get("text") for part in dicts_of(parts) if part.get("type") == "output_text"]
        strings = [text for text in texts if isinstance(text, str)]
        if len(strings) != len(parts):
            return None  # a refusal, or a part that is not text
        text = "".join(strings)
        return text if text and fits(text, max_bytes) else None

    def tool_call_answer(self, response: dict[str, Any], max_bytes: int) -> tuple[str, list[dict[str, Any]]] | None:
        return None

    def streamed_answer(self, max_bytes: int) -> StreamedResponse:
        return StreamedResponse(self, max_bytes)

    def usage(self, tokens: TokenCounter, request: ChatCompletionRequest, answer: str) -> dict[str, int]:
        return message_usage(tokens, request, answer)

    def hit_response(self, reply: HitReply) -> dict[str, Any]:
        self._remember(reply)
        return self._response(reply, "completed", [_message(reply, "completed")], int(time.time()))

    async def hit_events(self, reply: HitReply, include_usage: bool) -> AsyncIterator[dict[str, Any]]:
        """The events the openai SDK's stream helper reads, in OpenAI's order."""
        self._remember(reply)
        created = int(time.time())
        item_id = _message(reply, "completed")["id"]
        sequence = itertools.count()

        def event(kind: str, **fields: Any) -> dict[str, Any]:
            return {"type": kind, "sequence_number": next(sequence), **fields}

        position = {"item_id": item_id, "output_index": 0, "content_index": 0}
        started = self._response(reply, "in_progress", [], created)
        yield event("response.created", response=started)
        yield event("response.in_progress", response=started)
        in_progress = {**_message(reply, "in_progress"), "content": []}
        yield event("response.output_item.added", output_index=0, item=in_progress)
        part = {"type": "output_text", "text": "", "annotations": []}
        yield event("response.content_part.added", **position, part=part)
        async for piece in replay_pieces(reply.answer):
            yield event("response.output_text.delta", **position, delta=piece, logprobs=[])
        yield event("response.output_text.done", **position, text=reply.answer, logprobs=[])
        yield event("response.content_part.done", **position, part={**part, "text": reply.answer})
        yield event("response.output_item.done", output_index=0, item=_message(reply, "completed"))
        completed = self._response(reply, "completed", [_message(reply, "completed")], created)
        yield event("response.completed", response=completed)

    def _remember(self, reply: HitReply) -> None:
        issued = IssuedResponse(self.namespace, self.owner, self._conversation, reply.answer)
        self.issued.remember(reply.response_id, issued)

    def _response(self, reply: HitReply, status: str, output: list[dict[str, Any]], created: int) -> dict[str, Any]:
        """A Response object, repeating the request's fields as OpenAI does."""
        echoed = {name: self.body[name] for name in _ECHOED if name in self.body}
        completed = status == "completed"
        return {
            "id": reply.response_id,
            "object": "response",
            "created_at": created,
            "status": status,
            "model": reply.model,
            "output": output,
            "error": None,
            "incomplete_details": None,
            "previous_response_id": None,
            "instructions": None,
            "metadata": {},
            "parallel_tool_calls": True,
            "temperature": None,
            "tool_choice": "auto",
            "tools": [],
            "top_p": None,
            **echoed,
            "usage": _usage(reply.usage) if completed else None,
        }


class StreamedResponse:
    """What a Responses stream said so far. Its answer is read from the final ``response.completed``
    event's Response, by the same rule as a non-streamed one; the deltas before it are only counted,
    so that an answer over ``max_bytes`` is known to be too large (and never shared whole) early."""

    def __init__(self, dialect: ResponsesDialect, max_bytes: int) -> None:
        self.dialect = dialect
        self.max_bytes = max_bytes
        self.deltas: list[str] = []  # the text the client was streamed, to hold the final answer to
        self.delta_bytes = 0
        self.too_large = False
        self.answer: str | None = None
        self.finished = False

    def add(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if self.finished:
            self.answer = None  # anything after the final event: not one clean answer
            return
        if kind == "response.output_text.delta" and isinstance(event.get("delta"), str):
            self.delta_bytes += utf8_bytes(event["delta"])
            self.too_large = self.too_large or self.delta_bytes > self.max_bytes
            if self.too_large:
                self.deltas.clear()
            else:
                self.deltas.append(event["delta"])
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            self.finished = True
            if kind == "response.completed" and not self.too_large:
                answer = self.dialect.clean_answer(dict_field(event, "response"), self.max_bytes)
                # Stored only if it is what the client was streamed: the final word must not differ.
                self.answer = answer if not self.deltas or "".join(self.deltas) == answer else None

    def cacheable(self) -> bool:
        return self.answer is not None

    def text(self) -> str:
        return self.answer or ""

    def tool_call_answer(self) -> list[dict[str, Any]] | None:
        return None


def is_issued_id(value: object) -> bool:
    """Whether ``value`` names a response semcache served from its cache, however it is spelled: such
    an id must never reach the upstream, which never issued it."""
    return isinstance(value, str) and value.strip().lower().startswith(ISSUED_ID_PREFIX)


def _stateful(body: dict[str, Any]) -> str | None:
    """Why a request depends on state kept upstream, or acts, and is passed on untouched; else None."""
    if body.get("previous_response_id"):
        return "previous_response_id: the answer goes on from a conversation kept upstream"
    for name in ("conversation", "prompt"):
        if body.get(name):
            return f"{name}: the answer depends on what the upstream keeps"
    if body.get("background"):
        return "background: the answer is fetched later, from the upstream"
    tools = body.get("tools")
    if isinstance(tools, list) and any(not isinstance(t, dict) or t.get("type") != "function" for t in tools):
        return "tools that act or fetch (anything but functions)"
    if body.get("top_logprobs"):
        return "logprobs requested"
    return None


def _input_messages(value: object) -> list[dict[str, Any]] | None:
    """``input`` as chat messages of text, or None when it holds anything else (images, files,
    function calls and their outputs, reasoning, references to stored items)."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        return None
    messages = []
    for item in value:
        role = item.get("role") if isinstance(item, dict) else None
        if not isinstance(item, dict) or item.get("type", "message") != "message" or role not in _ROLES:
            return None
        text = _text_of(item.get("content"))
        if text is None:
            return None
        messages.append({"role": item["role"], "content": text})
    return messages


def _text_of(content: object) -> str | None:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    texts = []
    for part in content:
        if not isinstance(part, dict) or part.get("type") not in _TEXT_PARTS or not isinstance(part.get("text"), str):
            return None
        texts.append(part["text"])
    return "\n".join(texts)


def _message(reply: HitReply, status: str) -> dict[str, Any]:
    return {
        "id": f"msg_sc{reply.response_id.removeprefix(ISSUED_ID_PREFIX)}",
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": [{"type": "output_text", "text": reply.answer, "annotations": []}],
    }


def _usage(usage: dict[str, int]) -> dict[str, Any]:
    prompt, completion = usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + completion,
    }
