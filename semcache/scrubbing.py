"""Secrets taken out of everything an upstream answers, before semcache relays, stores or reads it.

An upstream may quote the credential it was sent: in an answer's text, in a model list, in any
field of a stream event, in the body of a route passed through. ``SecretScrubber`` replaces every
configured secret (and the client's own key, when that is what went upstream) with
``[redacted]``, wherever it is, in every shape the upstream can send it:

- a parsed JSON answer (``value``): every string and every object key;
- a stream of parsed events (``events``): also a secret split across events, as a model's deltas
  split a text: the text each client joins (a choice's content, a tool call's arguments, a Responses
  delta) is scrubbed as one text, its last few characters held back while they may begin a secret;
- raw bytes passed through (``wire``): also split across network chunks or behind JSON escapes
  (``\\u0041``), and in event streams also across events.

Secrets shorter than ``MIN_SECRET_CHARS`` are left alone: replacing a short word everywhere would
mangle answers, and a key that short is no secret anyway.
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
from collections.abc import AsyncIterator, Iterable
from functools import cached_property
from typing import Any

from .errors import UpstreamQuotedCredential
from .logs import REDACTED

MIN_SECRET_CHARS = 8
# A client's key passed upstream (no upstream_api_key) is scrubbed from its answers when it looks
# like a credential: long, letters and digits. A common word sent as a key would otherwise blank
# that word in answers that are then cached for everyone.
MIN_CLIENT_KEY_CHARS = 20
_CREDENTIAL_LIKE = re.compile(r"(?=.*[A-Za-z])(?=.*[0-9])[\x21-\x7e]+")
_REMEMBERED_CLIENT_KEYS = 1024
_QUOTED_CREDENTIAL = (
    "the upstream's answer quoted the API key this request was sent with; semcache neither relays nor caches such "
    "an answer"
)
_REDACTED_BYTES = REDACTED.encode()
# The short escapes JSON has; any character may also be written \uXXXX.
_SHORT_ESCAPES = {'"': b'\\"', "\\": b"\\\\", "/": b"\\/", "\b": b"\\b", "\f": b"\\f", "\n": b"\\n", "\r": b"\\r",
                  "\t": b"\\t"}  # fmt: skip
# Where an event of an event stream ends.
_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")
_MAX_EVENT_BYTES = 8 * 1024 * 1024
_EVENTS_BETWEEN_YIELDS = 64
# Fields of a chat delta whose pieces a client joins into one text.
_CHAT_TEXT_FIELDS = ("content", "refusal", "reasoning_content", "reasoning")
_RESPONSE_FINAL_EVENTS = frozenset(("response.completed", "response.incomplete", "response.failed"))


class SecretScrubber:
    """Replaces configured secrets with ``[redacted]`` in what an upstream answers."""

    def __init__(self, secrets: Iterable[str | None] = (), refused: Iterable[str] = ()) -> None:
        kept = {secret for secret in (*secrets, *refused) if secret and len(secret) >= MIN_SECRET_CHARS}
        self.secrets: tuple[str, ...] = tuple(sorted(kept, key=len, reverse=True))  # longest first
        # Secrets whose presence fails the answer (``UpstreamQuotedCredential``) instead of being replaced.
        self.refused = frozenset(secret for secret in refused if secret in kept)
        self._secret_bytes = tuple(secret.encode() for secret in self.secrets)
        self._for_client_key: dict[tuple[str, bool], SecretScrubber] = {}

    def __bool__(self) -> bool:
        return bool(self.secrets)

    def with_client_key(self, key: str | None, *, refuse: bool = False) -> SecretScrubber:
        """This scrubber, plus the client's own key when that is what goes upstream and it looks
        like a credential: an upstream that echoes it must not hand it to whoever is served next.

        ``refuse``: an answer that holds the key fails instead of having it replaced. An answer that
        is cached or shared must: the client chooses its key, and so what would be cut from an
        answer that others are served. What is relayed to that client alone may have it replaced.
        Refusal holds in parsed answers and events (``text``, ``value``, ``events``); ``wire``, which
        only pass-through routes use, replaces every secret."""
        if key is None or key in self.secrets or len(key) < MIN_CLIENT_KEY_CHARS or not _CREDENTIAL_LIKE.fullmatch(key):
            return self
        scrubber = self._for_client_key.get((key, refuse))
        if scrubber is None:
            if len(self._for_client_key) >= _REMEMBERED_CLIENT_KEYS:
                self._for_client_key.clear()
            scrubber = SecretScrubber([*self.secrets, key]) if not refuse else SecretScrubber(self.secrets, [key])
            self._for_client_key[(key, refuse)] = scrubber
        return scrubber

    # -- whole texts and values -------------------------------------------------------------------

    def text(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                if secret in self.refused:
                    raise UpstreamQuotedCredential(_QUOTED_CREDENTIAL)
                text = text.replace(secret, REDACTED)
        return text

    def value(self, value: Any) -> Any:
        """``value`` (parsed JSON) with every secret in its strings and keys replaced."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(key) if isinstance(key, str) else key: self.value(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self.value(item) for item in value]
        return value

    def may_hold(self, data: bytes) -> bool:
        """Whether raw JSON may hold a secret, as it is or behind escapes: a cheap check, so that
        only what may is walked by ``value``."""
        if not self.secrets:
            return False
        if any(secret in data for secret in self._secret_bytes):
            return True
        return self._may_be_escaped(data) and self._spelled.search(data) is not None

    def scrub_bytes(self, data: bytes, text: bool = True) -> bytes:
        """``data`` with every secret replaced: in ``text`` (JSON, an event stream) also any
        spelling of it that JSON escapes make; in other bytes (audio, images) as it is."""
        if text and self._may_be_escaped(data):
            return self._spelled.sub(_REDACTED_BYTES, data)
        for secret in self._secret_bytes:
            if secret in data:
                data = data.replace(secret, _REDACTED_BYTES)
        return data

    def _may_be_escaped(self, data: bytes) -> bool:
        return any(escape in data for escape in self._escapes)

    @cached_property
    def _escapes(self) -> tuple[bytes, ...]:
        """What must be in bytes for a secret to be spelled there with escapes."""
        return (b"\\u", *{_SHORT_ESCAPES[char] for secret in self.secrets for char in secret if char in _SHORT_ESCAPES})

    @cached_property
    def _spelled(self) -> re.Pattern[bytes]:
        """Every secret in any spelling JSON allows: each character as it is or escaped."""
        return re.compile(b"|".join(_spellings(secret) for secret in self.secrets))

    @cached_property
    def _longest_spelling(self) -> int:
        return max((sum(len(_longest_escape(c)) for c in secret) for secret in self.secrets), default=0)

    # -- streams ----------------------------------------------------------------------------------

    def events(self) -> EventScrubber:
        """A scrubber for one stream of parsed events (chat, legacy completions or Responses)."""
        return EventScrubber(self)

    def wire(self, body: AsyncIterator[bytes], content_type: str | None) -> AsyncIterator[bytes]:
        """``body`` as it arrives, scrubbed: event by event for an event stream, else as bytes."""
        if not self.secrets:
            return body
        media_type = (content_type or "").split(";")[0].strip().lower()
        if media_type == "text/event-stream":
            return self._wire_events(body)
        return self._wire_bytes(body, text=media_type.startswith("text/") or "json" in media_type or not media_type)

    async def _wire_bytes(self, body: AsyncIterator[bytes], text: bool) -> AsyncIterator[bytes]:
        """Bytes, each chunk's last few held back until the next: a secret cut between two
        chunks is whole in the bytes looked at."""
        held = b""
        keep = (self._longest_spelling if text else len(self._secret_bytes[0])) - 1
        async for chunk in body:
            data = self.scrub_bytes(held + chunk, text)
            cut = max(0, len(data) - keep)
            held = data[cut:]
            if cut:
                yield data[:cut]
        if held:
            yield self.scrub_bytes(held, text)

    async def _wire_events(self, body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """An event stream passed through, event by event: an event whose JSON carries a secret, or a
        piece of one, is written anew; every other one goes out as the upstream wrote it."""
        events = self.events()
        pending = b""
        async for chunk in body:
            pending += chunk
            *blocks, pending = _split_events(pending)
            for number, block in enumerate(blocks, start=1):
                for out in events.feed_block(block):
                    yield out
                if not number % _EVENTS_BETWEEN_YIELDS:
                    await asyncio.sleep(0)  # many small events in one chunk must not hold the loop
            if len(pending) > _MAX_EVENT_BYTES:  # not an event stream after all: as bytes, scrubbed
                yield self.scrub_bytes(pending)
                pending = b""
        if pending.strip():
            for out in events.feed_block(pending):
                yield out
        for event in events.finish():
            yield _event_block(event, named=events.named)


class EventScrubber:
    """Scrubs the events of one stream in order. ``feed`` answers the events to send in one's
    place: itself, scrubbed, with a text's last characters held back while they may begin a
    secret, and before it any text held back for a text that it ends."""

    def __init__(self, scrubber: SecretScrubber) -> None:
        self._scrubber = scrubber
        self._texts: dict[tuple[Any, ...], _HeldText] = {}
        self.named = False  # whether the stream names its events (``event:`` lines)

    def feed(self, event: dict[str, Any], data: bytes | None = None) -> list[dict[str, Any]]:
        """``data``: the event's JSON as sent, for the cheap check of its other fields."""
        if not self._scrubber:
            return [event]
        pieces = _texts_of(event)
        carried = {piece[0] for piece in pieces}  # ended with this event's own piece, not before it
        ended = _ended_texts(event)
        before = self._close(lambda key: key not in carried and ended(key))
        for key, holder, name, skeleton, ends in pieces:
            text = holder[name]
            held = self._texts.get(key)
            if held is None:
                held = self._texts[key] = _HeldText(self._scrubber, skeleton)
            if ends:
                holder[name] = held.end(text)
                del self._texts[key]
            else:
                holder[name] = held.add(text)
        if data is None or self._scrubber.may_hold(data):
            event = self._scrubber.value(event)
        return [*before, event]

    def finish(self) -> list[dict[str, Any]]:
        """The texts still held back, once the stream has ended: before its ``[DONE]``."""
        return self._close(lambda key: True)

    def _close(self, ended: Any) -> list[dict[str, Any]]:
        closing = [key for key in self._texts if ended(key)]
        out = []
        for key in closing:
            held = self._texts.pop(key)
            rest = held.end("")
            if rest:
                out.append(held.event_with(rest))
        return out

    def feed_block(self, block: bytes) -> list[bytes]:
        """One event of a raw event stream (its lines, without the blank line after them), as the
        bytes to send in its place."""
        lines = block.splitlines()
        data_lines = [line for line in lines if line.startswith(b"data:")]
        self.named = self.named or any(line.startswith(b"event:") for line in lines)
        data = b"\n".join(_field_value(line) for line in data_lines)
        try:
            event = json.loads(data) if data_lines else None
        except ValueError:
            event = None
        if not isinstance(event, dict):
            out = [] if data.strip() != b"[DONE]" else [_event_block(e, self.named) for e in self.finish()]
            return [*out, self._scrubber.scrub_bytes(block) + b"\n\n"]
        original = json.dumps(event, ensure_ascii=False)
        events = self.feed(event, data)
        *before, scrubbed = events
        blocks = [_event_block(e, self.named) for e in before]
        if json.dumps(scrubbed, ensure_ascii=False) == original:
            blocks.append(block + b"\n\n")
        else:
            kept = [line for line in lines if not line.startswith(b"data:")]
            blocks.append(b"\n".join([*kept, b"data: " + _json_bytes(scrubbed)]) + b"\n\n")
        return blocks


class _HeldText:
    """One text a client joins from many events: what was sent of it is scrubbed; the end that may
    begin a secret is held back until the next piece shows whether it does."""

    def __init__(self, scrubber: SecretScrubber, skeleton: dict[str, Any]) -> None:
        self._scrubber = scrubber
        self._skeleton = skeleton  # an event that carries nothing but this text, to send a held end in
        self._held = ""

    def add(self, piece: str) -> str:
        """The part of the text so far that can be sent now, scrubbed."""
        text = self._held + piece
        cut = self._safe_end(text)
        self._held = text[cut:]
        return self._scrubber.text(text[:cut])

    def end(self, piece: str) -> str:
        text, self._held = self._held + piece, ""
        return self._scrubber.text(text)

    def event_with(self, text: str) -> dict[str, Any]:
        event = copy.deepcopy(self._skeleton)
        holder, name = _leaf(event)
        holder[name] = text
        return event

    def _safe_end(self, text: str) -> int:
        """Where the held end of ``text`` starts: the longest end that begins a secret, moved back
        to the start of any whole secret that runs into it."""
        secrets = self._scrubber.secrets
        cut = len(text)
        for secret in secrets:
            start = text.find(secret[0], max(0, len(text) - len(secret) + 1))
            while start != -1 and start < cut:
                if secret.startswith(text[start:]):
                    cut = start
                    break
                start = text.find(secret[0], start + 1)
        moved = True
        while moved:
            moved = False
            for secret in secrets:
                start = text.find(secret, max(0, cut - len(secret) + 1))
                if start != -1 and start < cut < start + len(secret):
                    cut, moved = start, True
        return cut


def _texts_of(event: dict[str, Any]) -> list[tuple[tuple[Any, ...], dict[str, Any], str, dict[str, Any], bool]]:
    """The pieces of joined texts (strings) an event carries: (which text, the object holding the piece, its
    field, an event to send a held end of that text in, whether this event ends the text)."""
    found: list[tuple[tuple[Any, ...], dict[str, Any], str, dict[str, Any], bool]] = []
    kind = event.get("type")
    if isinstance(kind, str) and kind.endswith(".delta") and isinstance(event.get("delta"), str):
        key = ("responses", kind, *(event.get(name) for name in _RESPONSE_TEXT_IDS))
        alone = {name: value for name, value in event.items() if name not in ("logprobs", "obfuscation")}
        found.append((key, event, "delta", alone, False))
        return found
    choices = event.get("choices")
    if not isinstance(choices, list):
        return found
    top = {name: value for name, value in event.items() if name not in ("choices", "usage") and _scalar(value)}
    for position, choice in enumerate(choices):
        if not isinstance(choice, dict):
            continue
        index = choice.get("index", position)
        ends = bool(choice.get("finish_reason"))
        if isinstance(choice.get("text"), str) and "delta" not in choice:  # a legacy completion
            found.append((("choice", index, "text"), choice, "text", _choice_event(top, index, {"text": ""}), ends))
            continue
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            continue
        for name in (name for name in _CHAT_TEXT_FIELDS if isinstance(delta.get(name), str)):
            found.append((("choice", index, name), delta, name, _choice_event(top, index, {"delta": {name: ""}}), ends))
        function_call = delta.get("function_call")
        if isinstance(function_call, dict) and isinstance(function_call.get("arguments"), str):
            body: dict[str, Any] = {"delta": {"function_call": {"arguments": ""}}}
            found.append(
                (("choice", index, "function_call"), function_call, "arguments", _choice_event(top, index, body), ends)
            )
        calls = delta.get("tool_calls")
        for number, call in enumerate(calls if isinstance(calls, list) else []):
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict) and isinstance(function.get("arguments"), str):
                call_index = call.get("index", number)
                body = {"delta": {"tool_calls": [{"index": call_index, "function": {"arguments": ""}}]}}
                key = ("choice", index, "tool_call", call_index)
                found.append((key, function, "arguments", _choice_event(top, index, body), ends))
    return found


def _choice_event(top: dict[str, Any], index: Any, body: dict[str, Any]) -> dict[str, Any]:
    """An event of one choice, with the fields ``top`` of the event it follows."""
    return {**top, "choices": [{"index": index, **body, "finish_reason": None}]}


# What tells one Responses text from another: its event type and these.
_RESPONSE_TEXT_IDS = ("item_id", "output_index", "content_index", "summary_index")


def _ended_texts(event: dict[str, Any]) -> Any:
    """Which held texts an event ends, as a test of their keys: a chat or legacy choice's with its
    finish_reason (sent before it); a Responses item's with any other event of that item (its
    ``.done``), and every text with the stream's final event."""
    kind = event.get("type")
    if isinstance(kind, str):
        if kind in _RESPONSE_FINAL_EVENTS:
            return lambda key: True
        if kind.endswith(".delta"):
            return lambda key: False
        item = event.get("item")
        item_id = event.get("item_id", item.get("id") if isinstance(item, dict) else None)
        return lambda key: key[0] == "responses" and item_id is not None and key[2] == item_id
    choices = event.get("choices")
    finished = {
        choice.get("index", position)
        for position, choice in enumerate(choices if isinstance(choices, list) else [])
        if isinstance(choice, dict) and choice.get("finish_reason")
    }
    return lambda key: key[0] == "choice" and key[1] in finished


def _leaf(event: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The one text field of a skeleton event (``_texts_of``)."""
    if "delta" in event and not isinstance(event["delta"], dict):
        return event, "delta"
    choice = event["choices"][0]
    if "text" in choice:
        return choice, "text"
    delta = choice["delta"]
    if "function_call" in delta:
        return delta["function_call"], "arguments"
    if "tool_calls" in delta:
        return delta["tool_calls"][0]["function"], "arguments"
    return delta, next(iter(delta))


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _spellings(secret: str) -> bytes:
    """A pattern for ``secret`` as JSON may spell it: each character as it is, or escaped."""
    parts = []
    for char in secret:
        options = [re.escape(char.encode()), b"".join(map(_escaped_unit, _utf16_units(char)))]
        if char in _SHORT_ESCAPES:
            options.append(re.escape(_SHORT_ESCAPES[char]))
        parts.append(b"(?:" + b"|".join(options) + b")")
    return b"".join(parts)


def _escaped_unit(unit: int) -> bytes:
    """``\\uXXXX`` for one UTF-16 unit, its hex digits in either case."""
    digits = (bytes([digit]) for digit in b"%04x" % unit)
    return b"\\\\u" + b"".join(b"[%s%s]" % (d, d.upper()) if d.isalpha() else d for d in digits)


def _utf16_units(char: str) -> list[int]:
    encoded = char.encode("utf-16-be")
    return [int.from_bytes(encoded[i : i + 2], "big") for i in range(0, len(encoded), 2)]


def _longest_escape(char: str) -> bytes:
    return b"x" * max(len(char.encode()), 6 * len(_utf16_units(char)))


def _split_events(data: bytes) -> list[bytes]:
    """The complete events in ``data`` and, last, the start of the next one (maybe empty)."""
    return _EVENT_END.split(data)


def _field_value(line: bytes) -> bytes:
    value = line[5:]
    return value[1:] if value.startswith(b" ") else value


def _json_bytes(event: dict[str, Any]) -> bytes:
    return json.dumps(event, ensure_ascii=False, separators=(",", ":")).encode()


def _event_block(event: dict[str, Any], named: bool) -> bytes:
    kind = event.get("type")
    head = b"event: " + kind.encode() + b"\n" if named and isinstance(kind, str) else b""
    return head + b"data: " + _json_bytes(event) + b"\n\n"
