"""Locust users that speak the OpenAI chat API to semcache, one tenant (API key) per user.

Run it through ``python -m reliability.load``, which builds the workload, starts the servers and
reads the results. By hand, against a running semcache that uses the workload's API keys::

    SEMCACHE_LOAD_WORKLOAD=workload.json SEMCACHE_LOAD_REQUESTS=requests.csv \\
        locust -f reliability/load/locustfile.py --headless --host http://127.0.0.1:8080 -u 8 -r 4 -t 60s

Each request is named in Locust's statistics by its outcome, read from the ``X-Semcache`` and
``X-Semcache-Tier`` headers (``exact``, ``semantic``, ``template``, ``miss``, ``bypass``; ``error``
for anything but a 200), with ``POST`` or ``STREAM`` as its type, so the report has p50/p99 per
outcome. A 200 counts as a failure too when the answer is wrong for its outcome (a miss must carry
the upstream's answer to this prompt, an exact hit an answer to the same normalised prompt) or a
stream ends without ``finish_reason`` and ``data: [DONE]``. Every request is also written to the
CSV named by ``SEMCACHE_LOAD_REQUESTS``, with what the traffic meant by it, for the report.

Locust monkey-patches the standard library with gevent: this file runs only in its own process.
"""

from __future__ import annotations

import csv
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit

from geventhttpclient import HTTPClient
from locust import User, between, events, task
from locust.env import Environment

from reliability.load.traffic import ChatRequest, Tenant, Traffic, Workload
from semcache import normalize

CHAT_PATH = "/v1/chat/completions"
ANSWER_PREFIX = "Answer to: "  # what the stand-in upstream answers
REQUEST_TIMEOUT_S = 30.0  # a hang becomes an error here, never a stuck user
REQUEST_LOG_FIELDS = (
    "time", "namespace", "kind", "intent", "stream", "outcome", "coalesced", "status", "latency_ms", "ttfb_ms", "ok",
    "error",
)  # fmt: skip


class AnswerError(Exception):
    """A 200 whose answer or stream is not what its outcome promises."""


@dataclass
class Result:
    outcome: str
    status: int
    latency_ms: float
    ttfb_ms: float | None = None
    length: int = 0
    error: Exception | None = None
    coalesced: bool = False  # served another request's upstream answer: a hit that waited like a miss


class _Run:
    """The workload and the request log, loaded once per locust process."""

    traffic: Traffic
    log_file: TextIO | None = None
    log: Any = None  # csv.writer


@events.init.add_listener
def _load_workload(environment: Environment, **_: Any) -> None:
    workload_path = os.environ.get("SEMCACHE_LOAD_WORKLOAD")
    if not workload_path:
        raise SystemExit("set SEMCACHE_LOAD_WORKLOAD to the workload.json that python -m reliability.load writes")
    _Run.traffic = Traffic(Workload.from_json(Path(workload_path).read_text(encoding="utf-8")))
    log_path = os.environ.get("SEMCACHE_LOAD_REQUESTS")
    if log_path:
        _Run.log_file = open(log_path, "w", newline="", encoding="utf-8")  # noqa: SIM115 - closed on quit
        _Run.log = csv.writer(_Run.log_file)
        _Run.log.writerow(REQUEST_LOG_FIELDS)


@events.quitting.add_listener
def _close_log(**_: Any) -> None:
    if _Run.log_file is not None:
        _Run.log_file.close()
        _Run.log_file = None


class ChatUser(User):
    """One client application: a tenant's API key, a keep-alive connection, a short think time."""

    wait_time = between(0.0, 0.1)

    def on_start(self) -> None:
        self.tenant: Tenant = _Run.traffic.pick_tenant()
        url = urlsplit(self.host)
        self.http = HTTPClient(
            str(url.hostname or "127.0.0.1"),
            url.port or 80,
            connection_timeout=5.0,
            network_timeout=REQUEST_TIMEOUT_S,
            concurrency=1,
        )

    def on_stop(self) -> None:
        self.http.close()

    @task
    def chat(self) -> None:
        request = _Run.traffic.next_request(self.tenant)
        result = send(self.http, request, self.tenant.api_key)
        self.environment.events.request.fire(
            request_type="STREAM" if request.stream else "POST",
            name=result.outcome,
            response_time=result.latency_ms,
            response_length=result.length,
            exception=result.error,
            context={"namespace": request.namespace, "intent": request.intent},
        )
        _log_request(request, result)


def send(http: HTTPClient, request: ChatRequest, api_key: str) -> Result:
    """Send one chat request and check its answer; every failure is returned, never raised."""
    headers = {
        "Authorization": f"Bearer {api_key}",
        "Content-Type": "application/json",
        "Accept": "text/event-stream" if request.stream else "application/json",
    }
    started = time.perf_counter()
    outcome, status, ttfb_ms, length, coalesced = "error", 0, None, 0, False
    try:
        response = http.request("POST", CHAT_PATH, body=json.dumps(request.body).encode(), headers=headers)
        status = response.status_code
        if status != 200:
            body = response.read()
            raise AnswerError(f"HTTP {status}: {_error_code(body)}")
        outcome = _outcome(response)
        coalesced = response.get("x-semcache-coalesced") == "true"
        if request.stream:
            content, ttfb_ms, length = _read_stream(response, started)
        else:
            body = response.read()
            length = len(body)
            content = json.loads(body)["choices"][0]["message"]["content"]
        _check_answer(outcome, request.last_user_message, content)
    except Exception as exc:  # any failure of any kind is an error of the run, reported by kind
        return Result(outcome, status, _ms_since(started), ttfb_ms, length, exc, coalesced)
    return Result(outcome, status, _ms_since(started), ttfb_ms, length, coalesced=coalesced)


def _outcome(response: Any) -> str:
    tier = response.get("x-semcache-tier")
    outcome = tier or response.get("x-semcache")
    if not outcome:
        raise AnswerError("a 200 without an X-Semcache header")
    return str(outcome)


def _read_stream(response: Any, started: float) -> tuple[str, float | None, int]:
    """The streamed text, the time to its first content, and the bytes read; the stream must end
    with a finish reason and ``[DONE]``."""
    pieces: list[str] = []
    ttfb_ms: float | None = None
    finish_reason, length = None, 0
    while line := response.readline(b"\n"):
        length += len(line)
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            response.read()  # the end of the chunked body, so that the connection can be reused
            if finish_reason is None:
                raise AnswerError("stream ended without a finish_reason")
            return "".join(pieces), ttfb_ms, length
        event = json.loads(data)
        if "error" in event:
            raise AnswerError(f"in-band stream error: {event['error'].get('code')}")
        for choice in event.get("choices") or ():
            content = (choice.get("delta") or {}).get("content")
            if content:
                ttfb_ms = ttfb_ms if ttfb_ms is not None else _ms_since(started)
                pieces.append(content)
            finish_reason = choice.get("finish_reason") or finish_reason
    raise AnswerError("stream ended without data: [DONE]")


def _check_answer(outcome: str, prompt: str, content: Any) -> None:
    if not isinstance(content, str) or not content:
        raise AnswerError(f"empty answer on a {outcome}")
    if outcome in ("miss", "bypass") and content != ANSWER_PREFIX + prompt:
        raise AnswerError(f"a {outcome} without the upstream's answer to this prompt")
    if outcome == "exact" and normalize(content.removeprefix(ANSWER_PREFIX)) != normalize(prompt):
        raise AnswerError("an exact hit answering another prompt")


def _error_code(body: bytes) -> str:
    try:
        return str(json.loads(body)["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return "no OpenAI error body"


def _ms_since(started: float) -> float:
    return (time.perf_counter() - started) * 1000


def _log_request(request: ChatRequest, result: Result) -> None:
    if _Run.log is None:
        return
    error = "" if result.error is None else f"{type(result.error).__name__}: {result.error}"[:200]
    ttfb = "" if result.ttfb_ms is None else f"{result.ttfb_ms:.2f}"
    _Run.log.writerow(
        (
            f"{time.time():.3f}", request.namespace, request.kind, request.intent, int(request.stream),
            result.outcome, int(result.coalesced), result.status, f"{result.latency_ms:.2f}", ttfb,
            int(result.error is None), error,
        )
    )  # fmt: skip
