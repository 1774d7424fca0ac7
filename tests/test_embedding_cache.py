"""EmbeddingCache with small fakes behind its seams: the store going away, the upstream's answer
checked before anything is kept, and the keys of inputs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from semcache.decision.quality import NamespacePolicies, default_policy
from semcache.embedding_cache import EmbeddingCache, parse_embedding_request
from semcache.errors import UpstreamUnavailable
from semcache.pipeline import RequestControls
from semcache.settings import Settings
from semcache.testing.standin_upstream import embedding_inputs, standin_embedding
from testkit.fakes import MemoryEmbeddingStore


class EmbeddingUpstream:
    """Answers as the stand-in does; ``spoil`` may change the answer before it is sent."""

    def __init__(self) -> None:
        self.asked: list[Any] = []
        self.spoil: Any = None

    async def embed(self, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        self.asked.append(body["input"])
        items = embedding_inputs(body["input"]) or []
        data = [{"index": n, "embedding": standin_embedding(item)} for n, item in enumerate(items)]
        answer = {"data": data, "usage": {"prompt_tokens": 7 * len(items)}}
        if self.spoil is not None:
            self.spoil(answer)
        return answer


class WordCounter:
    def count_text(self, text: str, model: str) -> int:
        return len(text.split())


def cache(store: MemoryEmbeddingStore, upstream: EmbeddingUpstream) -> EmbeddingCache:
    policies = NamespacePolicies(default_policy(Settings()))
    return EmbeddingCache(store, upstream, WordCounter(), policies, default_ttl_s=60)  # type: ignore[arg-type]


def request(*inputs: Any) -> Any:
    return parse_embedding_request({"model": "m", "input": list(inputs)})


async def test_with_the_store_away_every_input_goes_upstream_and_is_answered() -> None:
    store, upstream = MemoryEmbeddingStore(), EmbeddingUpstream()
    embeddings = cache(store, upstream)
    await embeddings.embed(request("one", "two"), "default", RequestControls(), {})
    store.down = True
    answer = await embeddings.embed(request("one", "two", "three"), "default", RequestControls(), {})
    assert upstream.asked[-1] == ["one", "two", "three"] and answer.prompt_tokens == 21
    assert answer.outcome == "miss" and answer.from_cache == 0 and store.puts == 1  # nothing written while away
    np.testing.assert_array_equal(answer.vectors[2], np.float32(standin_embedding("three")))
    store.down = False
    again = await embeddings.embed(request("one", "two"), "default", RequestControls(), {})
    assert again.outcome == "hit"


async def test_with_the_store_away_only_on_writing_the_answer_still_comes() -> None:
    store, upstream = MemoryEmbeddingStore(), EmbeddingUpstream()
    answer = await cache(store, upstream).embed(request("one"), "default", RequestControls(read_cache=False), {})
    assert answer.outcome == "miss"
    store.down = True
    answer = await cache(store, upstream).embed(request("two"), "default", RequestControls(read_cache=False), {})
    assert len(answer.vectors) == 1


def _nan(answer: dict[str, Any]) -> None:
    answer["data"][0]["embedding"][0] = float("nan")


def _huge(answer: dict[str, Any]) -> None:
    answer["data"][0]["embedding"][0] = 1e300  # beyond float32


def _boolean(answer: dict[str, Any]) -> None:
    answer["data"][0]["embedding"][0] = True


def _duplicate_index(answer: dict[str, Any]) -> None:
    answer["data"][1]["index"] = 0


def _no_data(answer: dict[str, Any]) -> None:
    del answer["data"]


@pytest.mark.parametrize("spoil", [_nan, _huge, _boolean, _duplicate_index, _no_data])
async def test_a_spoiled_answer_is_refused_and_nothing_is_kept(spoil: Any) -> None:
    store, upstream = MemoryEmbeddingStore(), EmbeddingUpstream()
    upstream.spoil = spoil
    with pytest.raises(UpstreamUnavailable):
        await cache(store, upstream).embed(request("one", "two"), "default", RequestControls(), {})
    assert store.vectors == {}


async def test_base64_from_an_upstream_that_insists_is_decoded() -> None:
    store, upstream = MemoryEmbeddingStore(), EmbeddingUpstream()

    def as_base64(answer: dict[str, Any]) -> None:
        answer["data"][0]["embedding"] = standin_embedding("one", True)

    upstream.spoil = as_base64
    answer = await cache(store, upstream).embed(request("one"), "default", RequestControls(), {})
    np.testing.assert_array_equal(answer.vectors[0], np.float32(standin_embedding("one")))


async def test_the_account_and_other_fields_are_part_of_the_key_but_the_user_is_not() -> None:
    store, upstream = MemoryEmbeddingStore(), EmbeddingUpstream()
    embeddings = cache(store, upstream)
    await embeddings.embed(request("one"), "default", RequestControls(user="u1"), {})
    assert (await embeddings.embed(request("one"), "default", RequestControls(user="u2"), {})).outcome == "hit"
    assert (await embeddings.embed(request("one"), "default", RequestControls(account="acct"), {})).outcome == "miss"
    shaped = parse_embedding_request({"model": "m", "input": ["one"], "input_type": "query"})
    assert (await embeddings.embed(shaped, "default", RequestControls(), {})).outcome == "miss"
    assert upstream.asked == [["one"], ["one"], ["one"]]


async def test_stored_vectors_of_another_dimension_than_the_upstreams_now_are_asked_again() -> None:
    store, upstream = MemoryEmbeddingStore(), EmbeddingUpstream()
    embeddings = cache(store, upstream)
    await embeddings.embed(request("one"), "default", RequestControls(), {})

    def wider(answer: dict[str, Any]) -> None:  # the same model name, a new model behind it
        for item in answer["data"]:
            item["embedding"] = [*item["embedding"], 0.0]

    upstream.spoil = wider
    answer = await embeddings.embed(request("one", "two"), "default", RequestControls(), {})
    assert upstream.asked[-2:] == [["two"], ["one", "two"]]
    assert {len(vector) for vector in answer.vectors} == {len(standin_embedding("one")) + 1}
    upstream.spoil = None
    again = await embeddings.embed(request("one", "two"), "default", RequestControls(), {})
    assert again.outcome == "hit" and {len(v) for v in again.vectors} == {len(standin_embedding("one")) + 1}
