"""Closed-loop HTTP load on an OpenAI-compatible endpoint: N async clients, each sending its next
request as soon as its last one is answered, so N requests are really in flight at once.

Each simulated client is an ``HttpClient``: one kept-alive HTTP/1.1 connection per server, one
request at a time, a few dozen lines over asyncio streams. The client's own cost is counted in every
latency here, and it shares the machine's cores with the server, so the lighter the client, the more
a latency measures the server: httpx and aiohttp clients each add a share of an exact hit's time
that a bare socket does not. One shared pool serving 64 concurrent requests also capped this process
far below what 64 separate clients reach: the load generator, not the server, would set the pace.

Used by ``python -m benchmarks run`` for semcache, for the stand-in upstream called directly and
for LiteLLM's proxy. A request counts towards a phase's latency and throughput only when its
outcome (read from the response by ``outcome_of``) is the one the phase expects; the others are
counted in ``outcomes`` so that a phase that did not measure what it says shows it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import statistics
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .latency import PARAPHRASES, QUESTIONS, SUBJECTS, percentiles
from .miss_overhead import WORDS

MODEL = "bench-model"


@dataclass(frozen=True)
class Reply:
    """What an outcome is read from: the status and the headers (names in lower case)."""

    status: int
    headers: dict[str, str]


OutcomeOf = Callable[[Reply], str]


class HttpError(Exception):
    """The connection failed, closed early, or sent something that is not an HTTP/1.1 answer."""


class HttpClient:
    """One simulated client: a kept-alive HTTP/1.1 connection to each server it posts to, and one
    request at a time on it. Answers are read whole, by Content-Length or chunked; a connection the
    server closed while idle is opened again and the request sent once more, and a connection that
    failed otherwise is opened again for the next request."""

    def __init__(self, headers: dict[str, str] | None = None, timeout_s: float = 120.0) -> None:
        self._headers = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
        self._timeout_s = timeout_s
        self._connections: dict[tuple[str, int], tuple[asyncio.StreamReader, asyncio.StreamWriter]] = {}

    async def post_json(self, url: str, body: Any) -> Reply:
        parts = urlsplit(url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 80
        payload = json.dumps(body).encode()
        head = (
            f"POST {parts.path or '/'} HTTP/1.1\r\nhost: {host}:{port}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(payload)}\r\n{self._headers}\r\n"
        ).encode()
        server = (host, port)
        reused = server in self._connections
        try:
            return await asyncio.wait_for(self._exchange(server, head + payload), self._timeout_s)
        except (OSError, EOFError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
            self._forget(server)
            if reused and isinstance(exc, asyncio.IncompleteReadError) and not exc.partial:
                return await self.post_json(url, body)  # the server had closed the idle connection
            raise HttpError(str(exc) or type(exc).__name__) from exc
        except BaseException:  # a timeout or a cancellation mid-answer: the connection is out of step
            self._forget(server)
            raise

    async def _exchange(self, server: tuple[str, int], request: bytes) -> Reply:
        if server not in self._connections:
            self._connections[server] = await asyncio.open_connection(*server)
        reader, writer = self._connections[server]
        writer.write(request)
        status_line, *lines = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        headers = {}
        for line in lines:
            name, _, value = line.partition(":")
            if name:
                headers[name.strip().lower()] = value.strip()
        status = int(status_line.split(" ", 2)[1])
        if headers.get("transfer-encoding", "").lower() == "chunked":
            while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
                await reader.readexactly(size + 2)
            await reader.readuntil(b"\r\n")  # the end of the (empty) trailer
        else:
            await reader.readexactly(int(headers.get("content-length", "0")))
        if headers.get("connection", "").lower() == "close":
            self._forget(server)
        return Reply(status, headers)

    def _forget(self, server: tuple[str, int]) -> None:
        connection = self._connections.pop(server, None)
        if connection is not None:
            connection[1].close()

    async def close(self) -> None:
        for server in list(self._connections):
            self._forget(server)


def semcache_outcome(response: Reply) -> str:
    """``exact``, ``semantic``, ``template``, ``miss``, ``bypass`` or ``error``, from semcache's headers."""
    if response.status != 200:
        return "error"
    return response.headers.get("x-semcache-tier") or response.headers.get("x-semcache", "error")


def direct_outcome(response: Reply) -> str:
    return "direct" if response.status == 200 else "error"


@dataclass(frozen=True)
class Workload:
    """The prompts every cache under test is given: stored prompts, a paraphrase of each (same
    index), and new prompts for misses, each with its own number so no two can match."""

    stored: list[str]
    paraphrases: list[str]
    seed: int = 7

    @classmethod
    def default(cls) -> Workload:
        stored = [q.format(s) for s in SUBJECTS for q in QUESTIONS]
        paraphrases = [p.format(s) for s in SUBJECTS for p in PARAPHRASES]
        return cls(stored, paraphrases)

    def misses(self, count: int, label: str) -> list[str]:
        """``count`` prompts never asked before; ``label`` keeps separate batches apart."""
        rng = random.Random(f"{self.seed}:{label}")
        return [f"Case {label}-{n}: " + " ".join(rng.sample(WORDS, 7)) + "?" for n in range(count)]


@dataclass
class PhaseResult:
    """What one phase measured: latencies of the requests with the expected outcome (and their
    prompts, in the same order), and all outcomes.

    Throughput is counted requests over ``counted_s``, the time from the phase's start to its last
    counted answer: a request that is not counted (a paraphrase the verifier refused waits for the
    upstream, hundreds of ms) may hold the phase open after the last counted one, and that tail
    says nothing about how fast the counted path went. It stays visible in ``outcomes`` and
    ``wall_s``."""

    samples_ms: list[float] = field(default_factory=list)
    prompts: list[str] = field(default_factory=list)  # the prompt of each of samples_ms
    outcomes: Counter[str] = field(default_factory=Counter)
    wall_s: float = 0.0
    counted_s: float = 0.0  # from the start to the last counted answer
    client_cpu_s: float = 0.0  # this process's CPU time: the load generator's share of the cores
    server_cpu_s: float | None = None

    def extend(self, part: PhaseResult) -> None:
        """Add what a later part of the same phase measured (its requests ran after these)."""
        self.samples_ms += part.samples_ms
        self.prompts += part.prompts
        self.outcomes.update(part.outcomes)
        self.wall_s += part.wall_s
        self.counted_s += part.counted_s
        self.client_cpu_s += part.client_cpu_s
        if part.server_cpu_s is not None:
            self.server_cpu_s = (self.server_cpu_s or 0.0) + part.server_cpu_s

    def latency_by_prompt(self) -> dict[str, float]:
        """Each counted prompt's latency (ms); the last one where a prompt was sent more than once."""
        return dict(zip(self.prompts, self.samples_ms, strict=True))

    def summary(self) -> dict[str, Any]:
        throughput = len(self.samples_ms) / self.counted_s if self.counted_s > 0 else 0.0
        summary = {
            **percentiles(self.samples_ms),
            "throughput_rps": round(throughput, 1),
            "counted_s": round(self.counted_s, 3),
            "wall_s": round(self.wall_s, 3),
            "outcomes": dict(self.outcomes),
        }
        if self.wall_s > 0:  # cores busy on average: with 2 cores, client + server near 2 is a full machine
            summary["client_cores"] = round(self.client_cpu_s / self.wall_s, 2)
            if self.server_cpu_s is not None:
                summary["server_cores"] = round(self.server_cpu_s / self.wall_s, 2)
        return summary


def paired_added_ms(through: PhaseResult, direct: PhaseResult) -> dict[str, Any]:
    """What ``through`` (the cache) added to ``direct`` (the upstream alone), prompt by prompt: the
    median over the prompts counted in both of (latency through the cache - latency direct). The
    stand-in's delay is fixed per prompt, so each difference compares equal upstream waits, where a
    difference of two medians would carry the spread of the delays (hundreds of ms) into a figure of
    a few ms."""
    direct_ms = direct.latency_by_prompt()
    added = [ms - direct_ms[prompt] for prompt, ms in through.latency_by_prompt().items() if prompt in direct_ms]
    if not added:
        return {"pairs": 0}
    return {"p50_ms": round(statistics.median(added), 3), "pairs": len(added)}


async def run_phase(
    clients: list[HttpClient],
    url: str,
    prompts: list[str],
    *,
    requests: int,
    expect: str,
    outcome_of: OutcomeOf,
    server_pid: int | None = None,
) -> PhaseResult:
    """Send ``requests`` chat completions to ``url`` (cycling through ``prompts``) from every one of
    ``clients`` at once; with ``server_pid``, also count the server's CPU time."""
    order: Iterator[str] = itertools.islice(itertools.cycle(prompts), requests)
    result = PhaseResult()

    async def one_client(client: HttpClient) -> None:
        for prompt in order:  # the clients share one iterator: each takes the next prompt
            elapsed, outcome = await timed_request(client, url, prompt, outcome_of)
            result.outcomes[outcome] += 1
            if outcome == expect:
                result.samples_ms.append(elapsed)
                result.prompts.append(prompt)
                result.counted_s = time.perf_counter() - started

    server_before = process_cpu_s(server_pid)
    cpu_before, started = time.process_time(), time.perf_counter()
    await asyncio.gather(*(one_client(client) for client in clients))
    result.wall_s = time.perf_counter() - started
    result.client_cpu_s = time.process_time() - cpu_before
    server_after = process_cpu_s(server_pid)
    if server_before is not None and server_after is not None:
        result.server_cpu_s = server_after - server_before
    return result


def process_cpu_s(pid: int | None) -> float | None:
    """User + system CPU seconds of process ``pid`` (every thread), from /proc; None where unknown."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime and stime


async def timed_request(client: HttpClient, url: str, prompt: str, outcome_of: OutcomeOf) -> tuple[float, str]:
    """(milliseconds until the whole answer was read, outcome)."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": prompt}]}
    started = time.perf_counter()
    try:
        reply = await client.post_json(url, body)
    except (HttpError, TimeoutError):
        return (time.perf_counter() - started) * 1000, "error"
    return (time.perf_counter() - started) * 1000, outcome_of(reply)


async def fill(clients: list[HttpClient], url: str, prompts: list[str], outcome_of: OutcomeOf) -> Counter[str]:
    """Ask every prompt once, from every client at once, so that the cache holds them; returns the outcomes."""
    result = await run_phase(clients, url, prompts, requests=len(prompts), expect="", outcome_of=outcome_of)
    return result.outcomes


@asynccontextmanager
async def client_pool(
    count: int, headers: dict[str, str] | None = None, timeout_s: float = 120.0
) -> AsyncIterator[list[HttpClient]]:
    """``count`` simulated clients, each with its own kept-alive connections."""
    clients = [HttpClient(headers, timeout_s) for _ in range(count)]
    try:
        yield clients
    finally:
        for client in clients:
            await client.close()
