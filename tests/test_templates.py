"""Unit tests for semcache.tiers.template: loading template files and the template tier."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from semcache.keys import RequestKey, cache_api_key, request_key
from semcache.tiers import parse_templates
from semcache.tiers.base import Hit
from semcache.tiers.template import Template, TemplateTier, load_templates
from semcache.wire import ChatCompletionRequest
from testkit.fakes import HashingEmbedder

HOURS_YAML = """\
templates:
  - id: opening-hours
    questions: ["What are your opening hours?", "When are you open?"]
    answer: "We are open from 9:00 to 17:00, Monday to Friday."
    namespaces: [support]
    models: [gpt-4o-mini]
  - question: "Where is your office?"
    answer: "Main Street 1."
"""


def key(
    prompt: str,
    *,
    namespace: str = "support",
    model: str = "gpt-4o-mini",
    earlier: list[dict[str, Any]] | None = None,
    **fields: Any,
) -> RequestKey:
    messages = [*(earlier or []), {"role": "user", "content": prompt}]
    return request_key(ChatCompletionRequest(model=model, messages=messages, **fields), namespace)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# -- load_templates ------------------------------------------------------------------------------


def test_load_templates_from_yaml(tmp_path: Path) -> None:
    hours, office = load_templates(write(tmp_path, "templates.yaml", HOURS_YAML))
    assert hours == Template(
        id="opening-hours",
        questions=("What are your opening hours?", "When are you open?"),
        answer="We are open from 9:00 to 17:00, Monday to Friday.",
        namespaces=frozenset({"support"}),
        models=frozenset({"gpt-4o-mini"}),
    )
    assert (office.id, office.questions, office.namespaces, office.models) == (
        "template-1",
        ("Where is your office?",),
        None,
        None,
    )


def test_load_templates_from_json_list(tmp_path: Path) -> None:
    path = write(tmp_path, "templates.json", json.dumps([{"questions": ["Hi?"], "answer": "Hello!"}]))
    assert load_templates(path) == [Template(id="template-0", questions=("Hi?",), answer="Hello!")]


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("t.yaml", "templates: {a: 1}\n", "expected a list of templates"),
        ("t.yaml", "", "expected a list of templates"),
        ("t.yaml", "templates:\n  - just a string\n", "template #0 is not a mapping"),
        ("t.yaml", "- answer: yes\n", "template #0 needs 'questions'"),
        ("t.yaml", "- {questions: [ok], answer: a}\n- {questions: [' '], answer: b}\n", "template #1 needs"),
        ("t.yaml", "- {questions: hours, answer: a}\n", "template #0 needs 'questions', a list"),
        ("t.yaml", "- {questions: [Hi], answer: ''}\n", "template #0 needs 'answer'"),
        ("t.yaml", "- {questions: [Hi], answer: [a, b]}\n", "template #0 needs 'answer'"),
        ("t.yaml", "- {questions: [Hi], answer: a, namespaces: support}\n", "'namespaces' must be a list"),
        ("t.yaml", "- {questions: [Hi], answer: a, models: gpt-4o}\n", "'models' must be a list"),
        ("t.yaml", "- {questions: [Hi], answer: a, cache_api_scopes: {app: x}}\n", "'cache_api_scopes' must be"),
        ("t.yaml", "- {questions: [Hi], answer: a, cache_api_scopes: [x]}\n", "'cache_api_scopes' must be"),
        ("t.yaml", "- {questions: [Hi], answer: a, cache_api_scopes: [{model: m}]}\n", "in 'models', not in"),
        ("t.yaml", "templates:\n  - questions: [unclosed\n", "not valid YAML"),
        ("t.json", '{"templates": [', "not valid JSON"),
    ],
)
def test_bad_files_raise_a_clear_value_error(tmp_path: Path, name: str, text: str, message: str) -> None:
    path = write(tmp_path, name, text)
    with pytest.raises(ValueError, match=message) as caught:
        load_templates(path)
    assert str(path) in str(caught.value)


def test_a_missing_file_raises_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_templates(tmp_path / "nope.yaml")


# -- exact lookup --------------------------------------------------------------------------------


@pytest.fixture
def tier(tmp_path: Path) -> TemplateTier:
    return TemplateTier(load_templates(write(tmp_path, "templates.yaml", HOURS_YAML)), threshold=0.9)


def test_exact_lookup_matches_any_phrasing_after_normalisation(tier: TemplateTier) -> None:
    hit = tier.lookup_exact(key("  when ARE you open？"))
    assert hit is not None
    assert (hit.tier, hit.matched_prompt, hit.similarity, hit.entry_id) == ("template", "When are you open?", 1.0, None)
    assert hit.answer.startswith("We are open")


def test_exact_lookup_misses_other_prompts(tier: TemplateTier) -> None:
    assert tier.lookup_exact(key("When are you closed?")) is None


def test_exact_lookup_respects_namespaces_and_models(tier: TemplateTier) -> None:
    assert tier.lookup_exact(key("When are you open?", namespace="sales")) is None
    assert tier.lookup_exact(key("When are you open?", model="gpt-4o")) is None
    for namespace, model in (("support", "gpt-4o-mini"), ("sales", "gpt-4o")):  # unrestricted template
        assert tier.lookup_exact(key("Where is your office?", namespace=namespace, model=model)) is not None


def test_the_same_phrasing_in_two_namespaces() -> None:
    tier = TemplateTier(
        [
            Template("a", ("Who are you?",), "Team A", namespaces=frozenset({"a"})),
            Template("b", ("Who are you?",), "Team B", namespaces=frozenset({"b"})),
        ],
        threshold=0.9,
    )
    answers = {
        ns: getattr(tier.lookup_exact(key("who are you", namespace=ns)), "answer", None) for ns in ("a", "b", "c")
    }
    assert answers == {"a": "Team A", "b": "Team B", "c": None}


def test_lookup_skips_requests_with_history(tier: TemplateTier) -> None:
    history = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"}]
    assert tier.lookup_exact(key("When are you open?", earlier=history)) is None


def test_lookup_allows_a_system_prompt(tier: TemplateTier) -> None:
    system = [{"role": "system", "content": "You are a helpful assistant."}]
    assert tier.lookup_exact(key("When are you open?", earlier=system)) is not None


# -- semantic lookup -----------------------------------------------------------------------------

EMBEDDER = HashingEmbedder(dimension=1024)  # wide, so word hashes do not collide


def semantic_tier(threshold: float) -> TemplateTier:
    tier = TemplateTier(
        [
            Template("hours", ("What are your opening hours?",), "9 to 5", namespaces=frozenset({"support"})),
            Template("office", ("Where is your office?",), "Main Street 1."),
        ],
        threshold=threshold,
    )
    tier.set_vectors(EMBEDDER.embed(tier.phrasings))
    return tier


def semantic(tier: TemplateTier, prompt: str, **kwargs: Any) -> Hit | None:
    return tier.lookup_semantic(key(prompt, **kwargs), EMBEDDER.embed([prompt])[0])


def test_semantic_lookup_finds_a_paraphrase_above_the_threshold() -> None:
    # shares 5 of 6 words with the template: cosine 5 / sqrt(5 * 6), about 0.913
    hit = semantic(semantic_tier(0.9), "what are your opening hours today")
    assert hit is not None
    assert (hit.tier, hit.answer, hit.matched_prompt) == ("template", "9 to 5", "What are your opening hours?")
    assert hit.similarity == pytest.approx(5 / 30**0.5, abs=1e-4)


def test_semantic_lookup_respects_the_threshold() -> None:
    assert semantic(semantic_tier(0.95), "what are your opening hours today") is None
    assert semantic(semantic_tier(0.5), "how do I reset my password") is None


def test_semantic_lookup_respects_namespaces() -> None:
    assert semantic(semantic_tier(0.9), "what are your opening hours today", namespace="sales") is None
    assert semantic(semantic_tier(0.9), "where is your office", namespace="sales") is not None


def test_semantic_lookup_passes_over_a_closer_template_of_another_namespace() -> None:
    tier = TemplateTier(
        [
            Template(
                "support-hours", ("What are your opening hours today?",), "9 to 5", namespaces=frozenset({"support"})
            ),
            Template("hours", ("What are your opening hours?",), "Mostly 9 to 5"),
        ],
        threshold=0.85,
    )
    tier.set_vectors(EMBEDDER.embed(tier.phrasings))
    assert getattr(semantic(tier, "what are your opening hours today", namespace="support"), "answer", None) == "9 to 5"
    assert getattr(semantic(tier, "what are your opening hours today", namespace="sales"), "answer", None) == (
        "Mostly 9 to 5"
    )


def test_semantic_lookup_skips_requests_with_history() -> None:
    history = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]
    assert semantic(semantic_tier(0.5), "What are your opening hours?", earlier=history) is None


def test_semantic_lookup_needs_vectors() -> None:
    tier = TemplateTier([Template("office", ("Where is your office?",), "Main Street 1.")], threshold=0.5)
    assert tier.lookup_semantic(key("Where is your office?"), EMBEDDER.embed(["Where is your office?"])[0]) is None


# -- scope ---------------------------------------------------------------------------------------


def test_a_template_admits_a_plain_question_whatever_its_sampling_and_its_limit() -> None:
    office = Template("office", ("Where is your office?",), "Main Street 1.")
    for fields in ({}, {"temperature": 0, "top_p": 0.5, "seed": 1, "n": 1}, {"response_format": {"type": "text"}},
                   {"max_tokens": 1}, {"reasoning_effort": "low", "service_tier": "auto"}):  # fmt: skip
        assert office.admits(key("Where is your office?", **fields)), fields
    assert key("Where is your office?", max_tokens=9, max_completion_tokens=5).max_answer_tokens == 5


@pytest.mark.parametrize(
    "fields",
    [
        {"response_format": {"type": "json_object"}},
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}},
        {"tools": [{"type": "function", "function": {"name": "f"}}]},
        {"tool_choice": "none"},
        {"stop": "\n"},
        {"logit_bias": {"50256": -100}},
        {"max_output_tokens": "5"},  # not a whole number: a field like any other
        {"modalities": ["text", "audio"]},
        {"guided_json": {"type": "object"}},
    ],
)
def test_a_template_does_not_admit_a_request_that_shapes_its_answer_otherwise(fields: dict[str, Any]) -> None:
    office = Template("office", ("Where is your office?",), "Main Street 1.")
    request = ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "Where is your office?"}], **fields}
    )
    assert not office.admits(request_key(request, "support"))
    tier = TemplateTier([office], threshold=0.5)
    tier.set_vectors(EMBEDDER.embed(tier.phrasings))
    assert tier.lookup_exact(request_key(request, "support")) is None
    assert tier.lookup_semantic(request_key(request, "support"), EMBEDDER.embed(["Where is your office?"])[0]) is None


def test_a_template_admits_no_legacy_completion_and_the_plain_responses_api() -> None:
    office = Template("office", ("Where is your office?",), "Main Street 1.")
    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "Where is your office?"}])
    assert office.admits(request_key(request, "support", api="responses"))
    assert not office.admits(request_key(request, "support", api="completions", api_detail={"semantic": True}))


def test_lookups_pass_over_an_answer_that_does_not_fit() -> None:
    tier = TemplateTier(
        [
            Template("long", ("Where is your office?",), "Main Street 1, on the second floor, past the lifts."),
            Template("short", ("Where is your office?",), "Main Street 1."),
        ],
        threshold=0.5,
    )
    tier.set_vectors(EMBEDDER.embed(tier.phrasings))

    def fits(answer: str) -> bool:
        return len(answer) < 20

    assert getattr(tier.lookup_exact(key("Where is your office?"), fits), "answer", None) == "Main Street 1."
    vector = EMBEDDER.embed(["Where is your office?"])[0]
    hit = tier.lookup_semantic(key("Where is your office?"), vector, fits=fits)
    assert getattr(hit, "answer", None) == "Main Street 1."
    assert tier.lookup_exact(key("Where is your office?"), lambda answer: False) is None


def test_the_cache_api_scopes_a_template_admits() -> None:
    default, faq = parse_templates(
        [
            {"questions": ["Where is your office?"], "answer": "Main Street 1."},
            {"questions": ["Where is your office?"], "answer": "Main Street 1.", "cache_api_scopes": [{"app": "faq"}]},
        ],
        "test",
    )
    admitted = {
        json.dumps(scope): (default.admits(found := cache_api_key("ns", "Where is your office?", scope)),
                            faq.admits(found))
        for scope in ({}, {"model": "gpt-4o"}, {"app": "faq"}, {"app": "faq", "model": "gpt-4o"}, {"app": "other"},
                      {"model": 7})
    }  # fmt: skip
    assert admitted == {
        "{}": (True, False),
        '{"model": "gpt-4o"}': (True, False),
        '{"app": "faq"}': (False, True),
        '{"app": "faq", "model": "gpt-4o"}': (False, True),
        '{"app": "other"}': (False, False),
        '{"model": 7}': (False, False),  # not a model's name: the scope's own field
    }
    assert parse_templates([faq.as_dict()], "shared") == [faq]  # as the replicas share it
    assert "cache_api_scopes" not in default.as_dict()
