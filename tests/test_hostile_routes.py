"""Routes a client should not reach, or reach too often, and requests whose answers must not be
cached: through ``semcache serve`` as a process, with the fast path on and off, the openai SDK and
httpx as clients, and a stand-in upstream (a hostile one that records and obeys any request).

- A wrong method on a served path is a 405 whose ``Allow`` names its methods; a misspelt path a 404
  that names the nearest served path; only a real OpenAI route gets the passthrough_routes advice.
- A pass-through route passes on only the methods it needs to read or infer (DELETE
  /v1/models/{model} would delete a fine-tuned model with the operator's key), and those an operator
  lists in passthrough_methods.
- Every /v1 route a client can call is rate-limited, pass-through calls included.
- A legacy prompt's closing marks, in any script, and its leading newlines stay in its key.
- A request that asks for live data (search options, a search tool, a model that searches)
  bypasses the cache, in chat, the Responses API and legacy completions.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from pydantic import ValidationError

from semcache.settings import Settings
from semcache.testing.standin_upstream import StandinUpstream
from semcache.testing.uvicorn_thread import ThreadedUvicorn
from testkit.servers import SemcacheProcess

pytestmark = pytest.mark.slow

OPERATOR_KEY = "sk-operator-secret-4242"


class RecordingUpstream:
    """A hostile stand-in upstream: answers every method on every path with a 200, as an upstream
    that does whatever it is asked would, and records what reached it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str | None]] = []  # method, path, Authorization
        self._lock = threading.Lock()
        self._server = ThreadedUvicorn(self, lifespan="off")

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        headers = {name.decode().lower(): value.decode() for name, value in scope["headers"]}
        with self._lock:
            self.calls.append((scope["method"], scope["path"], headers.get("authorization")))
        body = json.dumps({"object": "list", "data": [], "deleted": True}).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})

    @property
    def base_url(self) -> str:
        return f"{self._server.url}/v1"

    def start(self) -> RecordingUpstream:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()


@pytest.fixture(scope="module")
def recorder() -> Iterator[RecordingUpstream]:
    upstream = RecordingUpstream().start()
    yield upstream
    upstream.stop()


def _serve(tmp: Path, upstream_url: str, **env: str) -> SemcacheProcess:
    settings = {f"SEMCACHE_{name.upper()}": value for name, value in env.items()}
    return SemcacheProcess(data_dir=tmp, upstream_url=upstream_url, env=settings).start()


@pytest.fixture(scope="module", params=["true", "false"], ids=["fast-path", "plain"])
def routes_service(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, recorder: RecordingUpstream
) -> Iterator[str]:
    """semcache in front of the recording upstream, with the operator's key; ``files`` passed on,
    and DELETE on it allowed by the operator."""
    service = _serve(
        tmp_path_factory.mktemp("routes"), recorder.base_url, fast_path=request.param,
        upstream_api_key=OPERATOR_KEY,
        passthrough_routes="models,embeddings,completions,moderations,audio,images,files",
        passthrough_methods=json.dumps({"files": ["DELETE"]}),
    )  # fmt: skip
    yield service.url
    service.stop()


def _sdk(base_url: str, **options: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="sk-test", max_retries=0, **options)


def _openai_error(response: httpx.Response, status: int, code: str) -> str:
    """The message of an error in OpenAI's shape, after checking its status and code."""
    assert response.status_code == status, (response.status_code, response.text)
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert (error["code"], error["type"]) == (code, "invalid_request_error"), error
    return str(error["message"])


def _method_not_allowed(url: str, method: str, path: str, allowed: str) -> str:
    """The message of the 405 that ``method`` on ``path`` gets, whose ``Allow`` must be ``allowed``."""
    response = httpx.request(method, f"{url}{path}", json={"model": "m"})
    message = _openai_error(response, 405, "method_not_allowed")
    assert response.headers["allow"] == allowed, (method, path, response.headers.get("allow"))
    return message


# --- A wrong method, a misspelt path --------------------------------------------------------------

WRONG_METHODS = [
    ("GET", "/v1/chat/completions", "POST"),
    ("PUT", "/v1/chat/completions", "POST"),
    ("DELETE", "/v1/chat/completions", "POST"),
    ("GET", "/v1/responses", "POST"),
    ("GET", "/v1/completions", "POST"),
    ("GET", "/v1/embeddings", "POST"),
    ("POST", "/v1/models", "GET"),
    ("GET", "/v1/semcache/feedback", "POST"),
    ("PATCH", "/v1/semcache/lookup", "POST"),
    ("POST", "/healthz", "GET"),
    ("DELETE", "/stats", "GET"),
    ("OPTIONS", "/v1/chat/completions", "POST"),
]


def test_a_served_path_asked_with_another_method_is_a_405_that_names_its_methods(
    routes_service: str, recorder: RecordingUpstream
) -> None:
    recorder.calls.clear()
    for method, path, allowed in WRONG_METHODS:
        message = _method_not_allowed(routes_service, method, path, allowed)
        assert path in message and allowed in message, message
        assert "passthrough_routes" not in message, message
    with _sdk(f"{routes_service}/v1") as client, pytest.raises(openai.APIStatusError) as refused:
        client.get("/chat/completions", cast_to=httpx.Response)
    assert refused.value.status_code == 405 and refused.value.response.headers["allow"] == "POST"
    assert recorder.calls == []


MISSPELT = [
    ("POST", "/v1/chat/completion", "POST /v1/chat/completions"),
    ("POST", "/v1/chat", "POST /v1/chat/completions"),
    ("POST", "/v1/chat/completions/", "POST /v1/chat/completions"),
    ("POST", "/v1/Chat/Completions", "POST /v1/chat/completions"),
    ("POST", "/chat/completions", "POST /v1/chat/completions"),
    ("POST", "/v1/chat-completions", "POST /v1/chat/completions"),
    ("POST", "/v1/moderation", "POST /v1/moderations"),
    ("GET", "/v1/model", "GET /v1/models"),
    ("POST", "/v1/semcache/feedbak", "POST /v1/semcache/feedback"),
    ("GET", "/healthzz", "/healthz"),
]


def test_a_misspelt_path_is_a_404_that_names_the_nearest_served_path(
    routes_service: str, recorder: RecordingUpstream
) -> None:
    recorder.calls.clear()
    for method, path, nearest in MISSPELT:
        response = httpx.request(method, f"{routes_service}{path}", json={"model": "m", "messages": []})
        message = _openai_error(response, 404, "unknown_route")
        assert "unknown route" in message and nearest in message, (path, message)
        assert "passthrough_routes" not in message, (path, message)
    # A base URL one segment too deep: the SDK asks for /v1/chat/chat/completions.
    with _sdk(f"{routes_service}/v1/chat") as client, pytest.raises(openai.NotFoundError) as typo:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert "/v1/chat/completions" in str(typo.value.body) and "passthrough_routes" not in str(typo.value.body)
    assert recorder.calls == []


def test_only_a_real_openai_route_gets_the_passthrough_routes_advice(
    routes_service: str, recorder: RecordingUpstream
) -> None:
    recorder.calls.clear()
    for method, path in [("GET", "/v1/batches"), ("GET", "/v1/fine_tuning/jobs"), ("POST", "/v1/vector_stores"),
                         ("GET", "/v1/assistants/asst_1")]:  # fmt: skip
        message = _openai_error(httpx.request(method, f"{routes_service}{path}"), 404, "unknown_route")
        assert "passthrough_routes" in message, message
    with _sdk(f"{routes_service}/v1") as client, pytest.raises(openai.NotFoundError) as refused:
        client.batches.list()
    assert "passthrough_routes" in str(refused.value.body)
    assert recorder.calls == []


# --- The methods a pass-through route passes on ---------------------------------------------------

REFUSED_METHODS = [
    ("DELETE", "/v1/models/ft:gpt-4o-mini:acme::abc123", "GET"),  # deletes a fine-tuned model
    ("POST", "/v1/models/gpt-4o", "GET"),
    ("PUT", "/v1/moderations", "POST"),
    ("GET", "/v1/moderations", "POST"),
    ("PATCH", "/v1/images/generations", "POST"),
    ("DELETE", "/v1/audio/speech", "POST"),
    ("POST", "/v1/files", "GET, DELETE"),  # the operator allowed DELETE on files, not POST
    ("PATCH", "/v1/files/file-1", "GET, DELETE"),
    ("OPTIONS", "/v1/moderations", "POST"),
]


def test_a_pass_through_route_passes_on_only_the_methods_it_needs_or_an_operator_lists(
    routes_service: str, recorder: RecordingUpstream
) -> None:
    recorder.calls.clear()
    for method, path, allowed in REFUSED_METHODS:
        message = _method_not_allowed(routes_service, method, path, allowed)
        assert "passthrough_methods" in message, message
    with _sdk(f"{routes_service}/v1") as client:
        with pytest.raises(openai.APIStatusError) as refused:
            client.models.delete("ft:gpt-4o-mini:acme::abc123")
        assert refused.value.status_code == 405
        assert recorder.calls == []  # none reached the upstream

        client.models.retrieve("gpt-4o")
        client.files.list()
        client.files.delete("file-1")  # listed by the operator: passed on
    operator = f"Bearer {OPERATOR_KEY}"
    assert recorder.calls == [
        ("GET", "/v1/models/gpt-4o", operator),
        ("GET", "/v1/files", operator),
        ("DELETE", "/v1/files/file-1", operator),
    ]


def test_passthrough_methods_are_checked_when_the_settings_load() -> None:
    assert Settings(passthrough_methods={"models": ["delete"]}).passthrough_methods == {"models": ["DELETE"]}
    for wrong, says in [
        ({"models": ["HEAD"]}, "one of GET, POST, PUT, PATCH, DELETE"),
        ({"files": ["DELETE"]}, "which passthrough_routes does not list"),
        ({"chat": ["GET"]}, "not a /v1 route"),
    ]:
        with pytest.raises(ValidationError, match=says):
            Settings(passthrough_methods=wrong)


# --- Rate limits on every route -------------------------------------------------------------------

# A request each /v1 operation of the OpenAPI schema takes, that the route would serve; the
# pass-through's own operations ({path}) by a path of a route passed on.
CLIENT_CALLS: dict[tuple[str, str], tuple[str, Any]] = {
    ("POST", "/v1/chat/completions"): (
        "/v1/chat/completions",
        {"model": "m", "messages": [{"role": "user", "content": "Hi there"}]},
    ),
    ("POST", "/v1/responses"): ("/v1/responses", {"model": "m", "input": "Hi there"}),
    ("POST", "/v1/completions"): ("/v1/completions", {"model": "m", "prompt": "Hi there"}),
    ("POST", "/v1/embeddings"): ("/v1/embeddings", {"model": "m", "input": "Hi there"}),
    ("GET", "/v1/models"): ("/v1/models", None),
    ("POST", "/v1/semcache/feedback"): ("/v1/semcache/feedback", {"id": "chatcmpl-unknown", "correct": False}),
    ("POST", "/v1/semcache/lookup"): ("/v1/semcache/lookup", {"prompt": "Hi there"}),
    ("POST", "/v1/semcache/store"): ("/v1/semcache/store", {"prompt": "Hi there", "answer": "Hello"}),
    ("GET", "/v1/{path}"): ("/v1/models/m", None),
    ("POST", "/v1/{path}"): ("/v1/moderations", {"input": "Hi there"}),
    ("PUT", "/v1/{path}"): ("/v1/moderations", {"input": "Hi there"}),  # methods the operator listed count too
    ("PATCH", "/v1/{path}"): ("/v1/moderations", {"input": "Hi there"}),
    ("DELETE", "/v1/{path}"): ("/v1/moderations", None),
}


@pytest.fixture(scope="module", params=["true", "false"], ids=["fast-path", "plain"])
def limited_service(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, _standin_server: StandinUpstream
) -> Iterator[str]:
    """semcache with a burst of one request per client and next to no refill, the operator's key,
    and every method passed on to moderations."""
    service = _serve(
        tmp_path_factory.mktemp("limited"), _standin_server.base_url, fast_path=request.param,
        rate_limit_per_s="0.001", rate_limit_burst="1", upstream_api_key=OPERATOR_KEY,
        passthrough_methods=json.dumps({"moderations": ["PUT", "PATCH", "DELETE"]}),
    )  # fmt: skip
    yield service.url
    service.stop()


def test_every_route_a_client_can_call_is_rate_limited(limited_service: str) -> None:
    schema = httpx.get(f"{limited_service}/openapi.json").json()
    operations = {(method.upper(), path) for path, item in schema["paths"].items() if path.startswith("/v1/")
                  for method in item}  # fmt: skip
    assert operations == set(CLIENT_CALLS), "a /v1 route without a rate-limit check here"
    unlimited = []
    for number, ((method, _), (path, body)) in enumerate(sorted(CLIENT_CALLS.items())):
        headers = {"X-Semcache-Namespace": f"client-{number}"}  # a client each: without API keys, a bucket each
        first = httpx.request(method, f"{limited_service}{path}", json=body, headers=headers)
        second = httpx.request(method, f"{limited_service}{path}", json=body, headers=headers)
        assert first.status_code != 429, (method, path, first.text)
        if second.status_code != 429:
            unlimited.append(f"{method} {path}: {second.status_code}")
            continue
        assert second.json()["error"]["code"] == "rate_limit_exceeded" and int(second.headers["retry-after"]) >= 1
    assert unlimited == []


# --- What legacy completions keep in their key ----------------------------------------------------


@pytest.fixture(scope="module")
def cache_service(tmp_path_factory: pytest.TempPathFactory, _standin_server: StandinUpstream) -> Iterator[str]:
    service = _serve(tmp_path_factory.mktemp("cache"), _standin_server.base_url)
    yield service.url
    service.stop()


@pytest.fixture
def client(cache_service: str) -> Iterator[openai.OpenAI]:
    """An SDK client in a namespace of its own: nothing stored by another test reaches it."""
    namespace = {"X-Semcache-Namespace": f"t-{uuid.uuid4().hex[:12]}"}
    with _sdk(f"{cache_service}/v1", default_headers=namespace) as sdk:
        yield sdk


# Prompts a continuation differs after: each pair must not share an answer.
CONTINUED_DIFFERENTLY = [
    ("今天天气很好。", "今天天气很好！"),
    ("明天会下雨吗。", "明天会下雨吗？"),
    ("Story:\n今天天气很好。", "Story:\n今天天气很好！"),
    ("The weather is fine!", "The weather is fine！"),  # a full-width mark
    ("هل الجو جميل اليوم؟", "هل الجو جميل اليوم."),
    ("مرحبا بكم،", "مرحبا بكم,"),
    ("आज मौसम अच्छा है।", "आज मौसम अच्छा है."),
    ("Once upon a time there was a king.", "\n\nOnce upon a time there was a king."),
    ("\nOnce upon a time there was a queen.", "\r\nOnce upon a time there was a queen."),
]


def test_a_legacy_prompts_closing_marks_and_leading_newlines_stay_in_its_key(
    client: openai.OpenAI, upstream: StandinUpstream
) -> None:
    merged = []
    for first, second in CONTINUED_DIFFERENTLY:
        for prompt in (first, second):
            raw = client.completions.with_raw_response.create(model="gpt-3.5-turbo-instruct", prompt=prompt)
            if prompt is second and raw.headers["x-semcache"] == "hit":
                merged.append((first, second))
        again = client.completions.with_raw_response.create(model="gpt-3.5-turbo-instruct", prompt=second)
        assert again.headers["x-semcache"] == "hit"  # the same prompt, as written, still hits
    assert merged == []
    asked = [call["json"]["prompt"] for call in upstream.calls if call["path"] == "/v1/completions"]
    assert asked == [prompt for pair in CONTINUED_DIFFERENTLY for prompt in pair]


# --- Requests that ask for live data --------------------------------------------------------------

FUNCTION_TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
LIVE_CHAT: list[dict[str, Any]] = [
    {"web_search_options": {}},
    {"web_search_options": {"search_context_size": "low"}},
    {"tools": [{"type": "web_search_preview"}]},
    {"tools": [FUNCTION_TOOL, {"type": "web_search"}]},
    {"model": "gpt-4o-search-preview"},
    {"model": "openai/gpt-4o:online"},
    {"extra_body": {"search_parameters": {"mode": "auto"}}},
    {"extra_body": {"plugins": [{"id": "web"}]}},
    {"web_search_options": {}, "stream": True},
]


def test_chat_that_asks_for_live_data_bypasses_the_cache(client: openai.OpenAI, upstream: StandinUpstream) -> None:
    cached = []
    for number, fields in enumerate(LIVE_CHAT):
        request = {"model": "gpt-4o", "messages": [{"role": "user", "content": f"What is the news today, {number}?"}],
                   **fields}  # fmt: skip
        outcomes = []
        for _ in range(2):
            raw = client.chat.completions.with_raw_response.create(**request)
            outcomes.append(raw.headers["x-semcache"])
            answer = raw.parse()
            if fields.get("stream"):
                list(answer)
        if outcomes != ["bypass", "bypass"]:
            cached.append((fields, outcomes))
    assert cached == []
    assert upstream.chat_calls() == 2 * len(LIVE_CHAT)
    plain = {"model": "gpt-4o", "messages": [{"role": "user", "content": "What is a haiku?"}]}
    outcomes = [client.chat.completions.with_raw_response.create(**plain).headers["x-semcache"] for _ in range(2)]
    assert outcomes == ["miss", "hit"]  # the same question without search is cached


LIVE_RESPONSES: list[dict[str, Any]] = [
    {"extra_body": {"web_search_options": {}}},
    {"model": "gpt-4o-search-preview"},
    {"tools": [{"type": "web_search_preview_2025_03_11"}]},
    {"tools": [{"type": "web_search"}]},
]
LIVE_COMPLETIONS: list[dict[str, Any]] = [
    {"extra_body": {"web_search_options": {}}},
    {"extra_body": {"search_parameters": {"mode": "on"}}},
    {"model": "gpt-4o-search-preview"},
]


def test_responses_and_legacy_completions_that_ask_for_live_data_bypass_the_cache(
    client: openai.OpenAI, upstream: StandinUpstream
) -> None:
    cached = []
    for number, fields in enumerate(LIVE_RESPONSES):
        request = {"model": "gpt-4o", "input": f"What happened in the markets today, {number}?", **fields}
        outcomes = [client.responses.with_raw_response.create(**request).headers["x-semcache"] for _ in range(2)]
        if outcomes != ["bypass", "bypass"]:
            cached.append((fields, outcomes))
    for number, fields in enumerate(LIVE_COMPLETIONS):
        request = {"model": "gpt-3.5-turbo-instruct", "prompt": f"Today's headlines, {number}:", **fields}
        outcomes = [client.completions.with_raw_response.create(**request).headers["x-semcache"] for _ in range(2)]
        if outcomes != ["bypass", "bypass"]:
            cached.append((fields, outcomes))
    assert cached == []
    paths = [call["path"] for call in upstream.calls]
    assert paths.count("/v1/responses") == 2 * len(LIVE_RESPONSES)
    assert paths.count("/v1/completions") == 2 * len(LIVE_COMPLETIONS)
