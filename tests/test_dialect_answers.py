"""What each dialect stores of an upstream's answer, and what it remembers of the hits it served:
only a clean, consistent answer, and never more than it may keep (small fakes, no service)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from semcache.dialects.completions import CompletionsDialect
from semcache.dialects.responses import IssuedResponse, IssuedResponses, ResponsesDialect
from semcache.tokens import TokenCounter

TEXT = "Paris is the capital of France."


def response(**changes: Any) -> dict[str, Any]:
    message = {"type": "message", "status": "completed", "role": "assistant",
               "content": [{"type": "output_text", "text": TEXT, "annotations": []}]}  # fmt: skip
    return {"status": "completed", "error": None, "incomplete_details": None, "output": [message], **changes}


def responses_dialect() -> ResponsesDialect:
    return ResponsesDialect({"model": "m", "input": "q"}, "default", None, IssuedResponses())


def test_a_completed_response_of_one_message_of_text_is_stored() -> None:
    assert responses_dialect().clean_answer(response(), 1000) == TEXT
    with_reasoning = response(output=[{"type": "reasoning", "summary": []}, *response()["output"]])
    assert responses_dialect().clean_answer(with_reasoning, 1000) == TEXT


@pytest.mark.parametrize(
    "changes",
    [
        {"status": "incomplete"},
        {"incomplete_details": {"reason": "max_output_tokens"}},  # "completed", yet cut
        {"error": {"code": "server_error"}},
        {"output": [{**response()["output"][0], "status": "incomplete"}]},
        {"output": [response()["output"][0], response()["output"][0]]},
        {"output": [{**response()["output"][0], "content": [{"type": "refusal", "refusal": "No."}]}]},
        {"output": [{"type": "function_call", "name": "f", "arguments": "{}"}]},
        {"output": [{**response()["output"][0], "role": "user"}]},
    ],
)
def test_any_other_response_is_not(changes: dict[str, Any]) -> None:
    assert responses_dialect().clean_answer(response(**changes), 1000) is None


def test_a_streamed_response_is_stored_only_as_its_client_was_streamed_it() -> None:
    def streamed(*deltas: str, final: dict[str, Any]) -> str | None:
        answer = responses_dialect().streamed_answer(1000)
        for delta in deltas:
            answer.add({"type": "response.output_text.delta", "delta": delta})
        answer.add({"type": "response.completed", "response": final})
        return answer.text() if answer.cacheable() else None

    assert streamed("Paris is the ", "capital of France.", final=response()) == TEXT
    assert streamed("Lyon is the ", "capital of France.", final=response()) is None  # the final word differs
    assert streamed("Paris " * 300, final=response()) is None  # over the bound


def test_a_legacy_completion_with_an_error_beside_its_choice_is_not_stored() -> None:
    clean = {"choices": [{"index": 0, "text": TEXT, "finish_reason": "stop"}]}
    dialect = CompletionsDialect({"model": "m", "prompt": "q"})
    assert dialect.clean_answer(clean, 1000) == TEXT
    assert dialect.clean_answer({**clean, "error": {"message": "overloaded"}}, 1000) is None


def test_the_hits_remembered_stay_within_their_count_and_their_text() -> None:
    issued = IssuedResponses(capacity=3, max_chars=100)
    for number in range(4):
        issued.remember(f"r{number}", IssuedResponse("ns", None, [{"role": "user", "content": "q"}], "a" * 20))
    assert issued.get("r0", "ns") is None and issued.get("r3", "ns") is not None  # three at most
    issued.remember("big", IssuedResponse("ns", None, [{"role": "user", "content": "q" * 60}], "a" * 20))
    assert issued.get("big", "ns") is not None and issued.get("r2", "ns") is None  # 100 characters at most
    issued.remember("huge", IssuedResponse("ns", None, [], "a" * 101))
    assert issued.get("huge", "ns") is None and issued.get("big", "ns") is not None  # never kept, nothing lost
    assert issued.get("big", "other") is None


def test_the_hits_remembered_are_shared_fairly_between_namespaces() -> None:
    """Past either bound, the namespace holding the most of it forgets its oldest."""
    issued = IssuedResponses(capacity=10, max_chars=1000)

    def hit(namespace: str, chars: int) -> IssuedResponse:
        return IssuedResponse(namespace, None, [], "a" * chars)

    for number in range(3):
        issued.remember(f"mine{number}", hit("mine", 10))
    for number in range(50):  # many small ones: the count bound
        issued.remember(f"flood{number}", hit("flood", 1))
    assert all(issued.get(f"mine{n}", "mine") is not None for n in range(3))
    assert issued.get("flood49", "flood") is not None and issued.get("flood42", "flood") is None  # 7 kept
    for number in range(20):  # large ones: the weight bound
        issued.remember(f"heavy{number}", hit("heavy", 400))
    assert all(issued.get(f"mine{n}", "mine") is not None for n in range(3))
    assert issued.get("heavy19", "heavy") is not None and issued.get("heavy17", "heavy") is None
    assert issued.held()[1] <= 1000 and issued.held()[0] <= 10


def test_a_legacy_hits_usage_counts_its_prompt_as_plain_text(tmp_path: Path) -> None:
    tokens = TokenCounter(tmp_path)
    dialect = CompletionsDialect({"model": "gpt-3.5-turbo-instruct", "prompt": "Write a haiku about the sea."})
    usage = dialect.usage(tokens, dialect.chat_view(), TEXT)
    assert usage["prompt_tokens"] == tokens.count_text("Write a haiku about the sea.", "gpt-3.5-turbo-instruct")
    assert usage["total_tokens"] == usage["prompt_tokens"] + tokens.count_text(TEXT, "gpt-3.5-turbo-instruct")
