"""Auth and tenant isolation, through real HTTP and the openai SDK: API keys map to namespaces, a
key for namespace A never gets an answer stored in B (exact, template, semantic, in-flight,
streamed or not), feedback stays within the tenant, and the admin key is separate."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from semcache.testing.standin_upstream import StandinUpstream

from .conftest import ask

pytestmark = pytest.mark.slow

KEY_A = "sk-tenant-a-0001"
KEY_B = "sk-tenant-b-0002"
ADMIN_KEY = "admin-key-0003"
QUESTION = "How do I learn Python quickly?"
PARAPHRASE = "How can I learn Python fast?"
KEYS_YAML = f"{KEY_A}: [team-a, shared]\n{KEY_B}: [team-b, shared]\n"


@pytest.fixture
def keys_file(tmp_path: Path) -> Path:
    path = tmp_path / "keys.yaml"
    path.write_text(KEYS_YAML)
    return path


@pytest.fixture
def tenants(
    serve: Callable[..., str], keys_file: Path, make_client: Callable[..., openai.OpenAI]
) -> tuple[str, openai.OpenAI, openai.OpenAI]:
    url = serve(api_keys_file=keys_file, admin_key=ADMIN_KEY)
    return url, make_client(url, KEY_A), make_client(url, KEY_B)


def chat(url: str, key: str | None, prompt: str = QUESTION, **headers: str) -> httpx.Response:
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    body = {"model": "test-model", "messages": [{"role": "user", "content": prompt}]}
    return httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=30)


def stream(client: openai.OpenAI, prompt: str, **headers: str) -> tuple[str, dict[str, str]]:
    """One streamed question; returns the assembled answer and the response headers."""
    raw = client.chat.completions.with_raw_response.create(
        model="test-model", messages=[{"role": "user", "content": prompt}], stream=True, extra_headers=headers
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in raw.parse() if chunk.choices)
    return text, dict(raw.headers)


def answer(client: openai.OpenAI, prompt: str, streamed: bool, **headers: str) -> tuple[str, dict[str, str]]:
    return stream(client, prompt, **headers) if streamed else ask(client, prompt, extra_headers=headers)


# -- keys --------------------------------------------------------------------------------------


def test_an_unknown_or_missing_key_is_a_401_on_every_client_path(tenants: tuple[str, Any, Any]) -> None:
    url, _, _ = tenants
    for key in ("sk-not-a-tenant", None, ADMIN_KEY):  # the admin key is not a client key
        response = chat(url, key)
        assert response.status_code == 401
        assert response.json()["error"] == {
            "message": "missing or unknown API key", "type": "authentication_error", "param": None,
            "code": "invalid_api_key",
        }  # fmt: skip
    # the key is checked before anything else: a bad namespace header does not turn it into a 400
    assert chat(url, "sk-not-a-tenant", **{"X-Semcache-Namespace": "a b"}).status_code == 401
    assert httpx.get(f"{url}/v1/models", headers={"Authorization": "Bearer nope"}).status_code == 401
    feedback = httpx.post(f"{url}/v1/semcache/feedback", json={"id": "chatcmpl-x", "correct": False})
    assert feedback.status_code == 401


def test_the_sdk_raises_its_usual_errors(tenants: tuple[str, openai.OpenAI, openai.OpenAI], make_client) -> None:
    url, _, b = tenants
    with pytest.raises(openai.AuthenticationError):
        ask(make_client(url, "sk-unknown-key"), QUESTION)
    with pytest.raises(openai.PermissionDeniedError) as denied:
        ask(b, QUESTION, extra_headers={"X-Semcache-Namespace": "team-a"})
    assert denied.value.code == "namespace_not_allowed"


@pytest.mark.parametrize("namespace", ["team-a", "default", "Team-B", "team-b-other"])
def test_a_key_can_never_set_a_namespace_outside_its_list(tenants: tuple[str, Any, Any], namespace: str) -> None:
    url, _, _ = tenants
    response = chat(url, KEY_B, **{"X-Semcache-Namespace": namespace})
    assert response.status_code == 403 and response.json()["error"]["type"] == "permission_error"


def test_the_header_chooses_within_the_allowed_set(
    tenants: tuple[str, openai.OpenAI, openai.OpenAI], upstream: StandinUpstream
) -> None:
    _, a, b = tenants
    ask(a, QUESTION, extra_headers={"X-Semcache-Namespace": "shared"})
    assert ask(b, QUESTION)[1]["x-semcache"] == "miss"  # team-b, the key's default, is not shared
    assert ask(b, QUESTION, extra_headers={"X-Semcache-Namespace": "shared"})[1]["x-semcache"] == "hit"
    assert ask(a, QUESTION)[1]["x-semcache"] == "miss"  # team-a never held it either
    assert upstream.chat_calls() == 3


# -- isolation ---------------------------------------------------------------------------------


@pytest.mark.parametrize("streamed", [False, True], ids=["json", "stream"])
def test_exact_and_semantic_hits_never_cross_tenants(
    tenants: tuple[str, openai.OpenAI, openai.OpenAI], upstream: StandinUpstream, streamed: bool
) -> None:
    _, a, b = tenants
    upstream.state.answers[QUESTION] = "stored for team-a"
    assert answer(a, QUESTION, streamed)[1]["x-semcache"] == "miss"
    # the tiers do serve it within team-a: exact, and semantic for a paraphrase
    exact, semantic = answer(a, QUESTION, streamed), answer(a, PARAPHRASE, streamed)
    assert (exact[0], exact[1]["x-semcache-tier"]) == ("stored for team-a", "exact")
    assert (semantic[0], semantic[1]["x-semcache-tier"]) == ("stored for team-a", "semantic")

    upstream.state.answers[PARAPHRASE] = "fresh for team-b"
    text, headers = answer(b, PARAPHRASE, streamed)  # team-a's entry would be a semantic hit
    assert (text, headers["x-semcache"]) == ("fresh for team-b", "miss")
    text, headers = answer(b, QUESTION, streamed)  # team-a's entry would be an exact hit
    assert (text, headers.get("x-semcache-tier")) == ("fresh for team-b", "semantic")  # team-b's own entry
    with pytest.raises(openai.PermissionDeniedError):
        answer(b, QUESTION, streamed, **{"X-Semcache-Namespace": "team-a"})
    assert upstream.chat_calls() == 2


def test_templates_of_a_namespace_serve_only_it_and_global_ones_serve_all(
    serve: Callable[..., str], keys_file: Path, tmp_path: Path, make_client, upstream: StandinUpstream
) -> None:
    templates = tmp_path / "templates.yaml"
    templates.write_text(
        "- {questions: ['What is the team-a wifi password?'], answer: 'a-secret-wifi', namespaces: [team-a]}\n"
        "- {questions: ['What are your opening hours?', 'When are you open?'], answer: '9 to 5'}\n"
    )
    url = serve(api_keys_file=keys_file, templates=templates)
    a, b = make_client(url, KEY_A), make_client(url, KEY_B)
    text, headers = ask(a, "What is the team-a wifi password?")
    assert (text, headers["x-semcache-tier"]) == ("a-secret-wifi", "template")
    for prompt in ("What is the team-a wifi password?", "what's the wifi password of team-a"):
        text, headers = ask(b, prompt, extra_headers={"Cache-Control": "no-store"})  # leaves team-b empty
        assert text != "a-secret-wifi" and headers["x-semcache"] == "miss"
    # a template without ``namespaces:`` is curated for everyone, by design
    for client in (a, b):
        text, headers = ask(client, "When are you open?")
        assert (text, headers["x-semcache-tier"]) == ("9 to 5", "template")
    assert upstream.chat_calls() == 2


@pytest.mark.parametrize("streamed", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("b_prompt", [QUESTION, PARAPHRASE], ids=["same-prompt", "paraphrase"])
def test_requests_in_flight_are_shared_only_within_a_tenant(
    tenants: tuple[str, openai.OpenAI, openai.OpenAI], upstream: StandinUpstream, streamed: bool, b_prompt: str
) -> None:
    """While team-a's call is in flight, team-a's paraphrase waits for it and shares it; team-b's
    identical or similar request makes its own call."""
    _, a, b = tenants
    upstream.set_fault(latency_s=3.0)  # every upstream call takes 3 s: long enough to overlap
    results: dict[str, tuple[str, dict[str, str]]] = {}

    def run(name: str, client: openai.OpenAI, prompt: str) -> threading.Thread:
        thread = threading.Thread(target=lambda: results.__setitem__(name, answer(client, prompt, streamed)))
        thread.start()
        return thread

    leader = run("a-leader", a, QUESTION)
    wait_for(lambda: upstream.chat_calls() == 1)
    threads = [run("a-follower", a, PARAPHRASE), run("b", b, b_prompt)]
    wait_for(lambda: upstream.chat_calls() == 2)
    assert leader.is_alive()  # team-b's call started while team-a's was still in flight
    for thread in (leader, *threads):
        thread.join(30)
    assert results["a-follower"][1].get("x-semcache-coalesced") == "true"
    assert results["a-follower"][0] == results["a-leader"][0] == f"Answer to: {QUESTION}"
    text, headers = results["b"]
    assert headers["x-semcache"] == "miss" and "x-semcache-coalesced" not in headers
    assert text == f"Answer to: {b_prompt}"
    assert upstream.chat_calls() == 2


def test_feedback_on_another_tenants_response_fails(
    tenants: tuple[str, openai.OpenAI, openai.OpenAI], upstream: StandinUpstream
) -> None:
    url, a, _ = tenants
    ask(a, QUESTION)
    served = a.chat.completions.create(model="test-model", messages=[{"role": "user", "content": QUESTION}])

    def feedback(key: str | None, **headers: str) -> httpx.Response:
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        body = {"id": served.id, "correct": False}
        return httpx.post(f"{url}/v1/semcache/feedback", json=body, headers=headers)

    assert feedback(KEY_B).status_code == 404  # team-b's own namespace never served it
    assert feedback(KEY_B, **{"X-Semcache-Namespace": "team-a"}).status_code == 403
    assert feedback(KEY_B, **{"X-Semcache-Namespace": "shared"}).status_code == 404
    assert feedback(None).status_code == 401
    assert ask(a, QUESTION)[1]["x-semcache"] == "hit"  # none of that reached team-a's entry
    assert feedback(KEY_A).status_code == 200
    assert ask(a, QUESTION)[1]["x-semcache"] == "miss"  # team-a's own report dropped it


# -- the admin key -------------------------------------------------------------------------------


def test_the_admin_key_and_client_keys_are_separate(tenants: tuple[str, Any, Any]) -> None:
    url, _, _ = tenants
    path = f"{url}/admin/decisions"
    assert httpx.get(path).status_code == 401
    for key in (KEY_A, KEY_B):
        refused = httpx.get(path, headers={"Authorization": f"Bearer {key}"})
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "invalid_admin_key"
    assert httpx.get(path, headers={"Authorization": f"Bearer {ADMIN_KEY}"}).status_code == 200
    assert chat(url, ADMIN_KEY).status_code == 401


def test_admin_is_closed_when_client_keys_are_set_without_an_admin_key(
    serve: Callable[..., str], keys_file: Path
) -> None:
    url = serve(api_keys_file=keys_file)
    for key in (KEY_A, None):
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        refused = httpx.get(f"{url}/admin/decisions", headers=headers)
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "admin_disabled"


def test_the_operator_may_list_the_admin_key_as_a_client_key(
    serve: Callable[..., str], tmp_path: Path, upstream: StandinUpstream
) -> None:
    keys = tmp_path / "keys.yaml"
    keys.write_text(f"{ADMIN_KEY}: [ops]\n")
    url = serve(api_keys_file=keys, admin_key=ADMIN_KEY)
    assert chat(url, ADMIN_KEY).status_code == 200


# -- the key file --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[]", "expected a mapping"),
        ("sk-tenant-a-0001: []\n", "key 1 needs a non-empty list"),
        ("sk-tenant-a-0001: [ok]\nsk-tenant-b-0002: ['bad name']\n", "key 2 needs"),
        ("'': [team-a]\n", "key 1 must be at least 4 characters"),
        ("'has space': [team-a]\n", "key 1 must be"),
    ],
)
def test_a_bad_key_file_is_refused_without_printing_keys(tmp_path: Path, text: str, problem: str) -> None:
    from semcache.server.access import AccessPolicy

    path = tmp_path / "keys.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=problem) as refused:
        AccessPolicy.from_file(path)
    assert "sk-tenant" not in str(refused.value)


def test_a_json_key_file(tmp_path: Path) -> None:
    from semcache.server.access import AccessPolicy

    path = tmp_path / "keys.json"
    path.write_text('{"sk-tenant-a-0001": ["team-a", "shared"], "sk-tenant-b-0002": "team-b"}')
    policy = AccessPolicy.from_file(path)
    assert policy.namespace_for("Bearer sk-tenant-a-0001", None) == "team-a"
    assert policy.namespace_for("bearer sk-tenant-a-0001", "shared") == "shared"
    assert policy.namespace_for("Bearer sk-tenant-b-0002", None) == "team-b"
    assert sorted(policy.keys) == ["sk-tenant-a-0001", "sk-tenant-b-0002"]


def test_serve_takes_the_key_file_but_no_admin_key_flag() -> None:
    from typer.testing import CliRunner

    from semcache.cli import app

    result = CliRunner(env={"COLUMNS": "200"}).invoke(app, ["serve", "--help"])
    assert result.exit_code == 0
    assert "--api-keys" in result.output and "SEMCACHE_API_KEYS_FILE" in result.output
    assert "--log-format" in result.output and "--admin-key" not in result.output


def test_serve_refuses_a_bad_key_file_without_printing_it(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from semcache.cli import app

    keys = tmp_path / "keys.yaml"
    keys.write_text("sk-tenant-a-0001: [team-a]\nsk-tenant-b-0002: []\n")
    result = CliRunner().invoke(app, ["serve", "--api-keys", str(keys), "--data-dir", str(tmp_path / "data")])
    assert result.exit_code == 2
    output = " ".join(result.output.split())  # rich wraps long lines
    assert "key 2 needs a non-empty list" in output and "sk-tenant" not in output


def wait_for(condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        time.sleep(0.02)
