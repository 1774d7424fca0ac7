"""Tenant probes, over real HTTP on loopback: team-b stores an answer, then a client holding only
team-a's key tries every way we could think of to reach it (headers, keys, body fields, the prompt
itself, the admin and feedback APIs, /stats and /metrics, the request id). Each probe must end in a
clear error in OpenAI's shape or in a miss, and never carry team-b's answer.

Team-a's probes send ``Cache-Control: no-store``, so team-a's own namespace stays empty: any hit it
gets would have come from somewhere else. The last part checks hit padding against the timing
side channel (docs/security.md, "Timing side channel")."""

from __future__ import annotations

import base64
import http.client
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from semcache.protocols import Embedder
from semcache.server import create_app
from semcache.settings import Settings
from semcache.testing.standin_upstream import StandinUpstream
from semcache.testing.uvicorn_thread import ThreadedUvicorn
from testkit.servers import wait_healthy

pytestmark = [pytest.mark.slow, pytest.mark.reliability]

KEY_A = "sk-probe-team-a-0001"
KEY_B = "sk-probe-team-b-0002"
ADMIN_KEY = "admin-probe-key-0003"
QUESTION = "What is the vault code of the Zurich office?"
PARAPHRASE = "What's the vault code for the Zurich office?"
SECRET = "team-b only: the Zurich vault code is 4711-0815"
NO_STORE = {"Cache-Control": "no-store"}
_PARSER_REFUSAL = "Invalid HTTP request received."
ERROR_FIELDS = {"message", "type", "param", "code"}
Headers = list[tuple[str | bytes, str | bytes]]


@dataclass(frozen=True)
class Tenants:
    url: str
    b_response_id: str  # of a hit served to team-b, for feedback probes
    b_request_id: str
    b_entry_ids: list[int]


@pytest.fixture(scope="module")
def tenants(
    tmp_path_factory: pytest.TempPathFactory, _standin_server: StandinUpstream, minilm: Embedder
) -> Iterator[Tenants]:
    """One service for every probe: they only read, or are refused."""
    folder = tmp_path_factory.mktemp("probes")
    keys = folder / "keys.yaml"
    keys.write_text(f"{KEY_A}: [team-a, shared]\n{KEY_B}: [team-b, shared]\n")
    settings = Settings(
        data_dir=folder / "data", upstream_url=_standin_server.base_url, api_keys_file=keys, admin_key=ADMIN_KEY
    )
    with ThreadedUvicorn(create_app(settings, embedder=minilm)) as server:
        wait_healthy(server.url)
        _standin_server.state.answers[QUESTION] = SECRET
        try:
            assert chat(server.url, _bearer(KEY_B)).headers["x-semcache"] == "miss"
            hit = chat(server.url, _bearer(KEY_B))
        finally:
            del _standin_server.state.answers[QUESTION]  # from now on the upstream never says it
        assert (hit.headers["x-semcache"], hit.json()["choices"][0]["message"]["content"]) == ("hit", SECRET)
        listed = httpx.get(f"{server.url}/admin/entries", params={"namespace": "team-b"}, headers=_bearer(ADMIN_KEY))
        entry_ids = [entry["id"] for entry in listed.json()["data"]]
        assert entry_ids
        yield Tenants(server.url, hit.json()["id"], hit.headers["x-request-id"], entry_ids)


def chat(url: str, headers: dict[str, str] | Headers, *, prompt: str = QUESTION, stream: bool = False,
         **fields: Any) -> httpx.Response:  # fmt: skip
    body = {"model": "test-model", "messages": [{"role": "user", "content": prompt}], "stream": stream, **fields}
    response = httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=30)
    response.read()
    return response


def raw_chat(url: str, headers: Headers) -> httpx.Response:
    """A chat request with headers exactly as given (httpx refuses a value with a leading space,
    http.client sends it, and obsolete line folding too)."""
    body = json.dumps({"model": "test-model", "messages": [{"role": "user", "content": QUESTION}]}).encode()
    connection = http.client.HTTPConnection(httpx.URL(url).host, httpx.URL(url).port, timeout=30)
    try:
        connection.putrequest("POST", "/v1/chat/completions")
        for name, value in [*headers, ("Content-Type", "application/json"), ("Content-Length", str(len(body)))]:
            connection.putheader(name.decode() if isinstance(name, bytes) else name, value)
        connection.endheaders(body)
        reply = connection.getresponse()
        return httpx.Response(reply.status, headers=reply.getheaders(), content=reply.read())
    finally:
        connection.close()


def assert_refused_or_missed(response: httpx.Response, refused_with: set[int] | None = None) -> None:
    """A clear 4xx in OpenAI's error shape, or a miss; team-b's answer in neither."""
    assert SECRET not in response.text and "4711" not in response.text
    if response.status_code == 200:
        assert refused_with is None, f"expected {refused_with}, got a 200"
        assert response.headers["x-semcache"] in ("miss", "bypass")
        return
    assert response.status_code in (refused_with or {400, 401, 403, 404})
    if response.status_code == 400 and response.text == _PARSER_REFUSAL:
        return  # malformed HTTP: uvicorn refuses it before semcache sees a request
    assert set(response.json()["error"]) == ERROR_FIELDS


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _as_a(*extra: tuple[str | bytes, str | bytes]) -> Headers:
    return [("Authorization", f"Bearer {KEY_A}"), *NO_STORE.items(), *extra]


NAMESPACE = "X-Semcache-Namespace"

# -- the namespace header ------------------------------------------------------------------------

HEADER_PROBES: dict[str, tuple[Headers, set[int] | None]] = {
    "plain": (_as_a((NAMESPACE, "team-b")), {403}),
    "leading-space": (_as_a((NAMESPACE, " team-b")), {403}),
    "trailing-tab": (_as_a((NAMESPACE, "team-b\t")), {400, 403}),  # uvicorn's parser may refuse it first
    "folded-line": (_as_a((NAMESPACE, "team-a\r\n team-b")), {400}),
    "upper-case": (_as_a((NAMESPACE, "TEAM-B")), {403}),
    "capitalised": (_as_a((NAMESPACE, "Team-b")), {403}),
    "lower-case-name": (_as_a(("x-semcache-namespace", "team-b")), {403}),
    "list-a-b": (_as_a((NAMESPACE, "team-a,team-b")), {400}),
    "list-b-a": (_as_a((NAMESPACE, "team-b, team-a")), {400}),
    "semicolon": (_as_a((NAMESPACE, "team-b;team-a")), {400}),
    "url-encoded": (_as_a((NAMESPACE, "team%2Db")), {400}),
    "nul-encoded": (_as_a((NAMESPACE, "team-b%00")), {400}),
    "path-traversal": (_as_a((NAMESPACE, "team-a/../team-b")), {400}),
    "wildcard": (_as_a((NAMESPACE, "*")), {400}),
    "empty": (_as_a((NAMESPACE, "")), {400}),
    "unicode-hyphen": (_as_a((NAMESPACE.encode(), "team\u2010b".encode())), {400}),
    "latin-1-lookalike": (_as_a((NAMESPACE.encode(), "t\xe9am-b".encode("latin-1"))), {400}),
    "duplicate-a-first": (_as_a((NAMESPACE, "team-a"), (NAMESPACE, "team-b")), None),  # the first one counts
    "duplicate-b-first": (_as_a((NAMESPACE, "team-b"), (NAMESPACE, "team-a")), {403}),
    "underscored-name": (_as_a(("X_Semcache_Namespace", "team-b")), None),  # not the header: team-a
    "other-name": (_as_a(("Semcache-Namespace", "team-b"), ("X-Namespace", "team-b")), None),
    "shared": (_as_a((NAMESPACE, "shared")), None),  # allowed to both, but team-b stored nothing there
}


@pytest.mark.parametrize("probe", HEADER_PROBES, ids=list(HEADER_PROBES))
def test_namespace_header_tricks_never_reach_team_b(tenants: Tenants, probe: str) -> None:
    headers, refused_with = HEADER_PROBES[probe]
    assert_refused_or_missed(raw_chat(tenants.url, headers), refused_with)


# -- keys ----------------------------------------------------------------------------------------


def _basic(secret: str) -> str:
    return "Basic " + base64.b64encode(f"{secret}:".encode()).decode()


KEY_PROBES: dict[str, tuple[Headers, int]] = {
    "no-key": ([(NAMESPACE, "team-b")], 401),
    "basic-scheme": ([("Authorization", _basic(KEY_A)), (NAMESPACE, "team-b")], 401),
    "token-scheme": ([("Authorization", f"Token {KEY_A}"), (NAMESPACE, "team-b")], 401),
    "no-scheme": ([("Authorization", KEY_A), (NAMESPACE, "team-b")], 401),
    "bearer-only": ([("Authorization", "Bearer"), (NAMESPACE, "team-b")], 401),
    "bearer-spaces": ([("Authorization", "Bearer    "), (NAMESPACE, "team-b")], 401),
    "b-key-prefix": ([("Authorization", f"Bearer {KEY_B[:12]}"), (NAMESPACE, "team-b")], 401),
    "b-key-cut": ([("Authorization", f"Bearer {KEY_B[:-1]}"), (NAMESPACE, "team-b")], 401),
    "b-key-appended": ([("Authorization", f"Bearer {KEY_B}x"), (NAMESPACE, "team-b")], 401),
    "a-and-b-prefix": ([("Authorization", f"Bearer {KEY_A} {KEY_B[:12]}"), (NAMESPACE, "team-b")], 401),
    "a-key-upper": ([("Authorization", f"Bearer {KEY_A.upper()}"), (NAMESPACE, "team-b")], 401),
    "a-key-padded": ([("Authorization", f"bearer   {KEY_A}  "), (NAMESPACE, "team-b")], 403),
    "two-auth-headers": (
        [("Authorization", f"Bearer {KEY_A}"), ("Authorization", f"Bearer {KEY_B[:12]}"), (NAMESPACE, "team-b")],
        403,
    ),
    "api-key-header": ([("api-key", KEY_A), ("X-Api-Key", KEY_A), (NAMESPACE, "team-b")], 401),
    "admin-key-as-client": ([("Authorization", f"Bearer {ADMIN_KEY}"), (NAMESPACE, "team-b")], 401),
}


@pytest.mark.parametrize("probe", KEY_PROBES, ids=list(KEY_PROBES))
def test_key_tricks_are_refused(tenants: Tenants, probe: str) -> None:
    headers, status = KEY_PROBES[probe]
    assert_refused_or_missed(raw_chat(tenants.url, [*headers, *NO_STORE.items()]), {status})


def test_a_key_in_the_query_string_is_not_a_key(tenants: Tenants) -> None:
    body = {"model": "test-model", "messages": [{"role": "user", "content": QUESTION}]}
    for params in ({"api_key": KEY_A}, {"api-key": KEY_A, "namespace": "team-b"}):
        response = httpx.post(f"{tenants.url}/v1/chat/completions", params=params, json=body, headers=NO_STORE)
        assert_refused_or_missed(response, {401})


# -- the body and the prompt ---------------------------------------------------------------------

BODY_PROBES: dict[str, dict[str, Any]] = {
    "user-field": {"user": "team-b"},
    "metadata": {"metadata": {"namespace": "team-b"}, "store": True},
    "namespace-field": {"namespace": "team-b", "x-semcache-namespace": "team-b"},
    "extra-headers-field": {"extra_headers": {NAMESPACE: "team-b"}, "http_headers": {NAMESPACE: "team-b"}},
}


@pytest.mark.parametrize("probe", BODY_PROBES, ids=list(BODY_PROBES))
def test_body_fields_do_not_choose_a_namespace(tenants: Tenants, probe: str) -> None:
    assert_refused_or_missed(chat(tenants.url, _as_a(), **BODY_PROBES[probe]), None)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize(
    "prompt",
    [QUESTION, PARAPHRASE, "what is the vault code of the zurich office"],
    ids=["exact", "paraphrase", "normalised"],
)
@pytest.mark.parametrize("namespace", [None, "shared"], ids=["own-namespace", "shared-namespace"])
def test_the_same_or_a_similar_question_is_a_miss(
    tenants: Tenants, prompt: str, stream: bool, namespace: str | None
) -> None:
    headers = _as_a((NAMESPACE, namespace)) if namespace else _as_a()
    response = chat(tenants.url, headers, prompt=prompt, stream=stream)
    assert_refused_or_missed(response, None)
    assert response.headers["x-semcache"] == "miss"


def test_the_models_path_is_keyed_too(tenants: Tenants) -> None:
    response = httpx.get(f"{tenants.url}/v1/models", headers=_as_a((NAMESPACE, "team-b")))
    assert_refused_or_missed(response, {403})


# -- the admin API -------------------------------------------------------------------------------


def _admin_calls(tenants: Tenants) -> dict[str, tuple[str, str, dict[str, Any] | None]]:
    entry = tenants.b_entry_ids[0]
    return {
        "list": ("GET", "/admin/entries?namespace=team-b", None),
        "search": ("GET", "/admin/entries?query=vault%20code%20Zurich", None),
        "get": ("GET", f"/admin/entries/{entry}", None),
        "export": ("GET", "/admin/entries/export?namespace=team-b", None),
        "decisions": ("GET", "/admin/decisions?namespace=team-b", None),
        "config": ("GET", "/admin/namespaces/team-b/config", None),
        "set-config": ("PUT", "/admin/namespaces/team-a/config", {"threshold": 0.0}),
        "delete": ("DELETE", f"/admin/entries/{entry}", None),
        "delete-by-filter": ("POST", "/admin/entries/delete", {"namespace": "team-b", "dry_run": True}),
        "flush": ("POST", "/admin/flush", {"confirm": True}),
        "import": ("POST", "/admin/entries/import", None),
        "reload-templates": ("POST", "/admin/templates/reload", None),
    }


ADMIN_CREDENTIALS: dict[str, dict[str, str]] = {
    "no-key": {},
    "a-key": _bearer(KEY_A),
    "b-key": _bearer(KEY_B),
    "admin-key-cut": _bearer(ADMIN_KEY[:-1]),
    "admin-key-basic": {"Authorization": _basic(ADMIN_KEY)},
    "admin-key-header": {"X-Admin-Key": ADMIN_KEY, "Authorization": f"Bearer {KEY_A}"},
}
ADMIN_CALLS = ["list", "search", "get", "export", "decisions", "config", "set-config", "delete", "delete-by-filter",
               "flush", "import", "reload-templates"]  # fmt: skip


@pytest.mark.parametrize("credentials", ADMIN_CREDENTIALS, ids=list(ADMIN_CREDENTIALS))
def test_the_admin_api_refuses_client_keys_and_near_misses(tenants: Tenants, credentials: str) -> None:
    calls = _admin_calls(tenants)
    assert sorted(calls) == sorted(ADMIN_CALLS)
    for name, (method, path, body) in calls.items():
        content = f'{{"namespace": "team-a", "prompt": "{QUESTION}", "answer": "poisoned"}}\n'
        response = httpx.request(
            method, f"{tenants.url}{path}", json=body, headers=ADMIN_CREDENTIALS[credentials],
            content=content if name == "import" else None,
        )  # fmt: skip
        assert response.status_code in (401, 403), name
        assert_refused_or_missed(response, {401, 403})
    # none of it touched team-b's entry
    assert chat(tenants.url, _bearer(KEY_B)).headers["x-semcache"] == "hit"


# -- the feedback API ----------------------------------------------------------------------------


def test_feedback_on_team_b_hits_and_entries_fails(tenants: Tenants) -> None:
    def feedback(response_id: str, *extra: tuple[str, str]) -> httpx.Response:
        return httpx.post(f"{tenants.url}/v1/semcache/feedback", json={"id": response_id, "correct": False},
                          headers=_as_a(*extra))  # fmt: skip

    for handle in (tenants.b_response_id, tenants.b_request_id, *map(str, tenants.b_entry_ids), "1", "*"):
        assert_refused_or_missed(feedback(handle), {404})
        assert_refused_or_missed(feedback(handle, (NAMESPACE, "shared")), {404})
        assert_refused_or_missed(feedback(handle, (NAMESPACE, "team-b")), {403})
    no_key = httpx.post(f"{tenants.url}/v1/semcache/feedback", json={"id": tenants.b_response_id, "correct": False})
    assert_refused_or_missed(no_key, {401})
    # team-b's entry still serves, and its own verdict on that hit is still open to it alone
    assert chat(tenants.url, _bearer(KEY_B)).headers["x-semcache"] == "hit"
    own = httpx.post(f"{tenants.url}/v1/semcache/feedback", json={"id": tenants.b_response_id, "correct": True},
                     headers=_bearer(KEY_B))  # fmt: skip
    assert own.status_code == 200 and own.json()["recorded"] is True


# -- what anyone can read --------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/stats", "/metrics", "/healthz", "/openapi.json"])
def test_open_paths_show_no_prompt_answer_or_key(tenants: Tenants, path: str) -> None:
    """/stats and /metrics list every tenant's namespaces: with a key file, a client key does not
    open them; what the admin key reads there holds no prompt, answer or key either."""
    response = httpx.get(f"{tenants.url}{path}", headers=_bearer(KEY_A))
    if path in ("/stats", "/metrics"):
        assert response.status_code == 403 and "team-b" not in response.text
        response = httpx.get(f"{tenants.url}{path}", headers=_bearer(ADMIN_KEY))
    assert response.status_code == 200
    text = response.text.lower()
    for private in (QUESTION, PARAPHRASE, SECRET, "zurich", "vault", KEY_A, KEY_B, ADMIN_KEY):
        assert private.lower() not in text, f"{path} shows {private!r}"


# -- the request id ------------------------------------------------------------------------------


def test_a_request_id_is_a_log_label_and_nothing_more(tenants: Tenants) -> None:
    """Reusing team-b's request or response id gets team-a nothing; an id that could forge log lines
    or headers is replaced by a fresh one."""
    for borrowed in (tenants.b_request_id, tenants.b_response_id):
        response = chat(tenants.url, _as_a(("X-Request-Id", borrowed)))
        assert_refused_or_missed(response, None)
        assert response.headers["x-request-id"] == borrowed  # only ever a label for this request's log lines
    for forged in ("a b", "x" * 129, '{"namespace":"team-b"}', "<script>", "team-b\\n"):
        response = chat(tenants.url, _as_a(("X-Request-Id", forged)))
        assert_refused_or_missed(response, None)
        fresh = response.headers["x-request-id"]
        assert fresh != forged and len(fresh) == 32 and int(fresh, 16) >= 0


# -- the timing side channel -----------------------------------------------------------------------

PADDING_MS = 300.0


def test_padded_hits_take_at_least_the_configured_time(serve: Callable[..., str], upstream: StandinUpstream) -> None:
    """A lower bound, not a speed claim: every hit, exact or semantic, JSON or streamed (to its
    headers), is answered no sooner than hit_min_latency_ms after it was sent."""
    url = serve(hit_min_latency_ms=PADDING_MS)
    floor_s = PADDING_MS / 1000
    assert chat(url, {}).headers["x-semcache"] == "miss"
    durations = []
    for prompt in (QUESTION, PARAPHRASE, QUESTION):
        started = time.perf_counter()
        response = chat(url, {}, prompt=prompt)
        seconds = time.perf_counter() - started
        assert response.headers["x-semcache"] == "hit"
        durations.append(seconds)
        body = {"model": "test-model", "messages": [{"role": "user", "content": prompt}], "stream": True}
        started = time.perf_counter()
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=30) as streamed:
            to_headers = time.perf_counter() - started
            assert streamed.headers["x-semcache"] == "hit"
            text = streamed.read().decode()
        assert "data: [DONE]" in text
        durations.append(to_headers)
    assert min(durations) >= floor_s, durations
    assert upstream.chat_calls() == 1


def test_padding_can_be_set_per_namespace(serve: Callable[..., str], upstream: StandinUpstream) -> None:
    url = serve()
    config = httpx.put(f"{url}/admin/namespaces/padded/config", json={"hit_min_latency_ms": PADDING_MS})
    assert config.status_code == 200 and config.json()["config"]["hit_min_latency_ms"] == PADDING_MS
    padded = {NAMESPACE: "padded"}
    assert chat(url, padded).headers["x-semcache"] == "miss"
    started = time.perf_counter()
    response = chat(url, padded)
    seconds = time.perf_counter() - started
    assert response.headers["x-semcache"] == "hit" and seconds >= PADDING_MS / 1000
    refused = httpx.put(f"{url}/admin/namespaces/padded/config", json={"hit_min_latency_ms": -1})
    assert refused.status_code == 400 and set(refused.json()["error"]) == ERROR_FIELDS
