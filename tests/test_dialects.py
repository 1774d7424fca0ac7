"""The Responses API and the legacy Completions API through the cache: hits in each API's own
shape, streamed and not, scopes of their own, stateful requests passed on untouched, and a hit's id
that a later request can go on from (real HTTP, the openai SDK, the stand-in upstream)."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from semcache.testing.standin_upstream import StandinUpstream

pytestmark = pytest.mark.slow

MODEL = "gpt-4o-mini"
QUESTION = "How do I learn Python quickly?"
PARAPHRASE = "How can I learn Python fast?"


def respond(client: openai.OpenAI, **kwargs: Any) -> tuple[Any, dict[str, str]]:
    raw = client.responses.with_raw_response.create(model=kwargs.pop("model", MODEL), **kwargs)
    return raw.parse(), dict(raw.headers)


def calls_to(upstream: StandinUpstream, path: str) -> list[dict[str, Any]]:
    return [call["json"] for call in upstream.calls if call["path"] == path]


# -- the Responses API ---------------------------------------------------------------------


def test_a_response_asked_again_or_paraphrased_is_a_hit_in_the_responses_shape(
    serve: Callable[..., str], upstream: StandinUpstream, make_client: Callable[..., openai.OpenAI]
) -> None:
    client = make_client(serve())
    first, headers = respond(client, input=QUESTION)
    assert headers["x-semcache"] == "miss" and first.output_text == f"Answer to: {QUESTION}"
    again, headers = respond(client, input=QUESTION)
    assert (headers["x-semcache"], headers["x-semcache-tier"]) == ("hit", "exact")
    paraphrased, headers = respond(client, input=[{"role": "user", "content": PARAPHRASE}])
    assert (headers["x-semcache"], headers["x-semcache-tier"]) == ("hit", "semantic")
    for hit in (again, paraphrased):
        assert hit.output_text == first.output_text
        assert hit.object == "response" and hit.status == "completed" and hit.model == MODEL
        assert hit.id.startswith("resp_sc") and hit.output[0].type == "message"
        assert hit.usage.input_tokens > 0 and hit.usage.output_tokens > 0
    assert len(calls_to(upstream, "/v1/responses")) == 1


def test_a_streamed_hit_is_the_event_sequence_the_sdk_stream_helper_reads(
    serve: Callable[..., str], upstream: StandinUpstream, make_client: Callable[..., openai.OpenAI]
) -> None:
    client = make_client(serve())
    with client.responses.stream(model=MODEL, input=QUESTION) as stream:  # a streamed miss, relayed
        missed = stream.get_final_response()
    with client.responses.stream(model=MODEL, input=QUESTION) as stream:
        kinds = [event.type for event in stream]
        hit = stream.get_final_response()
    assert missed.output_text == hit.output_text == f"Answer to: {QUESTION}"
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]  # fmt: skip
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]  # fmt: skip
    assert "response.output_text.delta" in kinds and hit.id.startswith("resp_sc")
    assert len(calls_to(upstream, "/v1/responses")) == 1  # the streamed miss was stored

    raw = httpx.post(f"{client.base_url}responses", json={"model": MODEL, "input": QUESTION, "stream": True})
    assert raw.headers["x-semcache"] == "hit" and raw.headers["content-type"].startswith("text/event-stream")
    assert raw.text.startswith("event: response.created\ndata: {") and "[DONE]" not in raw.text


def test_responses_keep_scopes_of_their_own(
    serve: Callable[..., str], upstream: StandinUpstream, make_client: Callable[..., openai.OpenAI]
) -> None:
    client = make_client(serve())
    client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": QUESTION}])
    _, headers = respond(client, input=QUESTION)
    assert headers["x-semcache"] == "miss"  # a chat answer is never served to the Responses API
    for shaping in (
        {"instructions": "Answer in French."},
        {"temperature": 0.2},
        {"max_output_tokens": 50},
        {"text": {"format": {"type": "json_object"}}},
        {"reasoning": {"effort": "high"}},
        {"tools": [{"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}]},
    ):
        _, headers = respond(client, input=QUESTION, **shaping)
        assert headers["x-semcache"] == "miss", shaping
    _, headers = respond(client, input=QUESTION, metadata={"trace": "1"}, store=False, user="someone")
    assert headers["x-semcache"] == "hit"  # fields that do not shape the answer


def test_stateful_or_acting_requests_are_passed_on_untouched(
    serve: Callable[..., str], upstream: StandinUpstream, make_client: Callable[..., openai.OpenAI]
) -> None:
    client = make_client(serve())
    first, _ = respond(client, input=QUESTION)
    for stateful in (
        {"previous_response_id": first.id},
        {"tools": [{"type": "web_search"}]},
        {"background": True},
        {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "https://x/y.png"}]}]},
    ):
        body = {"input": QUESTION, **stateful}
        _, headers = respond(client, **body)
        assert headers["x-semcache"] == "bypass", stateful
        assert calls_to(upstream, "/v1/responses")[-1] == {"model": MODEL, **body}
    assert len(calls_to(upstream, "/v1/responses")) == 5


def test_a_later_request_goes_on_from_a_hit_as_its_conversation_written_out(
    serve: Callable[..., str], upstream: StandinUpstream, make_client: Callable[..., openai.OpenAI]
) -> None:
    client = make_client(serve())
    respond(client, input=QUESTION)
    hit, headers = respond(client, input=QUESTION)
    assert headers["x-semcache"] == "hit"
    follow_up, headers = respond(client, input="And which book should I read first?", previous_response_id=hit.id)
    assert follow_up.output_text == "Answer to: And which book should I read first?"
    sent = calls_to(upstream, "/v1/responses")[-1]
    assert "previous_response_id" not in sent  # the upstream never issued that id
    assert sent["input"] == [
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": f"Answer to: {QUESTION}"},
        {"role": "user", "content": "And which book should I read first?"},
    ]
    with pytest.raises(openai.BadRequestError) as unknown:
        respond(client, input="And then?", previous_response_id="resp_sc" + "0" * 24)
    assert unknown.value.code == "previous_response_not_found"
    other_namespace = make_client(serve())  # another replica, which never served that hit
    with pytest.raises(openai.BadRequestError):
        respond(other_namespace, input="And then?", previous_response_id=hit.id)


@pytest.mark.parametrize(
    ("fault", "stream"),
    [
        ({"finish_reason": "length"}, False),  # status "incomplete"
        ({"tool_calls": True}, False),  # a function call, not text
        ({"finish_reason": "length"}, True),
        ({"cut_after_chunks": 5}, True),
        ({"error_after_chunks": 1}, True),
    ],
)
def test_an_incomplete_cut_or_failed_response_is_never_cached(
    serve: Callable[..., str],
    upstream: StandinUpstream,
    make_client: Callable[..., openai.OpenAI],
    fault: dict[str, Any],
    stream: bool,
) -> None:
    client = make_client(serve())
    upstream.set_fault(times=1, **fault)
    try:
        if stream:
            for _ in client.responses.create(model=MODEL, input=QUESTION, stream=True):
                pass
        else:
            respond(client, input=QUESTION)
    except (openai.APIError, httpx.HTTPError):
        pass  # a cut or failed stream reaches the client as an error
    _, headers = respond(client, input=QUESTION)
    assert headers["x-semcache"] == "miss"


# -- the legacy Completions API ------------------------------------------------------------


def test_a_legacy_completion_of_one_text_is_cached_like_chat(
    serve: Callable[..., str], upstream: StandinUpstream, make_client: Callable[..., openai.OpenAI]
) -> None:
    client = make_client(serve())
    first = client.completions.with_raw_response.create(model="gpt-3.5-turbo-instruct", prompt=QUESTION)
    again = client.completions.with_raw_response.create(model="gpt-3.5-turbo-instruct", prompt=[QUESTION])
    assert (first.headers["x-semcache"], again.headers["x-semcache"]) == ("miss", "hit")
    hit = again.parse()
    assert hit.object == "text_completion" and hit.id.startswith("cmpl-sc")
    assert hit.choices[0].text == first.parse().choices[0].text == f"Completion of: {QUESTION}"
    assert hit.choices[0].finish_reason == "stop" and hit.usage is not None and hit.usage.completion_tokens > 0
    streamed = client.completions.create(model="gpt-3.5-turbo-instruct", prompt=QUESTION, stream=True)
    assert "".join(chunk.choices[0].text for chunk in streamed if chunk.choices) == f"Completion of: {QUESTION}"
    asked = client.chat.completions.with_raw_response.create(
        model="gpt-3.5-turbo-instruct", messages=[{"role": "user", "content": QUESTION}]
    )
    assert asked.headers["x-semcache"] == "miss"  # never across APIs
    assert len(calls_to(upstream, "/v1/completions")) == 1


def test_a_streamed_legacy_miss_is_stored_and_other_prompts_pass_through(
    serve: Callable[..., str], upstream: StandinUpstream, make_client: Callable[..., openai.OpenAI]
) -> None:
    client = make_client(serve())
    pieces = [c.choices[0].text for c in client.completions.create(model="m", prompt=QUESTION, stream=True)]
    assert "".join(pieces) == f"Completion of: {QUESTION}"
    again = client.completions.with_raw_response.create(model="m", prompt=QUESTION)
    assert again.headers["x-semcache"] == "hit"
    for uncached in ({"prompt": [1, 2, 3]}, {"prompt": ["one", "two"]}, {"prompt": QUESTION, "echo": True},
                     {"prompt": QUESTION, "logprobs": 2}, {"prompt": QUESTION, "best_of": 3}):  # fmt: skip
        raw = client.completions.with_raw_response.create(model="m", **uncached)
        assert raw.headers["x-semcache"] == "bypass", uncached
    assert len(calls_to(upstream, "/v1/completions")) == 6


FEW_SHOT = "Translate English to French:\nsea otter => loutre de mer\npeppermint => menthe poivrée\ncheese => fromage\n"


@pytest.mark.parametrize(
    ("asked", "other"),
    [
        (FEW_SHOT + "plush giraffe =>", FEW_SHOT + "apple =>"),
        ("Q: What is the capital of France?\nA:", "Q: What is the capital of Spain?\nA:"),
        (FEW_SHOT + "The weather in Paris today is", FEW_SHOT + "The weather in London today is"),
        (QUESTION + "\nA:", QUESTION + "\nA: "),  # continued differently
    ],
)
def test_a_template_with_another_last_line_is_not_a_hit(
    serve: Callable[..., str], make_client: Callable[..., openai.OpenAI], asked: str, other: str
) -> None:
    client = make_client(serve())
    client.completions.create(model="m", prompt=asked)
    assert client.completions.with_raw_response.create(model="m", prompt=other).headers["x-semcache"] == "miss"


def test_a_paraphrased_last_line_under_the_same_template_is_a_hit(
    serve: Callable[..., str], make_client: Callable[..., openai.OpenAI]
) -> None:
    client = make_client(serve())
    for prefix in ("", "You are a patient teacher.\n"):
        client.completions.create(model="m", prompt=prefix + QUESTION)
        raw = client.completions.with_raw_response.create(model="m", prompt=prefix + PARAPHRASE)
        assert (raw.headers["x-semcache"], raw.headers["x-semcache-tier"]) == ("hit", "semantic")


def test_a_legacy_completion_cut_short_is_not_cached(
    serve: Callable[..., str], upstream: StandinUpstream, make_client: Callable[..., openai.OpenAI]
) -> None:
    client = make_client(serve())
    upstream.set_fault(finish_reason="length", times=1)
    client.completions.create(model="m", prompt=QUESTION)
    upstream.set_fault(cut_after_chunks=2, times=1)
    with pytest.raises((openai.APIError, httpx.HTTPError)):
        for _ in client.completions.create(model="m", prompt=QUESTION, stream=True):
            pass
    assert client.completions.with_raw_response.create(model="m", prompt=QUESTION).headers["x-semcache"] == "miss"


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("responses", {"input": QUESTION}),  # no model
        ("responses", {"model": MODEL, "input": 42}),
        ("responses", {"model": MODEL, "input": QUESTION, "temperature": 5}),
        ("responses", {"model": MODEL, "input": QUESTION, "stream": "yes please"}),
        ("responses", {"model": MODEL, "input": QUESTION, "previous_response_id": "resp_scnothing"}),
        ("completions", {"prompt": QUESTION}),
        ("completions", {"model": "m"}),
        ("completions", {"model": "m", "prompt": 3}),
        ("completions", {"model": "m", "prompt": "x", "n": 0}),
    ],
)
def test_bad_requests_get_a_400_in_openais_shape(
    serve: Callable[..., str], upstream: StandinUpstream, path: str, body: dict[str, Any]
) -> None:
    response = httpx.post(f"{serve()}/v1/{path}", json=body)
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert upstream.calls == []


def test_stats_count_each_api_by_route(
    serve: Callable[..., str], upstream: StandinUpstream, make_client: Callable[..., openai.OpenAI]
) -> None:
    url = serve()
    client = make_client(url)
    for _ in range(2):
        respond(client, input=QUESTION)
        client.completions.create(model="m", prompt=QUESTION)
    routes = httpx.get(f"{url}/stats").json()["by_route"]
    assert routes["responses"]["hits"] == 1 and routes["responses"]["misses"] == 1
    assert routes["completions"]["hits"] == 1 and routes["completions"]["misses"] == 1


# -- what a hostile review found -----------------------------------------------------------


@pytest.mark.parametrize("api", ["responses", "completions"])
def test_with_scope_per_user_one_user_is_never_served_anothers_answer(
    serve: Callable[..., str], make_client: Callable[..., openai.OpenAI], api: str
) -> None:
    client = make_client(serve(scope_per_user=True))
    outcomes = []
    for field, user in [("user", "alice"), ("user", "bob"), ("safety_identifier", "carol"), ("user", "alice")]:
        if api == "completions" and field != "user":
            continue
        if api == "responses":
            raw = client.responses.with_raw_response.create(model=MODEL, input=QUESTION, **{field: user})
        else:
            raw = client.completions.with_raw_response.create(model="m", prompt=QUESTION, user=user)
        outcomes.append(raw.headers["x-semcache"])
    assert outcomes == (["miss", "miss", "miss", "hit"] if api == "responses" else ["miss", "miss", "hit"])


def test_a_responses_request_is_never_trimmed_to_fit_a_context_limit(
    serve: Callable[..., str], upstream: StandinUpstream
) -> None:
    url = serve(context_limits={MODEL: 40}, trim_oldest_turns=True)
    earlier = [
        {"role": "user", "content": "My name is Bob. " + "blah " * 40},
        {"role": "assistant", "content": "Noted."},
    ]
    body = {"model": MODEL, "input": [*earlier, {"role": "user", "content": "What is my name?"}]}
    response = httpx.post(f"{url}/v1/responses", json=body)
    assert response.status_code == 400 and response.json()["error"]["code"] == "context_length_exceeded"
    assert upstream.calls == []  # never sent on trimmed for the key and whole to the upstream


def test_a_follower_of_an_identical_response_in_flight_gets_its_own_fields(
    serve: Callable[..., str], upstream: StandinUpstream, make_client: Callable[..., openai.OpenAI]
) -> None:
    client = make_client(serve())
    upstream.set_fault(latency_s=1.0, times=1)
    with ThreadPoolExecutor(2) as pool:
        leader = pool.submit(respond, client, input=QUESTION, user="alice", metadata={"ticket": "ALICE-1"})
        time.sleep(0.3)
        follower = pool.submit(respond, client, input=QUESTION, user="bob")
        (led, _), (followed, headers) = leader.result(), follower.result()
    assert headers.get("x-semcache-coalesced") == "true" and len(calls_to(upstream, "/v1/responses")) == 1
    assert followed.output_text == led.output_text
    assert followed.id != led.id and followed.user == "bob" and followed.metadata == {}


@pytest.mark.parametrize(
    ("asked", "other"),
    [
        ("Is the sky blue", "Is the sky blue?"),
        ("def f(x):\n    return", "def f(x):\nreturn"),
        ("   Once upon a time", "Once upon a time"),
        ("Roses are red, violets are", "Roses are red, violets are blue,"),  # unfinished: exact only
    ],
)
def test_a_continuation_is_served_only_to_the_same_text(
    serve: Callable[..., str], make_client: Callable[..., openai.OpenAI], asked: str, other: str
) -> None:
    client = make_client(serve())
    client.completions.create(model="m", prompt=asked)
    assert client.completions.with_raw_response.create(model="m", prompt=other).headers["x-semcache"] == "miss"
    assert client.completions.with_raw_response.create(model="m", prompt=asked).headers["x-semcache"] == "hit"


@pytest.mark.parametrize(
    "item",
    [
        {"role": ["user"], "content": QUESTION},
        {"role": {"a": 1}, "content": QUESTION},
        {"role": "user", "content": [{"type": ["input_text"], "text": QUESTION}]},
        {"role": "user", "content": [{"type": {"x": 1}, "text": QUESTION}]},
    ],
)
def test_odd_input_items_are_passed_on_never_a_500(
    serve: Callable[..., str], upstream: StandinUpstream, item: dict[str, Any]
) -> None:
    response = httpx.post(f"{serve()}/v1/responses", json={"model": MODEL, "input": [item]})
    assert response.status_code == 200 and response.headers["x-semcache"] == "bypass"


def test_a_hits_id_is_recognised_however_spelled_and_only_by_its_user(
    serve: Callable[..., str], upstream: StandinUpstream, make_client: Callable[..., openai.OpenAI], tmp_path: Path
) -> None:
    keys = tmp_path / "keys.yaml"
    keys.write_text("sk-alice: [shared]\nsk-bob: [shared]\n")
    url = serve(api_keys_file=keys, scope_per_user=True)
    alice, bob = make_client(url, api_key="sk-alice"), make_client(url, api_key="sk-bob")
    respond(alice, input=QUESTION)
    hit, headers = respond(alice, input=QUESTION)
    assert headers["x-semcache"] == "hit"
    with pytest.raises(openai.BadRequestError):
        respond(bob, input="And then?", previous_response_id=hit.id)
    with pytest.raises(openai.BadRequestError):
        respond(alice, input="And then?", previous_response_id=hit.id.upper())
    respond(alice, input="And then?", previous_response_id=f" {hit.id} ")  # written out, as the id itself is
    assert all(not str(call.get("previous_response_id", "")).strip().lower().startswith("resp_sc")
               for call in calls_to(upstream, "/v1/responses"))  # fmt: skip


def test_a_chat_template_filled_in_differently_is_not_a_hit(
    serve: Callable[..., str], make_client: Callable[..., openai.OpenAI]
) -> None:
    client = make_client(serve())
    for asked, other in [
        ("plush giraffe =>", "apple =>"),
        ("The weather in Paris today is", "The weather in London today is"),
    ]:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": FEW_SHOT + asked}])
        raw = client.chat.completions.with_raw_response.create(
            model="m", messages=[{"role": "user", "content": FEW_SHOT + other}]
        )
        assert raw.headers["x-semcache"] == "miss"
