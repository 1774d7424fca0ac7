"""Start-up on a large data folder: ``semcache serve`` from launch to ``/healthz`` 200.

    python -m benchmarks.startup [--entries 1000000] [--starts 3] [--folder DIR]

The data folder holds ``--entries`` entries in the embedded (SQLite) store, every one in the
default namespace and the scope of a one-message chat request to ``bench-model``, with a prompt of
about 60 characters, an answer of about 600 and a 384-d float32 vector (1,536 bytes), so about
2.3 KB a row; and the index snapshot that a running server saves (one HNSW partition). Vectors are
synthetic (clustered unit vectors, as ``benchmarks.index_search``): nothing is embedded to build
it. The folder is built once (the HNSW build takes minutes) and kept in
``benchmarks/results/.data-<entries>`` for later runs; ``--rebuild`` builds it again.

Each start is timed from the process's launch to the first 200 of ``/healthz``, polled every
20 ms. The ONNX export of the model is present (built before the first timed start), and the
stand-in upstream runs, so its check does not wait for a connect timeout. The page cache is warm:
the first, untimed start reads the folder once, and dropping the caches needs root, which a
benchmark does not ask for. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from semcache.settings import Settings
from testkit.servers import free_port, standin_process

from .http_load import process_cpu_s

ROOT = Path(__file__).resolve().parents[1]
MODEL = "bench-model"
ANSWER_WORDS = (
    "the a to of and in is that for it as with on be by this are or from at an can your you will not "
    "practice daily learn steps start small book guide build habit review notes time progress skills"
).split()


BUILT = "built.json"  # written last: a folder without it is rebuilt


def data_folder(entries: int) -> Path:
    return ROOT / "benchmarks" / "results" / f".data-{entries}"


def build(folder: Path, entries: int, env: dict[str, str], log: Path | None = None) -> dict[str, Any]:
    """Fill ``folder`` with ``entries`` synthetic entries and the index snapshot semcache saves."""
    from semcache.index import ScopedVectorIndex
    from semcache.keys import _keyed, request_key
    from semcache.server.access import DEFAULT_NAMESPACE
    from semcache.wire import ChatCompletionRequest

    from .index_search import DIMENSION, synthetic

    started = time.perf_counter()
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    # One start on the empty folder creates the store and records the embedding model's name,
    # which the snapshot must carry (a different name re-embeds every entry).
    with standin_process() as upstream:
        start_once(folder, upstream, env, log)
    db = sqlite3.connect(folder / "entries.sqlite3", isolation_level=None)
    model_name = db.execute("SELECT value FROM meta WHERE key = 'embedding_model'").fetchone()[0]
    rng = np.random.default_rng(11)
    words = random.Random(11)
    vectors = synthetic(entries, rng)
    first = request_key(ChatCompletionRequest.model_validate(_body("q")), DEFAULT_NAMESPACE)
    parts = _scope_parts(first)
    now = time.time()
    db.execute("PRAGMA synchronous=OFF")
    db.execute("PRAGMA cache_size=-2000000")  # the indexes' pages stay in memory until the commit
    db.execute("BEGIN")
    rows = []
    for n in range(entries):
        prompt = f"Question {n}: how do I {' '.join(words.sample(ANSWER_WORDS, 6))}?"
        key = _keyed(DEFAULT_NAMESPACE, MODEL, prompt, dict(parts), None, has_history=False, system=[],
                     template=first.template_scope, max_answer_tokens=first.max_answer_tokens)  # fmt: skip
        if n % 10_000 == 0:  # the shortcut gives the keys a chat request gets
            assert key == request_key(ChatCompletionRequest.model_validate(_body(prompt)), DEFAULT_NAMESPACE)
        answer = " ".join(words.choices(ANSWER_WORDS, k=110))[:600]
        rows.append((n + 1, key.namespace, key.scope, key.exact, MODEL, prompt, answer, now, None, now, 0,
                     vectors[n].tobytes()))  # fmt: skip
        if len(rows) == 50_000:
            _insert(db, rows)
    _insert(db, rows)
    db.execute("COMMIT")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # as a server that ran a while leaves it
    db.close()
    index = ScopedVectorIndex(DIMENSION)
    index.add(first.scope, np.arange(1, entries + 1, dtype=np.int64), vectors)
    index.rebuild(first.scope)  # into HNSW, as the server's maintenance does
    index.save(folder / "faiss", embedding_model=model_name)
    built = {"entries": entries, "build_s": round(time.perf_counter() - started, 1)}
    (folder / BUILT).write_text(json.dumps(built))
    return built


def _scope_parts(key: Any) -> dict[str, Any]:
    """What ``keys.request_key`` digests into the scope of a one-message request to ``MODEL``."""
    from semcache.keys import _digest

    parts = {"ns": key.namespace, "model": MODEL, "context": [], "params": {}}
    assert _digest(parts) == key.scope, "keys.request_key changed what a scope is made of"
    return parts


def _body(prompt: str) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": prompt}]}


def _insert(db: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> None:
    db.executemany(
        "INSERT INTO entries (id, namespace, scope, exact_key, model, prompt, answer, created_at, expires_at, "
        "last_access, hits, vector) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )
    rows.clear()


def start_once(folder: Path, upstream: str, env: dict[str, str], log: Path | None = None) -> dict[str, Any]:
    """Launch ``semcache serve`` on ``folder``, time it to ``/healthz`` 200 (polled every 20 ms),
    ask the first stored prompt again (an exact hit), and stop it (which saves the snapshot again)."""
    stored = None
    if (folder / "entries.sqlite3").exists():
        with sqlite3.connect(f"file:{folder / 'entries.sqlite3'}?mode=ro", uri=True) as db:
            stored = db.execute("SELECT prompt FROM entries ORDER BY id LIMIT 1").fetchone()
    port = free_port()
    command = [sys.executable, "-m", "semcache", "serve", "--port", str(port), "--data-dir", str(folder),
               "--upstream", upstream]  # fmt: skip
    output = open(log, "ab") if log is not None else subprocess.DEVNULL  # noqa: SIM115 - closed below
    started = time.perf_counter()
    process = subprocess.Popen(command, env={**os.environ, **env}, stdout=output, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(timeout=5) as client:
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"semcache exited with code {process.returncode} before it was ready")
                try:
                    if client.get(f"{url}/healthz").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.perf_counter() - started > 600:
                    raise TimeoutError("semcache was not ready within 600 s")
                time.sleep(0.02)
            ready_s = time.perf_counter() - started
            cpu_s = process_cpu_s(process.pid)  # every thread's: what the start cost, however busy the machine
            timed = {"ready_s": round(ready_s, 3), "cpu_s": None if cpu_s is None else round(cpu_s, 2)}
            if stored is None:  # an empty folder: nothing to ask, and nothing to store
                return timed
            reply = client.post(f"{url}/v1/chat/completions", json=_body(stored[0]))
        outcome = reply.headers.get("x-semcache-tier") or reply.headers.get("x-semcache", str(reply.status_code))
        return {**timed, "first_request": outcome}
    finally:
        process.terminate()
        try:
            process.wait(120)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if output is not subprocess.DEVNULL:
            output.close()


def run(entries: int, starts: int, env: dict[str, str], *, rebuild: bool = False, log: Path | None = None,
        folder: Path | None = None) -> dict[str, Any]:  # fmt: skip
    """Build the folder if needed, then one untimed start (page cache, model export) and ``starts`` timed."""
    folder = folder or data_folder(entries)
    built = None
    if rebuild or not (folder / BUILT).exists():
        built = build(folder, entries, env, log)
    with standin_process() as upstream:
        start_once(folder, upstream, env, log)  # warms the page cache; not counted
        timed = [start_once(folder, upstream, env, log) for _ in range(starts)]
    ready = [t["ready_s"] for t in timed]
    return {
        "entries": entries,
        "store": "sqlite (embedded)",
        "entry_bytes": "prompt ~60 B, answer ~600 B, vector 1,536 B (384-d float32)",
        "index": f"{'HNSW' if entries >= Settings().hnsw_min_entries else 'flat'} snapshot (one scope)",
        "page_cache": "warm (a first start, not counted, read the folder; dropping caches needs root)",
        "model_export": "present",
        "ready_s": ready,
        "ready_p50_s": round(statistics.median(ready), 3),
        "cpu_s": [t["cpu_s"] for t in timed],
        "first_request": [t.get("first_request") for t in timed],
        "folder_bytes": {p.name: p.stat().st_size for p in (folder / "entries.sqlite3", folder / "faiss/snapshot.npz")},
        **({"built": built} if built else {}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--starts", type=int, default=3, help="timed starts, after one untimed")
    parser.add_argument("--folder", type=Path, help="data folder (default benchmarks/results/.data-<entries>)")
    parser.add_argument("--rebuild", action="store_true", help="build the data folder again")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k.startswith("SEMCACHE_")}
    env.setdefault("SEMCACHE_EMBEDDING_CACHE_DIR", str(ROOT / "benchmarks" / "results" / ".models"))
    print(json.dumps(run(args.entries, args.starts, env, rebuild=args.rebuild, folder=args.folder), indent=2))


if __name__ == "__main__":
    main()
