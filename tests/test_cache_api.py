"""The cache API for applications that call their model themselves (/v1/semcache/lookup and
/store), its Python client and its LangChain cache: real HTTP on loopback, the real model."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from semcache.client import Client, SemcacheClientError
from semcache.testing.standin_upstream import StandinUpstream

from .conftest import ask, assert_openai_error

pytestmark = pytest.mark.slow

QUESTION = "How do I reset my account password?"
PARAPHRASE = "How can I reset the password of my account?"
ANSWER = "Open Settings, choose Security, then Reset password."
SCOPE = {"model": "my-own-model", "temperature": 0}
KEY_A, KEY_B = "key-team-a-0001", "key-team-b-0002"


def post(url: str, path: str, body: Any, **headers: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/semcache/{path}", json=body, headers=headers, timeout=30)


@pytest.fixture
def keyed(serve: Callable[..., str], tmp_path: Path) -> str:
    keys = tmp_path / "keys.yaml"
    keys.write_text(f"{KEY_A}: [team-a]\n{KEY_B}: [team-b]\n")
    return serve(api_keys_file=keys)


def test_a_stored_answer_is_found_by_its_prompt_and_its_paraphrases_in_the_same_scope(service: str) -> None:
    stored = post(service, "store", {"prompt": QUESTION, "answer": ANSWER, "scope": SCOPE})
    assert stored.status_code == 200, stored.text
    assert stored.json()["object"] == "semcache.entry" and stored.json()["namespace"] == "default"
    assert isinstance(stored.json()["id"], int)

    exact = post(service, "lookup", {"prompt": QUESTION, "scope": SCOPE}).json()
    assert exact["hit"] and exact["answer"] == ANSWER and exact["tier"] == "exact" and exact["similarity"] == 1.0
    assert exact["id"]
    similar = post(service, "lookup", {"prompt": PARAPHRASE, "scope": SCOPE}).json()
    assert similar["hit"] and similar["answer"] == ANSWER and similar["tier"] == "semantic"
    assert 0.91 <= similar["similarity"] < 1.0

    other_scope = post(service, "lookup", {"prompt": QUESTION, "scope": {**SCOPE, "temperature": 1}}).json()
    assert other_scope == {"object": "semcache.lookup", "hit": False, "answer": None, "tier": None,
                           "similarity": None, "id": None, "namespace": "default", "verified": False}  # fmt: skip
    other_namespace = post(service, "lookup", {"prompt": QUESTION, "scope": SCOPE, "namespace": "elsewhere"})
    assert other_namespace.json()["hit"] is False


def test_an_answer_stored_through_the_api_is_never_served_to_a_chat_request(
    service: str, upstream: StandinUpstream, make_client: Callable[..., openai.OpenAI]
) -> None:
    post(service, "store", {"prompt": QUESTION, "answer": "PLANTED through the cache API"})
    upstream.state.answers[QUESTION] = "the model's own answer"
    content, headers = ask(make_client(service), QUESTION)
    assert headers["x-semcache"] == "miss" and content == "the model's own answer"


def test_a_hit_reported_wrong_is_not_served_again(service: str) -> None:
    post(service, "store", {"prompt": QUESTION, "answer": ANSWER})
    found = post(service, "lookup", {"prompt": QUESTION}).json()
    reported = httpx.post(f"{service}/v1/semcache/feedback", json={"id": found["id"], "correct": False})
    assert reported.status_code == 200, reported.text
    assert post(service, "lookup", {"prompt": QUESTION}).json()["hit"] is False  # a wrong exact hit is dropped


def test_an_entry_lives_for_its_ttl(service: str) -> None:
    post(service, "store", {"prompt": QUESTION, "answer": ANSWER, "ttl_s": 1})
    assert post(service, "lookup", {"prompt": QUESTION}).json()["hit"] is True
    time.sleep(1.2)
    assert post(service, "lookup", {"prompt": QUESTION}).json()["hit"] is False


@pytest.mark.parametrize(
    ("path", "body", "code"),
    [
        ("lookup", {}, None),
        ("lookup", {"prompt": ""}, None),
        ("lookup", {"prompt": QUESTION, "scope": ["not", "an", "object"]}, None),
        ("lookup", {"prompt": QUESTION, "surprise": 1}, None),
        ("lookup", {"prompt": QUESTION, "namespace": "bad namespace!"}, None),
        ("store", {"prompt": QUESTION}, None),
        ("store", {"prompt": QUESTION, "answer": ANSWER, "ttl_s": -1}, None),
        ("store", {"prompt": QUESTION, "answer": "x" * 2_000_001}, None),
        ("store", {"prompt": QUESTION, "answer": "x" * 20_001}, "answer_too_large"),
        ("store", {"prompt": "   ", "answer": ANSWER}, "invalid_prompt"),
        ("store", {"prompt": f"{QUESTION} Answer exactly: never.", "answer": "never"}, "answer_instruction"),
    ],
)
def test_bad_input_gets_an_openai_shaped_4xx(
    serve: Callable[..., str], path: str, body: dict[str, Any], code: str | None
) -> None:
    url = serve(max_answer_bytes=20_000, max_body_bytes=2_000_000)
    response = post(url, path, body)
    assert 400 <= response.status_code < 500, response.text
    assert_openai_error(response, response.status_code, code)


def test_only_json_from_this_site_is_taken(service: str) -> None:
    form = httpx.post(f"{service}/v1/semcache/store", data={"prompt": QUESTION, "answer": "PLANTED"})
    assert_openai_error(form, 415, "unsupported_media_type")
    text = httpx.post(f"{service}/v1/semcache/store", content=b'{"prompt": "q", "answer": "PLANTED"}',
                      headers={"Content-Type": "text/plain"})  # fmt: skip
    assert_openai_error(text, 415, "unsupported_media_type")
    cross_site = post(service, "store", {"prompt": QUESTION, "answer": "PLANTED"}, Origin="https://evil.example")
    assert_openai_error(cross_site, 403, "cross_site")
    assert post(service, "lookup", {"prompt": QUESTION}).json()["hit"] is False


def test_without_api_keys_only_this_machine_may_store(service: str) -> None:
    """A DNS-rebinding page reaches 127.0.0.1 under its own name: it may not plant answers."""
    port = httpx.URL(service).port
    refused = post(service, "store", {"prompt": QUESTION, "answer": "PLANTED"}, Host=f"evil.example:{port}")
    assert_openai_error(refused, 403, "store_needs_api_keys")
    assert post(service, "lookup", {"prompt": QUESTION}).json()["hit"] is False


def test_with_api_keys_each_key_stores_and_finds_in_its_own_namespaces_only(keyed: str) -> None:
    auth_a, auth_b = f"Bearer {KEY_A}", f"Bearer {KEY_B}"
    assert_openai_error(post(keyed, "store", {"prompt": QUESTION, "answer": ANSWER}), 401)
    stored = post(keyed, "store", {"prompt": QUESTION, "answer": ANSWER}, Authorization=auth_a)
    assert stored.status_code == 200 and stored.json()["namespace"] == "team-a"
    planted = post(keyed, "store", {"prompt": QUESTION, "answer": "PLANTED", "namespace": "team-a"},
                   Authorization=auth_b)  # fmt: skip
    assert_openai_error(planted, 403, "namespace_not_allowed")
    assert post(keyed, "lookup", {"prompt": QUESTION}, Authorization=auth_b).json()["hit"] is False
    found = post(keyed, "lookup", {"prompt": QUESTION}, Authorization=auth_a).json()
    assert found["hit"] and found["answer"] == ANSWER


async def test_the_python_client_stores_and_looks_up_sync_and_async(keyed: str) -> None:
    with Client(keyed, api_key=KEY_A) as cache:
        assert cache.lookup(QUESTION, scope=SCOPE).hit is False
        entry_id = cache.store(QUESTION, ANSWER, scope=SCOPE)
        found = cache.lookup(PARAPHRASE, scope=SCOPE)
        assert found.hit and found.answer == ANSWER and found.tier == "semantic" and entry_id > 0
        cache.feedback(found.id or "", correct=True)
        assert (await cache.alookup(QUESTION, scope=SCOPE)).tier == "exact"
        await cache.astore("What is two plus two?", "Four.", scope=SCOPE, ttl_s=60)
        assert (await cache.alookup("What is two plus two?", scope=SCOPE)).answer == "Four."
        await cache.aclose()
    with Client(keyed, api_key="not-a-key") as stranger, pytest.raises(SemcacheClientError) as refused:
        stranger.store(QUESTION, ANSWER)
    assert refused.value.status == 401 and refused.value.code


def test_langchain_calls_a_model_behind_the_semcache_cache_once_for_a_prompt_asked_twice(service: str) -> None:
    from langchain_core.globals import set_llm_cache
    from langchain_core.language_models import FakeListChatModel, FakeListLLM

    from semcache.integrations.langchain import SemcacheCache

    cache = SemcacheCache(service)
    set_llm_cache(cache)
    try:
        chat_model = FakeListChatModel(responses=["first answer", "second answer"])
        assert chat_model.invoke(QUESTION).content == "first answer"
        assert chat_model.invoke(QUESTION).content == "first answer"  # from semcache
        assert chat_model.i == 1  # the model answered once
        text_model = FakeListLLM(responses=["one", "two"])
        assert text_model.invoke(QUESTION) == "one"
        assert text_model.invoke(QUESTION) == "one"
        assert text_model.i == 1
    finally:
        set_llm_cache(None)
        cache.close()


async def test_langchain_async_calls_go_through_the_cache_too(service: str) -> None:
    from langchain_core.globals import set_llm_cache
    from langchain_core.language_models import FakeListChatModel

    from semcache.integrations.langchain import SemcacheCache

    cache = SemcacheCache(service)
    set_llm_cache(cache)
    try:
        model = FakeListChatModel(responses=["async answer", "never asked"])
        assert (await model.ainvoke(PARAPHRASE)).content == "async answer"
        assert (await model.ainvoke(PARAPHRASE)).content == "async answer"
        assert model.i == 1
    finally:
        set_llm_cache(None)
        await cache.aclose()


def test_a_cache_that_cannot_be_reached_never_stops_the_application() -> None:
    from langchain_core.globals import set_llm_cache
    from langchain_core.language_models import FakeListChatModel

    from semcache.integrations.langchain import SemcacheCache

    cache = SemcacheCache("http://127.0.0.1:9")  # nothing listens there
    set_llm_cache(cache)
    try:
        model = FakeListChatModel(responses=["asked", "asked again"])
        assert model.invoke(QUESTION).content == "asked"
        assert model.invoke(QUESTION).content == "asked again"
    finally:
        set_llm_cache(None)
        cache.close()


def test_with_scope_per_user_each_key_finds_only_what_it_stored(serve: Callable[..., str], tmp_path: Path) -> None:
    keys = tmp_path / "keys.yaml"
    keys.write_text(f"{KEY_A}: [shared]\n{KEY_B}: [shared]\n")
    url = serve(api_keys_file=keys, scope_per_user=True)
    auth_a, auth_b = f"Bearer {KEY_A}", f"Bearer {KEY_B}"
    assert post(url, "store", {"prompt": QUESTION, "answer": ANSWER}, Authorization=auth_a).status_code == 200
    assert post(url, "lookup", {"prompt": QUESTION}, Authorization=auth_a).json()["hit"] is True
    assert post(url, "lookup", {"prompt": QUESTION}, Authorization=auth_b).json()["hit"] is False


def test_with_scope_per_user_and_no_key_nothing_is_stored_or_found(serve: Callable[..., str]) -> None:
    url = serve(scope_per_user=True)
    assert_openai_error(post(url, "store", {"prompt": QUESTION, "answer": ANSWER}), 400, "user_required")
    assert post(url, "lookup", {"prompt": QUESTION}).json()["hit"] is False


def test_entries_stored_through_the_api_are_managed_like_any_other(service: str) -> None:
    entry_id = post(service, "store", {"prompt": QUESTION, "answer": ANSWER}).json()["id"]
    exported = httpx.get(f"{service}/admin/entries/export", timeout=30)
    assert exported.status_code == 200 and QUESTION in exported.text
    assert httpx.delete(f"{service}/admin/entries/{entry_id}", timeout=30).status_code == 200
    assert post(service, "lookup", {"prompt": QUESTION}).json()["hit"] is False


def test_stats_count_requests_by_route(service: str, make_client: Callable[..., openai.OpenAI]) -> None:
    client = make_client(service)
    ask(client, QUESTION)
    post(service, "store", {"prompt": QUESTION, "answer": ANSWER})
    post(service, "lookup", {"prompt": QUESTION})
    post(service, "lookup", {"prompt": "Something nobody asked before?"})
    client.embeddings.create(model="standin-embedding", input=["a chunk of text"])
    by_route = httpx.get(f"{service}/stats").json()["by_route"]
    assert by_route["chat"]["requests"] == 1 and by_route["chat"]["misses"] == 1
    assert by_route["cache_api"]["requests"] == 2
    assert (by_route["cache_api"]["hits"], by_route["cache_api"]["misses"]) == (1, 1)
    assert by_route["embeddings"]["requests"] == 1 and by_route["embeddings"]["misses"] == 1


LONG_CONTEXT = " ".join(f"Clause {n}: the tenant keeps the premises clean and in good repair." for n in range(60))


def test_prompts_longer_than_the_model_reads_are_never_served_each_others_answers(service: str) -> None:
    """The model reads the first 256 tokens: two prompts alike there but asking different
    questions after it have the same vector, and only an exact match may answer them."""
    first = f"{LONG_CONTEXT}\n\nQuestion: who pays for repairs to the roof?"
    second = f"{LONG_CONTEXT}\n\nQuestion: may the tenant keep a dog?"
    post(service, "store", {"prompt": first, "answer": "The landlord pays for the roof."})
    assert post(service, "lookup", {"prompt": first}).json()["tier"] == "exact"
    assert post(service, "lookup", {"prompt": second}).json()["hit"] is False
    decisions = httpx.get(f"{service}/admin/decisions", params={"limit": 5}).json()["data"]
    assert any(d["decision"] == "rejected: longer than the embedding model reads" for d in decisions)


def test_langchain_keeps_the_system_prompt_out_of_what_it_embeds(service: str) -> None:
    from langchain_core.globals import set_llm_cache
    from langchain_core.language_models import FakeListChatModel
    from langchain_core.messages import HumanMessage, SystemMessage

    from semcache.integrations.langchain import SemcacheCache

    cache = SemcacheCache(service)
    set_llm_cache(cache)
    try:
        model = FakeListChatModel(responses=["reset it in Settings", "deleting is permanent", "unused"])
        system = SystemMessage(content=LONG_CONTEXT)
        assert model.invoke([system, HumanMessage(content=QUESTION)]).content == "reset it in Settings"
        other = model.invoke([system, HumanMessage(content="How do I delete my account permanently?")])
        assert other.content == "deleting is permanent"  # another question: asked, not served the first
        again = model.invoke([system, HumanMessage(content=PARAPHRASE)])
        assert again.content == "reset it in Settings" and model.i == 2  # a paraphrase: from semcache
        plain = model.invoke([HumanMessage(content=QUESTION)])
        assert plain.content == "unused"  # without that system prompt: another scope
    finally:
        set_llm_cache(None)
        cache.close()


def test_a_prompt_that_dictates_its_answer_is_neither_stored_nor_served(service: str) -> None:
    post(service, "store", {"prompt": QUESTION, "answer": ANSWER})
    dictating = post(service, "lookup", {"prompt": f"{QUESTION} Answer exactly: it cannot be done."}).json()
    assert dictating["hit"] is False


def test_a_long_model_name_in_the_scope_is_kept_in_the_key(service: str) -> None:
    scope = {"model": "m" * 300}
    assert post(service, "store", {"prompt": QUESTION, "answer": ANSWER, "scope": scope}).status_code == 200
    assert post(service, "lookup", {"prompt": QUESTION, "scope": scope}).json()["hit"] is True
    assert post(service, "lookup", {"prompt": QUESTION, "scope": {"model": "m" * 299}}).json()["hit"] is False


def test_the_client_reports_a_hit_in_the_namespace_it_was_found_in(service: str) -> None:
    with Client(service, namespace="team-c") as cache:
        cache.store(QUESTION, ANSWER)
        found = cache.lookup(QUESTION)
        assert found.hit and found.namespace == "team-c"
        cache.feedback(found, correct=False)
        assert cache.lookup(QUESTION).hit is False
        with pytest.raises(SemcacheClientError):
            cache.feedback(cache.lookup("Never stored?"), correct=False)  # a miss has no id
