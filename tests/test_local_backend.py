"""`semcache serve --backend local`: misses answered by a local model, through the openai SDK."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import openai
import pytest

from testkit.tiny_model import build_tiny_causal_lm

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_causal_lm(tmp_path_factory.mktemp("tiny-lm"))


def test_local_backend_answers_misses_and_caches_clean_answers(
    serve: Callable[..., str], make_client: Callable[..., openai.OpenAI], tiny_model: Path
) -> None:
    url = serve(backend="local", model=tiny_model, upstream_url="http://127.0.0.1:9/unused")
    client = make_client(url)
    ask = {"model": "tiny", "messages": [{"role": "user", "content": "the cat sat on the mat"}], "max_tokens": 40}

    # Cut by max_tokens: finish_reason "length", so it is not stored.
    first = client.chat.completions.with_raw_response.create(**ask)
    assert first.headers["x-semcache"] == "miss" and first.parse().choices[0].finish_reason == "length"
    assert client.chat.completions.with_raw_response.create(**ask).headers["x-semcache"] == "miss"

    # Ended by a stop string: a clean answer, stored, then served from the cache, also as a stream.
    stopped = {**ask, "stop": ["a"]}
    answer = client.chat.completions.create(**stopped)
    assert answer.choices[0].finish_reason == "stop"
    again = client.chat.completions.with_raw_response.create(**stopped)
    assert again.headers["x-semcache-tier"] == "exact"
    assert again.parse().choices[0].message.content == answer.choices[0].message.content
    chunks = list(client.chat.completions.create(**stopped, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == answer.choices[0].message.content
    assert [m["id"] for m in httpx.get(f"{url}/v1/models").json()["data"]] == [tiny_model.name]


def test_local_backend_without_a_model_fails_to_load_with_a_clear_reason(
    tmp_path: Path, serve: Callable[..., str]
) -> None:
    with pytest.raises(RuntimeError, match="needs --model"):
        serve(backend="local")
