"""The service end to end: the official openai SDK against semcache in front of a real stand-in."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import httpx
import openai
import pytest

from semcache.server import create_app
from semcache.settings import Settings
from semcache.testing.standin_upstream import StandinUpstream
from semcache.testing.uvicorn_thread import ThreadedUvicorn
from testkit.fakes import HashingEmbedder
from testkit.servers import wait_healthy

from .conftest import ask

pytestmark = pytest.mark.slow

QUESTION = "How do I learn Python quickly?"
PARAPHRASE = "How can I learn Python fast?"


def test_miss_goes_upstream_once_then_exact_hit(client: openai.OpenAI, upstream: StandinUpstream) -> None:
    answer, headers = ask(client, QUESTION)
    assert headers["x-semcache"] == "miss"
    assert answer == f"Answer to: {QUESTION}"
    again, headers = ask(client, "  How do I learn Python quickly  ")
    assert (headers["x-semcache"], headers["x-semcache-tier"]) == ("hit", "exact")
    assert again == answer
    _, headers = ask(client, "how do I learn python QUICKLY?")  # another case: the semantic tier's call
    assert (headers["x-semcache"], headers["x-semcache-tier"]) == ("hit", "semantic")
    assert upstream.chat_calls() == 1


def test_paraphrase_is_a_semantic_hit_and_unrelated_is_a_miss(client: openai.OpenAI, upstream: StandinUpstream) -> None:
    ask(client, QUESTION)
    answer, headers = ask(client, PARAPHRASE)
    assert (headers["x-semcache"], headers["x-semcache-tier"]) == ("hit", "semantic")
    assert 0.9 <= float(headers["x-semcache-similarity"]) <= 1.0
    assert answer == f"Answer to: {QUESTION}"
    other, headers = ask(client, "What is the boiling point of water at sea level?")
    assert headers["x-semcache"] == "miss" and "x-semcache-tier" not in headers
    assert other == "Answer to: What is the boiling point of water at sea level?"
    assert upstream.chat_calls() == 2


def test_hit_is_a_well_formed_completion(client: openai.OpenAI) -> None:
    ask(client, QUESTION)
    first = client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": QUESTION}])
    second = client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": QUESTION}])
    assert first.id != second.id and second.id.startswith("chatcmpl-")
    assert second.model == "gpt-4o-mini" and second.object == "chat.completion"
    assert second.choices[0].finish_reason == "stop"
    assert second.usage is not None and second.usage.completion_tokens > 0
    assert second.usage.total_tokens == second.usage.prompt_tokens + second.usage.completion_tokens


@pytest.mark.parametrize(
    "change",
    [
        {"model": "another-model"},
        {"messages": [{"role": "system", "content": "Answer in French."}, {"role": "user", "content": QUESTION}]},
        {
            "messages": [
                # on-topic earlier turns may shape the answer (standalone questions: test_quality.py)
                {"role": "user", "content": "I want to start programming in Python."},
                {"role": "assistant", "content": "Great choice!"},
                {"role": "user", "content": QUESTION},
            ]
        },
        {"temperature": 0.2},
        {"top_p": 0.5},
        {"max_tokens": 20},
        {"stop": ["\n"]},
        {"seed": 7},
        {"response_format": {"type": "json_object"}},
        {
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
            "tool_choice": "none",
        },
        {"extra_headers": {"X-Semcache-Namespace": "tenant-b"}},
    ],
    ids=[
        "model",
        "system",
        "history",
        "temperature",
        "top_p",
        "max_tokens",
        "stop",
        "seed",
        "response_format",
        "tools",
        "namespace",
    ],
)
def test_a_different_scope_is_a_miss(client: openai.OpenAI, upstream: StandinUpstream, change: dict) -> None:
    ask(client, QUESTION)
    _, headers = ask(client, QUESTION, **change)
    assert headers["x-semcache"] == "miss"
    assert upstream.chat_calls() == 2


def test_n_above_one_and_hot_temperature_bypass(client: openai.OpenAI, upstream: StandinUpstream) -> None:
    ask(client, QUESTION)
    _, headers = ask(client, QUESTION, n=2)
    assert headers["x-semcache"] == "bypass"
    _, headers = ask(client, QUESTION, temperature=1.5)
    assert headers["x-semcache"] == "bypass"
    assert upstream.chat_calls() == 3


def test_no_cache_refreshes_and_no_store_does_not_store(client: openai.OpenAI, upstream: StandinUpstream) -> None:
    ask(client, QUESTION)
    upstream.state.answers[QUESTION] = "A fresher answer."
    answer, headers = ask(client, QUESTION, extra_headers={"Cache-Control": "no-cache"})
    assert headers["x-semcache"] == "miss" and answer == "A fresher answer."
    answer, headers = ask(client, QUESTION)
    assert headers["x-semcache"] == "hit" and answer == "A fresher answer."

    ask(client, "Where is Mount Kilimanjaro?", extra_headers={"Cache-Control": "no-store"})
    _, headers = ask(client, "Where is Mount Kilimanjaro?")
    assert headers["x-semcache"] == "miss"
    assert upstream.chat_calls() == 4


def test_ttl_header_expires_the_entry(client: openai.OpenAI, upstream: StandinUpstream) -> None:
    ask(client, QUESTION, extra_headers={"X-Semcache-TTL": "1"})
    assert ask(client, QUESTION)[1]["x-semcache"] == "hit"
    time.sleep(1.2)
    assert ask(client, QUESTION)[1]["x-semcache"] == "miss"
    assert ask(client, PARAPHRASE)[1]["x-semcache"] == "hit"  # the fresh entry from the miss above


def test_default_ttl_and_background_expiry(make_client, serve: Callable[..., str], upstream: StandinUpstream) -> None:
    url = serve(ttl_s=1)
    client = make_client(url)
    ask(client, QUESTION)
    assert httpx.get(f"{url}/stats").json()["entries"] == 1
    deadline = time.monotonic() + 10
    while httpx.get(f"{url}/stats").json()["entries"] and time.monotonic() < deadline:
        time.sleep(0.1)
    stats = httpx.get(f"{url}/stats").json()
    assert stats["entries"] == 0 and stats["index"]["entries"] == 0 and stats["expired"] == 1
    assert ask(client, PARAPHRASE)[1]["x-semcache"] == "miss"


def test_max_entries_evicts_least_recently_used(
    make_client, serve: Callable[..., str], upstream: StandinUpstream
) -> None:
    url = serve(max_entries=2)
    client = make_client(url)
    for question in ("What is a prime number?", "Who wrote Hamlet?"):
        ask(client, question)
    time.sleep(0.05)
    ask(client, "What is a prime number?")  # a hit makes it recently used
    ask(client, "How tall is the Eiffel Tower?")
    deadline = time.monotonic() + 10
    while httpx.get(f"{url}/stats").json()["entries"] > 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert ask(client, "Who wrote Hamlet?")[1]["x-semcache"] == "miss"
    assert ask(client, "What is a prime number?")[1]["x-semcache"] == "hit"


def test_streamed_miss_then_streamed_and_plain_hits(client: openai.OpenAI, upstream: StandinUpstream) -> None:
    def streamed(prompt: str) -> tuple[str, str | None]:
        with client.chat.completions.with_streaming_response.create(
            model="test-model", messages=[{"role": "user", "content": prompt}], stream=True
        ) as response:
            outcome = response.headers.get("x-semcache")
            chunks = list(response.parse())
        assert chunks[-1].choices[0].finish_reason == "stop"
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices), outcome

    assert streamed(QUESTION) == (f"Answer to: {QUESTION}", "miss")
    assert streamed(QUESTION) == (f"Answer to: {QUESTION}", "hit")
    assert streamed(PARAPHRASE) == (f"Answer to: {QUESTION}", "hit")
    assert ask(client, QUESTION)[1]["x-semcache-tier"] == "exact"
    assert upstream.chat_calls() == 1


def test_streamed_hit_reports_usage_when_asked(client: openai.OpenAI) -> None:
    ask(client, QUESTION)
    chunks = list(
        client.chat.completions.create(
            model="test-model",
            messages=[{"role": "user", "content": QUESTION}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


def test_cut_off_stream_is_not_cached(client: openai.OpenAI, upstream: StandinUpstream) -> None:
    upstream.set_fault(cut_after_chunks=2, times=1)
    with pytest.raises(openai.APIError):
        list(
            client.chat.completions.create(
                model="test-model", messages=[{"role": "user", "content": QUESTION}], stream=True
            )
        )
    assert ask(client, QUESTION)[1]["x-semcache"] == "miss"


def test_truncated_answer_is_not_cached(client: openai.OpenAI, upstream: StandinUpstream) -> None:
    upstream.set_fault(finish_reason="length", times=1)
    ask(client, QUESTION)
    assert ask(client, QUESTION)[1]["x-semcache"] == "miss"


def test_upstream_errors_come_back_in_openai_shape(
    serve: Callable[..., str], make_client, upstream: StandinUpstream
) -> None:
    client = make_client(serve(upstream_max_attempts=1))  # retries: tests/test_resilience.py
    upstream.set_fault(status=429, retry_after=3, times=1)
    with pytest.raises(openai.RateLimitError) as caught:
        ask(client, QUESTION)
    assert caught.value.response.headers["retry-after"] == "3"
    assert caught.value.response.headers["x-semcache"] == "miss"
    assert ask(client, QUESTION)[1]["x-semcache"] == "miss"


async def test_async_client_and_100_concurrent_requests(service: str, upstream: StandinUpstream) -> None:
    client = openai.AsyncOpenAI(base_url=f"{service}/v1", api_key="x", max_retries=0)
    questions = [f"What is {n} times {n + 1}?" for n in range(20)]
    first = await asyncio.gather(
        *(
            client.chat.completions.create(model="test-model", messages=[{"role": "user", "content": q}])
            for q in questions
        )
    )
    assert [r.choices[0].message.content for r in first] == [f"Answer to: {q}" for q in questions]

    async def one(n: int) -> str:
        question = questions[n % len(questions)]
        if n % 2:
            stream = await client.chat.completions.create(
                model="test-model", messages=[{"role": "user", "content": question}], stream=True
            )
            return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        response = await client.chat.completions.create(
            model="test-model", messages=[{"role": "user", "content": question}]
        )
        return response.choices[0].message.content or ""

    answers = await asyncio.gather(*(one(n) for n in range(100)))
    await client.close()
    assert answers == [f"Answer to: {questions[n % len(questions)]}" for n in range(100)]
    assert upstream.chat_calls() == 20
    async with httpx.AsyncClient() as http:
        stats = (await http.get(f"{service}/stats")).json()
    assert stats["hits"] == 100 and stats["misses"] == 20 and stats["errors"] == 0


def test_models_are_proxied(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == ["standin-model"]


def test_stats_count_per_namespace(service: str, client: openai.OpenAI) -> None:
    ask(client, QUESTION)
    ask(client, QUESTION)
    ask(client, QUESTION, extra_headers={"X-Semcache-Namespace": "team-a"})
    stats = httpx.get(f"{service}/stats").json()
    assert (stats["requests"], stats["hits"], stats["misses"], stats["bypass"]) == (3, 1, 2, 0)
    assert stats["hit_rate"] == pytest.approx(1 / 3, abs=1e-3)
    assert stats["tiers"] == {"exact": 1, "template": 0, "semantic": 0}
    assert stats["entries"] == 2
    assert stats["by_namespace"]["default"]["hit_rate"] == 0.5
    assert stats["by_namespace"]["team-a"] == {
        "requests": 1,
        "hits": 0,
        "misses": 1,
        "bypass": 0,
        "errors": 0,
        "reported_wrong": 0,
        "hit_rate": 0.0,
    }


@pytest.mark.parametrize(
    ("body", "headers", "status", "fragment"),
    [
        (b"{not json", {"content-type": "application/json"}, 400, "not valid JSON"),
        (b'{"messages": [{"role": "user", "content": "hi"}]}', {}, 400, "model"),
        (b'{"model": "m", "messages": []}', {}, 400, "messages"),
        (b'{"model": "m", "messages": "hello"}', {}, 400, "messages"),
        (b'{"model": "m", "messages": [{"role": "robot", "content": "hi"}]}', {}, 400, "role"),
        (b'{"model": 5, "messages": [{"role": "user", "content": "hi"}]}', {}, 400, "model"),
        (
            b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": "hot"}',
            {},
            400,
            "temperature",
        ),
        (b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}', {"x-semcache-ttl": "soon"}, 400, "TTL"),
        (
            b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}',
            {"x-semcache-namespace": "a b"},
            400,
            "Namespace",
        ),
        (b'{"model": "m", "messages": [{"role": "user", "content": "' + b"x" * 5_000_000 + b'"}]}', {}, 413, "larger"),
    ],
    ids=[
        "invalid-json",
        "no-model",
        "empty-messages",
        "messages-string",
        "bad-role",
        "model-number",
        "temperature-string",
        "bad-ttl",
        "bad-namespace",
        "oversized",
    ],
)
def test_bad_input_gets_an_openai_shaped_4xx(
    service: str, body: bytes, headers: dict, status: int, fragment: str
) -> None:
    response = httpx.post(
        f"{service}/v1/chat/completions", content=body, headers={"content-type": "application/json", **headers}
    )
    assert response.status_code == status
    error = response.json()["error"]
    assert set(error) >= {"message", "type", "code"} and fragment in error["message"]


def test_unknown_path_is_an_openai_shaped_404(service: str) -> None:
    response = httpx.get(f"{service}/v1/nothing-here")
    assert response.status_code == 404 and "error" in response.json()


def test_templates_answer_curated_questions(
    make_client, serve: Callable[..., str], tmp_path, upstream: StandinUpstream
) -> None:
    path = tmp_path / "templates.yaml"
    path.write_text(
        "templates:\n"
        "  - id: hours\n"
        "    questions: ['What are your opening hours?', 'When are you open?']\n"
        "    answer: 'We are open 9 to 5, Monday to Friday.'\n"
        "  - id: vip\n"
        "    questions: ['Do you have a lounge?']\n"
        "    answer: 'Yes, for gold members.'\n"
        "    namespaces: [vip]\n"
    )
    url = serve(templates=path)
    client = make_client(url)
    answer, headers = ask(client, "when are you OPEN?")
    assert (answer, headers["x-semcache-tier"]) == ("We are open 9 to 5, Monday to Friday.", "template")
    answer, headers = ask(client, "What are the opening hours?")
    assert (answer, headers["x-semcache-tier"]) == ("We are open 9 to 5, Monday to Friday.", "template")
    assert ask(client, "Do you have a lounge?")[1]["x-semcache"] == "miss"
    vip = ask(client, "Do you have a lounge?", extra_headers={"X-Semcache-Namespace": "vip"})
    assert vip[0] == "Yes, for gold members."
    assert upstream.chat_calls() == 1


def test_api_keys_map_to_namespaces(
    make_client, serve: Callable[..., str], tmp_path, upstream: StandinUpstream
) -> None:
    keys = tmp_path / "keys.yaml"
    keys.write_text("sk-alpha: [alpha, shared]\nsk-beta: [beta, shared]\n")
    url = serve(api_keys_file=keys)
    alpha = make_client(url, "sk-alpha")
    beta = make_client(url, "sk-beta")
    ask(alpha, QUESTION)
    assert ask(beta, QUESTION)[1]["x-semcache"] == "miss"  # beta's default namespace is its own
    with pytest.raises(openai.PermissionDeniedError):
        ask(beta, QUESTION, extra_headers={"X-Semcache-Namespace": "alpha"})
    with pytest.raises(openai.AuthenticationError):
        ask(make_client(url, "sk-unknown"), QUESTION)
    ask(alpha, PARAPHRASE, extra_headers={"X-Semcache-Namespace": "shared"})
    assert ask(beta, PARAPHRASE, extra_headers={"X-Semcache-Namespace": "shared"})[1]["x-semcache"] == "hit"


def test_healthz_is_503_while_loading_then_200(tmp_path, upstream: StandinUpstream) -> None:
    class GatedEmbedder(HashingEmbedder):
        """Blocks until released, so the service stays in its loading phase."""

        def __init__(self) -> None:
            super().__init__()
            self.release = threading.Event()

        def embed(self, texts):
            self.release.wait(30)
            return super().embed(texts)

    templates = tmp_path / "templates.yaml"
    templates.write_text("- questions: ['What are your opening hours?']\n  answer: '9 to 5.'\n")
    embedder = GatedEmbedder()
    settings = Settings(data_dir=tmp_path, upstream_url=upstream.base_url, templates=templates)
    with ThreadedUvicorn(create_app(settings, embedder=embedder)) as server:
        health = httpx.get(f"{server.url}/healthz")
        assert health.status_code == 503 and health.json()["status"] == "loading"
        chat = httpx.post(
            f"{server.url}/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        )
        assert chat.status_code == 503 and chat.json()["error"]["code"] == "not_ready"
        assert chat.headers["retry-after"] == "5"
        embedder.release.set()
        wait_healthy(server.url, timeout_s=30)
        assert httpx.get(f"{server.url}/healthz").json() == {"status": "ok"}


def test_healthz_reports_a_failed_load(tmp_path, upstream: StandinUpstream) -> None:
    settings = Settings(data_dir=tmp_path, upstream_url=upstream.base_url, embedding_model=str(tmp_path / "nope"))
    with ThreadedUvicorn(create_app(settings)) as server:
        deadline = time.monotonic() + 10
        while httpx.get(f"{server.url}/healthz").json()["status"] == "loading" and time.monotonic() < deadline:
            time.sleep(0.05)
        health = httpx.get(f"{server.url}/healthz")
        assert health.status_code == 503 and health.json()["status"] == "failed"
        assert "nope" in health.json()["error"]


def test_a_template_obeys_the_guards_like_every_other_tier(
    make_client, serve: Callable[..., str], tmp_path, upstream: StandinUpstream
) -> None:
    path = tmp_path / "templates.yaml"
    path.write_text(
        "templates:\n"
        "  - id: hours\n"
        "    questions: ['When are you open?', 'What are your opening hours?']\n"
        "    answer: 'We are open 9 to 5, Monday to Friday.'\n"
    )
    client = make_client(serve(templates=path))
    # Each within the template's cosine (0.95), each vetoed by the negation guard.
    for changed in ("What are not your opening hours?", "What aren't your opening hours?"):
        answer, headers = ask(client, changed)
        assert headers.get("x-semcache-tier") != "template" and answer == f"Answer to: {changed}", changed
    assert ask(client, "What are your opening hours?!")[1].get("x-semcache-tier") == "template"
