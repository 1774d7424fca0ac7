"""The OpenAI APIs semcache answers from its cache, each a *dialect*: Chat Completions, the legacy
Completions and the Responses API.

Every dialect is looked up the same way, through a chat-shaped view of its request (the prompt as
the last user message; every field that shapes the answer in the scope), so the tiers, the decision
policy and the store know only chat. What differs is here: which upstream API a miss goes to, how
its answer is read and judged clean enough to store, and how a hit is written back in the client's
own API, as one object or as the stream of events its SDK expects.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import ValidationError

from ..errors import InvalidRequest
from ..protocols import UpstreamApi
from ..tokens import TokenCounter
from ..wire import ChatCompletionRequest


@dataclass(frozen=True)
class HitReply:
    """What a hit's answer is written from, in any dialect."""

    response_id: str
    model: str
    answer: str
    usage: dict[str, int]  # prompt_tokens, completion_tokens, total_tokens
    tool_calls: list[dict[str, Any]] | None = None  # chat only, with cache_tool_calls


class StreamedAnswer(Protocol):
    """What an upstream stream said so far, and whether it may be cached."""

    too_large: bool  # over max_answer_bytes: no longer kept, and never shared whole

    def add(self, event: dict[str, Any]) -> None: ...

    def cacheable(self) -> bool:
        """Whether the stream ended cleanly with a text answer that may be stored."""
        ...

    def text(self) -> str: ...

    def tool_call_answer(self) -> list[dict[str, Any]] | None:
        """The tool calls of a stream that ended cleanly with them (chat only), or None."""
        ...


class Dialect(Protocol):
    """One OpenAI API, as the pipeline needs it."""

    api: UpstreamApi  # the upstream API a miss is sent to, and how /stats counts the route
    named_events: bool  # SSE events carry an ``event:`` line with their type (the Responses API)
    ends_with_done: bool  # a stream ends with ``data: [DONE]`` (Chat and legacy Completions)
    # Part of the scope beside the chat view, from what the view cannot show: no client field forges it.
    key_detail: Any
    semantic: bool  # whether a paraphrase may be served (the semantic tier, a similar request in flight)
    # Whether an identical request's own upstream answer may be handed to another client as it is:
    # not when the answer repeats fields of the request that are not in the scope (the Responses API's).
    shares_upstream_response: bool

    def upstream_body(self, request: ChatCompletionRequest) -> dict[str, Any]:
        """The body a miss sends upstream, without ``stream`` (the call sets it)."""
        ...

    def new_id(self) -> str:
        """A fresh id for an answer semcache writes itself."""
        ...

    def clean_answer(self, response: dict[str, Any], max_bytes: int) -> str | None:
        """The text of a non-streamed answer that is safe to cache, or None."""
        ...

    def tool_call_answer(self, response: dict[str, Any], max_bytes: int) -> tuple[str, list[dict[str, Any]]] | None:
        """The text and tool calls of an answer that ended cleanly with them (chat only), or None."""
        ...

    def streamed_answer(self, max_bytes: int) -> StreamedAnswer: ...

    def usage(self, tokens: TokenCounter, request: ChatCompletionRequest, answer: str) -> dict[str, int]:
        """The tokens the upstream would have counted for this request and ``answer``."""
        ...

    def hit_response(self, reply: HitReply) -> dict[str, Any]: ...

    def hit_events(self, reply: HitReply, include_usage: bool) -> AsyncIterator[dict[str, Any]]:
        """A hit as the stream events the client's SDK expects, in order."""
        ...


# Streamed hits are replayed in pieces of about this many characters, in at most this many pieces:
# a long answer in longer pieces, with the event loop free between them.
_REPLAY_PIECE_CHARS = 24
_REPLAY_MAX_PIECES = 256


def chat_view_of(view: dict[str, Any]) -> ChatCompletionRequest:
    """The chat view of another API's request, or a 400 naming the field of the client's request
    that is wrong."""
    try:
        return ChatCompletionRequest.model_validate(view)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"]) or "body"
        raise InvalidRequest(f"{where}: {error['msg']}", code="invalid_request") from exc


def message_usage(tokens: TokenCounter, request: ChatCompletionRequest, answer: str) -> dict[str, int]:
    """Usage of a request made of messages: the chat view's, with each message's overhead."""
    messages = [message.model_dump(exclude_none=True) for message in request.messages]
    return tokens.usage(messages, answer, request.model)


async def replay_pieces(answer: str) -> AsyncIterator[str]:
    """A cached answer in the pieces a streamed hit sends it in."""
    piece_chars = max(_REPLAY_PIECE_CHARS, -(-len(answer) // _REPLAY_MAX_PIECES))
    for start in range(0, len(answer), piece_chars):
        yield answer[start : start + piece_chars]
        if piece_chars > _REPLAY_PIECE_CHARS:
            await asyncio.sleep(0)  # a long answer: let other requests in between its pieces
