"""Pieces the benchmarks share: the stand-in upstream as a process, and matplotlib."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from semcache.testing.uvicorn_thread import free_port


@contextmanager
def standin_process(latency_s: float = 0.0, jitter_s: float = 0.0) -> Iterator[str]:
    """The stand-in upstream in its own process, so it does not share the client's interpreter;
    yields its OpenAI base URL once it answers. Each answer waits ``latency_s`` plus up to
    ``jitter_s`` more (fixed per prompt)."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "semcache.testing.standin_upstream", "--port", str(port),
         "--latency-s", str(latency_s), "--latency-jitter-s", str(jitter_s), "--log-level", "warning"]
    )  # fmt: skip
    try:
        wait_for_standin(f"http://127.0.0.1:{port}/v1/models", process)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.terminate()
        process.wait(10)


def wait_for_standin(url: str, process: subprocess.Popen[bytes], timeout_s: float = 30) -> None:
    """Until ``url`` answers 200, while the stand-in's ``process`` runs; else RuntimeError."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"the stand-in upstream did not start (see {url})")


def pyplot() -> Any | None:
    """matplotlib's pyplot without a display, or None (with a note) when it is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot written", file=sys.stderr)
        return None
    return plt
