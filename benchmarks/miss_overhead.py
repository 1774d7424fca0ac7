"""What a miss costs on top of calling the upstream directly, as ratios measured in one run.

    python -m benchmarks.miss_overhead [--requests 60] [--upstream-latency-ms 50] [--chunk-delay-ms 5]

The stand-in upstream and ``semcache serve`` run as separate processes on loopback. Each request
is a new prompt, so every request through semcache is a miss: lookup, embedding, the upstream
call, and storing the answer. For streams, time to first byte is the time to the first content
chunk. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from rich.progress import Progress

from testkit.servers import SemcacheProcess, standin_process

WORDS = (
    "apple river quantum violin harbor zebra copper lantern meadow orbit puzzle saddle tiger velvet walnut "
    "yacht anchor bishop cactus dragon falcon glacier hammer igloo jungle kettle lemon magnet nectar oyster "
    "parrot quartz rocket silver tulip umbrella vulture wizard yogurt zephyr basalt cobalt dune ember fjord"
).split()


def distinct_prompts(count: int, seed: int) -> list[str]:
    """Word salads that share no meaning, so that every one is a miss (checked on the header too)."""
    rng = random.Random(seed)
    return [" ".join(rng.sample(WORDS, 7)) + "?" for _ in range(count)]


def timed(client: httpx.Client, url: str, prompt: str, stream: bool) -> tuple[float, float]:
    """(time to first content byte, total) in ms."""
    body = {"model": "bench-model", "messages": [{"role": "user", "content": prompt}], "stream": stream}
    started = time.perf_counter()
    first = None
    with client.stream("POST", f"{url}/chat/completions", json=body) as response:
        outcome = response.headers.get("x-semcache", "direct")
        for line in response.iter_lines():
            if first is None and ('"content":"' in line and '"content":""' not in line):
                first = time.perf_counter()
        response.raise_for_status()
    total = time.perf_counter()
    if outcome not in ("miss", "direct"):
        raise RuntimeError(f"expected a miss, got {outcome!r} for {prompt!r}")
    return ((first or total) - started) * 1000, (total - started) * 1000


def run(requests: int, upstream_latency_ms: float, chunk_delay_ms: float) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with standin_process(upstream_latency_ms / 1000) as direct_url:
        control = direct_url.removesuffix("/v1") + "/_control"
        httpx.post(control, json={"chunk_delay_s": chunk_delay_ms / 1000}).raise_for_status()
        with (
            tempfile.TemporaryDirectory() as data,
            SemcacheProcess(data_dir=Path(data), upstream_url=direct_url) as service,
            httpx.Client(timeout=60) as client,
            Progress(transient=True) as progress,
        ):
            cache_url = f"{service.url}/v1"
            for n in range(5):
                timed(client, direct_url, f"warm-up {n}", False)
                timed(client, cache_url, f"warm-up {n}", True)
            task = progress.add_task("measuring misses", total=requests * 4)
            for stream in (False, True):
                mode = "stream" if stream else "non_stream"
                direct, cached = [], []
                for prompt in distinct_prompts(requests, seed=int(stream)):  # alternate: drift hits both alike
                    direct.append(timed(client, direct_url, prompt, stream))
                    cached.append(timed(client, cache_url, prompt, stream))
                    progress.advance(task, 2)
                results[mode] = summarise(direct, cached)
    results["upstream_latency_ms"] = upstream_latency_ms
    results["chunk_delay_ms"] = chunk_delay_ms
    return results


def summarise(direct: list[tuple[float, float]], cached: list[tuple[float, float]]) -> dict[str, Any]:
    def p50(values: list[float]) -> float:
        return round(statistics.median(values), 2)

    ttfb_direct, ttfb_cached = p50([d[0] for d in direct]), p50([c[0] for c in cached])
    total_direct, total_cached = p50([d[1] for d in direct]), p50([c[1] for c in cached])
    return {
        "direct_ttfb_p50_ms": ttfb_direct,
        "semcache_miss_ttfb_p50_ms": ttfb_cached,
        "ttfb_ratio": round(ttfb_cached / ttfb_direct, 3),
        "direct_total_p50_ms": total_direct,
        "semcache_miss_total_p50_ms": total_cached,
        "total_ratio": round(total_cached / total_direct, 3),
        "added_total_p50_ms": round(total_cached - total_direct, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument("--upstream-latency-ms", type=float, default=50.0)
    parser.add_argument("--chunk-delay-ms", type=float, default=5.0)
    args = parser.parse_args()
    print(json.dumps(run(args.requests, args.upstream_latency_ms, args.chunk_delay_ms), indent=2))


if __name__ == "__main__":
    main()
