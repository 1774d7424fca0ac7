"""The other /v1 routes: the stateless inference routes pass on to the upstream untouched, account
routes only when an operator lists them, and errors come back in OpenAI's shape, scrubbed (real HTTP,
the openai SDK, the stand-in upstream)."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import openai
import pytest

from semcache.settings import Settings
from semcache.testing.standin_upstream import SPEECH_BYTES, StandinUpstream

pytestmark = pytest.mark.slow


def test_moderations_and_speech_pass_through_the_openai_sdk_and_are_never_cached(
    serve: Callable[..., str], upstream: StandinUpstream, make_client: Callable[..., openai.OpenAI]
) -> None:
    client = make_client(serve())
    for _ in range(2):
        raw = client.moderations.with_raw_response.create(input=["an attack plan", "a picnic"])
        assert raw.headers["x-semcache"] == "bypass"
        assert [result.flagged for result in raw.parse().results] == [True, False]
    speech = client.audio.speech.create(model="tts-1", voice="alloy", input="Hello")
    assert speech.read() == SPEECH_BYTES  # binary, streamed, byte for byte
    paths = [call["path"] for call in upstream.calls]
    assert paths == ["/v1/moderations", "/v1/moderations", "/v1/audio/speech"]  # each reached the upstream
    assert upstream.calls[0]["headers"]["authorization"] == "Bearer sk-test"  # the client's key, as on chat


def test_legacy_completions_pass_through_and_embeddings_too_with_their_cache_off(
    serve: Callable[..., str], upstream: StandinUpstream, make_client: Callable[..., openai.OpenAI]
) -> None:
    client = make_client(serve(cache_embeddings=False))  # on, they are cached: tests/test_embeddings_cache.py
    vectors = client.embeddings.create(model="text-embedding-3-small", input=["a chunk", "another chunk"])
    assert [item.index for item in vectors.data] == [0, 1] and len(vectors.data[0].embedding) == 8
    again = client.embeddings.create(model="text-embedding-3-small", input=["a chunk", "another chunk"])
    assert again.data[0].embedding == vectors.data[0].embedding  # the SDK's base64, decoded alike
    assert abs(sum(v * v for v in vectors.data[0].embedding) - 1.0) < 1e-5
    assert upstream.calls[0]["json"]["encoding_format"] == "base64"  # relayed as the SDK sent it
    completion = client.completions.create(model="gpt-3.5-turbo-instruct", prompt="Say hi")
    assert completion.choices[0].text == "Completion of: Say hi"
    assert [call["path"] for call in upstream.calls] == ["/v1/embeddings", "/v1/embeddings", "/v1/completions"]


def test_account_routes_pass_only_when_an_operator_lists_them(
    serve: Callable[..., str], upstream: StandinUpstream, make_client: Callable[..., openai.OpenAI]
) -> None:
    closed = make_client(serve())
    with pytest.raises(openai.NotFoundError) as refused:
        closed.files.list()
    assert refused.value.body is not None and "passthrough_routes" in str(refused.value.body)
    assert upstream.calls == []

    opened = make_client(serve(passthrough_routes="models,moderations,files"))
    assert [f.id for f in opened.files.list()] == ["file-standin"]


@pytest.mark.parametrize(
    "path", ["/v1/nothing-here", "/v1/audio/../../_control", "/v1/audio/%2E%2E/%2E%2E/_reset", "/v1/semcache/x"]
)
def test_other_paths_get_a_404_in_openais_shape_and_never_reach_the_upstream(
    serve: Callable[..., str], upstream: StandinUpstream, path: str
) -> None:
    url = serve()
    response = httpx.post(f"{url}{path}", json={})
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert upstream.calls == []


def test_relayed_errors_keep_their_status_and_are_scrubbed_of_the_key(
    serve: Callable[..., str], upstream: StandinUpstream
) -> None:
    url = serve(upstream_api_key="sk-operator-secret-123")
    upstream.set_fault(status=401, echo_authorization=True, times=1)
    response = httpx.post(f"{url}/v1/moderations", json={"input": "hi"})
    assert response.status_code == 401
    assert "sk-operator-secret-123" not in response.text
    assert response.json()["error"]["message"]
    assert upstream.calls[0]["headers"]["authorization"] == "Bearer sk-operator-secret-123"


def test_an_unknown_route_name_in_the_settings_is_refused() -> None:
    with pytest.raises(ValueError, match="not a /v1 route"):
        Settings(passthrough_routes="moderations,chat")
