"""POST /v1/embeddings, cached per input: the service on loopback in front of the stand-in upstream,
asked through the official openai SDK (base64 by default, as LangChain's OpenAIEmbeddings asks too)."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from typing import Any

import httpx
import numpy as np
import openai
import pytest

from semcache.testing.standin_upstream import StandinUpstream, rough_tokens, standin_embedding

from .conftest import assert_openai_error

pytestmark = pytest.mark.slow

MODEL = "text-embedding-3-small"
PATH = "/v1/embeddings"


def expected(item: str | list[int], dimension: int = 8) -> np.ndarray:
    """What the stand-in gives an input, as semcache keeps and serves it: float32."""
    return np.asarray(standin_embedding(item, False, dimension), dtype=np.float32)


def embed(client: openai.OpenAI, inputs: Any, **kwargs: Any) -> tuple[list[np.ndarray], Any, dict[str, str]]:
    """Vectors, usage and headers of one request through the SDK."""
    raw = client.embeddings.with_raw_response.create(model=kwargs.pop("model", MODEL), input=inputs, **kwargs)
    parsed = raw.parse()
    return [np.asarray(item.embedding, dtype=np.float32) for item in parsed.data], parsed.usage, dict(raw.headers)


def upstream_inputs(upstream: StandinUpstream) -> list[Any]:
    """What each embeddings call that reached the stand-in asked for."""
    return [call["json"]["input"] for call in upstream.calls if call["path"] == PATH]


def post(url: str, body: Any, **headers: str) -> httpx.Response:
    return httpx.post(f"{url}{PATH}", json=body, headers=headers, timeout=30)


def test_only_the_inputs_not_seen_are_asked_and_every_vector_comes_back_in_order(
    service: str, upstream: StandinUpstream, make_client: Callable[..., openai.OpenAI]
) -> None:
    client = make_client(service)
    vectors, usage, headers = embed(client, ["chunk one", "chunk two"])
    assert headers["x-semcache"] == "miss" and headers["x-semcache-cached-inputs"] == "0/2"
    assert usage.prompt_tokens == rough_tokens("chunk one") + rough_tokens("chunk two")

    vectors, usage, headers = embed(client, ["chunk two", "chunk three", "chunk one", "chunk three"])
    assert upstream_inputs(upstream) == [["chunk one", "chunk two"], ["chunk three"]]  # once, though sent twice
    assert upstream.calls[-1]["json"]["encoding_format"] == "float"  # asked as floats, whatever the client wants
    for vector, text in zip(vectors, ["chunk two", "chunk three", "chunk one", "chunk three"], strict=True):
        np.testing.assert_array_equal(vector, expected(text))
    assert headers["x-semcache"] == "miss" and headers["x-semcache-cached-inputs"] == "2/4"
    assert usage.prompt_tokens == usage.total_tokens == rough_tokens("chunk three")  # what the upstream was asked

    vectors, usage, headers = embed(client, ["chunk three", "chunk one"])
    assert headers["x-semcache"] == "hit" and headers["x-semcache-cached-inputs"] == "2/2"
    assert usage.prompt_tokens == 0 and len(upstream_inputs(upstream)) == 2
    np.testing.assert_array_equal(vectors[1], expected("chunk one"))


def test_floats_and_base64_carry_the_same_float32_vector(
    service: str, upstream: StandinUpstream, make_client: Callable[..., openai.OpenAI]
) -> None:
    client = make_client(service)
    as_floats, _, first = embed(client, "a sentence", encoding_format="float")
    as_base64, _, second = embed(client, "a sentence")  # the SDK's default
    assert (first["x-semcache"], second["x-semcache"]) == ("miss", "hit")
    np.testing.assert_array_equal(as_floats[0], as_base64[0])
    np.testing.assert_array_equal(as_floats[0], expected("a sentence"))
    raw = post(service, {"model": MODEL, "input": ["a sentence"], "encoding_format": "base64"}).json()
    decoded = np.frombuffer(base64.b64decode(raw["data"][0]["embedding"]), dtype="float32")  # as the SDK decodes
    np.testing.assert_array_equal(decoded, expected("a sentence"))
    assert raw["object"] == "list" and raw["model"] == MODEL and raw["data"][0]["object"] == "embedding"
    assert raw["usage"] == {"prompt_tokens": 0, "total_tokens": 0}
    plain = post(service, {"model": MODEL, "input": "a sentence"}).json()  # OpenAI's default: floats
    assert isinstance(plain["data"][0]["embedding"], list)
    assert len(upstream_inputs(upstream)) == 1


def test_token_id_inputs_are_cached_apart_from_text(
    service: str, upstream: StandinUpstream, make_client: Callable[..., openai.OpenAI]
) -> None:
    """LangChain's OpenAIEmbeddings sends lists of token ids by default."""
    client = make_client(service)
    vectors, usage, _ = embed(client, [[1, 2, 3], [4, 5]])
    np.testing.assert_array_equal(vectors[0], expected([1, 2, 3]))
    np.testing.assert_array_equal(vectors[1], expected([4, 5]))
    assert usage.prompt_tokens == 5
    vectors, _, headers = embed(client, [1, 2, 3])  # one input as a flat list of ids: the same input
    assert headers["x-semcache"] == "hit"
    np.testing.assert_array_equal(vectors[0], expected([1, 2, 3]))
    _, _, headers = embed(client, ["1", "[1, 2, 3]"])  # text that reads like ids is text
    assert headers["x-semcache"] == "miss" and headers["x-semcache-cached-inputs"] == "0/2"
    assert upstream_inputs(upstream) == [[[1, 2, 3], [4, 5]], ["1", "[1, 2, 3]"]]


def test_model_dimensions_and_namespace_are_part_of_the_key(
    service: str, upstream: StandinUpstream, make_client: Callable[..., openai.OpenAI]
) -> None:
    client = make_client(service)
    embed(client, ["shared text"])
    short, _, headers = embed(client, ["shared text"], dimensions=4)
    assert headers["x-semcache"] == "miss" and len(short[0]) == 4
    np.testing.assert_array_equal(short[0], expected("shared text", 4))
    assert upstream.calls[-1]["json"]["dimensions"] == 4
    assert embed(client, ["shared text"], dimensions=4)[2]["x-semcache"] == "hit"
    assert embed(client, ["shared text"], model="text-embedding-3-large")[2]["x-semcache"] == "miss"
    other = embed(client, ["shared text"], extra_headers={"X-Semcache-Namespace": "team-b"})
    assert other[2]["x-semcache"] == "miss"
    assert embed(client, ["shared text"])[2]["x-semcache"] == "hit"
    assert len(upstream_inputs(upstream)) == 4


def test_with_scope_per_user_each_key_has_its_own_vectors(
    serve: Callable[..., str], upstream: StandinUpstream, make_client: Callable[..., openai.OpenAI]
) -> None:
    url = serve(scope_per_user=True)
    first, second = make_client(url, api_key="sk-user-a"), make_client(url, api_key="sk-user-b")
    assert embed(first, ["private text"])[2]["x-semcache"] == "miss"
    assert embed(first, ["private text"])[2]["x-semcache"] == "hit"
    assert embed(second, ["private text"])[2]["x-semcache"] == "miss"
    anonymous = post(url, {"model": MODEL, "input": ["private text"]})  # no key, no user: nothing is shared
    assert anonymous.status_code == 200 and anonymous.headers["x-semcache"] == "bypass"


@pytest.mark.parametrize("bad", ["short", "not_json", "mixed_dimensions", "bad_index", "not_numbers"])
def test_a_malformed_upstream_answer_is_a_502_and_nothing_of_it_is_cached(
    serve: Callable[..., str], upstream: StandinUpstream, bad: str
) -> None:
    url = serve(upstream_max_attempts=1)
    post(url, {"model": MODEL, "input": ["known"]})
    upstream.set_fault(bad_embeddings=bad, times=1)
    assert_openai_error(post(url, {"model": MODEL, "input": ["known", "new one", "new two"]}), 502)
    again = post(url, {"model": MODEL, "input": ["new one", "new two"]})
    assert again.status_code == 200 and again.headers["x-semcache"] == "miss"
    assert again.headers["x-semcache-cached-inputs"] == "0/2"
    assert upstream_inputs(upstream)[-2:] == [["new one", "new two"], ["new one", "new two"]]


def test_upstream_errors_are_relayed_scrubbed_and_not_cached(
    serve: Callable[..., str], upstream: StandinUpstream
) -> None:
    url = serve(upstream_api_key="sk-operator-secret-123", upstream_max_attempts=1)
    upstream.set_fault(status=401, echo_authorization=True, times=1)
    refused = post(url, {"model": MODEL, "input": ["text"]})
    assert_openai_error(refused, 401)
    assert "sk-operator-secret-123" not in refused.text
    upstream.set_fault(status=503, times=1)
    assert_openai_error(post(url, {"model": MODEL, "input": ["text"]}), 503)
    assert post(url, {"model": MODEL, "input": ["text"]}).headers["x-semcache"] == "miss"
    stats = httpx.get(f"{url}/stats").json()
    assert stats["by_route"]["embeddings"]["errors"] == 2


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"input": ["text"]}, "invalid_model"),
        ({"model": MODEL}, "invalid_input"),
        ({"model": MODEL, "input": []}, "invalid_input"),
        ({"model": MODEL, "input": ""}, "invalid_input"),
        ({"model": MODEL, "input": ["text", ""]}, "invalid_input"),
        ({"model": MODEL, "input": [[]]}, "invalid_input"),
        ({"model": MODEL, "input": [["a"]]}, "invalid_input"),
        ({"model": MODEL, "input": [1.5, 2]}, "invalid_input"),
        ({"model": MODEL, "input": [[1, -2]]}, "invalid_input"),
        ({"model": MODEL, "input": ["text", [1, 2]]}, "invalid_input"),
        ({"model": MODEL, "input": {"text": 1}}, "invalid_input"),
        ({"model": MODEL, "input": ["x"] * 2049}, "too_many_inputs"),
        ({"model": MODEL, "input": "text", "encoding_format": "int8"}, "invalid_encoding_format"),
        ({"model": MODEL, "input": "text", "dimensions": 0}, "invalid_dimensions"),
        ({"model": MODEL, "input": "text", "dimensions": "8"}, "invalid_dimensions"),
        ({"model": MODEL, "input": "text", "user": 7}, "invalid_user"),
        ([{"model": MODEL}], "invalid_body"),
    ],
)
def test_bad_requests_get_a_400_in_openais_shape_and_never_reach_the_upstream(
    service: str, upstream: StandinUpstream, body: Any, code: str
) -> None:
    assert_openai_error(post(service, body), 400, code)
    assert upstream.calls == []


def test_bodies_over_the_bound_and_broken_json_are_refused(service: str, upstream: StandinUpstream) -> None:
    too_large = post(service, {"model": MODEL, "input": ["x" * 5_000_000]})
    assert_openai_error(too_large, 413)
    broken = httpx.post(f"{service}{PATH}", content=b'{"model": ', headers={"content-type": "application/json"})
    assert broken.status_code == 400 and broken.json()["error"]["type"] == "invalid_request_error"
    assert upstream.calls == []


def test_cache_headers_and_ttl_are_honoured(service: str, upstream: StandinUpstream) -> None:
    body = {"model": MODEL, "input": ["short-lived"]}
    assert post(service, body, **{"Cache-Control": "no-store"}).headers["x-semcache"] == "miss"
    assert post(service, body, **{"X-Semcache-TTL": "1"}).headers["x-semcache"] == "miss"  # no-store kept nothing
    assert post(service, body).headers["x-semcache"] == "hit"
    assert post(service, body, **{"Cache-Control": "no-cache"}).headers["x-semcache"] == "miss"  # read skipped...
    time.sleep(1.2)  # ...and stored again with the default TTL, over the entry that had 1 s
    assert post(service, body).headers["x-semcache"] == "hit"
    assert_openai_error(post(service, body, **{"X-Semcache-TTL": "soon"}), 400, "invalid_ttl")
    other = {"model": MODEL, "input": ["expires"]}
    post(service, other, **{"X-Semcache-TTL": "1"})
    assert post(service, other).headers["x-semcache"] == "hit"
    time.sleep(1.2)
    assert post(service, other).headers["x-semcache"] == "miss"
    assert len(upstream_inputs(upstream)) == 5


def test_stats_and_metrics_show_the_saving(
    service: str, upstream: StandinUpstream, make_client: Callable[..., openai.OpenAI]
) -> None:
    client = make_client(service)
    chunks = [f"chunk number {n} of a long document" for n in range(4)]
    embed(client, chunks)
    embed(client, chunks)  # re-ingested
    embed(client, [*chunks[:2], "a new chunk"])
    stats = httpx.get(f"{service}/stats").json()
    embeddings = stats["embeddings"]
    assert embeddings["requests"] == 3 and embeddings["inputs"] == 11
    assert embeddings["inputs_from_cache"] == 6 and embeddings["inputs_asked_upstream"] == 5
    assert embeddings["entries"] == 5 and embeddings["tokens_saved"] > 6
    assert stats["by_route"]["embeddings"]["requests"] == 3
    assert (stats["by_route"]["embeddings"]["hits"], stats["by_route"]["embeddings"]["misses"]) == (1, 2)
    metrics = httpx.get(f"{service}/metrics").text
    assert 'semcache_embedding_inputs_total{source="cache"} 6.0' in metrics
    assert 'semcache_embedding_inputs_total{source="upstream"} 5.0' in metrics
    assert f"semcache_embedding_tokens_saved_total {float(embeddings['tokens_saved'])}" in metrics


def test_with_cache_embeddings_off_they_are_passed_through(
    serve: Callable[..., str], upstream: StandinUpstream, make_client: Callable[..., openai.OpenAI]
) -> None:
    client = make_client(serve(cache_embeddings=False))
    for _ in range(2):
        vectors, _, headers = embed(client, ["passed on"])
        assert headers["x-semcache"] == "bypass"
        np.testing.assert_allclose(vectors[0], expected("passed on"), rtol=1e-6)
    assert upstream_inputs(upstream) == [["passed on"], ["passed on"]]
    assert upstream.calls[0]["json"]["encoding_format"] == "base64"  # relayed as the SDK sent it
