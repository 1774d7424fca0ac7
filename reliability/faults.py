"""Faults under load: does semcache stay fast, correct and whole when its surroundings fail?

    python -m reliability.faults [--scenarios upstream_slow redis_restart ...] [--mode short|full] [--out DIR]

Each scenario runs background load against ``semcache serve`` child processes in front of the
stand-in upstream (its own process, driven over ``POST /_control``): several async clients, half on
httpx and half on the official openai SDK, streamed and not, in four namespaces reached through API
keys (and a few requests with an unknown key), asking new questions, exact repeats and paraphrases,
70% short questions and 30% multi-turn conversations. Mid-load the fault is injected, held, then
cleared, and the scenario checks:

- never a hang: every request completes within a bound a little above semcache's own upstream
  timeouts, and every error is OpenAI-shaped with an expected status (a 429 with ``Retry-After``,
  502/503/504), or an in-band error event for a stream cut after its headers;
- no partial answer cached: every entry afterwards holds the stand-in's full answer for its prompt
  (``Answer to: <prompt>``), and every answer served (hit or not) is a full one;
- no acknowledged entry lost: every entry the admin API listed before and during the fault is still
  listed afterwards, and is served as a hit with the same answer (on every replica);
- recovery by itself: after the fault is cleared, a new question is answered and then served as a
  hit within a bounded time, with no operator action.

Scenarios: upstream slow / 429 with Retry-After / 5xx / streams cut midway / malformed SSE / hangs
(on one embedded-store process), Redis stopped and restarted, a replica killed with ``kill -9`` (two
replicas on one Redis), and the data folder's disk full (the embedded process's data folder is a
small tmpfs when this runs as root; otherwise the process's file-size limit is dropped to one byte
with ``prlimit``, and the summary says which ran). After each scenario every log written (semcache's,
the stand-in's, Redis's) is scanned for API keys, the admin key, the upstream key, Authorization
values and ``sk-`` keys.

Writes ``summary.md`` and ``summary.json`` to ``benchmarks/results/faults-<UTC timestamp>/`` (or
``--out``), with one row per fault. The short mode (the default, unless ``SEMCACHE_RELIABILITY=full``)
takes about two minutes; ``--mode full`` holds each fault longer, with more clients and three rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import itertools
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
import openai

from semcache.testing.uvicorn_thread import free_port
from testkit.redis_server import RedisServer
from testkit.reliability import full_mode
from testkit.secrets_scan import scan_logs
from testkit.servers import SemcacheProcess

ROOT = Path(__file__).resolve().parent
MODEL = "gpt-4o-mini"
ANSWER_PREFIX = "Answer to: "  # the stand-in's deterministic answer is this plus the last user message
SCENARIOS = (
    "upstream_slow",
    "upstream_429",
    "upstream_5xx",
    "stream_cut",
    "malformed_sse",
    "upstream_hang",
    "disk_full",
    "redis_restart",
    "replica_kill",
)
Phase = Literal["before", "fault", "recovery", "after"]

# semcache's own limits for these runs: short, so that a fault shows within seconds.
FIRST_BYTE_TIMEOUT_S = 1.2
TOTAL_TIMEOUT_S = 3.0
BREAKER_RESET_S = 1.0
# No client request may take longer than this: semcache's total upstream timeout, plus room for a
# retry's wait and for a busy two-core machine.
CLIENT_BOUND_S = TOTAL_TIMEOUT_S + 3.0
SERVICE_ENV = {
    "SEMCACHE_UPSTREAM_CONNECT_TIMEOUT_S": "1",
    "SEMCACHE_UPSTREAM_FIRST_BYTE_TIMEOUT_S": str(FIRST_BYTE_TIMEOUT_S),
    "SEMCACHE_UPSTREAM_TOTAL_TIMEOUT_S": str(TOTAL_TIMEOUT_S),
    "SEMCACHE_UPSTREAM_MAX_ATTEMPTS": "2",
    "SEMCACHE_UPSTREAM_RETRY_BASE_DELAY_S": "0.1",
    "SEMCACHE_UPSTREAM_RETRY_MAX_TOTAL_S": "2",
    "SEMCACHE_BREAKER_FAILURE_THRESHOLD": "5",
    "SEMCACHE_BREAKER_RESET_AFTER_S": str(BREAKER_RESET_S),
    "SEMCACHE_SWEEP_INTERVAL_S": "1",
    "SEMCACHE_SNAPSHOT_INTERVAL_S": "2",
    "SEMCACHE_REDIS_TIMEOUT_S": "0.5",
    "SEMCACHE_LOG_FORMAT": "json",
}


# --------------------------------------------------------------------------
# How long, how hard
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    """How much load, and for how long, each scenario runs."""

    mode: str
    clients: int
    before_s: float  # load before the fault
    fault_s: float  # how long the fault is held
    after_s: float  # load after the service recovered
    rounds: int  # inject/clear cycles per scenario
    recover_within_s: float  # the service must answer and serve hits again within this
    reask_max: int  # acknowledged entries asked again (on every replica) after each scenario
    log_level: str

    @classmethod
    def for_mode(cls, mode: str) -> Timing:
        if mode == "full":
            return cls("full", 16, 5.0, 20.0, 10.0, 3, 90.0, 400, "debug")
        return cls("short", 6, 1.5, 3.0, 1.0, 1, 60.0, 30, "info")


# --------------------------------------------------------------------------
# Secrets and namespaces
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Secrets:
    """The keys of one run: fresh each time, so that a leak found in a log is this run's."""

    client_keys: dict[str, list[str]]  # key -> namespaces, the first one its default
    unknown_key: str
    admin_key: str
    upstream_key: str

    @classmethod
    def fresh(cls) -> Secrets:
        tag = os.urandom(6).hex()
        return cls(
            client_keys={
                f"sk-fault-a-{tag}": ["team-a"],
                f"sk-fault-b-{tag}": ["team-b"],
                f"fault-c-{tag}": ["team-c", "shared"],  # no sk- prefix: only the literal scan catches it
                f"sk-fault-d-{tag}": ["shared"],
            },
            unknown_key=f"sk-fault-unknown-{tag}",
            admin_key=f"admin-fault-{tag}",
            upstream_key=f"sk-upstream-fault-{tag}",
        )

    @property
    def namespaces(self) -> list[str]:
        return sorted({ns for namespaces in self.client_keys.values() for ns in namespaces})

    def key_for(self, namespace: str) -> tuple[str, dict[str, str]]:
        """A key that may use ``namespace``, and the header that picks it when it is not the default."""
        for key, namespaces in self.client_keys.items():
            if namespaces[0] == namespace:
                return key, {}
        for key, namespaces in self.client_keys.items():
            if namespace in namespaces:
                return key, {"X-Semcache-Namespace": namespace}
        raise KeyError(namespace)

    def all(self) -> list[str]:
        return [*self.client_keys, self.unknown_key, self.admin_key, self.upstream_key]


# --------------------------------------------------------------------------
# What the clients ask
# --------------------------------------------------------------------------

_OPENERS = ("How do I", "How can I", "What is the best way to", "What's the easiest way to")
_FOLLOW_UP_OPENERS = ("Given all that, how should I", "Given all that, how would I")
_VERBS = (
    "back up", "clean", "configure", "debug", "install", "migrate", "monitor", "reset", "secure", "speed up",
    "test", "update", "document", "restore", "replace", "tune", "audit", "encrypt", "recycle", "label",
)  # fmt: skip
_OBJECTS = (
    "a home router", "a Postgres database", "a laptop battery", "a garden hose", "a sourdough starter",
    "a bicycle chain", "a kitchen sink", "a Kubernetes cluster", "a wool sweater", "a family photo album",
    "a Python package", "a solar panel", "an espresso machine", "a fish tank", "a violin bow", "a car tire",
    "a web server", "a mechanical keyboard", "a wooden floor", "a shared calendar", "a label printer",
    "a ceiling fan", "a Git repository", "a password manager", "a greenhouse", "a 3D printer",
    "a tax return archive", "a mailing list", "a smoke detector", "a backup drive",
)  # fmt: skip
_CONTEXTS = (
    "on a tight budget", "before winter", "for a small team", "without special tools", "in an old house",
    "while travelling", "for a school project", "after a power cut", "in a rented flat", "for the first time",
    "on a weekend", "with a beginner's skills", "for a charity shop", "in a humid climate", "at a café",
)  # fmt: skip


@dataclass(frozen=True)
class Ask:
    """One request's messages; ``prompt`` is its last user message."""

    namespace: str
    messages: tuple[tuple[str, str], ...]
    kind: Literal["new", "repeat", "paraphrase"]

    @property
    def prompt(self) -> str:
        return self.messages[-1][1]

    def wire_messages(self) -> list[dict[str, str]]:
        return [{"role": role, "content": content} for role, content in self.messages]


class Corpus:
    """New questions, exact repeats and paraphrases, per namespace; remembers every prompt sent,
    so that any cached answer can be checked against the stand-in's and any entry asked again."""

    def __init__(self, namespaces: list[str], seed: int = 8) -> None:
        self.namespaces = namespaces
        self._rng = random.Random(seed)
        self._fresh = _fresh_questions(self._rng)
        self._asked: dict[str, list[Ask]] = {ns: [] for ns in namespaces}
        self._messages: dict[str, tuple[tuple[str, str], ...]] = {}
        self._lock = threading.Lock()

    def next_ask(self, rng: random.Random) -> Ask:
        namespace = rng.choice(self.namespaces)
        with self._lock:
            asked = self._asked[namespace]
            roll = rng.random()
            if asked and roll < 0.40:
                ask = Ask(namespace, rng.choice(asked).messages, "repeat")
            elif asked and roll < 0.55:
                ask = self._paraphrase(rng.choice(asked), rng)
            else:
                ask = self._new(namespace, conversation=rng.random() < 0.30, rng=rng)
            asked.append(ask)
            self._messages.setdefault(ask.prompt, ask.messages)
            return ask

    def probe(self, namespace: str) -> Ask:
        """A question never asked before, for recovery probes."""
        with self._lock:
            ask = self._new(namespace, conversation=False, rng=self._rng)
            self._messages.setdefault(ask.prompt, ask.messages)
            return ask

    def messages_for(self, prompt: str) -> list[dict[str, str]] | None:
        with self._lock:
            messages = self._messages.get(prompt)
        return None if messages is None else [{"role": r, "content": c} for r, c in messages]

    def full_answers(self) -> set[str]:
        """Every answer the stand-in can give to what was asked."""
        with self._lock:
            return {ANSWER_PREFIX + prompt for prompt in self._messages}

    def _new(self, namespace: str, *, conversation: bool, rng: random.Random) -> Ask:
        verb, thing, context = next(self._fresh)
        if not conversation:
            return Ask(namespace, (("user", f"{rng.choice(_OPENERS)} {verb} {thing} {context}?"),), "new")
        question = f"{rng.choice(_FOLLOW_UP_OPENERS)} {verb} {thing} {context}?"
        return Ask(namespace, (*_history(thing, context), ("user", question)), "new")

    def _paraphrase(self, original: Ask, rng: random.Random) -> Ask:
        """The same question with another opener (and, in a conversation, the same history)."""
        prompt = original.prompt
        openers = _FOLLOW_UP_OPENERS if prompt.startswith("Given all that") else _OPENERS
        used = next((o for o in openers if prompt.startswith(o + " ")), None)
        if used is None:
            return Ask(original.namespace, original.messages, "repeat")
        other = rng.choice([o for o in openers if o != used])
        reworded = other + prompt[len(used) :]
        return Ask(original.namespace, (*original.messages[:-1], ("user", reworded)), "paraphrase")


def _fresh_questions(rng: random.Random) -> Iterator[tuple[str, str, str]]:
    """(verb, thing, context) never given before: every combination, then again with a variant
    number, so that a long run never runs out."""
    combos = [(v, o, c) for v in _VERBS for o in _OBJECTS for c in _CONTEXTS]
    for variant in itertools.count():
        rng.shuffle(combos)
        for verb, thing, context in combos:
            yield verb, thing, context if variant == 0 else f"{context} (variant {variant})"


def _history(thing: str, context: str) -> tuple[tuple[str, str], ...]:
    """The earlier turns of a longer support conversation about ``thing``."""
    first = f"I have been having trouble with {thing} {context}, and I would like some careful advice."
    second = f"It started last month. I already read the manual for {thing} twice and asked a friend."
    return (
        ("system", "You are a patient support assistant. Answer in short, practical steps."),
        ("user", first),
        ("assistant", ANSWER_PREFIX + first),
        ("user", second),
        ("assistant", ANSWER_PREFIX + second),
    )


# --------------------------------------------------------------------------
# The clients
# --------------------------------------------------------------------------


@dataclass
class Outcome:
    """What one client request got."""

    phase: Phase  # when the request was sent
    target: int
    namespace: str
    prompt: str
    kind: str
    stream: bool
    client: str  # "httpx" or "openai"
    seconds: float = 0.0
    status: int | None = None  # None: no HTTP answer at all
    semcache: str | None = None  # X-Semcache
    tier: str | None = None
    answer: str | None = None  # the whole text, when the answer completed
    failure: str | None = None  # "timeout", "connection", "in-band error", "http error", "cut silently", ...
    error_shape_ok: bool = True
    error_code: str | None = None
    retry_after: str | None = None
    ended_in: Phase | None = None  # when its answer ended
    detail: str | None = None  # the client's exception, when it raised one

    @property
    def during_fault(self) -> bool:
        """Whether any part of it overlapped the fault or the recovery from it."""
        return self.phase in ("fault", "recovery") or self.ended_in in ("fault", "recovery")

    @property
    def label(self) -> str:
        if self.status is None:
            return self.failure or "no answer"
        if self.status == 200 and self.failure is None:
            return f"200 {self.semcache}"
        if self.status == 200:
            return f"200 then {self.failure}"
        return f"{self.status} {self.error_code or ''}".strip()


def _describe(exc: BaseException) -> str:
    """An exception and its cause, short: enough to tell a refused connection from a dropped one."""
    cause = exc.__cause__ or exc.__context__
    text = f"{type(exc).__name__}: {exc}" + (f" <- {type(cause).__name__}: {cause}" if cause else "")
    return text[:200]


def _error_fields(body: object) -> tuple[bool, str | None]:
    """Whether an error body (the inner ``error`` object) is OpenAI-shaped, and its code."""
    if not isinstance(body, dict):
        return False, None
    shaped = isinstance(body.get("message"), str) and isinstance(body.get("type"), str)
    shaped = shaped and "param" in body and "code" in body
    code = body.get("code")
    return shaped, code if isinstance(code, str) else None


class Load:
    """Clients sending requests from a thread of their own until stopped; ``phase`` labels them."""

    def __init__(self, targets: list[str], corpus: Corpus, secrets: Secrets, clients: int, *, seed: int = 1) -> None:
        self.targets = targets
        self.corpus = corpus
        self.secrets = secrets
        self.clients = clients
        self.seed = seed
        self.phase: Phase = "before"
        self.outcomes: list[Outcome] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), name="fault-load", daemon=True)

    def start(self) -> Load:
        self._thread.start()
        return self

    def stop(self) -> list[Outcome]:
        self._stop.set()
        self._thread.join(CLIENT_BOUND_S + 30)
        if self._thread.is_alive():
            raise RuntimeError("the load clients did not stop: a request outlived every timeout")
        return list(self.outcomes)

    async def _run(self) -> None:
        await asyncio.gather(*(self._client(n) for n in range(self.clients)))

    async def _client(self, n: int) -> None:
        rng = random.Random(self.seed * 1000 + n)
        use_sdk = n % 2 == 1
        sdk_clients: dict[int, openai.AsyncOpenAI] = {}  # one per replica, each connection kept busy
        async with httpx.AsyncClient(timeout=CLIENT_BOUND_S + 5) as http:
            while not self._stop.is_set():
                target = (n + rng.randrange(len(self.targets))) % len(self.targets)
                outcome = await self._one(rng, target, http, sdk_clients if use_sdk else None)
                self.outcomes.append(outcome)
                await asyncio.sleep(rng.uniform(0.01, 0.08) if outcome.status is not None else 0.2)
        for sdk in sdk_clients.values():
            await sdk.close()

    async def _one(
        self,
        rng: random.Random,
        target: int,
        http: httpx.AsyncClient,
        sdk_clients: dict[int, openai.AsyncOpenAI] | None,
    ) -> Outcome:
        ask = self.corpus.next_ask(rng)
        stream = rng.random() < 0.4
        key, headers = self.secrets.key_for(ask.namespace)
        if rng.random() < 0.03:
            key = self.secrets.unknown_key  # a client with a wrong key: a 401, whatever the fault
        outcome = Outcome(self.phase, target, ask.namespace, ask.prompt, ask.kind, stream,
                          "httpx" if sdk_clients is None else "openai")  # fmt: skip
        started = time.monotonic()
        try:
            if sdk_clients is None:
                call = _ask_httpx(http, self.targets[target], key, headers, ask, stream, outcome)
            else:
                sdk = sdk_clients.get(target)
                if sdk is None:
                    sdk = sdk_clients[target] = openai.AsyncOpenAI(
                        base_url=f"{self.targets[target]}/v1", api_key=key, max_retries=0, timeout=CLIENT_BOUND_S + 5
                    )
                call = _ask_sdk(sdk, {"Authorization": f"Bearer {key}", **headers}, ask, stream, outcome)
            await asyncio.wait_for(call, CLIENT_BOUND_S)
        except TimeoutError:
            outcome.failure = "timeout"  # a hang, as a client sees it
        except (httpx.TransportError, openai.APIConnectionError) as exc:
            outcome.failure = "connection" if outcome.status is None else "connection lost"
            outcome.detail = _describe(exc)
        except (ValueError, KeyError, IndexError, TypeError) as exc:  # a body that is not what the API promises
            outcome.failure = f"unreadable answer ({type(exc).__name__})"
            outcome.detail = _describe(exc)
        outcome.seconds = time.monotonic() - started
        outcome.ended_in = self.phase
        return outcome


async def _ask_httpx(
    http: httpx.AsyncClient, url: str, key: str, headers: dict[str, str], ask: Ask, stream: bool, out: Outcome
) -> None:
    body = {"model": MODEL, "messages": ask.wire_messages(), "stream": stream}
    request_headers = {"Authorization": f"Bearer {key}", **headers}
    async with http.stream("POST", f"{url}/v1/chat/completions", json=body, headers=request_headers) as response:
        out.status = response.status_code
        out.semcache, out.tier = response.headers.get("x-semcache"), response.headers.get("x-semcache-tier")
        out.retry_after = response.headers.get("retry-after")
        if response.status_code != 200:
            _http_error(out, await response.aread())
        elif stream:
            await _read_sse(response, out)
        else:
            message = json.loads(await response.aread())["choices"][0]["message"]
            out.answer = message.get("content")


def _http_error(out: Outcome, content: bytes) -> None:
    out.failure = "http error"
    try:
        body = json.loads(content)
    except ValueError:
        body = None
    out.error_shape_ok, out.error_code = _error_fields(body.get("error") if isinstance(body, dict) else None)
    out.error_shape_ok = out.error_shape_ok and isinstance(body, dict) and set(body) == {"error"}


async def _read_sse(response: httpx.Response, out: Outcome) -> None:
    """Collect a stream's text; it must end with ``[DONE]`` or with an in-band error event."""
    pieces: list[str] = []
    async for line in response.aiter_lines():
        if not line.startswith("data: "):
            continue
        data = line[len("data: ") :]
        if data == "[DONE]":
            out.answer = "".join(pieces)
            return
        event = json.loads(data)
        if "error" in event:
            out.failure = "in-band error"
            out.error_shape_ok, out.error_code = _error_fields(event["error"])
            return
        for choice in event.get("choices") or []:
            pieces.append((choice.get("delta") or {}).get("content") or "")
    out.failure = "cut silently"  # neither [DONE] nor an error: the client cannot tell it was cut


async def _ask_sdk(sdk: openai.AsyncOpenAI, headers: dict[str, str], ask: Ask, stream: bool, out: Outcome) -> None:
    messages: Any = ask.wire_messages()
    try:
        raw = await sdk.chat.completions.with_raw_response.create(
            model=MODEL, messages=messages, stream=stream, extra_headers=headers or None
        )
        out.status = raw.status_code
        out.semcache, out.tier = raw.headers.get("x-semcache"), raw.headers.get("x-semcache-tier")
        parsed: Any = raw.parse()
        if not stream:
            out.answer = parsed.choices[0].message.content
            return
        pieces: list[str] = []
        finished = False
        async for chunk in parsed:
            for choice in chunk.choices:
                pieces.append(choice.delta.content or "")
                finished = finished or choice.finish_reason == "stop"
        if finished:
            out.answer = "".join(pieces)
        else:
            out.failure = "cut silently"
    except openai.APIStatusError as error:
        out.status, out.failure = error.status_code, "http error"
        out.retry_after = error.response.headers.get("retry-after")
        out.error_shape_ok, out.error_code = _error_fields(error.body)
    except openai.APIConnectionError:
        raise
    except openai.APIError as error:  # an in-band error event, after the headers
        out.failure = "in-band error"
        out.error_shape_ok, out.error_code = _error_fields(error.body)


# --------------------------------------------------------------------------
# The running parts
# --------------------------------------------------------------------------


class Standin:
    """The stand-in upstream in its own process, logging to a file, driven over HTTP."""

    def __init__(self, log_path: Path, *, latency_s: float = 0.05, jitter_s: float = 0.15) -> None:
        self.port = free_port()
        self.log_path = log_path
        self.latency_s, self.jitter_s = latency_s, jitter_s
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    def start(self) -> Standin:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "semcache.testing.standin_upstream", "--port", str(self.port),
                 "--latency-s", str(self.latency_s), "--latency-jitter-s", str(self.jitter_s), "--log-level", "info"],
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self.process.poll() is None:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.root_url}/_control", timeout=1).status_code == 200:
                    return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"the stand-in upstream did not start; see {self.log_path}")

    def set_fault(self, **fault: Any) -> None:
        httpx.post(f"{self.root_url}/_control", json=fault, timeout=5).raise_for_status()

    def clear(self) -> None:
        httpx.post(f"{self.root_url}/_reset", timeout=5).raise_for_status()  # also forgets recorded calls

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


class DataDisk:
    """The embedded process's data folder, and a way to fill it: a small tmpfs when mounting is
    allowed (root), else the process's file-size limit (``prlimit --fsize``), set once it runs."""

    def __init__(self, folder: Path, size_mb: int = 64) -> None:
        self.folder = folder
        self.size_mb = size_mb
        self.method: Literal["tmpfs", "prlimit"] = "prlimit"
        self.pid: int | None = None
        self._filler = folder / "disk-filler.bin"

    def prepare(self) -> DataDisk:
        self.folder.mkdir(parents=True, exist_ok=True)
        if shutil.which("mount") is not None and os.geteuid() == 0:
            mounted = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={self.size_mb}m", "tmpfs", str(self.folder)],
                capture_output=True,
            )
            if mounted.returncode == 0:
                self.method = "tmpfs"
        return self

    def describe(self) -> str:
        if self.method == "tmpfs":
            return f"data folder on a {self.size_mb} MB tmpfs, filled to the last byte"
        return "file-size limit of the process set to 1 byte (prlimit --fsize): no tmpfs mount allowed"

    def fill(self) -> None:
        if self.method == "prlimit":
            self._prlimit("1")
            return
        with open(self._filler, "wb", buffering=0) as filler:
            for size in (1 << 20, 1 << 12, 1):
                with contextlib.suppress(OSError):
                    while True:
                        filler.write(b"\0" * size)
                        filler.flush()

    def free(self) -> None:
        if self.method == "prlimit":
            self._prlimit("unlimited")
            return
        self._filler.unlink(missing_ok=True)

    def _prlimit(self, soft: str) -> None:
        assert self.pid is not None, "the process's pid is needed for prlimit"
        subprocess.run(["prlimit", f"--pid={self.pid}", f"--fsize={soft}:unlimited"], check=True)

    def release(self) -> None:
        if self.method == "tmpfs":
            subprocess.run(["umount", "-l", str(self.folder)], capture_output=True)


class Rig:
    """semcache processes in front of the stand-in: one on the embedded store (its data folder on a
    disk that can be filled), or two replicas sharing a Redis."""

    def __init__(
        self,
        kind: Literal["embedded", "redis"],
        work_dir: Path,
        standin: Standin,
        secrets: Secrets,
        timing: Timing,
    ) -> None:
        self.kind = kind
        self.work_dir = work_dir
        self.standin = standin
        self.secrets = secrets
        self.timing = timing
        self.log_dir = work_dir / "logs"
        self.services: list[SemcacheProcess] = []
        self.redis: RedisServer | None = None
        self.disk: DataDisk | None = None
        self.corpus = Corpus(secrets.namespaces)

    @property
    def targets(self) -> list[str]:
        return [service.url for service in self.services]

    def start(self) -> Rig:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        keys_file = self.work_dir / "api-keys.json"
        keys_file.write_text(json.dumps(self.secrets.client_keys))
        env = {
            **SERVICE_ENV,
            "SEMCACHE_LOG_LEVEL": self.timing.log_level,
            "SEMCACHE_API_KEYS_FILE": str(keys_file),
            "SEMCACHE_ADMIN_KEY": self.secrets.admin_key,
            "SEMCACHE_UPSTREAM_API_KEY": self.secrets.upstream_key,
        }
        # The ONNX export of the embedding model is made once and shared by every process.
        exports = os.environ.get("SEMCACHE_EMBEDDING_CACHE_DIR") or str(self.work_dir.parent / "embedding-exports")
        env["SEMCACHE_EMBEDDING_CACHE_DIR"] = exports
        if self.kind == "embedded":
            self.disk = DataDisk(self.work_dir / "data").prepare()
            self._add_service("embedded", self.disk.folder, env)
        else:
            self.redis = RedisServer(self.work_dir / "redis").start()
            redis_env = {**env, "SEMCACHE_STORE": "redis", "SEMCACHE_REDIS_URL": self.redis.url}
            for name in ("replica-a", "replica-b"):
                self._add_service(name, self.work_dir / name, redis_env)
        # Each loads the model: start them side by side.
        with ThreadPoolExecutor(len(self.services)) as starting:
            for started in [starting.submit(service.start) for service in self.services]:
                started.result()
        if self.disk is not None:
            assert self.services[0].process is not None
            self.disk.pid = self.services[0].process.pid
        return self

    def _add_service(self, name: str, data_dir: Path, env: dict[str, str]) -> None:
        self.services.append(
            SemcacheProcess(
                data_dir=data_dir, upstream_url=self.standin.base_url, env=env, log_path=self.log_dir / f"{name}.log"
            )
        )

    def stop(self) -> None:
        for service in self.services:
            service.stop()
        if self.redis is not None:
            self.redis.stop()
        if self.disk is not None:
            self.disk.release()

    def log_paths(self) -> list[Path]:
        paths = [self.log_dir]
        if self.redis is not None and (self.redis.folder / "redis.log").exists():
            paths.append(self.redis.folder / "redis.log")
        return paths

    def list_entries(self, target: int = 0) -> list[dict[str, Any]]:
        """Every entry, whole, through the admin API."""
        entries: list[dict[str, Any]] = []
        cursor: str | None = None
        headers = {"Authorization": f"Bearer {self.secrets.admin_key}"}
        while True:
            params: dict[str, Any] = {"limit": 1000, "max_chars": 0, **({"cursor": cursor} if cursor else {})}
            response = httpx.get(f"{self.targets[target]}/admin/entries", params=params, headers=headers, timeout=30)
            response.raise_for_status()
            page = response.json()
            entries += page["data"]
            cursor = page["next_cursor"]
            if not cursor:
                return entries

    def ask(self, target: int, namespace: str, messages: list[dict[str, str]]) -> httpx.Response:
        key, headers = self.secrets.key_for(namespace)
        return httpx.post(
            f"{self.targets[target]}/v1/chat/completions",
            json={"model": MODEL, "messages": messages},
            headers={"Authorization": f"Bearer {key}", **headers},
            timeout=CLIENT_BOUND_S,
        )


# --------------------------------------------------------------------------
# The faults
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    """A fault: how to inject it and clear it, and what clients may see while it lasts."""

    name: str
    rig: Literal["embedded", "redis"]
    description: str
    inject: Callable[[Rig, int], str | None]  # (rig, round) -> a note for the report
    clear: Callable[[Rig, int], None]
    allowed_statuses: frozenset[int]  # besides 200 and the unknown key's 401, while the fault lasts
    # Did the fault show at all (else the scenario proves nothing)? Given what was sent during it.
    effect: Callable[[list[Outcome], ScenarioResult], bool]
    effect_shown: str  # what the effect check looks for, for the report
    store_down: bool = False  # the admin API cannot list entries while it lasts
    killed_target: int | None = None  # this replica's clients see connection errors while it lasts
    hold_at_least_s: float = 0.0


def _set_fault(**fault: Any) -> Callable[[Rig, int], str | None]:
    def inject(rig: Rig, round_: int) -> str | None:
        rig.standin.set_fault(**fault)
        return None

    return inject


def _clear_upstream(rig: Rig, round_: int) -> None:
    rig.standin.clear()


def _count(outcomes: list[Outcome], test: Callable[[Outcome], bool]) -> int:
    return sum(1 for outcome in outcomes if test(outcome))


def _stop_redis(rig: Rig, round_: int) -> str | None:
    assert rig.redis is not None
    if round_ % 2 == 1:
        rig.redis.kill()
        return "Redis killed with kill -9"
    rig.redis.stop()
    return "Redis stopped (SIGTERM)"


def _start_redis(rig: Rig, round_: int) -> None:
    assert rig.redis is not None
    rig.redis.start()


def _kill_replica(rig: Rig, round_: int) -> str | None:
    rig.services[1].kill()
    return "replica B killed with kill -9 mid-load; restarted after the hold"


def _restart_replica(rig: Rig, round_: int) -> None:
    rig.services[1].start()


def _fill_disk(rig: Rig, round_: int) -> str | None:
    assert rig.disk is not None
    # SQLite reuses its write-ahead log's pages; empty it first, so the next commits need new space.
    with contextlib.closing(sqlite3.connect(rig.disk.folder / "entries.sqlite3", timeout=5)) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    rig.disk.fill()
    return rig.disk.describe() + " (after a WAL checkpoint)"


def _free_disk(rig: Rig, round_: int) -> None:
    assert rig.disk is not None
    rig.disk.free()


def _slow_misses(outcomes: list[Outcome]) -> bool:
    slow = [o.seconds for o in outcomes if o.status == 200 and o.semcache == "miss" and o.failure is None]
    return bool(slow) and sorted(slow)[len(slow) // 2] > 0.6


def scenarios() -> dict[str, Scenario]:
    upstream_errors = frozenset({502, 503, 504})
    table = [
        Scenario(
            "upstream_slow", "embedded", "upstream answers 0.7 s late and streams slowly (below the timeouts)",
            _set_fault(latency_s=0.7, chunk_delay_s=0.02), _clear_upstream, frozenset(),
            lambda o, r: _slow_misses(o), "median miss over 0.6 s",
        ),
        Scenario(
            "upstream_429", "embedded", "upstream answers 429 with Retry-After: 1",
            _set_fault(status=429, retry_after=1), _clear_upstream, frozenset({429}),
            lambda o, r: _count(o, lambda x: x.status == 429) > 0, "429s passed on",
        ),
        Scenario(
            "upstream_5xx", "embedded", "upstream answers 503",
            _set_fault(status=503), _clear_upstream, upstream_errors,
            lambda o, r: _count(o, lambda x: x.status in upstream_errors) > 0, "502/503/504 answers",
        ),
        Scenario(
            "stream_cut", "embedded", "upstream cuts every answer after 2 chunks (JSON bodies: half sent)",
            _set_fault(cut_after_chunks=2), _clear_upstream, upstream_errors,
            lambda o, r: _count(o, lambda x: x.failure == "in-band error" or x.status in upstream_errors) > 0,
            "in-band errors or 502s",
        ),
        Scenario(
            "malformed_sse", "embedded", "upstream streams a garbage event midway",
            _set_fault(malformed_sse=True), _clear_upstream, upstream_errors,
            lambda o, r: _count(o, lambda x: x.failure == "in-band error" or x.status in upstream_errors) > 0,
            "in-band errors or 502s",
        ),
        Scenario(
            "upstream_hang", "embedded", "upstream accepts and never answers (longer than every timeout)",
            _set_fault(hang_before_first_byte=True), _clear_upstream, upstream_errors,
            lambda o, r: _count(o, lambda x: x.status in (503, 504)) > 0, "504 timeouts or 503 circuit_open",
            hold_at_least_s=TOTAL_TIMEOUT_S + 1.5,
        ),
        Scenario(
            "disk_full", "embedded", "the data folder's disk is full",
            _fill_disk, _free_disk, frozenset(),
            lambda o, r: r.not_stored_during_fault > 0 and _count(o, lambda x: x.status == 200) > 0,
            "answers kept flowing, misses answered but not stored",
        ),
        Scenario(
            "redis_restart", "redis", "Redis stopped, then restarted on the same port and data",
            _stop_redis, _start_redis, frozenset(),
            lambda o, r: _count(o, lambda x: x.semcache == "bypass") > 0, "answered as bypass while Redis was down",
            store_down=True,
        ),
        Scenario(
            "replica_kill", "redis", "one of two replicas killed with kill -9, then restarted",
            _kill_replica, _restart_replica, frozenset(),
            lambda o, r: _count(o, lambda x: x.target == 1 and x.failure == "connection") > 0,
            "connection refused by the killed replica", killed_target=1,
        ),
    ]  # fmt: skip
    return {scenario.name: scenario for scenario in table}


# --------------------------------------------------------------------------
# Running a scenario, and checking what happened
# --------------------------------------------------------------------------


@dataclass
class ScenarioResult:
    name: str
    description: str
    notes: list[str] = field(default_factory=list)
    requests_during_fault: int = 0
    outcomes_during_fault: dict[str, int] = field(default_factory=dict)
    outcomes_after: dict[str, int] = field(default_factory=dict)
    requests_total: int = 0
    slowest_s: float = 0.0
    client_timeouts: int = 0
    unexpected_errors: int = 0
    malformed_errors: int = 0
    missing_retry_after: int = 0
    bad_answers_served: int = 0
    partial_answers_cached: int = 0
    entries_after: int = 0
    acknowledged: int = 0
    acknowledged_lost: int = 0
    reasked: int = 0
    reask_failures: int = 0
    not_stored_during_fault: int = 0
    recover_s: list[float] = field(default_factory=list)
    fault_effect_shown: bool = False
    secrets_found: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "passed": self.passed}


def _entry_key(entry: dict[str, Any]) -> tuple[str, str, str]:
    return entry["namespace"], entry["scope"], entry["prompt"]


def _entry_map(entries: list[dict[str, Any]]) -> dict[tuple[str, str, str], str]:
    return {_entry_key(entry): entry["answer"] for entry in entries}


def run_scenario(rig: Rig, scenario: Scenario, *, say: Callable[[str], None] = print) -> ScenarioResult:
    """Run ``scenario`` under load on ``rig`` (already started) and check it."""
    timing = rig.timing
    result = ScenarioResult(scenario.name, scenario.description)
    acknowledged: dict[tuple[str, str, str], str] = {}
    load = Load(rig.targets, rig.corpus, rig.secrets, timing.clients, seed=zlib.crc32(scenario.name.encode())).start()
    try:
        for round_ in range(timing.rounds):
            load.phase = "before"
            time.sleep(timing.before_s)
            acknowledged.update(_entry_map(rig.list_entries()))
            load.phase = "fault"
            note = scenario.inject(rig, round_)
            if note and note not in result.notes:
                result.notes.append(note)
            say(f"  round {round_ + 1}/{timing.rounds}: fault injected ({scenario.description})")
            time.sleep(max(timing.fault_s, scenario.hold_at_least_s))
            result.not_stored_during_fault += _during_fault_listing(rig, scenario, load, acknowledged, result)
            load.phase = "recovery"
            cleared_at = time.monotonic()
            scenario.clear(rig, round_)
            recovered = _wait_recovered(rig, cleared_at, timing.recover_within_s)
            if recovered is None:
                result.problems.append(f"round {round_ + 1}: not recovered within {timing.recover_within_s} s")
                break
            result.recover_s.append(round(recovered, 2))
            say(f"  round {round_ + 1}/{timing.rounds}: fault cleared, recovered in {recovered:.2f} s")
            load.phase = "after"
            time.sleep(timing.after_s)
    finally:
        outcomes = load.stop()
    _check_outcomes(rig, scenario, outcomes, result)
    _check_entries(rig, acknowledged, result)
    report = scan_logs(rig.log_paths(), rig.secrets.all())
    result.secrets_found = len(report.findings)
    result.problems += [f"secret in a log: {finding}" for finding in report.findings[:5]]
    result.fault_effect_shown = scenario.effect([o for o in outcomes if o.phase == "fault"], result)
    if not result.fault_effect_shown:
        result.problems.append(f"the fault showed no effect ({scenario.effect_shown}): the run proves nothing")
    return result


def _during_fault_listing(
    rig: Rig,
    scenario: Scenario,
    load: Load,
    acknowledged: dict[tuple[str, str, str], str],
    result: ScenarioResult,
) -> int:
    """List the entries while the fault lasts (they are acknowledged too); returns how many misses
    answered during the fault are not among them (their store failed)."""
    try:
        during = rig.list_entries(target=0)
    except httpx.HTTPStatusError as error:
        if not scenario.store_down:
            result.problems.append(f"admin listing failed during the fault: HTTP {error.response.status_code}")
        elif error.response.status_code != 503:
            result.problems.append(f"admin listing during the store outage: HTTP {error.response.status_code}")
        return 0
    acknowledged.update(_entry_map(during))
    stored = {(e["namespace"], e["prompt"]) for e in during}
    answered = {
        (o.namespace, o.prompt)
        for o in list(load.outcomes)
        if o.phase == "fault" and o.status == 200 and o.semcache == "miss" and o.failure is None
    }
    return len(answered - stored)


def _wait_recovered(rig: Rig, since: float, within_s: float) -> float | None:
    """Seconds from ``since`` until every replica answers a new question, stores it, and serves it
    as a hit (from the next replica, on a shared store); None if that did not happen in time."""
    pending = list(range(len(rig.targets)))
    while time.monotonic() - since < within_s:
        target = pending[0]
        ask = rig.corpus.probe("team-a")
        if _probe(rig, target, ask, (target + 1) % len(rig.targets)):
            pending.pop(0)
            if not pending:
                return time.monotonic() - since
        else:
            time.sleep(0.2)
    return None


def _probe(rig: Rig, target: int, ask: Ask, hit_target: int) -> bool:
    messages = ask.wire_messages()
    expected = ANSWER_PREFIX + ask.prompt
    try:
        first = rig.ask(target, ask.namespace, messages)
        if first.status_code != 200 or first.headers.get("x-semcache") != "miss":
            return False
        if first.json()["choices"][0]["message"]["content"] != expected:
            return False
        again = rig.ask(hit_target, ask.namespace, messages)
    except httpx.HTTPError:
        return False
    return (
        again.status_code == 200
        and again.headers.get("x-semcache") == "hit"
        and again.json()["choices"][0]["message"]["content"] == expected
    )


def _check_outcomes(rig: Rig, scenario: Scenario, outcomes: list[Outcome], result: ScenarioResult) -> None:
    during = [o for o in outcomes if o.phase == "fault"]
    result.requests_total = len(outcomes)
    result.requests_during_fault = len(during)
    result.outcomes_during_fault = dict(Counter(o.label for o in during).most_common())
    result.outcomes_after = dict(Counter(o.label for o in outcomes if o.phase == "after").most_common())
    result.slowest_s = round(max((o.seconds for o in outcomes), default=0.0), 2)
    result.client_timeouts = _count(outcomes, lambda o: o.failure == "timeout")
    full_answers = rig.corpus.full_answers()
    for outcome in outcomes:
        problem = _judge(outcome, scenario, full_answers)
        if problem is None:
            continue
        kind, text = problem
        if kind == "unexpected":
            result.unexpected_errors += 1
        elif kind == "shape":
            result.malformed_errors += 1
        elif kind == "retry-after":
            result.missing_retry_after += 1
        elif kind == "answer":
            result.bad_answers_served += 1
        if len(result.problems) < 12:
            result.problems.append(
                f"{outcome.phase} {outcome.label} ({outcome.client}, stream={outcome.stream}): {text}"
                + (f" [{outcome.detail}]" if outcome.detail else "")
            )
    if result.client_timeouts:
        result.problems.append(f"{result.client_timeouts} requests hung past {CLIENT_BOUND_S} s")


def _judge(outcome: Outcome, scenario: Scenario, full_answers: set[str]) -> tuple[str, str] | None:
    """What is wrong with one outcome, if anything: (kind, explanation)."""
    if outcome.failure == "timeout":
        return None  # counted apart
    faulty = outcome.during_fault
    if (
        outcome.status is None
        or outcome.failure in ("connection lost", "cut silently")
        or (outcome.failure or "").startswith("unreadable")
    ):
        if faulty and scenario.killed_target == outcome.target:
            return None  # the replica was killed under it
        return "unexpected", f"{outcome.failure}"
    if outcome.status != 200:
        if outcome.status == 401 and outcome.error_code == "invalid_api_key":
            return None if outcome.error_shape_ok else ("shape", "401 body not OpenAI-shaped")
        restarting = faulty and outcome.target == scenario.killed_target and outcome.error_code == "not_ready"
        if not (faulty and outcome.status in scenario.allowed_statuses) and not restarting:
            return "unexpected", f"status {outcome.status} not expected in this phase"
        if not outcome.error_shape_ok:
            return "shape", "error body not OpenAI-shaped"
        if outcome.status == 429 and not outcome.retry_after:
            return "retry-after", "429 without Retry-After"
        return None
    if outcome.failure == "in-band error":
        if not faulty or not scenario.allowed_statuses:
            return "unexpected", "in-band error outside a fault that cuts streams"
        return None if outcome.error_shape_ok else ("shape", "in-band error event not OpenAI-shaped")
    own = ANSWER_PREFIX + outcome.prompt
    if outcome.semcache == "hit" and outcome.tier != "exact":
        ok = outcome.answer in full_answers  # a semantic hit answers a similar question, in full
    else:
        ok = outcome.answer == own
    return None if ok else ("answer", f"served {outcome.answer!r:.80} for {outcome.prompt!r:.60}")


def _check_entries(rig: Rig, acknowledged: dict[tuple[str, str, str], str], result: ScenarioResult) -> None:
    """No partial answer cached; no acknowledged entry lost, and each still served as a hit."""
    final = rig.list_entries()
    result.entries_after = len(final)
    partial = [e for e in final if e["answer"] != ANSWER_PREFIX + e["prompt"]]
    result.partial_answers_cached = len(partial)
    for entry in partial[:3]:
        result.problems.append(f"cached partial answer {entry['answer']!r:.80} for {entry['prompt']!r:.60}")
    stored = _entry_map(final)
    lost = [key for key, answer in acknowledged.items() if stored.get(key) != answer]
    result.acknowledged, result.acknowledged_lost = len(acknowledged), len(lost)
    for key in lost[:3]:
        result.problems.append(f"acknowledged entry lost: {key[0]} {key[2]!r:.60}")
    keys = [key for key in acknowledged if key not in lost]
    sample = random.Random(len(keys)).sample(keys, min(len(keys), rig.timing.reask_max))
    for namespace, _scope, prompt in sample:
        messages = rig.corpus.messages_for(prompt)
        if messages is None:
            result.problems.append(f"entry for a prompt never sent: {prompt!r:.60}")
            continue
        for target in range(len(rig.targets)):
            result.reasked += 1
            response = rig.ask(target, namespace, messages)
            for _ in range(3):  # explored: answered from the upstream to learn, the entry kept; ask again
                if response.headers.get("x-semcache-explored") != "true":
                    break
                response = rig.ask(target, namespace, messages)
            served = response.json()["choices"][0]["message"]["content"] if response.status_code == 200 else None
            if response.headers.get("x-semcache") != "hit" or served != acknowledged[(namespace, _scope, prompt)]:
                result.reask_failures += 1
                if result.reask_failures <= 3:
                    result.problems.append(
                        f"acknowledged entry not served as a hit on replica {target}: {prompt!r:.60} "
                        f"(HTTP {response.status_code}, {response.headers.get('x-semcache')})"
                    )


# --------------------------------------------------------------------------
# The whole run
# --------------------------------------------------------------------------


@contextlib.contextmanager
def running(kind: Literal["embedded", "redis"], work_dir: Path, standin: Standin, secrets: Secrets,
            timing: Timing) -> Iterator[Rig]:  # fmt: skip
    rig = Rig(kind, work_dir / kind, standin, secrets, timing)
    try:
        yield rig.start()
    finally:
        rig.stop()


def run(names: list[str], timing: Timing, work_dir: Path, say: Callable[[str], None] = print) -> list[ScenarioResult]:
    """Run the named scenarios, grouped by the processes they need; returns one result per scenario."""
    table = scenarios()
    secrets = Secrets.fresh()
    results: list[ScenarioResult] = []
    standin = Standin(work_dir / "standin.log").start()
    try:
        for kind in ("embedded", "redis"):
            chosen = [table[name] for name in names if table[name].rig == kind]
            if not chosen:
                continue
            say(f"starting semcache ({kind} store)")
            with running(kind, work_dir, standin, secrets, timing) as rig:
                for scenario in chosen:
                    say(f"{scenario.name}: {scenario.description}")
                    result = run_scenario(rig, scenario, say=say)
                    verdict = "PASS" if result.passed else "FAIL: " + "; ".join(result.problems[:3])
                    say(f"  {result.requests_during_fault} requests during the fault, {verdict}")
                    results.append(result)
    finally:
        standin.stop()
    results.sort(key=lambda r: names.index(r.name))
    return results


def summary_markdown(results: list[ScenarioResult], timing: Timing, when: str) -> str:
    lines = [
        f"# Faults under load ({timing.mode} mode, {when})",
        "",
        f"{timing.clients} clients, fault held {timing.fault_s:.0f} s, {timing.rounds} round(s) per fault; semcache "
        f"upstream timeouts {FIRST_BYTE_TIMEOUT_S} s first byte / {TOTAL_TIMEOUT_S} s total, client bound "
        f"{CLIENT_BOUND_S} s.",
        "",
        "| fault | requests during fault | outcomes during fault | slowest request | partial answers cached "
        "| acknowledged entries lost | time to recover | secrets in logs | result |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        outcomes = ", ".join(f"{label}: {count}" for label, count in r.outcomes_during_fault.items())
        recover = " / ".join(f"{s:.1f} s" for s in r.recover_s) or "—"
        lines.append(
            f"| {r.name} | {r.requests_during_fault} | {outcomes} | {r.slowest_s:.2f} s | {r.partial_answers_cached} "
            f"| {r.acknowledged_lost} of {r.acknowledged} | {recover} | {r.secrets_found} "
            f"| {'pass' if r.passed else 'FAIL'} |"
        )
    lines.append("")
    for r in results:
        if r.notes or r.problems:
            lines.append(f"- **{r.name}**: " + "; ".join(r.notes + r.problems))
    return "\n".join(lines) + "\n"


def write_summary(results: list[ScenarioResult], timing: Timing, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    payload = {"mode": timing.mode, "timing": asdict(timing), "when": when, "client_bound_s": CLIENT_BOUND_S,
               "service_settings": SERVICE_ENV, "scenarios": [r.as_dict() for r in results]}  # fmt: skip
    (out / "summary.json").write_text(json.dumps(payload, indent=2))
    (out / "summary.md").write_text(summary_markdown(results, timing, when))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m reliability.faults", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scenarios", nargs="+", choices=SCENARIOS, default=list(SCENARIOS), metavar="NAME",
                        help=f"which faults to run (default: all): {', '.join(SCENARIOS)}")  # fmt: skip
    parser.add_argument("--mode", choices=("short", "full"), default="full" if full_mode() else "short")
    parser.add_argument("--out", type=Path, help="folder for summary.md and summary.json")
    args = parser.parse_args(argv)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or ROOT / "results" / f"faults-{stamp}"
    timing = Timing.for_mode(args.mode)
    # Keep the ONNX export of the embedding model between runs (benchmarks/results is not tracked).
    os.environ.setdefault("SEMCACHE_EMBEDDING_CACHE_DIR", str(ROOT / "results" / "embedding-exports"))
    with tempfile.TemporaryDirectory(prefix="semcache-faults-") as scratch:
        work_dir = Path(scratch)
        results = run(args.scenarios, timing, work_dir)
        write_summary(results, timing, out)
        shutil.copytree(work_dir, out / "logs", ignore=shutil.ignore_patterns("*.sqlite3*", "*.npz", "*.aof", "*.bin",
                        "appendonlydir", "models", "embedding-exports", "tiktoken"), dirs_exist_ok=True)  # fmt: skip
    print((out / "summary.md").read_text())
    print(f"written to {out}")
    return 0 if all(r.passed for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
