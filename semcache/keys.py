"""Turning a chat request into cache keys: normalisation, scope, and the cacheability policy.

An entry may only ever be served to a request with the same *scope*: namespace, model, every
message before the last user message (system prompt and earlier turns), and every parameter that
shapes the answer. The last user message is the *prompt* that the tiers match on.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from .instructions import find_answer_instruction
from .language import Script, detect_script
from .wire import MAX_MODEL_CHARS, ChatCompletionRequest, Message

KEY_VERSION = "1"

# Request fields that do not change what the answer says, so they stay out of the scope.
_NOT_ANSWER_SHAPING = {"messages", "model", "stream", "stream_options", "user", "metadata", "store"}
# Answer-shaping fields that change how an answer is sampled or served, never what a right answer
# says: a template's curated answer does for any value of them. Every other one (a response format,
# tools, stop sequences, a field semcache does not know) asks for an answer no template was written for.
_SAMPLING = frozenset(
    ("temperature", "top_p", "seed", "presence_penalty", "frequency_penalty", "n", "logprobs", "service_tier",
     "reasoning_effort", "reasoning", "parallel_tool_calls", "truncation", "prompt_cache_key", "safety_identifier")
)  # fmt: skip
# Fields that cap an answer's length in tokens (chat's two, the Responses API's): a template's answer
# does when it fits under the lowest.
_TOKEN_LIMITS = ("max_tokens", "max_completion_tokens", "max_output_tokens")
# Values of answer-shaping fields that ask for what a template's answer is anyway: plain text.
_PLAIN_TEXT: dict[str, Any] = {
    "response_format": {"type": "text"}, "text": {"format": {"type": "text"}}, "modalities": ["text"],
}  # fmt: skip

# Han, kana and the CJK symbols and punctuation block (。、「」...): text written without spaces.
_CJK = "\u3000-\u303f\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f"
_HAS_CJK = re.compile(f"[{_CJK}]")
# Spaces between two CJK characters, or between one and a punctuation mark ("你好, 世界"); never a
# line break, nor the indentation after one, which may be the structure of code or a list.
_PUNCT = "!-/:-@\\[-`{-~"
_SPACE = "[^\\S\\n\\r\\v\\f\\x85\\u2028\\u2029]+"
_SPACE_BY_CJK = re.compile(f"(?<=[{_CJK}]){_SPACE}(?=[{_CJK}{_PUNCT}])|(?<=[{_PUNCT}]){_SPACE}(?=[{_CJK}])")
# The full-width forms of ASCII (Ａ, １, ？) and the half-width forms of katakana and Hangul, and
# the ideographic space: the same characters at another width, which NFKC folds.
_WIDTH_FORMS = re.compile("[\u3000\uff01-\uffee]+")
# CJK punctuation written as its Chinese or its ASCII form ("接通电话？" and "接通电话?"). Replaced
# by a search for the marks, not ``str.translate``, which is slower where there are none and holds
# the GIL for all of a long text.
_CJK_PUNCTUATION = {"。": ".", "、": ",", "“": '"', "”": '"', "「": '"', "」": '"', "『": '"', "』": '"',
                    "‘": "'", "’": "'", "～": "~", "〜": "~"}  # fmt: skip
_CJK_PUNCTUATION_MARK = re.compile(f"[{''.join(_CJK_PUNCTUATION)}]")
# A space that is not a line break: cheap to look for before the search for spaces by CJK text.
_ANY_SPACE = re.compile(_SPACE)
# A mark that closes a CJK sentence (after the translation above), and is trimmed: one, and not a
# "!" after a digit or a Latin letter, which may be a factorial or part of a name.
_CJK_CLOSING_MARK = re.compile(r"(?:[.?~]|(?<![0-9A-Za-z])!)\s*$")


def normalize(text: str) -> str:
    """The exact tier's form of a prompt: it merges only spellings that cannot change the meaning.

    Merged: surrounding whitespace, Unicode canonical equivalents (NFC), the full-width and
    half-width forms of a character, one trailing question mark; in CJK text also the spaces
    between CJK characters, CJK punctuation and its ASCII form, and the closing sentence mark.
    Kept: case, superscripts and other compatibility forms ("2³" is not "23"), whitespace inside
    the text (code indentation), and every other punctuation mark ("6!" is not "6"). Spellings
    that differ in these reach the semantic tier, whose guards judge them.
    """
    folded = _WIDTH_FORMS.sub(lambda m: unicodedata.normalize("NFKC", m.group()), unicodedata.normalize("NFC", text))
    if _HAS_CJK.search(folded) and detect_script(folded) != "latin":
        folded = folded.strip()
        if _ANY_SPACE.search(folded):
            folded = _SPACE_BY_CJK.sub("", folded)
        folded = _CJK_PUNCTUATION_MARK.sub(lambda mark: _CJK_PUNCTUATION[mark.group()], folded)
        # Stripped, the text ends in its closing mark if it has one: only its end is searched.
        end = max(0, len(folded) - 8)
        return (folded[:end] + _CJK_CLOSING_MARK.sub("", folded[end:])).strip()
    return folded.strip().removesuffix("?").rstrip()


@dataclass(frozen=True)
class RequestKey:
    """Everything the tiers need to know about one cacheable request."""

    namespace: str
    model: str
    scope: str  # hex digest of namespace, model, earlier messages and answer-shaping parameters
    prompt: str  # the last user message, as sent
    normalized: str
    exact: str  # hex digest of scope and normalised prompt
    has_history: bool  # earlier user or assistant turns exist (a system prompt alone does not count)
    system_prompt_hash: str  # hex digest of the system and developer messages only
    # The prompt's script. It picks the embedding model and the threshold, and is part of the scope
    # for non-Latin prompts only, so every index partition holds vectors of one model.
    language: Script = "latin"
    # What a template must admit to answer this request (``template_scope``): the parts of the scope
    # that no curated answer stands for whatever they say (the API, the fields that shape the answer
    # but sampling and token limits, the cache API's scope), and the fewest answer tokens it allows.
    template_scope: str = ""
    max_answer_tokens: int | None = None


def message_text(message: Message) -> str | None:
    """Plain text of a message, or None when it carries anything but text."""
    if message.content is None or isinstance(message.content, str):
        return message.content or ""
    texts = []
    for part in message.content:
        if part.type != "text" or part.text is None:
            return None
        texts.append(part.text)
    return "\n".join(texts)


def bypass_reason(
    request: ChatCompletionRequest, max_temperature: float, *, cache_answer_instructions: bool = False
) -> str | None:
    """Why this request must not touch the cache, or None when it may.

    Unless ``cache_answer_instructions``, a prompt that tells the model what to answer ("... Answer
    exactly: all refunds are free") bypasses: its answer must never reach other people's questions."""
    if request.n is not None and request.n > 1:
        return "n > 1"
    if request.temperature is not None and request.temperature > max_temperature:
        return f"temperature above {max_temperature}"
    extras = request.model_extra or {}
    if extras.get("logprobs"):
        return "logprobs requested"
    last = request.messages[-1]
    if last.role != "user":
        return "the last message is not a user message"
    if message_text(last) is None or any(message_text(m) is None for m in request.messages):
        return "non-text content"
    if not (message_text(last) or "").strip():
        return "empty prompt"
    if not cache_answer_instructions and (instruction := find_answer_instruction(message_text(last) or "")):
        return f"instructions about the answer ({instruction})"
    return None


# Tools the client runs itself; any other kind (web_search, web_search_preview, browser_search,
# google_search, ...) the upstream runs, and the answer is built from what it fetched.
_CLIENT_TOOLS = ("function", "custom")


def live_data_reason(request: ChatCompletionRequest) -> str | None:
    """Why a request asks for an answer built from live data (a web search), or None: search options
    (``web_search_options``, ``search_parameters``, ... even ``{}``), a tool the upstream runs itself,
    a model that always searches (``gpt-4o-search-preview``, OpenRouter's ``:online``) or a web
    plugin. Such an answer is only true now: the request bypasses the cache, in every API."""
    found = _live_data(request)
    return None if found is None else f"asks for live data: {found}"


def _live_data(request: ChatCompletionRequest) -> str | None:
    for name, value in (request.model_extra or {}).items():
        if "search" in name.lower() and value is not None and value is not False:
            return name
    for tool in request.tools or ():
        kind = tool.get("type", "function" if "function" in tool else None)
        if kind not in _CLIENT_TOOLS:
            return f"a tool the upstream runs: {str(kind)[:64]!r}"
    model = request.model.lower()
    if "search" in model or model.endswith(":online"):
        return f"model {request.model[:64]!r} searches the web"
    plugins = (request.model_extra or {}).get("plugins")
    if isinstance(plugins, list) and any(isinstance(p, dict) and p.get("id") == "web" for p in plugins):
        return "the web plugin"
    return None


def request_key(
    request: ChatCompletionRequest,
    namespace: str,
    *,
    standalone: bool = False,
    user: str | None = None,
    account: str | None = None,
    api: str = "chat",
    api_detail: Any = None,
) -> RequestKey:
    """Keys for a request that ``bypass_reason`` allowed.

    With ``standalone``, earlier user and assistant turns are left out of the scope (the system
    prompt stays in), so the prompt can hit entries stored from other conversations. With ``user``
    (a hash naming who asked, see ``user_id``), the scope is that user's alone. A request of another
    API than chat (``api``, see ``semcache.dialects``) comes as its chat view, in scopes of that API
    and of ``api_detail``, what its chat view cannot show.
    """
    *earlier, last = request.messages
    prompt = message_text(last) or ""
    params = request.model_dump(exclude=_NOT_ANSWER_SHAPING, exclude_none=True)
    context = [m.model_dump(exclude_none=True) for m in earlier]
    system = [c for c in context if c.get("role") in ("system", "developer")]
    if standalone:
        context = system
    parts = {"ns": namespace, "model": request.model, "context": context, "params": params}
    if account is not None:  # only when the client names an upstream organization or project
        parts["account"] = account
    if api != "chat":  # chat's scopes stay as they were; no field a client sends can forge this one
        parts["api"] = api if api_detail is None else [api, api_detail]
    # The prompt message's other fields (its author's ``name``): an answer may address them.
    prompt_fields = last.model_dump(exclude={"role", "content"}, exclude_none=True)
    if prompt_fields:  # only when sent: scopes without them stay as they were
        parts["prompt_fields"] = prompt_fields
    shaping, max_answer_tokens = _shaping_beyond_sampling(params)
    return _keyed(
        namespace, request.model, prompt, parts, user, has_history=len(system) != len(context), system=system,
        template=template_scope(api if api_detail is None else [api, api_detail], shaping),
        max_answer_tokens=max_answer_tokens,
    )  # fmt: skip


def template_scope(api: Any, shaping: dict[str, Any]) -> str:
    """The part of a request's scope that a template must admit: its ``api`` (with what the API's
    chat view cannot show) and the ``shaping`` fields that ask for an answer of some other kind.
    A template admits the scope of a plain question by default (``Template.admits``)."""
    if shaping or not isinstance(api, str):
        return _digest({"template": api, "shaping": shaping})
    plain = _PLAIN_TEMPLATE_SCOPES.get(api)
    if plain is None:  # one per API: most requests are plain questions
        plain = _PLAIN_TEMPLATE_SCOPES[api] = _digest({"template": api, "shaping": {}})
    return plain


_PLAIN_TEMPLATE_SCOPES: dict[str, str] = {}


def _shaping_beyond_sampling(params: dict[str, Any]) -> tuple[dict[str, Any], int | None]:
    """The scope's fields that a curated answer cannot stand for, and the lowest token limit. A
    limit that is not a whole number stays among the former."""
    shaping = {
        name: value
        for name, value in params.items()
        if name not in _SAMPLING and not (name in _PLAIN_TEXT and value == _PLAIN_TEXT[name])
    }
    limits = [shaping.pop(name) for name in _TOKEN_LIMITS if type(shaping.get(name)) is int]
    return shaping, min(limits, default=None)


# The model an entry of the cache API names when its scope names none (entries always name one),
# or one longer than a chat request may name.
CACHE_API_MODEL = "semcache-cache-api"


def cache_api_key(namespace: str, prompt: str, scope: dict[str, Any], *, user: str | None = None) -> RequestKey:
    """Keys for the cache API (``/v1/semcache/lookup`` and ``/store``): the application's own
    ``scope`` object stands where a chat request's model, context and parameters stand. Its scopes
    never meet chat's, so an answer stored through the API is never served to a chat request."""
    model = scope.get("model")
    if not isinstance(model, str) or not 0 < len(model) <= MAX_MODEL_CHARS:
        model = CACHE_API_MODEL
    parts: dict[str, Any] = {"ns": namespace, "api": "cache", "scope": scope}
    template = cache_api_template_scope(scope, model)
    return _keyed(namespace, model, prompt, parts, user, has_history=False, system=[], template=template)


def cache_api_template_scope(scope: dict[str, Any], model: str | None = None) -> str:
    """What a template must admit to answer a cache API lookup of ``scope``: the whole scope, but
    its ``model`` when the key names it (``model``), which a template's ``models`` judges."""
    rest = {name: value for name, value in scope.items() if not (name == "model" and value == model)}
    return template_scope("cache", rest)


def _keyed(
    namespace: str,
    model: str,
    prompt: str,
    parts: dict[str, Any],
    user: str | None,
    *,
    has_history: bool,
    system: list[dict[str, Any]],
    template: str,
    max_answer_tokens: int | None = None,
) -> RequestKey:
    """The keys of ``prompt`` in the scope that ``parts`` describe, with its script and its user."""
    language = detect_script(prompt)
    if language != "latin":  # Latin prompts keep the scopes (and entries) they always had
        parts["lang"] = language
    if user is not None:  # only with scope_per_user: shared scopes stay as they were
        parts["user"] = user
    scope = _digest(parts)
    normalized = normalize(prompt)
    return RequestKey(
        namespace=namespace,
        model=model,
        scope=scope,
        prompt=prompt,
        normalized=normalized,
        exact=_digest({"scope": scope, "prompt": normalized}),
        has_history=has_history,
        system_prompt_hash=_digest(system),
        language=language,
        template_scope=template,
        max_answer_tokens=max_answer_tokens,
    )


def user_id(authorization: str | None, user: str | None) -> str | None:
    """Who sent a request, for ``scope_per_user``: a hash of its ``Authorization`` value and its
    ``user`` field together, so that a client can name any ``user`` but only within its own key.
    None when it sent neither. Neither is ever stored in clear: the scope is a hash of this hash."""
    if not authorization and not user:
        return None
    return _digest({"authorization": authorization or "", "user": user or ""})


def consulted_tools(request: ChatCompletionRequest) -> bool:
    """Whether earlier turns hold tool calls or their results: data from outside the conversation
    (a weather report, a database row) that shapes the answer, however the question reads."""
    for message in request.messages[:-1]:
        extras = message.model_extra or {}
        if message.role in ("tool", "function") or extras.get("tool_calls") or extras.get("function_call"):
            return True
    return False


def embedding_key(scope: dict[str, Any], item: str | list[int]) -> str:
    """The key of one embeddings input: the digest of its ``scope`` (namespace, model, dimensions,
    the other fields that shape a vector, the account and, per user, the user) and the input as it
    is, text or token ids (the digest's JSON keeps ``"1"`` and ``[1]`` apart). Inputs are never
    normalised: a space changes an embedding, and an exact cache must give the vector asked for."""
    return _digest({"api": "embeddings", "scope": scope, "input": item})


def account_id(organization: str | None, project: str | None) -> str | None:
    """The upstream account a request asked for (``OpenAI-Organization``, ``OpenAI-Project``), which
    may change the models it reaches; None when it named neither. Part of the scope when set."""
    if not organization and not project:
        return None
    return _digest({"organization": organization or "", "project": project or ""})


def conversation_text(request: ChatCompletionRequest) -> str:
    """The text of the turns before the prompt, but the system prompt: user and assistant text, the
    tools' results, and the calls the assistant made (a tool's "blizzard, flights cancelled" shapes
    the answer to "What is the weather in Oslo?" as much as a user's words would)."""
    parts = []
    for message in request.messages[:-1]:
        if message.role in ("system", "developer"):
            continue
        parts.append(message_text(message) or "")
        calls = (message.model_extra or {}).get("tool_calls") or (message.model_extra or {}).get("function_call")
        if calls:
            parts.append(json.dumps(calls, ensure_ascii=False, default=str))
    return "\n".join(part for part in parts if part)


# What json.dumps(..., sort_keys=True, separators=(",", ":"), ensure_ascii=False) would build for
# every call, built once: the digest comes out the same, for less work per request.
_CANONICAL_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _digest(value: Any) -> str:
    return hashlib.sha256(_CANONICAL_JSON.encode([KEY_VERSION, value]).encode()).hexdigest()
