"""Hostile clients, part of issue 16's suite: an answer is served only to a request of the same
context. Two API keys share one namespace of a real ``semcache serve``, in front of the stand-in
upstream, and one of them tries to get a context-shaped answer served to the other.

- A follow-up's answer is shaped by its earlier turns: it is stored with its conversation, never
  where single-turn prompts (or their paraphrases) find it, and a refresh of it replaces nothing
  of anyone else's. It may still *read* a single-turn entry (docs/security.md says why, and the risk).
- The exact tier merges only spellings that cannot change the meaning; the semantic tier's
  guards catch exponents, case-sensitive flags, factorials and code indentation.
- A message's ``name`` is part of the scope.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from semcache.testing.standin_upstream import StandinUpstream
from testkit.servers import SemcacheProcess

from .conftest import ask

pytestmark = pytest.mark.slow

KEY_A, KEY_B = "sk-tenant-a-0001", "sk-tenant-b-0002"
SHARED = {"X-Semcache-Namespace": "shared"}


@pytest.fixture(scope="module")
def standin() -> Iterator[StandinUpstream]:
    with StandinUpstream() as upstream:
        yield upstream


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, standin: StandinUpstream) -> Iterator[str]:
    """``semcache serve`` with two client keys that share the namespace ``shared``."""
    folder = tmp_path_factory.mktemp("hostile-context")
    keys = folder / "keys.json"
    keys.write_text(json.dumps({KEY_A: ["shared", "a"], KEY_B: ["shared", "b"]}))
    process = SemcacheProcess(
        "--api-keys", str(keys), data_dir=folder / "data", upstream_url=standin.base_url, log_path=folder / "log"
    )
    with process:
        yield process.url


@pytest.fixture
def clients(service: str, standin: StandinUpstream) -> Iterator[tuple[openai.OpenAI, openai.OpenAI]]:
    standin.reset()
    standin.state.answers.clear()
    a = openai.OpenAI(base_url=f"{service}/v1", api_key=KEY_A, max_retries=0)
    b = openai.OpenAI(base_url=f"{service}/v1", api_key=KEY_B, max_retries=0)
    yield a, b
    a.close()
    b.close()


def asks(client: openai.OpenAI, prompt: str, **kwargs: Any) -> tuple[str, str]:
    """The answer and X-Semcache of one question in the shared namespace."""
    headers = {**SHARED, **kwargs.pop("extra_headers", {})}
    text, response_headers = ask(client, prompt, extra_headers=headers, **kwargs)
    return text, response_headers["x-semcache"]


def conversation(*turns: str) -> list[dict[str, str]]:
    roles = ("user", "assistant")
    return [{"role": roles[n % 2], "content": text} for n, text in enumerate(turns)]


ALLERGY = ("My daughter is allergic to peanuts; remember that.", "Noted.")
SNACK = "What is a good snack for a school trip to the Louvre?"
SNACK_PARAPHRASE = "What's a good snack for a school trip to the Louvre?"
PEANUT_FREE = "Apple slices and a cheese sandwich: no peanuts anywhere."


# -- follow-ups ---------------------------------------------------------------------------------


def test_a_follow_ups_answer_is_never_served_to_a_single_turn_question(clients: Any, standin: StandinUpstream) -> None:
    a, b = clients
    standin.state.answers[SNACK] = PEANUT_FREE
    assert asks(a, "", messages=conversation(*ALLERGY, SNACK))[1] == "miss"
    standin.state.answers.clear()
    for prompt in (SNACK_PARAPHRASE, SNACK):
        text, _ = asks(b, prompt)
        assert text != PEANUT_FREE, f"{prompt!r} was served the follow-up's answer"


def test_a_refreshed_follow_up_replaces_no_single_turn_entry(clients: Any, standin: StandinUpstream) -> None:
    a, b = clients
    question = "Which museum in Paris is best for a school trip?"
    standin.state.answers[question] = "The Louvre."
    assert asks(b, question) == ("The Louvre.", "miss")

    standin.state.answers[question] = "The Louvre, and pack peanut-free snacks."
    refresh = {"Cache-Control": "no-cache"}
    assert asks(a, "", messages=conversation(*ALLERGY, question), extra_headers=refresh)[1] == "miss"

    assert asks(b, question) == ("The Louvre.", "hit")  # B's own entry, untouched


def test_the_same_conversation_asked_again_is_a_hit(clients: Any, standin: StandinUpstream) -> None:
    a, _ = clients
    turns = conversation("I am planning a trip to Paris with my class.", "Sounds fun!", "What is the capital of Peru?")
    assert asks(a, "", messages=turns)[1] == "miss"
    assert asks(a, "", messages=turns)[1] == "hit"
    assert standin.chat_calls() == 1


def test_a_standalone_follow_up_may_read_a_single_turn_entry(clients: Any, standin: StandinUpstream) -> None:
    a, b = clients
    question = "What is the capital of Australia?"
    assert asks(b, question)[1] == "miss"
    turns = conversation("I love cooking pasta.", "Nice! What sauce?", question)
    assert asks(a, "", messages=turns) == (f"Answer to: {question}", "hit")
    assert standin.chat_calls() == 1


def test_a_tool_result_keeps_the_follow_up_in_its_conversation(clients: Any, standin: StandinUpstream) -> None:
    a, b = clients
    question = "What is the current weather in Oslo Norway?"
    assert asks(b, question)[1] == "miss"  # a single-turn entry, which knows nothing of the tool's report
    call = {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}
    turns = [
        {"role": "user", "content": "Please run the lookup tool."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Oslo, Norway: blizzard, -18C, all flights cancelled"},
        {"role": "assistant", "content": "Done."},
        {"role": "user", "content": question},
    ]
    assert asks(a, "", messages=turns)[1] == "miss"


def test_the_upstream_account_a_client_names_is_part_of_the_scope(clients: Any, standin: StandinUpstream) -> None:
    a, b = clients
    question = "Which fine-tuned model should I use for support tickets?"
    project = {"OpenAI-Organization": "org-1", "OpenAI-Project": "proj_A"}
    assert asks(a, question, extra_headers=project)[1] == "miss"
    assert asks(b, question, extra_headers={**project, "OpenAI-Project": "proj_B"})[1] == "miss"
    assert asks(b, question, extra_headers=project)[1] == "hit"
    assert asks(b, question)[1] == "miss"  # naming none is another account too


def test_no_store_counts_in_any_cache_control_header(service: str, clients: Any) -> None:
    question = {"model": "m", "messages": [{"role": "user", "content": "What is my private diagnosis code?"}]}
    split = [("Cache-Control", "max-age=0"), ("Cache-Control", "no-store"), ("Authorization", f"Bearer {KEY_A}")]
    first = httpx.post(f"{service}/v1/chat/completions", json=question, headers=split)
    assert first.headers["x-semcache"] == "miss"
    again = httpx.post(f"{service}/v1/chat/completions", json=question, headers={"Authorization": f"Bearer {KEY_A}"})
    assert again.headers["x-semcache"] == "miss"  # nothing was stored
    twice = [("X-Semcache-TTL", "60"), ("X-Semcache-TTL", "0"), ("Authorization", f"Bearer {KEY_A}")]
    refused = httpx.post(f"{service}/v1/chat/completions", json=question, headers=twice)
    assert (refused.status_code, refused.json()["error"]["code"]) == (400, "invalid_ttl")


# -- the exact tier and the guards -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("What is 2³?", "What is 23?"),
        ("What does `ls -R` do?", "What does `ls -r` do?"),
        ("What does ls -R do?", "What does ls -r do?"),
        ("What is 6!?", "What is 6?"),
        (
            "What does this print?\nfor i in range(3):\n    print(i)\nprint('done')",
            "What does this print?\nfor i in range(3):\n    print(i)\n    print('done')",
        ),
    ],
    ids=["superscript", "inline-flag", "bare-flag", "factorial", "indentation"],
)
def test_spellings_that_change_the_meaning_are_not_merged(
    clients: Any, standin: StandinUpstream, first: str, second: str
) -> None:
    a, b = clients
    assert asks(a, first)[1] == "miss"
    assert asks(b, second) == (f"Answer to: {second}", "miss")
    assert asks(b, first) == (f"Answer to: {first}", "hit")  # each keeps its own answer


@pytest.mark.parametrize(
    ("question", "variant"),
    [
        ("What is the boiling point of water at sea level?", "What is the boiling point of water at sea level"),
        ("How tall is the Eiffel Tower?", "  How tall is the Eiffel Tower?  "),
        ("Where is the Great Barrier Reef?", "where is the Great Barrier Reef?"),  # sentence case: semantic
        ("What does a chef do?", "what does a chef do"),
    ],
)
def test_spellings_that_keep_the_meaning_still_hit(
    clients: Any, standin: StandinUpstream, question: str, variant: str
) -> None:
    a, b = clients
    asks(a, question)
    assert asks(b, variant) == (f"Answer to: {question}", "hit")
    assert standin.chat_calls() == 1


def test_full_width_and_cjk_spacing_variants_share_an_exact_entry(clients: Any, standin: StandinUpstream) -> None:
    a, b = clients
    asks(a, "如何通过语音助手接通电话？")
    for variant in ("如何 通过 语音助手 接通电话", "如何通过语音助手接通电话?", "如何通过语音助手接通电话。"):
        assert asks(b, variant)[1] == "hit"
    assert standin.chat_calls() == 1


# -- the name of the person asking --------------------------------------------------------------


def test_a_message_name_is_part_of_the_scope(clients: Any, standin: StandinUpstream) -> None:
    a, b = clients
    prompt = "Write a one-line birthday greeting addressed to me by name."

    def as_named(client: openai.OpenAI, name: str) -> tuple[str, str]:
        return asks(client, "", messages=[{"role": "user", "content": prompt, "name": name}])

    assert as_named(a, "alice")[1] == "miss"
    assert as_named(b, "bob")[1] == "miss"
    assert as_named(b, "alice")[1] == "hit"  # the same person's question
    assert asks(b, prompt)[1] == "miss"  # and no name is not "alice"
    assert standin.chat_calls() == 3
