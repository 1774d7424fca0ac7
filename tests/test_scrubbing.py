"""``SecretScrubber`` on its own: the edges the process tests reach only by chance."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from semcache.errors import UpstreamQuotedCredential
from semcache.scrubbing import SecretScrubber

KEY = "key-0123456789abcdef"
LONGER = KEY + "-and-more"  # a secret that begins with another
REDACTED = "[redacted]"


def joined(scrubber: SecretScrubber, pieces: list[str]) -> str:
    events = scrubber.events()
    sent = []
    for piece in pieces:
        sent += events.feed({"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]})
    sent += events.feed({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    sent += events.finish()
    assert sent[-1]["choices"][0]["finish_reason"] == "stop"  # nothing held back comes after the finish
    return "".join(e["choices"][0]["delta"].get("content", "") for e in sent)


@pytest.mark.parametrize("cut", range(1, len(LONGER)))
def test_a_secret_cut_anywhere_is_caught_and_the_longer_of_two_wins(cut: int) -> None:
    scrubber = SecretScrubber([KEY, LONGER])
    text = f"a {LONGER} b {KEY} c"
    assert joined(scrubber, [text[:cut], text[cut:]]) == f"a {REDACTED} b {REDACTED} c"
    assert joined(scrubber, list(text)) == f"a {REDACTED} b {REDACTED} c"


def test_text_that_only_begins_like_a_secret_is_sent_whole() -> None:
    assert joined(SecretScrubber([KEY]), ["call key-01", "2 now"]) == "call key-012 now"
    assert joined(SecretScrubber([KEY]), ["ends with key-0123"]) == "ends with key-0123"


def test_short_secrets_and_word_like_client_keys_are_left_alone() -> None:
    scrubber = SecretScrubber(["admin", None, ""])
    assert not scrubber and scrubber.text("admin panel") == "admin panel"
    assert scrubber.with_client_key("a-common-phrase-in-text") is scrubber  # no digits: not a credential
    assert scrubber.with_client_key("abc123") is scrubber  # too short
    assert scrubber.with_client_key(KEY + "XYZ").text(f"x {KEY}XYZ") == f"x {REDACTED}"


def test_a_client_key_that_is_refused_fails_the_answer_wherever_it_is_and_the_rest_are_replaced() -> None:
    """An answer that may be cached or shared must not have the client's key cut out: the client
    chose it. Refused, it fails the answer: whole, in an object's key, split across stream events."""
    client_key = "client-key-0123456789abcdef"
    refusing = SecretScrubber([KEY]).with_client_key(client_key, refuse=True)
    assert refusing.text(f"the operator's {KEY}") == f"the operator's {REDACTED}"
    for quoting in (lambda: refusing.text(f"yours: {client_key}"), lambda: refusing.value({client_key: 1}),
                    lambda: refusing.value({"a": [f"x{client_key}y"]})):  # fmt: skip
        with pytest.raises(UpstreamQuotedCredential):
            quoting()
    events = refusing.events()
    sent = events.feed({"choices": [{"index": 0, "delta": {"content": "yours: " + client_key[:9]}}]})
    assert "".join(e["choices"][0]["delta"]["content"] for e in sent) == "yours: "  # the rest held back
    with pytest.raises(UpstreamQuotedCredential):
        events.feed({"choices": [{"index": 0, "delta": {"content": client_key[9:]}}]})
    assert refusing.may_hold(json.dumps({"a": client_key}).encode())
    # Relayed to the client alone (never cached), its key is taken out as any secret is.
    assert SecretScrubber([KEY]).with_client_key(client_key).text(f"yours: {client_key}") == f"yours: {REDACTED}"


def test_a_responses_text_is_flushed_before_its_done_event() -> None:
    events = SecretScrubber([KEY]).events()
    where = {"item_id": "msg_1", "output_index": 0, "content_index": 0}
    sent = []
    for piece in ["your ", KEY[:6], KEY[6:], " ok", " key-"]:
        sent += events.feed({"type": "response.output_text.delta", **where, "delta": piece})
    sent += events.feed({"type": "response.output_text.done", **where, "text": f"your {KEY} ok key-"})
    assert [e["type"] for e in sent[-2:]] == ["response.output_text.delta", "response.output_text.done"]
    deltas = "".join(e["delta"] for e in sent if e["type"].endswith(".delta"))
    assert deltas == sent[-1]["text"] == f"your {REDACTED} ok key-"


async def _gather(body: AsyncIterator[bytes]) -> bytes:
    return b"".join([piece async for piece in body])


def _wire(scrubber: SecretScrubber, parts: list[bytes], content_type: str) -> bytes:
    async def body() -> AsyncIterator[bytes]:
        for part in parts:
            yield part

    return asyncio.run(_gather(scrubber.wire(body(), content_type)))


@pytest.mark.parametrize("cut", [1, 7, 15, 30, 60])
def test_raw_json_is_scrubbed_across_chunks_and_escapes(cut: int) -> None:
    spelled = "".join(f"\\u{ord(c):04x}" for c in KEY[:5]) + KEY[5:]
    data = ('{"a": "' + KEY + '", "b": "' + spelled + '"}').encode()
    out = _wire(SecretScrubber([KEY]), [data[:cut], data[cut:]], "application/json")
    assert json.loads(out) == {"a": REDACTED, "b": REDACTED}


def test_a_passed_through_event_stream_is_scrubbed_across_events() -> None:
    def event(text: str, finish: Any = None) -> bytes:
        payload = {"choices": [{"index": 0, "text": text, "finish_reason": finish}]}
        return b"data: " + json.dumps(payload).encode() + b"\n\n"

    stream = (
        event("k: " + KEY[:9]) + event(KEY[9:] + ".") + b": a comment\n\n" + event("", "stop") + b"data: [DONE]\n\n"
    )
    out = _wire(SecretScrubber([KEY]), [stream[:20], stream[20:]], "text/event-stream; charset=utf-8")
    texts = [json.loads(line[6:]) for line in out.decode().split("\n") if line.startswith("data: {")]
    assert "".join(e["choices"][0]["text"] for e in texts) == f"k: {REDACTED}."
    assert out.endswith(b"data: [DONE]\n\n") and b": a comment" in out
