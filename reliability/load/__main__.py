"""``python -m reliability.load``: load and soak semcache with Locust, then judge the run.

Examples:

    python -m reliability.load                                   # 60 s, 8 users, ../shared/data if present
    python -m reliability.load --duration 30m --users 16         # the soak: memory must stay flat
    python -m reliability.load --duration 20s --users 8 --max-entries 100 --out /tmp/load

It starts the stand-in upstream (300-800 ms before the first byte, fixed per prompt, then 20 ms
between streamed pieces) and ``semcache serve`` as processes of their own, with JSON logs, an API
keys file (four tenants, each its own key and namespace), a templates file, an admin key and an
upstream key, in a fresh data folder. Locust runs headless as a third process (it monkey-patches
the standard library with gevent) with the users of ``reliability/load/locustfile.py``: 70% short
questions and 30% long multi-turn conversations, with exact repeats, rewordings, a few template
and bypass requests, 40% streamed (see ``reliability/load/traffic.py``). Meanwhile semcache's RSS
(``/proc/PID/status``) is sampled with its request and entry counts from ``GET /stats``, and a
progress line is printed every ``--progress-every`` seconds.

The results go to ``benchmarks/results/load-<UTC timestamp>/`` (``--out``): ``summary.json``,
``summary.md``, ``memory.png``, ``latency.png``, ``requests.csv`` (every request: outcome, latency,
what the traffic meant), ``memory.csv``, Locust's own CSVs, and ``logs/`` (semcache's, the
stand-in's and Locust's output).

The run fails (exit code 1) when:

- more than ``--max-error-rate`` (0.1%) of requests fail: a status other than 200, a stream without
  ``[DONE]``, or a wrong answer (a miss must carry the upstream's answer to this very prompt, an
  exact hit an answer to the same normalised prompt); the CI test demands none at all;
- semcache's memory grows with requests once warm (below);
- the secret scan of every log written finds a client API key, the admin key, the upstream key, an
  ``Authorization`` value, a Bearer token or an ``sk-...`` key, or has no line to read;
- semcache or Locust dies.

How memory is judged. A cache is meant to grow: every miss stores an entry (the prompt, the answer,
a 384-float vector, index bookkeeping: a few KiB). "Flat" can therefore only mean: no growth per
*request* beyond what the stored entries explain. The run sets the size bound (``--max-entries``,
1,000 by default) so that the store fills during warm-up; from then on the least recently used
entries are evicted as fast as misses add new ones, the entry count stays level, and requests of
every kind (hits on repeats, misses that replace an entry, streams) should leave RSS level too.
Warm-up ends at the first sample after something was evicted and ``--warmup`` has passed (10% of
the run, at least 5 s). The growth is the least-squares slope of RSS against the number of requests
served, over the samples after warm-up. The cost of an entry is measured separately, as the slope
of RSS against the entry count while the store filled, and reported (``rss_bytes_per_entry_while_filling``).

The bound is 1 MiB per 1,000 requests (about 1 KiB per request), and the fitted growth after
warm-up must also exceed a 16 MiB noise floor before it fails a run: allocator arenas and the
interpreter's free lists move RSS by a few MiB either way. Memory is judged only over at least
2,000 requests after warm-up (``--min-judged-requests``); a shorter run reports its figures as
"not judged", because its RSS still rises in steps as ONNX Runtime's arenas grow to the longest
input seen so far and thread pools start (a 20-second run showed steps of 8 and 27 MiB).

Why 1 KiB: semcache keeps one bounded record per response served from the cache so that feedback
can name it (``ServedHits``: the 100,000 most recent, with the query's vector for semantic hits:
about 0.3 KiB per exact hit, 2 KiB per semantic hit), which legitimately grows by a few hundred
bytes per request on this mix until it is full; a leak that keeps anything the size of a request
or response body (1-4 KiB here) per request exceeds the bound. Over the 30-minute soak the noise
floor is far below what the bound allows, so the slope alone decides.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from semcache.testing.uvicorn_thread import free_port
from testkit.plots import pyplot
from testkit.secrets_scan import scan_logs
from testkit.servers import SemcacheProcess, stop_process, wait_for_standin

from .report import (
    MIB,
    MemoryBounds,
    MemorySample,
    errors_summary,
    latency_by_outcome,
    memory_analysis,
    outcomes_by_intent,
    plot_latency,
    plot_memory,
    read_requests,
    summary_markdown,
    throughput,
)
from .traffic import Workload, api_keys_file_content, build_workload, templates_file_content

ROOT = Path(__file__).resolve().parents[2]
LOCUSTFILE = Path(__file__).with_name("locustfile.py")
DEFAULT_DATA = ROOT.parent / "shared" / "data"
# The ONNX export of the embedding model takes a minute: keep it where `python -m benchmarks` keeps it.
ONNX_EXPORTS = ROOT / "benchmarks" / "results" / ".models"
UPSTREAM_LATENCY_S = 0.3  # before the first byte; plus up to UPSTREAM_JITTER_S more, fixed per prompt
UPSTREAM_JITTER_S = 0.5
UPSTREAM_CHUNK_DELAY_S = 0.02  # between streamed pieces, as a model generates them
LOCUST_STOP_TIMEOUT_S = 30  # requests in flight when time is up may finish
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smh]?)$")


@dataclass(frozen=True)
class Options:
    duration_s: float
    users: int
    spawn_rate: float
    out: Path
    data: Path | None
    max_entries: int
    log_level: str
    warmup_s: float
    sample_interval_s: float
    progress_every_s: float
    max_error_rate: float
    memory: MemoryBounds


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``30m`` or ``1h``, in seconds."""
    match = _DURATION.match(text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (use 60s, 30m or 1h)")
    value, unit = float(match.group(1)), match.group(2) or "s"
    return value * {"s": 1, "m": 60, "h": 3600}[unit]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m reliability.load", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=parse_duration, default=60.0, help="how long Locust sends: 60s, 30m, 1h")
    parser.add_argument("--users", type=int, default=8, help="concurrent simulated clients")
    parser.add_argument("--spawn-rate", type=float, default=4.0, help="users started per second")
    parser.add_argument("--out", type=Path, help="results folder (default benchmarks/results/load-<timestamp>)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the labelled data folder (QQP files)")
    parser.add_argument("--max-entries", type=int, default=1_000, help="semcache's size bound (fills in warm-up)")
    parser.add_argument("--log-level", default="info", help="semcache's log level (debug logs upstream headers)")
    parser.add_argument("--warmup", type=parse_duration, help="shortest warm-up (default 10%% of the run, >= 5s)")
    parser.add_argument("--sample-interval", type=float, help="seconds between memory samples (default 1 or 5)")
    parser.add_argument("--progress-every", type=float, help="seconds between progress lines (default 10 or 30)")
    parser.add_argument("--max-error-rate", type=float, default=0.001, help="failed share that fails the run")
    parser.add_argument(
        "--max-growth-mib-per-1k", type=float, default=1.0, help="RSS growth per 1,000 requests after warm-up"
    )
    parser.add_argument("--noise-floor-mib", type=float, default=16.0, help="growth below this never fails a run")
    parser.add_argument(
        "--min-judged-requests", type=int, default=2_000, help="requests after warm-up needed to judge memory"
    )
    return parser


def options_from(args: argparse.Namespace) -> Options:
    long_run = args.duration > 120
    warmup = args.warmup if args.warmup is not None else max(5.0, args.duration * 0.1)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return Options(
        duration_s=args.duration,
        users=args.users,
        spawn_rate=args.spawn_rate,
        out=args.out or ROOT / "benchmarks" / "results" / f"load-{stamp}",
        data=args.data if args.data and args.data.is_dir() else None,
        max_entries=args.max_entries,
        log_level=args.log_level,
        warmup_s=warmup,
        sample_interval_s=args.sample_interval or (5.0 if long_run else 1.0),
        progress_every_s=args.progress_every or (30.0 if long_run else 10.0),
        max_error_rate=args.max_error_rate,
        memory=MemoryBounds(
            max_growth_bytes_per_1k_requests=args.max_growth_mib_per_1k * MIB,
            noise_floor_bytes=args.noise_floor_mib * MIB,
            min_warmup_s=warmup,
            min_requests_judged=args.min_judged_requests,
        ),
    )


@dataclass(frozen=True)
class Secrets:
    """Every secret the run configures: none may reach a log."""

    client_keys: list[str]
    admin_key: str
    upstream_key: str

    def all(self) -> list[str]:
        return [*self.client_keys, self.admin_key, self.upstream_key]


class MemorySampler:
    """Samples semcache's RSS and counters in a thread, and prints progress now and then. Every few
    samples it also reads ``/admin/decisions`` with the admin key, so that key travels under load."""

    def __init__(self, semcache: SemcacheProcess, admin_key: str, options: Options) -> None:
        assert semcache.process is not None
        self.pid = semcache.process.pid
        self.url = semcache.url
        self.admin_key = admin_key
        self.options = options
        self.samples: list[MemorySample] = []
        self.errors_seen = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-sampler", daemon=True)
        self._started = 0.0

    def start(self) -> MemorySampler:
        self._started = time.monotonic()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        next_progress = self.options.progress_every_s
        # With client API keys configured, /stats needs the admin key (or a metrics key) too.
        admin = {"Authorization": f"Bearer {self.admin_key}"}
        with httpx.Client(base_url=self.url, headers=admin, timeout=10) as client:
            while True:
                self._sample(client)
                elapsed = time.monotonic() - self._started
                if elapsed >= next_progress:
                    self._print_progress(elapsed)
                    next_progress += self.options.progress_every_s
                if self._stop.wait(self.options.sample_interval_s):
                    self._sample(client)
                    return

    def _sample(self, client: httpx.Client) -> None:
        rss = read_rss_bytes(self.pid)
        try:
            stats = client.get("/stats").json()
            if len(self.samples) % 10 == 0:
                client.get("/admin/decisions?limit=3")
        except (httpx.HTTPError, ValueError):
            return  # a busy moment; the next sample will do
        if rss is None:
            return
        self.errors_seen = int(stats.get("errors", 0))
        index = stats.get("index") or {}
        self.samples.append(
            MemorySample(
                elapsed_s=round(time.monotonic() - self._started, 2),
                rss_bytes=rss,
                requests=int(stats.get("requests", 0)),
                entries=int(stats.get("entries", 0)),
                evicted=int(stats.get("evicted", 0)),
                tombstones=int(index.get("tombstones", 0)),
            )
        )

    def _print_progress(self, elapsed_s: float) -> None:
        if not self.samples:
            return
        last = self.samples[-1]
        rate = last.requests / elapsed_s if elapsed_s else 0.0
        print(
            f"[{_clock(elapsed_s)} / {_clock(self.options.duration_s)}] {last.requests:,} requests ({rate:.1f}/s), "
            f"{last.entries:,} entries ({last.evicted:,} evicted), RSS {last.rss_bytes / MIB:.1f} MiB, "
            f"semcache errors {self.errors_seen}",
            flush=True,
        )


def read_rss_bytes(pid: int) -> int | None:
    """VmRSS of a process from ``/proc``, or None once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    match = re.search(r"^VmRSS:\s+(\d+)\s+kB", status, re.MULTILINE)
    return int(match.group(1)) * 1024 if match else None


def _clock(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"


def run(options: Options) -> dict[str, Any]:
    """Run the load test and write its results; the summary's ``verdict`` is "pass" or "fail"."""
    out = options.out
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    workload = build_workload(options.data)
    keys = Secrets(
        client_keys=[tenant.api_key for tenant in workload.tenants],
        admin_key=f"sk-admin-{secrets.token_hex(16)}",
        upstream_key=f"sk-upstream-{secrets.token_hex(16)}",
    )
    failures: list[str] = []
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    with ExitStack() as stack:
        config = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="semcache-load-")))
        standin_url = stack.enter_context(StandinProcess(logs / "standin.log"))
        semcache = _semcache(options, workload, keys, config, standin_url, logs / "semcache.log")
        stack.callback(semcache.stop)
        print(f"semcache at {semcache.url}, upstream stand-in at {standin_url}; results in {out}", flush=True)
        sampler = MemorySampler(semcache, keys.admin_key, options).start()
        locust_code = _run_locust(options, semcache.url, workload, config / "workload.json", out)
        sampler.stop()
        if semcache.process is None or semcache.process.poll() is not None:
            failures.append("semcache died during the run")
    if locust_code != 0:
        failures.append(f"locust exited with code {locust_code}")
    # Everything written so far: the three logs, and Locust's CSVs and request log (error texts).
    scan = scan_logs([out], keys.all())
    return _summarise(options, workload, sampler.samples, scan.as_dict(), started, standin_url, semcache, failures)


class StandinProcess:
    """The stand-in upstream as a process, its output in ``log_path``; yields its OpenAI base URL."""

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> str:
        port = free_port()
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "semcache.testing.standin_upstream", "--port", str(port),
                 "--latency-s", str(UPSTREAM_LATENCY_S), "--latency-jitter-s", str(UPSTREAM_JITTER_S),
                 "--log-level", "info"],
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        root = f"http://127.0.0.1:{port}"
        wait_for_standin(f"{root}/v1/models", self.process)
        # A fault without a status only paces the stream: every answer, from now on.
        httpx.post(f"{root}/_control", json={"chunk_delay_s": UPSTREAM_CHUNK_DELAY_S}, timeout=5).raise_for_status()
        return f"{root}/v1"

    def __exit__(self, *exc_info: object) -> None:
        stop_process(self.process, timeout_s=10)


def _semcache(
    options: Options, workload: Workload, keys: Secrets, config: Path, upstream_url: str, log_path: Path
) -> SemcacheProcess:
    (config / "workload.json").write_text(workload.to_json(), encoding="utf-8")
    (config / "api-keys.json").write_text(json.dumps(api_keys_file_content(workload)), encoding="utf-8")
    (config / "templates.yaml").write_text(yaml.safe_dump(templates_file_content()), encoding="utf-8")
    (config / "data").mkdir()
    return SemcacheProcess(
        *semcache_args(options, config),
        data_dir=config / "data",
        upstream_url=upstream_url,
        env={
            "SEMCACHE_ADMIN_KEY": keys.admin_key,
            "SEMCACHE_UPSTREAM_API_KEY": keys.upstream_key,
            # Evict and snapshot often enough that a short run exercises both.
            "SEMCACHE_SWEEP_INTERVAL_S": "2",
            "SEMCACHE_SNAPSHOT_INTERVAL_S": "60",
            "HF_HUB_OFFLINE": "1",
            "SEMCACHE_EMBEDDING_CACHE_DIR": os.environ.get("SEMCACHE_EMBEDDING_CACHE_DIR", str(ONNX_EXPORTS)),
        },
        log_path=log_path,
    ).start()


def semcache_args(options: Options, config: Path) -> list[str]:
    return [
        "--log-format", "json", "--log-level", options.log_level, "--max-entries", str(options.max_entries),
        "--api-keys", str(config / "api-keys.json"), "--templates", str(config / "templates.yaml"),
    ]  # fmt: skip


def _run_locust(options: Options, url: str, workload: Workload, workload_path: Path, out: Path) -> int:
    command = [
        str(Path(sys.executable).with_name("locust")), "-f", str(LOCUSTFILE), "--headless", "--host", url,
        "--users", str(options.users), "--spawn-rate", str(options.spawn_rate),
        "--run-time", f"{int(options.duration_s)}s", "--stop-timeout", str(LOCUST_STOP_TIMEOUT_S),
        "--csv", str(out / "locust"), "--only-summary", "--exit-code-on-error", "0",
    ]  # fmt: skip
    env = {
        **os.environ,
        "SEMCACHE_LOAD_WORKLOAD": str(workload_path),
        "SEMCACHE_LOAD_REQUESTS": str(out / "requests.csv"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    print(f"locust: {options.users} users for {int(options.duration_s)} s ({workload.source})", flush=True)
    with (out / "logs" / "locust.log").open("ab") as log:
        try:
            done = subprocess.run(
                command,
                env=env,
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=options.duration_s + LOCUST_STOP_TIMEOUT_S + 120,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return -1
    return done.returncode


def _summarise(
    options: Options,
    workload: Workload,
    samples: list[MemorySample],
    scan: dict[str, Any],
    started: str,
    upstream: str,
    semcache: SemcacheProcess,
    failures: list[str],
) -> dict[str, Any]:
    out = options.out
    requests_csv = out / "requests.csv"
    rows = read_requests(requests_csv) if requests_csv.is_file() else []
    errors = errors_summary(rows)
    memory = memory_analysis(samples, options.memory)
    if not rows:
        failures.append("no request was sent")
    elif errors["error_rate"] > options.max_error_rate:
        failures.append(f"error rate {errors['error_rate']} above {options.max_error_rate}")
    if memory["verdict"] == "fail":
        failures.append(f"memory: {memory['reason']}")
    if scan["findings"]:
        failures.append(f"secret scan: {len(scan['findings'])} findings")
    if not scan["lines_scanned"]:
        failures.append("secret scan: no log line to read")
    summary: dict[str, Any] = {
        "verdict": "fail" if failures else "pass",
        "failures": failures,
        "run": {
            "started": started,
            "duration": f"{int(options.duration_s)} s",
            "users": options.users,
            "question_source": workload.source,
            "mix": asdict(workload.mix),
            "namespaces": [t.namespace for t in workload.tenants],
            "upstream": f"{UPSTREAM_LATENCY_S * 1000:.0f}-{(UPSTREAM_LATENCY_S + UPSTREAM_JITTER_S) * 1000:.0f} ms "
            f"to the first byte, {UPSTREAM_CHUNK_DELAY_S * 1000:.0f} ms between streamed pieces ({upstream})",
            "semcache_args": [a for a in semcache.args if not a.startswith(("/", "http"))],
            "cpu_count": os.cpu_count(),
            "load_average_at_end": [round(v, 2) for v in os.getloadavg()],
        },
        "bounds": {"max_error_rate": options.max_error_rate, "memory": asdict(options.memory)},
        "throughput": throughput(rows),
        "errors": errors,
        "latency_by_outcome": latency_by_outcome(rows),
        "outcomes_by_intent": outcomes_by_intent(rows),
        "memory": memory,
        "secret_scan": scan,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    (out / "summary.md").write_text(summary_markdown(summary), encoding="utf-8")
    _write_memory_csv(samples, out / "memory.csv")
    plt = pyplot()
    if plt is not None and samples:
        plot_memory(samples, memory.get("warmup_s"), out / "memory.png", plt)
    if plt is not None and rows:
        plot_latency(rows, out / "latency.png", plt)
    return summary


def _write_memory_csv(samples: list[MemorySample], path: Path) -> None:
    lines = ["elapsed_s,rss_bytes,requests,entries,evicted,tombstones"]
    lines += [f"{s.elapsed_s},{s.rss_bytes},{s.requests},{s.entries},{s.evicted},{s.tombstones}" for s in samples]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    options = options_from(build_parser().parse_args(argv))
    summary = run(options)
    print(summary_markdown(summary), flush=True)
    print(f"results in {options.out}", flush=True)
    return 0 if summary["verdict"] == "pass" else 1


if __name__ == "__main__":
    sys.exit(main())
