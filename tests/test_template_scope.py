"""A template obeys the scope and the guards like every other tier: its curated answer is plain text
for the question asked plainly, so a request that asks for another answer (a JSON schema, tools,
stop sequences, too few tokens, a text to continue, a cache API scope it does not name, another
model) is not served it. Through ``semcache serve`` as a process, with the openai SDK as the client."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from semcache.testing.standin_upstream import StandinUpstream
from testkit.servers import SemcacheProcess

from .conftest import ask

pytestmark = pytest.mark.slow

HOURS = "We are open 9 to 5, Monday to Friday."
OFFICE = "Our office is at Main Street 1."
TEMPLATES = f"""\
templates:
  - id: hours
    questions: ["When are you open?", "What are your opening hours?"]
    answer: "{HOURS}"
  - id: office
    questions: ["Where is your office?"]
    answer: "{OFFICE}"
    models: [support-model]
    cache_api_scopes: [{{}}, {{app: faq}}]
"""
SCHEMA = {
    "type": "json_schema",
    "json_schema": {
        "name": "hours",
        "schema": {"type": "object", "properties": {"open": {"type": "string"}}, "required": ["open"]},
    },
}
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {"name": "opening_hours", "description": "Today's opening hours", "parameters": {"type": "object"}},
    }
]


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, _standin_server: StandinUpstream) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("template-scope")
    templates = folder / "templates.yaml"
    templates.write_text(TEMPLATES, encoding="utf-8")
    process = SemcacheProcess(
        "--templates", str(templates), data_dir=folder / "data", upstream_url=_standin_server.base_url
    )
    with process:
        yield process.url


@pytest.fixture
def client(service: str, upstream: StandinUpstream) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{service}/v1", api_key="sk-test", max_retries=0) as sdk:
        yield sdk


def tier(headers: dict[str, str]) -> str | None:
    return headers.get("x-semcache-tier")


@pytest.mark.parametrize(
    "prompt",
    [
        "When are you open?",  # a phrasing: the exact match
        "When are you open?!",  # within the template's cosine: the semantic match
    ],
)
def test_a_plain_question_gets_the_template_with_any_sampling_a_system_prompt_and_room(
    client: openai.OpenAI, prompt: str
) -> None:
    for kwargs in (
        {},
        {"temperature": 0, "top_p": 1, "seed": 7, "presence_penalty": 0, "frequency_penalty": 0, "n": 1},
        {"max_tokens": 200},
        {"max_completion_tokens": 200},
        {"response_format": {"type": "text"}},
        {"messages": [{"role": "system", "content": "You are the front desk."}, {"role": "user", "content": prompt}]},
    ):
        answer, headers = ask(client, prompt, **kwargs)
        assert (answer, tier(headers)) == (HOURS, "template"), kwargs


@pytest.mark.parametrize("prompt", ["When are you open?", "When are you open?!"])
@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("json schema", {"response_format": SCHEMA}),
        ("json object", {"response_format": {"type": "json_object"}}),
        ("tools", {"tools": TOOLS}),
        ("tools, none to call", {"tools": TOOLS, "tool_choice": "none"}),
        ("stop sequences", {"stop": [" to "]}),
        ("one token", {"max_tokens": 1}),
        ("three tokens", {"max_completion_tokens": 3}),
        ("a field semcache does not know", {"extra_body": {"guided_choice": ["yes", "no"]}}),
    ],
)
def test_a_request_that_asks_for_another_kind_of_answer_is_not_served_the_template(
    client: openai.OpenAI, upstream: StandinUpstream, prompt: str, name: str, kwargs: dict[str, Any]
) -> None:
    # no-store: each case's own answer stays out of the cache, where the next case would find it.
    answer, headers = ask(client, prompt, extra_headers={"Cache-Control": "no-store"}, **kwargs)
    assert tier(headers) is None and answer == f"Answer to: {prompt}", name
    assert len(upstream.state.snapshot_calls()) == 1, name


def test_a_negated_question_is_not_served_the_template(client: openai.OpenAI) -> None:
    answer, headers = ask(client, "What aren't your opening hours?")
    assert tier(headers) != "template" and answer == "Answer to: What aren't your opening hours?"


def test_a_template_with_models_answers_only_those_models(client: openai.OpenAI) -> None:
    assert ask(client, "Where is your office?", model="support-model")[0] == OFFICE
    answer, headers = ask(client, "Where is your office?", model="other-model")
    assert tier(headers) != "template" and answer == "Answer to: Where is your office?"


@pytest.mark.parametrize("prompt", ["When are you open", "When are you open?", "Q: When are you open?\nA:"])
def test_a_legacy_completion_is_a_text_to_continue_and_never_gets_the_template(
    client: openai.OpenAI, prompt: str
) -> None:
    raw = client.completions.with_raw_response.create(model="test-model", prompt=prompt)
    assert tier(dict(raw.headers)) != "template"
    assert HOURS not in (raw.parse().choices[0].text or "")


def test_the_responses_api_gets_the_template_for_plain_text_only(client: openai.OpenAI) -> None:
    raw = client.responses.with_raw_response.create(model="test-model", input="When are you open?", temperature=0)
    assert (raw.parse().output_text, tier(dict(raw.headers))) == (HOURS, "template")
    schema = {"format": {"type": "json_schema", "name": "hours", "schema": SCHEMA["json_schema"]["schema"]}}
    raw = client.responses.with_raw_response.create(model="test-model", input="When are you open?", text=schema)
    assert tier(dict(raw.headers)) != "template" and raw.parse().output_text != HOURS
    raw = client.responses.with_raw_response.create(model="test-model", input="When are you open?", max_output_tokens=2)
    assert tier(dict(raw.headers)) != "template"


def lookup(url: str, prompt: str, scope: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(f"{url}/v1/semcache/lookup", json={"prompt": prompt, "scope": scope}, timeout=30)
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_the_cache_api_gets_a_template_only_in_a_scope_the_template_names(service: str) -> None:
    for scope in ({}, {"model": "gpt-4o-mini"}):  # a template without cache_api_scopes: the empty scope
        found = lookup(service, "When are you open?", scope)
        assert (found["hit"], found["tier"], found["answer"]) == (True, "template", HOURS), scope
    for scope in ({"app": "billing"}, {"model": "gpt-4o-mini", "temperature": 0}, {"format": "json"}):
        assert lookup(service, "When are you open?", scope)["hit"] is False, scope

    # cache_api_scopes: [{}, {app: faq}], models: [support-model]
    for scope in ({"model": "support-model"}, {"model": "support-model", "app": "faq"}):
        found = lookup(service, "Where is your office?", scope)
        assert (found["tier"], found["answer"]) == ("template", OFFICE), scope
    for scope in ({"model": "support-model", "app": "sales"}, {"app": "faq"}, {"model": "other-model", "app": "faq"}):
        assert lookup(service, "Where is your office?", scope)["hit"] is False, scope
