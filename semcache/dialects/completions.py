"""The legacy Completions API (``/v1/completions``): one text prompt to continue.

A request whose ``prompt`` is one text is looked up as a chat request in scopes of its own (an
answer is never served across APIs): the prompt's last line as the user message, the lines before
it as a system message, which must match exactly. A text is continued from its very last character,
so what the exact tier's normalisation would merge (the whitespace around the last line, leading
newlines, its closing marks in any script) is part of the scope too, and only a prompt that ends a
sentence may be served a paraphrase's answer: "Roses are red, violets are" wants another
continuation than "... violets are blue,". Anything else (token ids, several prompts, ``echo``, log
probabilities, ``best_of``) goes upstream and is not cached.
"""

from __future__ import annotations

import secrets
import time
import unicodedata
from collections.abc import AsyncIterator
from typing import Any

from ..protocols import UpstreamApi
from ..tokens import TokenCounter
from ..wire import ChatCompletionRequest
from . import HitReply, chat_view_of, replay_pieces
from .untrusted import dicts_of, fits, is_first_choice, utf8_bytes

# Fields that go upstream but shape nothing in the answer, or that the chat view reads another way.
_OUT_OF_SCOPE = {"prompt", "user"}
# The marks that end a sentence: Latin, CJK (full and half width), Arabic and Urdu, Devanagari,
# Armenian, Ethiopic, Myanmar, Khmer, Tibetan, the Greek question mark, and the doubled forms.
_SENTENCE_ENDS = ".?!。？！｡．؟۔।॥։።፧။។៕།;‼⁇⁈⁉﹒﹖﹗"


class CompletionsDialect:
    api: UpstreamApi = "completions"
    named_events = False
    ends_with_done = True
    shares_upstream_response = True

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        self.bypass_reason: str | None = None
        self.key_detail: dict[str, Any] | None = None
        self.semantic = False

    def chat_view(self) -> ChatCompletionRequest:
        """The request as the tiers read it; sets ``bypass_reason`` when it may not be cached."""
        body = self.body
        text = _one_text(body.get("prompt"))
        if text is None:
            self.bypass_reason = "the prompt is not one text (token ids or several prompts)"
        elif body.get("echo"):
            self.bypass_reason = "echo requested"
        elif body.get("logprobs") is not None:
            self.bypass_reason = "logprobs requested"
        elif _more_than_one(body.get("best_of")):
            self.bypass_reason = "best_of > 1"
        view = {key: value for key, value in body.items() if key not in _OUT_OF_SCOPE}
        view.pop("logprobs", None)  # an int here, a bool in chat; read above
        view.update(messages=_as_messages(text or ""))
        self.key_detail, self.semantic = _continued_from(text or "")
        return chat_view_of(view)

    def upstream_body(self, request: ChatCompletionRequest) -> dict[str, Any]:
        return dict(self.body)

    def new_id(self) -> str:
        return f"cmpl-sc{secrets.token_hex(12)}"

    def clean_answer(self, response: dict[str, Any], max_bytes: int) -> str | None:
        """The text of one choice (index 0) finished with ``stop``, at most ``max_bytes``."""
        choices = response.get("choices")
        if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
            return None
        if response.get("error"):
            return None  # an answer and an error at once: not one to hand anyone else
        choice = choices[0]
        text = choice.get("text")
        if choice.get("finish_reason") != "stop" or not is_first_choice(choice) or not isinstance(text, str):
            return None
        return text if text and fits(text, max_bytes) else None

    def tool_call_answer(self, response: dict[str, Any], max_bytes: int) -> tuple[str, list[dict[str, Any]]] | None:
        return None

    def streamed_answer(self, max_bytes: int) -> StreamedCompletion:
        return StreamedCompletion(max_bytes)

    def usage(self, tokens: TokenCounter, request: ChatCompletionRequest, answer: str) -> dict[str, int]:
        """The prompt is plain text, counted without a chat message's overhead."""
        prompt = _one_text(self.body.get("prompt")) or ""
        prompt_tokens, completion_tokens = (
            tokens.count_text(prompt, request.model),
            tokens.count_text(answer, request.model),
        )
        return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens}  # fmt: skip

    def hit_response(self, reply: HitReply) -> dict[str, Any]:
        return {
            **_completion_object(reply, int(time.time())),
            "choices": [{"index": 0, "text": reply.answer, "logprobs": None, "finish_reason": "stop"}],
            "usage": reply.usage,
        }

    async def hit_events(self, reply: HitReply, include_usage: bool) -> AsyncIterator[dict[str, Any]]:
        head = _completion_object(reply, int(time.time()))
        async for piece in replay_pieces(reply.answer):
            yield {**head, "choices": [{"index": 0, "text": piece, "logprobs": None, "finish_reason": None}]}
        yield {**head, "choices": [{"index": 0, "text": "", "logprobs": None, "finish_reason": "stop"}]}
        if include_usage:
            yield {**head, "choices": [], "usage": reply.usage}


class StreamedCompletion:
    """What a legacy completion's stream said so far: cacheable when one choice (index 0) sent text
    and finished with ``stop``, nothing after it, at most ``max_bytes`` of text."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.pieces: list[str] = []
        self.kept_bytes = 0
        self.finish_reasons: list[str] = []
        self.too_large = False
        self.malformed = False

    def add(self, event: dict[str, Any]) -> None:
        choices = dicts_of(event.get("choices"))
        for choice in choices:
            text = choice.get("text")
            if len(choices) > 1 or not is_first_choice(choice) or not isinstance(text, str | None):
                self.malformed = True
            elif self.finish_reasons and text:
                self.malformed = True  # text after the answer finished
            if self.malformed or self.too_large:
                self.pieces.clear()
                return
            if text:
                self.kept_bytes += utf8_bytes(text)
                self.too_large = self.kept_bytes > self.max_bytes
                self.pieces.append(text)
            if choice.get("finish_reason"):
                self.finish_reasons.append(choice["finish_reason"])

    def cacheable(self) -> bool:
        clean = not (self.malformed or self.too_large)
        return clean and self.finish_reasons == ["stop"] and any(self.pieces)

    def text(self) -> str:
        return "".join(self.pieces)

    def tool_call_answer(self) -> list[dict[str, Any]] | None:
        return None


def _continued_from(prompt: str) -> tuple[dict[str, Any], bool]:
    """What the exact tier's normalisation of the prompt's last line would merge, kept as written:
    the whitespace before it (leading newlines of a one-line prompt too) and after the prompt, and
    its closing marks (punctuation of any script: "。" is not "！", nor "!" its full-width form).
    And whether the prompt ends a sentence: only then may a paraphrase's answer do."""
    ended = prompt.rstrip()
    context, _, last = ended.rpartition("\n")
    text = last if context.strip() else ended  # the user message of the chat view, as _as_messages makes it
    lead, tail = text[: len(text) - len(text.lstrip())], prompt[len(ended) :]
    marks = len(ended)
    while marks and unicodedata.category(ended[marks - 1]).startswith("P"):
        marks -= 1
    semantic = ended[-1:] in tuple(_SENTENCE_ENDS)
    return {"lead": lead, "tail": tail, "marks": ended[marks:], "semantic": semantic}, semantic


def _as_messages(prompt: str) -> list[dict[str, str]]:
    """A prompt to continue as chat messages: its last line is the question the tiers match, and the
    lines before it (a few-shot template, a document to summarise) a system message that the key
    holds whole. Matched whole, a long template would make every prompt written on it look alike."""
    context, _, last = prompt.rstrip().rpartition("\n")
    if not context.strip():
        return [{"role": "user", "content": prompt}]
    return [{"role": "system", "content": context}, {"role": "user", "content": last}]


def _completion_object(reply: HitReply, created: int) -> dict[str, Any]:
    return {"id": reply.response_id, "object": "text_completion", "created": created, "model": reply.model}


def _one_text(prompt: object) -> str | None:
    """The prompt when it is one text (a string, or a list of one string)."""
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    return prompt if isinstance(prompt, str) else None


def _more_than_one(value: object) -> bool:
    return isinstance(value, int | float) and value > 1
