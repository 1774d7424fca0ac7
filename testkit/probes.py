"""Timing a service while something else loads it: ``/healthz`` and one chat request, every 50 ms,
from a process of its own so that the load's client threads never delay the probe's clock.

    python -m testkit.probes URL NAMESPACE PROMPT STOP_FILE

prints one JSON object when STOP_FILE appears: the seconds each probe took, and each chat
request's X-Semcache header.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx


class Probes:
    """``with Probes(url, namespace, prompt, folder) as probes: ...`` then ``probes.result``."""

    def __init__(self, url: str, namespace: str, prompt: str, folder: Path) -> None:
        self.stop_file = folder / "probes.stop"
        self.stop_file.unlink(missing_ok=True)
        self.args = [sys.executable, "-m", "testkit.probes", url, namespace, prompt, str(self.stop_file)]
        self.result: dict[str, Any] = {}
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Probes:
        self._process = subprocess.Popen(self.args, stdout=subprocess.PIPE)
        time.sleep(0.3)  # its first probes run before the load starts
        return self

    def __exit__(self, *exc_info: object) -> None:
        assert self._process is not None
        self.stop_file.touch()
        output, _ = self._process.communicate(timeout=60)
        self.result = json.loads(output)


def main(url: str, namespace: str, prompt: str, stop_file: str) -> None:
    health: list[float] = []
    asks: list[float] = []
    outcomes: list[str] = []
    body = {"model": "test-model", "messages": [{"role": "user", "content": prompt}]}
    with httpx.Client(base_url=url, timeout=30) as client:
        while not Path(stop_file).exists():
            started = time.perf_counter()
            client.get("/healthz").raise_for_status()
            health.append(time.perf_counter() - started)
            started = time.perf_counter()
            answer = client.post("/v1/chat/completions", json=body, headers={"X-Semcache-Namespace": namespace})
            asks.append(time.perf_counter() - started)
            outcomes.append(answer.headers.get("x-semcache", str(answer.status_code)))
            time.sleep(0.05)
    print(json.dumps({"health": health, "asks": asks, "outcomes": outcomes}))


if __name__ == "__main__":
    main(*sys.argv[1:5])
