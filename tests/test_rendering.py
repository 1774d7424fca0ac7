"""Responses and stream events rendered in pieces: the same JSON as one ``json.dumps`` call."""

from __future__ import annotations

import asyncio
import json
import random
import time
from typing import Any

from semcache.server.rendering import _pieces, dumps, render


def _random_value(chance: random.Random, depth: int = 0) -> Any:
    kind = chance.choice(["str", "long", "int", "float", "none", "bool"] + (["dict", "list"] if depth < 4 else []))
    if kind == "str":
        return "".join(chance.choice('ab "\\\n\u00e9\u4e2d\U0001f600') for _ in range(chance.randint(0, 20)))
    if kind == "long":
        return "".join(chance.choice('xy "\\\n\u00e9\U0001f600') for _ in range(64)) * chance.randint(1000, 3000)
    if kind == "int":
        return chance.randint(-(10**12), 10**12)
    if kind == "float":
        return chance.random()
    if kind == "none":
        return None
    if kind == "bool":
        return chance.random() < 0.5
    if kind == "dict":
        return {f"k{n}\u00e9": _random_value(chance, depth + 1) for n in range(chance.randint(0, 6))}
    return [_random_value(chance, depth + 1) for _ in range(chance.randint(0, 300 if depth == 0 else 6))]


def test_pieces_make_the_same_json_as_one_call() -> None:
    chance = random.Random(16)
    for _ in range(30):
        value = {"choices": [{"message": {"content": _random_value(chance)}}], "extra": _random_value(chance)}
        assert "".join(_pieces(value)) == dumps(value)
        assert asyncio.run(render(value)) == dumps(value).encode()
    many = list(range(200_000))
    assert "".join(_pieces(many)) == dumps(many)
    assert json.loads(asyncio.run(render({"a": "x" * 1_000_000}))) == {"a": "x" * 1_000_000}


def test_a_large_payload_leaves_the_event_loop_free_between_pieces() -> None:
    answer = "All work and no play makes Jack a dull boy. \u00e9\n" * 200_000  # about 9 MB

    async def main() -> float:
        longest, last = 0.0, time.perf_counter()
        rendering = asyncio.ensure_future(render({"choices": [{"message": {"content": answer}}]}))
        while not rendering.done():
            await asyncio.sleep(0)
            now = time.perf_counter()
            longest, last = max(longest, now - last), now
        assert json.loads(rendering.result())["choices"][0]["message"]["content"] == answer
        return longest

    assert asyncio.run(main()) < 0.05  # in one call: tens of milliseconds
