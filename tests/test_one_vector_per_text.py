"""Issue 27, item 1: one vector per text. A real ``semcache serve`` on the shipped int8 model, in
front of the stand-in upstream: a prompt's similarity to a stored question, as ``/admin/decisions``
shows it, is the same when the prompt is looked up alone and when it is looked up amid a burst of
other clients' lookups, which the service embeds together in shared model calls. Before, the int8
model scaled its activations per call, and the same lookup could be a hit alone and a miss in a
burst (or the other way round).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from testkit.servers import SemcacheProcess, semcache_before_standin

pytestmark = pytest.mark.slow

STORED = [
    "How do I learn Python quickly?",
    "What is the capital of France?",
    "How do I reset my router to factory settings?",
    "Why does my sourdough bread come out dense and gummy in the middle?",
]
# Near each stored question, some above the threshold and some below it: a lookup of each finds a
# stored question as its best candidate, and its decision records the similarity.
LOOKUPS = [
    "How can I learn Python fast?",
    "What's the quickest way to pick up Python?",
    "Which city is the capital of France?",
    "What is France's capital city?",
    "How can I restore my router's factory settings?",
    "How do I factory reset a wifi router?",
    "Why is my homemade sourdough loaf dense and gummy inside?",
    "My sourdough is gummy in the middle, what am I doing wrong?",
]
# Other clients' prompts, short and long: the burst puts the lookups in model calls with them.
TRAFFIC = [
    "hi",
    "thanks!",
    "What time is it in Tokyo?",
    "How many ounces are in a cup?",
    "Is it safe to eat raw cookie dough?",
    "What is the difference between a process and a thread?",
    "How long should I rest a steak after grilling it?",
    "Can dogs eat grapes?",
    "Write a haiku about autumn rain.",
    "How do I undo the last git commit without losing my changes?",
    "What are the early signs of type 2 diabetes and when should I see a doctor about them?",
    "Translate 'the train to Munich leaves at half past nine' into German.",
    "We are a team of six engineers building a mobile app for booking fitness classes, and our Django "
    "backend slows down every evening when thousands of users book the same popular classes. What are "
    "our options for handling this load without rewriting everything, and which would you try first?",
    "I am planning a road trip from San Francisco to Seattle in early October with my partner and our "
    "dog. We have about eight days, want to see the coast and some redwoods, and would rather not drive "
    "more than four hours on any single day. Can you suggest a route with dog friendly overnight stops?",
    *(f"Question {n}: what is {n * 37} divided by {n + 3}?" for n in range(20)),
]
BURSTS = 3
CLIENTS = 24


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SemcacheProcess]:
    folder = tmp_path_factory.mktemp("one-vector")
    environment = {
        "SEMCACHE_LOG_LEVEL": "warning",
        "SEMCACHE_EMBEDDING_BACKEND": "onnx-int8",  # the shipped default, named: the model under test
        "SEMCACHE_MULTILINGUAL_EMBEDDING_MODEL": "all-MiniLM-L6-v2",  # one model to load
    }
    with semcache_before_standin(folder, environment) as process:
        yield process


def chat(client: httpx.Client, prompt: str, *, store: bool) -> httpx.Response:
    response = client.post(
        "/v1/chat/completions",
        json={"model": "test-model", "messages": [{"role": "user", "content": prompt}]},
        headers={} if store else {"Cache-Control": "no-store"},  # lookups leave the cache as it was
    )
    assert response.status_code == 200, response.text
    return response


def decisions_on_stored(client: httpx.Client) -> dict[str, list[dict[str, Any]]]:
    """Each lookup's decisions on a stored question, oldest first (amid the bursts, a lookup may
    also be compared with a similar request in flight, which has decisions of its own)."""
    decisions = client.get("/admin/decisions", params={"limit": 10_000}).json()["data"]
    found: dict[str, list[dict[str, Any]]] = {prompt: [] for prompt in LOOKUPS}
    for decision in reversed(decisions):  # the log lists the newest first
        if decision["query"] in found and decision["candidate"] in STORED:
            found[decision["query"]].append(decision)
    return found


def shared_model_calls(client: httpx.Client) -> float:
    """How many embedding model calls held more than one prompt, from ``/metrics``."""
    lines = client.get("/metrics").text.splitlines()

    def sample(prefix: str) -> float:
        return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith(prefix))

    return sample("semcache_embedding_batch_size_count") - sample('semcache_embedding_batch_size_bucket{le="1.0"}')


def test_a_lookups_similarity_is_the_same_alone_and_amid_other_traffic(service: SemcacheProcess) -> None:
    with httpx.Client(base_url=service.url, timeout=60) as client:
        for question in STORED:
            assert chat(client, question, store=True).headers["x-semcache"] == "miss"
        for prompt in LOOKUPS:  # one at a time: each is embedded alone
            chat(client, prompt, store=False)
        shared_before = shared_model_calls(client)
        prompts = [*LOOKUPS, *TRAFFIC]
        with ThreadPoolExecutor(CLIENTS) as pool:
            for burst in range(BURSTS):
                random.Random(burst).shuffle(prompts)
                list(pool.map(lambda prompt: chat(client, prompt, store=False), prompts))
        shared_after = shared_model_calls(client)
        decisions = decisions_on_stored(client)
    assert shared_after > shared_before  # the bursts were embedded in shared model calls
    for prompt, (alone, *amid) in decisions.items():
        assert len(amid) == BURSTS, (prompt, alone, amid)
        for decision in amid:
            assert decision["candidate"] == alone["candidate"]
            # /admin/decisions rounds similarities to 4 decimals
            assert abs(decision["similarity"] - alone["similarity"]) <= 1e-4, (prompt, alone, decision)
