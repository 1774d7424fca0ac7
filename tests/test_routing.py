"""Several embedding models behind one embedder, each script's threshold, and templates per model."""

from __future__ import annotations

import numpy as np
import pytest

from semcache.decision.quality import NamespacePolicies, QualityPolicy
from semcache.embedders import BatchingEmbedder, EmbeddingRoutes, RoutedEmbedder
from semcache.keys import request_key
from semcache.tiers import Template, TemplateTier
from semcache.wire import ChatCompletionRequest
from testkit.fakes import HashingEmbedder

ENGLISH, CHINESE = HashingEmbedder(64), HashingEmbedder(32)  # named hashing-64 and hashing-32


def routed(by_namespace: dict[str, dict[str, str]] | None = None) -> RoutedEmbedder:
    routes = EmbeddingRoutes.default(ENGLISH.name, CHINESE.name)
    return RoutedEmbedder(
        {ENGLISH.name: ENGLISH, CHINESE.name: CHINESE},
        EmbeddingRoutes(routes.by_script, by_namespace or {}),  # type: ignore[arg-type]
    )


def test_each_text_goes_to_its_scripts_model_padded_to_one_size() -> None:
    embedder = routed()
    vectors = embedder.embed(["How are you?", "你好吗", "Как дела?"])
    assert vectors.shape == (3, 64) and embedder.dimension == 64
    np.testing.assert_allclose(vectors[0], ENGLISH.embed(["How are you?"])[0])
    np.testing.assert_allclose(vectors[1, :32], CHINESE.embed(["你好吗"])[0])
    assert not vectors[1, 32:].any()  # zero padding: cosines within a model are unchanged
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)


def test_the_set_is_named_after_every_route() -> None:
    assert routed().name == "hashing-64;han=hashing-32;other=hashing-32"
    with_namespace = routed({"cn": {"latin": CHINESE.name}})
    assert with_namespace.name == "hashing-64;han=hashing-32;other=hashing-32;cn:latin=hashing-32"
    assert RoutedEmbedder.single(ENGLISH).name == "hashing-64"  # one model keeps its name, and its stored vectors


def test_namespaces_may_pick_other_models() -> None:
    embedder = routed({"cn": {"latin": CHINESE.name}})
    assert embedder.model_for("cn", "latin") == CHINESE.name
    assert embedder.model_for("default", "latin") == ENGLISH.name
    assert embedder.model_for("cn", "han") == CHINESE.name


def test_a_route_to_a_model_not_loaded_is_refused() -> None:
    with pytest.raises(ValueError, match="no embedding model loaded"):
        RoutedEmbedder({ENGLISH.name: ENGLISH}, EmbeddingRoutes.default(ENGLISH.name, "missing"))


async def test_the_batcher_embeds_with_the_model_asked_for() -> None:
    batcher = BatchingEmbedder(routed())
    try:
        chinese, english = await batcher.embed("hello world", CHINESE.name), await batcher.embed("hello world")
        many = await batcher.embed_many(["hello world"], CHINESE.name)
    finally:
        await batcher.close()
    np.testing.assert_allclose(chinese[:32], CHINESE.embed(["hello world"])[0])
    np.testing.assert_allclose(english, ENGLISH.embed(["hello world"])[0])
    np.testing.assert_allclose(many[0], chinese)


def test_each_script_has_its_own_threshold() -> None:
    policy = QualityPolicy(threshold=0.91, thresholds={"han": 0.985})
    assert policy.threshold_for("han") == 0.985
    assert policy.threshold_for("latin") == policy.threshold_for("other") == 0.91
    assert policy.updated({"thresholds": {"other": 0.97}}).thresholds == {"han": 0.985, "other": 0.97}
    with pytest.raises(ValueError, match="unknown scripts"):
        policy.updated({"thresholds": {"klingon": 0.9}})
    with pytest.raises(ValueError, match="between 0 and 1"):
        policy.updated({"thresholds": {"han": 1.5}})


def test_namespace_overrides_merge_per_script() -> None:
    policies = NamespacePolicies(QualityPolicy(threshold=0.91, thresholds={"han": 0.985, "other": 0.985}))
    policies.set("cn", {"thresholds": {"han": 0.99}})
    policies.set("cn", {"threshold": 0.8, "thresholds": {"other": 0.97}})
    policy = policies.for_namespace("cn")
    assert (policy.threshold, policy.thresholds) == (0.8, {"han": 0.99, "other": 0.97})
    assert policies.overrides("cn")["thresholds"] == {"han": 0.99, "other": 0.97}
    assert policies.for_namespace("other-team").threshold_for("han") == 0.985


async def test_templates_compare_a_query_with_its_own_models_phrasings() -> None:
    tier = TemplateTier([Template("hours", ("When are you open?", "营业时间是几点"), "9 to 5.")], threshold=0.5)
    batcher = BatchingEmbedder(routed())
    try:
        await tier.embed_phrasings(batcher)
        query = "营业时间是几点"
        key = request_key(ChatCompletionRequest(model="m", messages=[{"role": "user", "content": query}]), "ns")
        hit = tier.lookup_semantic(key, await batcher.embed(query, CHINESE.name), CHINESE.name)
        assert hit is not None and hit.matched_prompt == query
        assert tier.lookup_semantic(key, await batcher.embed(query, CHINESE.name), "not-a-model") is None
    finally:
        await batcher.close()
