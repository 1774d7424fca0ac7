"""Hit quality through the service: multi-turn scoping, operators' controls, and feedback."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import openai
import pytest

from semcache.testing.standin_upstream import StandinUpstream

from .conftest import ask

pytestmark = pytest.mark.slow

QUESTION = "How do I learn Python quickly?"
PARAPHRASE = "How can I learn Python fast?"


def conversation(*turns: str) -> list[dict[str, str]]:
    roles = ["user", "assistant"]
    return [{"role": roles[i % 2], "content": text} for i, text in enumerate(turns)]


def test_follow_up_questions_never_hit_across_conversations(client: openai.OpenAI, upstream: StandinUpstream) -> None:
    obama = conversation("Who was the 44th US president?", "Barack Obama.", "How old is he?")
    trump = conversation("Who was the 45th US president?", "Donald Trump.", "How old is he?")
    ask(client, "", messages=obama)
    answer, headers = ask(client, "", messages=trump)
    assert headers["x-semcache"] == "miss" and answer == "Answer to: How old is he?"
    assert ask(client, "", messages=obama)[1]["x-semcache"] == "hit"  # same conversation: fine
    assert upstream.chat_calls() == 2


def test_standalone_questions_hit_across_conversations(client: openai.OpenAI, upstream: StandinUpstream) -> None:
    """A follow-up that reads on its own may be answered from a single-turn entry; its own answer
    stays with its conversation, since earlier turns may have shaped it."""
    cooking = conversation("I love cooking pasta.", "Nice! What sauce?", "What is the capital of France?")
    planets = conversation("Tell me about the planets.", "There are eight.", "What is the capital of France?")
    ask(client, "", messages=cooking)
    assert ask(client, "What is the capital of France?")[1]["x-semcache"] == "miss"  # not the follow-up's answer
    _, headers = ask(client, "", messages=planets)
    assert (headers["x-semcache"], headers["x-semcache-tier"]) == ("hit", "exact")  # the single-turn entry
    assert ask(client, "", messages=cooking)[1]["x-semcache"] == "hit"  # its own conversation's entry
    with_system = [{"role": "system", "content": "Answer in German."}, *planets]
    assert ask(client, "", messages=with_system)[1]["x-semcache"] == "miss"  # a system prompt still scopes
    assert upstream.chat_calls() == 3


def test_an_on_topic_follow_up_stays_in_its_conversation(client: openai.OpenAI, upstream: StandinUpstream) -> None:
    java = conversation("I am writing a Java program that reads files.", "Sure.", "How do I read a file in Java?")
    ask(client, "How do I read a file in Java?")
    assert ask(client, "", messages=java)[1]["x-semcache"] == "miss"


def test_strict_multi_turn_keeps_every_follow_up_in_its_conversation(
    serve: Callable[..., str], make_client, upstream: StandinUpstream
) -> None:
    client = make_client(serve(multi_turn="strict"))
    ask(client, "", messages=conversation("I love cooking pasta.", "Nice!", "What is the capital of France?"))
    _, headers = ask(client, "", messages=conversation("Planets?", "Eight.", "What is the capital of France?"))
    assert headers["x-semcache"] == "miss"


def test_namespace_config_takes_effect_at_once_and_persists(
    serve: Callable[..., str], make_client, tmp_path, upstream: StandinUpstream
) -> None:
    data = tmp_path / "persisted"
    url = serve(data_dir=data)
    client = make_client(url)
    ask(client, QUESTION)
    config = httpx.get(f"{url}/admin/namespaces/default/config").json()
    assert config["config"]["threshold"] == 0.91 and config["overrides"] == {}

    response = httpx.put(f"{url}/admin/namespaces/default/config", json={"threshold": 0.99, "guards": ["numbers"]})
    assert response.status_code == 200
    assert response.json()["config"]["threshold"] == 0.99 and response.json()["config"]["guards"] == ["numbers"]
    assert ask(client, PARAPHRASE)[1]["x-semcache"] == "miss"  # 0.96 similar, now below the bar
    other = ask(client, PARAPHRASE, extra_headers={"X-Semcache-Namespace": "other"})
    assert other[1]["x-semcache"] == "miss"  # (a separate namespace, so no entry there either)

    restarted = serve(data_dir=data)
    assert httpx.get(f"{restarted}/admin/namespaces/default/config").json()["config"]["threshold"] == 0.99
    assert httpx.get(f"{restarted}/admin/namespaces/other/config").json()["config"]["threshold"] == 0.91


@pytest.mark.parametrize(
    "body",
    [{"threshold": 1.5}, {"guards": ["astrology"]}, {"unknown": 1}, {"threshold": "high"}],
    ids=["threshold-range", "guard-name", "unknown-field", "threshold-type"],
)
def test_bad_namespace_config_is_a_400(service: str, body: dict) -> None:
    response = httpx.put(f"{service}/admin/namespaces/default/config", json=body)
    assert response.status_code == 400 and response.json()["error"]["type"] == "invalid_request_error"


def test_admin_paths_need_the_admin_key_when_configured(serve: Callable[..., str], upstream: StandinUpstream) -> None:
    url = serve(admin_key="s3cret-admin")
    for method, path in [("GET", "/admin/namespaces/default/config"), ("GET", "/admin/decisions"),
                         ("PUT", "/admin/namespaces/default/config")]:  # fmt: skip
        assert httpx.request(method, f"{url}{path}", json={}).status_code == 401
        wrong = httpx.request(method, f"{url}{path}", json={}, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 403
        right = httpx.request(method, f"{url}{path}", json={}, headers={"Authorization": "Bearer s3cret-admin"})
        assert right.status_code == 200


def test_decisions_show_candidates_guards_and_verdicts(client: openai.OpenAI, service: str) -> None:
    ask(client, "Is 2015 a good year to buy a house in Boston?")
    ask(client, "Is 2016 a good year to buy a house in Boston?")  # close, but the numbers guard vetoes it
    ask(client, "Is 2016 a good year to buy a house in Boston?")  # exact: no semantic decision
    ask(client, QUESTION)
    ask(client, PARAPHRASE)
    decisions = httpx.get(f"{service}/admin/decisions", params={"limit": 3}).json()["data"]
    assert [d["decision"] for d in decisions] == ["hit", "miss", "rejected: guard numbers"]
    hit, _, vetoed = decisions
    assert hit["query"] == PARAPHRASE and hit["candidate"] == QUESTION and hit["similarity"] > 0.9
    assert vetoed["candidate"] == "Is 2015 a good year to buy a house in Boston?"
    assert {"guard": "numbers", "passed": False, "detail": "['2016'] vs ['2015']"} in vetoed["guards"]


def test_feedback_stops_a_wrong_semantic_hit_and_is_counted(
    client: openai.OpenAI, service: str, upstream: StandinUpstream
) -> None:
    ask(client, QUESTION)
    served = client.chat.completions.create(model="test-model", messages=[{"role": "user", "content": PARAPHRASE}])
    assert served.choices[0].message.content == f"Answer to: {QUESTION}"
    response = httpx.post(f"{service}/v1/semcache/feedback", json={"id": served.id, "correct": False})
    assert response.status_code == 200 and response.json() == {
        "id": served.id, "recorded": True, "correct": False, "tier": "semantic"
    }  # fmt: skip
    answer, headers = ask(client, PARAPHRASE)
    assert headers["x-semcache"] == "miss" and answer == f"Answer to: {PARAPHRASE}"
    stats = httpx.get(f"{service}/stats").json()
    assert stats["feedback"] == {"correct": 0, "wrong": 1} and stats["by_namespace"]["default"]["reported_wrong"] == 1
    again = httpx.post(f"{service}/v1/semcache/feedback", json={"id": served.id, "correct": False})
    assert again.status_code == 404 and again.json()["error"]["code"] == "not_found"


def test_feedback_on_a_wrong_exact_hit_drops_the_entry(client: openai.OpenAI, service: str) -> None:
    ask(client, QUESTION)
    served = client.chat.completions.create(model="test-model", messages=[{"role": "user", "content": QUESTION}])
    httpx.post(f"{service}/v1/semcache/feedback", json={"id": served.id, "correct": False}).raise_for_status()
    assert ask(client, QUESTION)[1]["x-semcache"] == "miss"


def test_feedback_only_from_the_namespace_that_was_served(client: openai.OpenAI, service: str) -> None:
    ask(client, QUESTION)
    served = client.chat.completions.create(model="test-model", messages=[{"role": "user", "content": QUESTION}])
    elsewhere = httpx.post(f"{service}/v1/semcache/feedback", json={"id": served.id, "correct": False},
                           headers={"X-Semcache-Namespace": "intruder"})  # fmt: skip
    assert elsewhere.status_code == 404
    assert ask(client, QUESTION)[1]["x-semcache"] == "hit"
    assert httpx.post(f"{service}/v1/semcache/feedback", json={"id": served.id}).status_code == 400
