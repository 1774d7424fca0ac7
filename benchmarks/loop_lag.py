"""Whether anything blocks semcache's event loop under mixed load: ``/healthz`` polled every 20 ms
while clients get semantic hits, send misses and stream hits.

    python -m benchmarks.loop_lag [--seconds 20] [--semantic 16] [--misses 4] [--streams 2]

``/healthz`` does no work of its own, so its latency is the time a request waits for the event
loop (plus the HTTP round trip on loopback): a request that blocks the loop for 30 ms shows as a
30 ms ``/healthz``. The poller runs in a thread of its own, on a kept-alive connection, so that the
load generator's own event loop never delays a poll. Semantic-hit clients send paraphrases of
stored prompts (some of which semcache explores, answering them from the upstream to label them,
as it does in production), miss clients new prompts, stream clients stored prompts with
``stream: true``. Prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import itertools
import json
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from testkit.servers import SemcacheProcess, standin_process

from .http_load import MODEL, HttpClient, Workload, client_pool, fill, semcache_outcome
from .latency import percentiles

POLL_INTERVAL_S = 0.02


class HealthPoller:
    """``GET /healthz`` every ``POLL_INTERVAL_S`` from a thread, keeping each latency (ms)."""

    def __init__(self, url: str) -> None:
        parts = url.removeprefix("http://").split(":")
        self._host, self._port = parts[0], int(parts[1])
        self.samples_ms: list[float] = []
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="healthz-poller", daemon=True)

    def __enter__(self) -> HealthPoller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _poll(self) -> None:
        connection = http.client.HTTPConnection(self._host, self._port, timeout=30)
        next_at = time.perf_counter()
        while not self._stop.is_set():
            started = time.perf_counter()
            try:
                connection.request("GET", "/healthz")
                response = connection.getresponse()
                response.read()
                if response.status == 200:
                    self.samples_ms.append((time.perf_counter() - started) * 1000)
                else:
                    self.errors += 1
            except (OSError, http.client.HTTPException):
                self.errors += 1
                connection.close()
                connection = http.client.HTTPConnection(self._host, self._port, timeout=30)
            next_at += POLL_INTERVAL_S
            self._stop.wait(max(0.0, next_at - time.perf_counter()))
        connection.close()


async def mixed_load(
    chat: str, workload: Workload, seconds: float, *, semantic: int, misses: int, streams: int
) -> dict[str, Any]:
    """``semantic`` + ``misses`` + ``streams`` closed-loop clients for ``seconds``; the outcomes and
    latencies of each kind."""
    deadline = time.perf_counter() + seconds
    paraphrases = itertools.cycle(workload.paraphrases)
    stored = itertools.cycle(workload.stored)
    new = iter(workload.misses(100_000, "lag"))
    kinds: dict[str, tuple[Any, bool]] = {"semantic": (paraphrases, False), "miss": (new, False),
                                          "stream": (stored, True)}  # fmt: skip
    outcomes: dict[str, Counter[str]] = {kind: Counter() for kind in kinds}
    latencies: dict[str, list[float]] = {kind: [] for kind in kinds}

    async def client(kind: str, http: HttpClient) -> None:
        prompts, stream = kinds[kind]
        while time.perf_counter() < deadline:
            body = {"model": MODEL, "messages": [{"role": "user", "content": next(prompts)}], "stream": stream}
            started = time.perf_counter()
            reply = await http.post_json(chat, body)
            latencies[kind].append((time.perf_counter() - started) * 1000)
            outcomes[kind][semcache_outcome(reply)] += 1

    counts = {"semantic": semantic, "miss": misses, "stream": streams}
    async with client_pool(sum(counts.values())) as pool:
        clients = iter(pool)
        await asyncio.gather(*(client(kind, next(clients)) for kind, count in counts.items() for _ in range(count)))
    return {
        kind: {"clients": counts[kind], "outcomes": dict(outcomes[kind]), **percentiles(latencies[kind])}
        for kind in kinds
    }


def measure(url: str, workload: Workload, seconds: float, *, semantic: int = 16, misses: int = 4,
            streams: int = 2) -> dict[str, Any]:  # fmt: skip
    """``/healthz`` latency while the mixed load runs on the semcache at ``url`` (already filled)."""
    chat = f"{url}/v1/chat/completions"
    with HealthPoller(url) as poller:
        load = asyncio.run(mixed_load(chat, workload, seconds, semantic=semantic, misses=misses, streams=streams))
    polls = sorted(poller.samples_ms)
    return {
        "healthz": {
            **percentiles(polls),
            "max_ms": round(polls[-1], 3) if polls else None,
            "over_20ms": sum(1 for ms in polls if ms > 20),
            "errors": poller.errors,
            "interval_ms": POLL_INTERVAL_S * 1000,
        },
        "load": load,
        "seconds": seconds,
    }


def run(seconds: float, upstream_delay_ms: tuple[float, float], env: dict[str, str] | None = None,
        log_path: Path | None = None, **clients: int) -> dict[str, Any]:  # fmt: skip
    """Start the stand-in and ``semcache serve``, fill it, and measure."""
    low, high = upstream_delay_ms
    workload = Workload.default()
    with (
        standin_process(low / 1000, (high - low) / 1000) as upstream_url,
        tempfile.TemporaryDirectory(prefix="semcache-lag-") as data,
        SemcacheProcess(data_dir=Path(data), upstream_url=upstream_url, env=env, log_path=log_path) as service,
    ):

        async def prepare() -> None:
            async with client_pool(32) as pool:
                await fill(pool, f"{service.url}/v1/chat/completions", workload.stored, semcache_outcome)

        asyncio.run(prepare())
        result = measure(service.url, workload, seconds, **clients)
    result["upstream_delay_ms"] = [low, high]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--semantic", type=int, default=16, help="clients getting semantic hits")
    parser.add_argument("--misses", type=int, default=4, help="clients sending new prompts")
    parser.add_argument("--streams", type=int, default=2, help="clients streaming stored prompts")
    parser.add_argument("--upstream-delay-ms", type=float, nargs=2, default=(300.0, 800.0), metavar=("MIN", "MAX"))
    args = parser.parse_args()
    result = run(args.seconds, tuple(args.upstream_delay_ms), semantic=args.semantic, misses=args.misses,
                 streams=args.streams)  # fmt: skip
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
