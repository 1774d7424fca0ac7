"""Unit tests for semcache.keys: normalisation, scope and exact keys, and the bypass policy."""

from __future__ import annotations

from typing import Any

import pytest

from semcache.keys import bypass_reason, normalize, request_key
from semcache.wire import ChatCompletionRequest


def chat(
    prompt: str = "What is the capital of France?", *, earlier: list[dict[str, Any]] | None = None, **params: Any
) -> ChatCompletionRequest:
    messages = [*(earlier or []), {"role": "user", "content": prompt}]
    return ChatCompletionRequest(**{"model": "gpt-4o-mini", "messages": messages, **params})


# -- normalize -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("  What is the capital?  ", "What is the capital"),  # surrounding whitespace, a trailing "?"
        ("Cafe\u0301 menu?", "Café menu"),  # NFC: canonical equivalents are one text
        ("ｆｕｌｌ ｗｉｄｔｈ？", "full width"),  # full-width forms
        ("ｶﾀｶﾅ", "カタカナ"),  # half-width katakana
        ("东京在哪里？", "东京在哪里"),
        ("这是什么。", "这是什么"),
        ("ends with a space ? ", "ends with a space"),
    ],
)
def test_normalize_merges_spellings_that_keep_the_meaning(text: str, expected: str) -> None:
    assert normalize(text) == expected


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("What Is The Capital?", "what is the capital?"),  # case
        ("What is 2³?", "What is 23?"),  # superscripts and other compatibility forms
        ("ﬁle", "file"),
        ("What does `ls -R` do?", "What does `ls -r` do?"),
        ("What is 6!?", "What is 6?"),  # punctuation other than one trailing "?"
        ("really?!...", "really"),
        ("if x:\n    y()\nz()", "if x:\n    y()\n    z()"),  # whitespace inside
        ("many  spaces", "many spaces"),
        ("计算6!", "计算6"),  # a "!" after a digit is no closing mark
        ("日志:\n  级别: 调试", "日志:\n级别: 调试"),  # line breaks and indentation in CJK text
    ],
)
def test_normalize_keeps_spellings_that_may_change_the_meaning(first: str, second: str) -> None:
    assert normalize(first) != normalize(second)


def test_normalize_keeps_inner_punctuation() -> None:
    assert normalize("Is 3.5 > 2?") == "Is 3.5 > 2"


# -- request_key: scope --------------------------------------------------------------------------


def test_same_request_same_keys() -> None:
    assert request_key(chat(), "default") == request_key(chat(), "default")


def test_scope_changes_with_namespace() -> None:
    assert request_key(chat(), "team-a").scope != request_key(chat(), "team-b").scope


def test_scope_changes_with_model() -> None:
    assert request_key(chat(), "default").scope != request_key(chat(model="gpt-4o"), "default").scope


def test_scope_changes_with_system_prompt() -> None:
    pirate = chat(earlier=[{"role": "system", "content": "Answer like a pirate."}])
    poet = chat(earlier=[{"role": "system", "content": "Answer like a poet."}])
    keys = {request_key(r, "default").scope for r in (chat(), pirate, poet)}
    assert len(keys) == 3


def test_scope_changes_with_earlier_turns() -> None:
    turn = [
        {"role": "user", "content": "Tell me about France."},
        {"role": "assistant", "content": "France is a country in Europe."},
    ]
    other_turn = [
        {"role": "user", "content": "Tell me about Texas."},
        {"role": "assistant", "content": "Texas is a state in the USA."},
    ]
    scopes = {request_key(chat(earlier=e), "default").scope for e in (None, turn, other_turn)}
    assert len(scopes) == 3


@pytest.mark.parametrize(
    "params",
    [
        {"temperature": 0.2},
        {"top_p": 0.5},
        {"max_tokens": 16},
        {"n": 1},
        {"stop": ["\n"]},
        {"tools": [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]},
        {"tool_choice": "none"},
        {"response_format": {"type": "json_object"}},
        {"seed": 7},
    ],
    ids=lambda p: next(iter(p)),
)
def test_scope_changes_with_each_answer_shaping_param(params: dict[str, Any]) -> None:
    plain, shaped = request_key(chat(), "default"), request_key(chat(**params), "default")
    assert plain.scope != shaped.scope
    assert plain.exact != shaped.exact


@pytest.mark.parametrize(
    "params",
    [{"user": "alice"}, {"stream": True}, {"stream": True, "stream_options": {"include_usage": True}}],
    ids=["user", "stream", "stream_options"],
)
def test_scope_ignores_params_that_do_not_shape_the_answer(params: dict[str, Any]) -> None:
    plain, other = request_key(chat(), "default"), request_key(chat(**params), "default")
    assert plain.scope == other.scope
    assert plain.exact == other.exact


# -- request_key: prompt and exact key -----------------------------------------------------------


def test_exact_key_equal_for_normalisation_equal_prompts() -> None:
    a = request_key(chat("What is the capital of France?"), "default")
    b = request_key(chat("  What is the capital of France？ "), "default")
    assert a.exact == b.exact
    assert a.prompt != b.prompt  # the prompt is kept as sent
    assert a.normalized == b.normalized == "What is the capital of France"
    assert request_key(chat("what is THE capital of France?"), "default").exact != a.exact


def test_exact_key_differs_for_different_prompts() -> None:
    a = request_key(chat("What is the capital of France?"), "default")
    b = request_key(chat("What is the capital of Spain?"), "default")
    assert a.scope == b.scope
    assert a.exact != b.exact


def test_exact_key_is_scoped() -> None:
    assert request_key(chat(), "team-a").exact != request_key(chat(), "team-b").exact


def test_scope_changes_with_the_prompt_messages_name() -> None:
    def named(name: str | None) -> ChatCompletionRequest:
        message = {"role": "user", "content": "Greet me by name.", **({"name": name} if name else {})}
        return ChatCompletionRequest.model_validate({"model": "gpt-4o-mini", "messages": [message]})

    scopes = {request_key(named(name), "default").scope for name in ("alice", "bob", None)}
    assert len(scopes) == 3
    assert request_key(named(None), "default").scope == request_key(chat("Greet me by name."), "default").scope


def test_has_history_false_with_only_a_system_prompt() -> None:
    key = request_key(chat(earlier=[{"role": "system", "content": "Be brief."}]), "default")
    assert key.has_history is False


def test_has_history_true_with_earlier_turns() -> None:
    key = request_key(
        chat(earlier=[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]), "default"
    )
    assert key.has_history is True


def test_system_prompt_hash_ignores_earlier_turns() -> None:
    system = {"role": "system", "content": "Be brief."}
    alone = request_key(chat(earlier=[system]), "default")
    with_turns = request_key(
        chat(earlier=[system, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]), "default"
    )
    assert alone.system_prompt_hash == with_turns.system_prompt_hash
    assert alone.scope != with_turns.scope


def test_text_content_parts_are_the_prompt() -> None:
    parts = ChatCompletionRequest(
        model="m",
        messages=[{"role": "user", "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "world"}]}],
    )
    assert request_key(parts, "default").prompt == "Hello\nworld"


# -- bypass_reason -------------------------------------------------------------------------------


def test_plain_request_is_cacheable() -> None:
    assert bypass_reason(chat(temperature=1.0, n=1), max_temperature=1.0) is None


def test_bypass_when_n_above_one() -> None:
    assert bypass_reason(chat(n=2), max_temperature=1.0) == "n > 1"


def test_bypass_when_temperature_above_ceiling() -> None:
    assert bypass_reason(chat(temperature=0.7), max_temperature=0.7) is None
    assert bypass_reason(chat(temperature=0.71), max_temperature=0.7) == "temperature above 0.7"


def test_bypass_when_logprobs_requested() -> None:
    assert bypass_reason(chat(logprobs=True), max_temperature=1.0) == "logprobs requested"
    assert bypass_reason(chat(logprobs=False), max_temperature=1.0) is None


def test_bypass_when_last_message_is_not_from_the_user() -> None:
    request = ChatCompletionRequest(
        model="m", messages=[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    )
    assert bypass_reason(request, max_temperature=1.0) == "the last message is not a user message"


def test_bypass_for_image_content() -> None:
    image = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
    request = ChatCompletionRequest(
        model="m", messages=[{"role": "user", "content": [{"type": "text", "text": "What is this?"}, image]}]
    )
    assert bypass_reason(request, max_temperature=1.0) == "non-text content"


def test_bypass_for_image_in_an_earlier_turn() -> None:
    image = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
    request = ChatCompletionRequest(
        model="m",
        messages=[
            {"role": "user", "content": [image]},
            {"role": "assistant", "content": "A cat."},
            {"role": "user", "content": "What colour is it?"},
        ],
    )
    assert bypass_reason(request, max_temperature=1.0) == "non-text content"


@pytest.mark.parametrize("prompt", ["", "   ", "\n\t"])
def test_bypass_for_empty_prompt(prompt: str) -> None:
    assert bypass_reason(chat(prompt), max_temperature=1.0) == "empty prompt"


# -- Chinese and other scripts -------------------------------------------------------------------


@pytest.mark.parametrize(
    "variant",
    [
        "如何通过语音助手接通电话?",
        "如何通过语音助手接通电话？",  # full-width question mark
        "如何通过语音助手接通电话。",
        "如何 通过 语音助手 接通电话",  # spaces between hanzi
        "如何通过语音助手接通电话 ？",
        "如何通过语音助手接通电话～",
    ],
)
def test_chinese_width_punctuation_and_space_variants_normalise_alike(variant: str) -> None:
    assert normalize(variant) == normalize("如何通过语音助手接通电话") == "如何通过语音助手接通电话"


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("他说“你好”是什么意思", '他说"你好"是什么意思'),
        ("「你好」是什么意思", '"你好"是什么意思'),
        ("苹果、香蕉哪个好", "苹果,香蕉哪个好"),
        ("你好, 世界", "你好，世界"),
        ("ｉＰｈｏｎｅ１４怎么截屏", "iPhone14怎么截屏"),
    ],
)
def test_chinese_punctuation_reads_as_ascii(first: str, second: str) -> None:
    assert normalize(first) == normalize(second)


def test_english_quoting_chinese_is_normalised_as_before() -> None:
    assert normalize("What does 胖口 mean in English?") == "What does 胖口 mean in English"
    assert normalize("What is “this”?") == "What is “this”"


def test_english_scopes_and_exact_keys_are_pinned() -> None:
    """Scopes as every release computed them; exact keys since normalisation keeps case."""
    key = request_key(chat(), "default")
    assert key.language == "latin"
    assert key.scope == "574198e1b1ca5ef8d5ff48296f31d9b543f1bb5ae87b26ea80b37dfb6bfa6f27"
    assert key.exact == "696258dfdc7c105604783ed1ee8ee5b106487201b1a556e417096a543821de4a"


def test_keys_of_a_system_prompt_a_parameter_and_a_user_are_pinned() -> None:
    """Digests of a request with every part a key reads: a change here orphans stored entries."""
    messages = [
        {"role": "system", "content": "Be brief. Ünïcode ✓"},
        {"role": "user", "content": "What is the capital of France?"},
    ]
    request = ChatCompletionRequest.model_validate({"model": "gpt-4o-mini", "temperature": 0.2, "messages": messages})
    key = request_key(request, "team-a", user="u1")
    assert key.scope == "bac9202581385a7e009f06fb11a46e4b4afd1cb8eaed9dc3e05f6d11e66479ba"
    assert key.exact == "8735c4ea9b07d18be031d0b75b23f19e5f84f87a486762f5e984661bd8bd73e1"
    assert key.system_prompt_hash == "735815b5ae47410785be3f397e797e2bc3f565e0d79b68dc41ae5f426a6e7a4e"


def test_a_non_latin_script_has_scopes_of_its_own() -> None:
    chinese = request_key(chat("法国的首都是哪里？"), "default")
    assert chinese.language == "han"
    assert chinese.scope != request_key(chat(), "default").scope
    assert chinese.scope == request_key(chat("日本的首都是哪里？"), "default").scope
    assert request_key(chat("Какая столица Франции?"), "default").language == "other"
