"""What the admin API's entry operations cost at size, through HTTP.

    python -m benchmarks.admin_entries [--entries 50000] [--store embedded|redis] [--embedded-import 2000]

Starts semcache in this process with the real model (and, with ``--store redis``, a throwaway
redis-server with ``appendfsync always``), imports synthetic entries that carry vectors (nothing is
embedded), then times a search by meaning and by text over the whole cache, an export and a flush,
and finally an import of prompts without vectors (every prompt embedded). Prints JSON.
"""

from __future__ import annotations

import argparse
import base64
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from semcache.embedders import load_embedder
from semcache.server import create_app
from semcache.settings import Settings
from semcache.testing.uvicorn_thread import ThreadedUvicorn
from testkit.redis_server import RedisServer
from testkit.servers import wait_healthy

_KEY = "benchmark-admin-key"
_JSONL = {"Content-Type": "application/x-ndjson"}  # /admin refuses bodies that are not JSON or JSONL
_CHUNK_BYTES = 3_500_000  # under the default max_body_bytes


def synthetic_lines(count: int, model_name: str, dimension: int) -> list[str]:
    """Export lines with random unit vectors, 50 scopes, 400-character answers."""
    rng = np.random.default_rng(0)
    lines = []
    for n in range(count):
        vector = rng.standard_normal(dimension).astype("<f4")
        vector /= np.linalg.norm(vector)
        line = plain_line(n, f"Synthetic benchmark question number {n} about topic {n % 97}?")
        line.update(scope=f"scope-{n % 50}", answer="A" * 400, vector_model=model_name)
        line["vector"] = base64.b64encode(vector.tobytes()).decode()
        lines.append(json.dumps(line))
    return lines


def plain_line(n: int, prompt: str) -> dict[str, Any]:
    return {"namespace": "bench", "scope": "s", "exact_key": f"key-{n}", "model": "m", "prompt": prompt,
            "answer": "x", "created_at": time.time()}  # fmt: skip


def post_in_chunks(http: httpx.Client, lines: list[str]) -> None:
    chunk: list[str] = []
    size = 0
    for line in lines:
        if chunk and size + len(line) + 1 > _CHUNK_BYTES:
            http.post("/admin/entries/import", content="\n".join(chunk), headers=_JSONL).raise_for_status()
            chunk, size = [], 0
        chunk.append(line)
        size += len(line) + 1
    if chunk:
        http.post("/admin/entries/import", content="\n".join(chunk), headers=_JSONL).raise_for_status()


def timed(action: Any) -> float:
    started = time.perf_counter()
    action()
    return round(time.perf_counter() - started, 3)


def measure(http: httpx.Client, count: int, embedded_import: int, model_name: str, dimension: int) -> dict[str, Any]:
    lines = synthetic_lines(count, model_name, dimension)
    seconds = timed(lambda: post_in_chunks(http, lines))
    results: dict[str, Any] = {"entries": count, "import_with_vectors_per_s": round(count / seconds)}
    search = {"query": "benchmark question about topic 5", "min_similarity": 0.3, "limit": 10}
    results["search_by_meaning_s"] = [
        timed(lambda: http.get("/admin/entries", params=search).raise_for_status()) for _ in range(2)
    ]
    text = {"text": "number 4999", "limit": 10}
    results["search_by_text_s"] = timed(lambda: http.get("/admin/entries", params=text).raise_for_status())

    def export() -> None:
        with http.stream("GET", "/admin/entries/export") as response:
            results["exported"] = sum(1 for _ in response.iter_lines())

    results["export_s"] = timed(export)
    results["flush_s"] = timed(lambda: http.post("/admin/flush", json={"confirm": True}).raise_for_status())
    prompts = [f"How do I configure feature number {n} of the product?" for n in range(embedded_import)]
    plain = "\n".join(json.dumps(plain_line(n, prompt)) for n, prompt in enumerate(prompts))
    seconds = timed(lambda: http.post("/admin/entries/import", content=plain, headers=_JSONL).raise_for_status())
    results["import_embedding_per_s"] = round(embedded_import / seconds)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=50_000)
    parser.add_argument("--store", choices=["embedded", "redis"], default="embedded")
    parser.add_argument("--embedded-import", type=int, default=2000, help="prompts imported without vectors")
    args = parser.parse_args()
    model = load_embedder("all-MiniLM-L6-v2")
    with tempfile.TemporaryDirectory() as folder:
        redis = RedisServer(Path(folder) / "redis").start() if args.store == "redis" else None
        extra: dict[str, Any] = {}
        if redis is not None:
            extra = {"store": "redis", "redis_url": redis.url, "redis_timeout_s": 30}
        settings = Settings(data_dir=Path(folder) / "data", upstream_url="http://127.0.0.1:9/v1", admin_key=_KEY,
                            **extra)  # fmt: skip
        try:
            with ThreadedUvicorn(create_app(settings, embedder=model)) as server:
                wait_healthy(server.url)
                headers = {"Authorization": f"Bearer {_KEY}"}
                with httpx.Client(base_url=server.url, headers=headers, timeout=3600) as http:
                    results = measure(http, args.entries, args.embedded_import, model.name, model.dimension)
        finally:
            if redis is not None:
                redis.stop()
    print(json.dumps({"store": args.store, **results}, indent=2))


if __name__ == "__main__":
    main()
