"""Every benchmark in one run, behind ``python -m benchmarks run``: the embedder floor, semcache over
HTTP at several concurrencies, the same workload through GPTCache and LiteLLM's proxy, and the
vector index at growing sizes. Results go to ``results.json`` (figures), ``samples.json`` (every
latency, for plots) and ``summary.md`` (targets with PASS/MISS, tables, the plot), rewritten after
each part so an interrupted run keeps what it measured.

A part that cannot run here (a throwaway venv not built in quick mode, a failed install) is
recorded with the reason, in the JSON and in the summary; nothing is estimated in its place.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
from rich.progress import Progress

from testkit.servers import SemcacheProcess, standin_process

from . import hit_quality_http, hit_steps, report
from .gptcache_speed import measure as measure_gptcache
from .http_load import (
    HttpClient,
    OutcomeOf,
    PhaseResult,
    Workload,
    client_pool,
    direct_outcome,
    fill,
    paired_added_ms,
    run_phase,
    semcache_outcome,
)
from .litellm_proxy import (
    LITELLM_VENV,
    SEMANTIC_UNAVAILABLE,
    CacheType,
    built_litellm_venv,
    ensure_litellm_venv,
    litellm_outcome,
    litellm_proxy,
)
from .quality_vs_gptcache import (
    GPTCACHE_VENV,
    BenchmarkError,
    built_gptcache_venv,
    ensure_gptcache_venv,
    progress_bar,
    stderr,
)

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("embedder", "http", "lag", "gptcache", "litellm", "index", "start", "hit_quality")
# Parts that run only when named (--only or --with): they take long (building a 1M-entry folder
# takes minutes of both cores), or measure hit quality, not speed.
OPT_IN_PARTS = ("start", "hit_quality")
RESULT_KEYS = {"http": "semcache"}  # where a part's results go, when not under its own name
ONNX_EXPORTS = ROOT / "benchmarks" / "results" / ".models"
SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD")  # environment values never written to the results
Samples = dict[str, dict[str, dict[str, list[float]]]]  # system -> clients -> phase -> latencies (ms)


@dataclass
class Options:
    """What one run measures. ``quick`` only changes the defaults the command line starts from."""

    out: Path
    quick: bool = False
    concurrency: list[int] = field(default_factory=lambda: [1, 8, 64])
    requests: int = 600  # hit requests per phase and concurrency level
    miss_requests: int = 40  # miss requests per concurrency level
    per_client: int = 4  # at least this many requests per client in every phase
    upstream_delay_ms: tuple[float, float] = (300.0, 800.0)  # first byte, spread per prompt
    index_sizes: list[int] = field(default_factory=lambda: [10_000, 100_000, 1_000_000])
    index_queries: int = 500
    index_threads: int = 0  # FAISS threads for building; 0: every core
    embed_rounds: int = 3
    lag_seconds: float = 20.0  # the mixed load /healthz is polled under
    start_entries: int = 1_000_000  # entries in the data folder the start is timed on
    starts: int = 3  # timed starts, after one untimed
    skip: set[str] = field(default_factory=set)
    chosen: set[str] = field(default_factory=set)  # of OPT_IN_PARTS, the ones asked for
    hit_quality_limit: int | None = hit_quality_http.DEFAULT_LIMIT  # requests per trace; None: whole traces
    build_venvs: bool = True  # False: use the GPTCache/LiteLLM venvs only if they are already built
    litellm_cache: CacheType = "local"
    semcache_env: dict[str, str] = field(default_factory=dict)
    command: str = ""

    @classmethod
    def quick_defaults(cls, out: Path) -> Options:
        return cls(
            out,
            quick=True,
            requests=16,
            miss_requests=16,
            per_client=1,
            upstream_delay_ms=(10.0, 30.0),
            index_sizes=[2_000],
            index_queries=100,
            embed_rounds=1,
            hit_quality_limit=40,
            lag_seconds=3.0,
            start_entries=2_000,
            starts=1,
            build_venvs=False,
        )

    def mode(self) -> str:
        """``quick``, ``full`` (every default, every part) or ``custom``."""
        if self.quick:
            return "quick"
        measured = (
            "concurrency",
            "requests",
            "miss_requests",
            "per_client",
            "upstream_delay_ms",
            "index_sizes",
            "lag_seconds",
            "start_entries",
        )
        defaults = Options(self.out)
        same = all(getattr(self, name) == getattr(defaults, name) for name in measured)
        return "full" if same and not self.skip else "custom"

    def hit_requests(self, clients: int) -> int:
        return max(self.requests, self.per_client * clients)

    def misses(self, clients: int) -> int:
        return max(self.miss_requests, self.per_client * clients)


@dataclass
class Run:
    """The results so far, written out after every part."""

    options: Options
    results: dict[str, Any] = field(default_factory=dict)
    samples: Samples = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def save(self) -> None:
        self.results["notes"] = self.notes
        self.results["targets"] = report.targets(self.results)
        self.results["ratios"] = report.ratios(self.results)
        out = self.options.out
        (out / "results.json").write_text(json.dumps(self.results, indent=2) + "\n")
        (out / "samples.json").write_text(json.dumps(self.samples) + "\n")
        (out / "summary.md").write_text(report.markdown(self.results))

    def note(self, text: str) -> None:
        stderr.print(f"[yellow]note:[/yellow] {text}")
        self.notes.append(text)


def run(options: Options) -> dict[str, Any]:
    """Measure every part not in ``options.skip``; returns the results also written to ``options.out``."""
    options.out.mkdir(parents=True, exist_ok=True)
    if "SEMCACHE_EMBEDDING_CACHE_DIR" not in os.environ:
        # One ONNX export for the embedder floor, semcache and later runs (the export is not measured).
        options.semcache_env.setdefault("SEMCACHE_EMBEDDING_CACHE_DIR", str(ONNX_EXPORTS))
    state = Run(options)
    state.results["meta"] = meta(options)
    workload = Workload.default()
    parts: list[tuple[str, Callable[[Run, Workload, Progress], None]]] = [
        ("embedder", part_embedder),
        ("http", part_http),
        ("lag", part_lag),
        ("gptcache", part_gptcache),
        ("litellm", part_litellm),
        ("index", part_index),
        ("start", part_start),
        ("hit_quality", part_hit_quality),
    ]
    with progress_bar() as progress:
        for name, part in parts:
            key = RESULT_KEYS.get(name, name)
            if name in OPT_IN_PARTS and name not in options.chosen:
                continue
            if name in options.skip:
                state.results[key] = {"skipped": "--skip " + name}
                continue
            started = time.monotonic()
            try:
                part(state, workload, progress)
            except (BenchmarkError, OSError, RuntimeError, httpx.HTTPError, ValueError) as exc:
                state.results[key] = {"error": f"{type(exc).__name__}: {exc}"}
                state.note(f"{name} failed: {exc}")
            if isinstance(state.results.get(key), dict):
                state.results[key]["part_seconds"] = round(time.monotonic() - started, 1)
            state.save()
    state.results["meta"]["finished"] = _now()
    state.results["meta"]["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    if (plot := report.plot(state.samples, options.out / "latency.png")) is not None:
        state.results["meta"]["plot"] = plot.name
    state.save()
    return state.results


def meta(options: Options) -> dict[str, Any]:
    described = asdict(options)
    described["out"] = str(options.out)
    described["skip"] = sorted(options.skip)
    described["chosen"] = sorted(options.chosen)
    described["semcache_env"] = {
        name: "<redacted>" if any(word in name for word in SECRET_WORDS) else value
        for name, value in options.semcache_env.items()
    }
    low, high = options.upstream_delay_ms
    return {
        "command": options.command,
        "mode": options.mode(),
        "started": _now(),
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "commit": _commit(),
        "load_average_before": [round(x, 2) for x in os.getloadavg()],
        "upstream": f"stand-in upstream, {low:g}–{high:g} ms before the first byte (fixed per prompt)",
        "options": described,
    }


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _commit() -> str | None:
    try:
        done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    except OSError:
        return None
    return done.stdout.strip() or None


# --- the embedder floor -------------------------------------------------------------------------


def part_embedder(state: Run, workload: Workload, progress: Progress) -> None:
    """In its own process, with semcache's environment, before anything else runs."""
    task = progress.add_task("embedder floor: one prompt, then batches", total=None)
    env = {**os.environ, **state.options.semcache_env}
    command = [sys.executable, "-m", "benchmarks.embedder_floor", "--rounds", str(state.options.embed_rounds)]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    progress.remove_task(task)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-10:])
        raise BenchmarkError(f"benchmarks.embedder_floor exited with {done.returncode}:\n{tail}")
    state.results["embedder"] = json.loads(done.stdout.strip().splitlines()[-1])


# --- semcache over HTTP -------------------------------------------------------------------------


def part_http(state: Run, workload: Workload, progress: Progress) -> None:
    options = state.options
    low, high = options.upstream_delay_ms
    with (
        standin_process(low / 1000, (high - low) / 1000) as upstream_url,
        tempfile.TemporaryDirectory(prefix="semcache-bench-") as data,
    ):
        task = progress.add_task("semcache: starting", total=None)
        service = SemcacheProcess(
            data_dir=Path(data),
            upstream_url=upstream_url,
            # The speed parts time the hit path: exploring (a few hits answered from the upstream, to
            # learn) is a cost in hits, which the hit-quality part reports, not a step of the path.
            env={"SEMCACHE_EXPLORE_SHARE": "0", **options.semcache_env},
            log_path=options.out / "semcache.log",
        )
        try:
            # Loading the model takes minutes on busy cores. A start that fails leaves the process
            # running (SemcacheProcess.__exit__ never runs), so stop it here in every case.
            service.start(timeout_s=600)
            progress.remove_task(task)
            assert service.process is not None
            with FloorProbe(options.semcache_env) as probe:
                phases = _semcache_phases(
                    service.url, service.process.pid, upstream_url, workload, options, progress, probe
                )
                measured, samples = asyncio.run(phases)
            stats = httpx.get(f"{service.url}/stats", timeout=30).json()
        finally:
            service.stop()
    measured["server_stats"] = {k: stats.get(k) for k in ("embedding", "tiers", "coalesced", "requests")}
    measured["semcache_env"] = sorted(options.semcache_env)
    state.results["semcache"] = measured
    state.samples["semcache"] = samples["semcache"]
    state.samples["upstream"] = samples["upstream"]


async def _semcache_phases(
    url: str,
    pid: int,
    upstream_url: str,
    workload: Workload,
    options: Options,
    progress: Progress,
    probe: FloorProbe,
) -> tuple[dict[str, Any], Samples]:
    chat, direct = f"{url}/v1/chat/completions", f"{upstream_url}/chat/completions"
    by_level: dict[str, dict[str, Any]] = {}
    samples: Samples = {"semcache": {}, "upstream": {}}
    paired: dict[str, Any] = {}
    steps: dict[str, Any] = {"skipped": "no one-client semantic-hit phase"}
    async with client_pool(32) as pool:
        filled = await fill(pool, chat, workload.stored, semcache_outcome)
    for clients in options.concurrency:
        async with client_pool(clients) as pool:
            await _warm_up(pool, chat, workload)
            task = progress.add_task(f"semcache: {clients} clients", total=4)
            misses = workload.misses(options.misses(clients), f"c{clients}")
            hits = options.hit_requests(clients)
            phases: dict[str, PhaseResult] = {}
            plan: list[tuple[str, str, list[str], int, str, OutcomeOf, int | None]] = [
                ("exact_hit", chat, workload.stored, hits, "exact", semcache_outcome, pid),
                ("semantic_hit", chat, workload.paraphrases, hits, "semantic", semcache_outcome, pid),
                # The same new prompts, first straight to the stand-in, then through semcache: each
                # prompt waits the same upstream delay on both paths.
                ("direct_upstream", direct, misses, len(misses), "direct", direct_outcome, None),
                ("miss", chat, misses, len(misses), "miss", semcache_outcome, pid),
            ]
            for phase, target, prompts, requests, expect, outcome_of, server_pid in plan:
                if phase == "semantic_hit" and clients == min(options.concurrency):
                    before = await _scraped(url)
                    pause_s = _p50_s(phases.get("exact_hit"))
                    phases[phase], paired = await _paired_with_floor(
                        pool, target, prompts, requests, pid, probe, pause_s=pause_s
                    )
                    after = await _scraped(url)
                    samples_ms = phases[phase].samples_ms
                    client_mean = statistics.fmean(samples_ms) if samples_ms else None
                    steps = (
                        hit_steps.semantic_hit_steps(before, after, client_mean)
                        if isinstance(before, dict) and isinstance(after, dict)
                        else {"skipped": f"/metrics could not be read: {before if isinstance(before, str) else after}"}
                    )
                elif phase == "semantic_hit" and clients == max(options.concurrency):
                    phases[phase], paired["batched"] = await _batched_around(
                        probe,
                        run_phase(pool, target, prompts, requests=requests, expect=expect, outcome_of=outcome_of,
                                  server_pid=server_pid),
                    )  # fmt: skip
                elif phase == "miss" and clients == min(options.concurrency):
                    phases[phase], paired["miss_prompts"] = await _misses_paired_with_floor(
                        pool, target, prompts, pid, probe, idle_s=options.upstream_delay_ms[0] / 1000
                    )
                else:
                    phases[phase] = await run_phase(
                        pool,
                        target,
                        prompts,
                        requests=requests,
                        expect=expect,
                        outcome_of=outcome_of,
                        server_pid=server_pid,
                    )
                progress.advance(task)
            progress.remove_task(task)
            by_level[str(clients)] = {name: result.summary() for name, result in phases.items()}
            by_level[str(clients)]["miss"]["added_over_direct"] = paired_added_ms(
                phases["miss"], phases["direct_upstream"]
            )
            samples["semcache"][str(clients)] = {n: r.samples_ms for n, r in phases.items() if n != "direct_upstream"}
            samples["upstream"][str(clients)] = {"direct": phases["direct_upstream"].samples_ms}
    measured = {"fill_outcomes": dict(filled), "by_concurrency": by_level, "paired_floor": paired,
                "semantic_hit_steps": steps}  # fmt: skip
    return measured, samples


async def _scraped(url: str) -> hit_steps.Histograms | str:
    """The server's histograms, or why they could not be read (the phases go on without them)."""
    try:
        return await hit_steps.scrape(url)
    except (httpx.HTTPError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"


class FloorProbe:
    """``python -m benchmarks.embedder_floor --serve``, with semcache's environment: one-prompt
    embedding timings taken between the chunks of an HTTP phase, so that the ratio of the two
    compares the same minutes of a machine whose speed drifts."""

    def __init__(self, semcache_env: dict[str, str]) -> None:
        self.env = {**os.environ, **semcache_env}
        self.process: subprocess.Popen[str] | None = None
        self.error: str | None = None

    def __enter__(self) -> FloorProbe:
        command = [sys.executable, "-m", "benchmarks.embedder_floor", "--serve"]
        self.process = subprocess.Popen(
            command, cwd=ROOT, env=self.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        assert self.process.stdout is not None
        if self.process.stdout.readline().strip() != "ready":
            self.error = f"benchmarks.embedder_floor --serve did not start (exit code {self.process.poll()})"
        return self

    def one_prompt_ms(self, count: int) -> list[float]:
        """``count`` one-prompt timings (of the next paraphrases), or none when the probe did not start."""
        return [float(ms) for ms in self._ask(f"{count}")]

    def texts_ms(self, texts: list[str], idle_s: float = 0.0) -> list[float]:
        """A one-prompt timing of each of ``texts``, each after a pause of ``idle_s`` when it is
        set; none when the probe did not start."""
        asked = {"texts": texts, "idle_s": idle_s} if idle_s > 0 else texts
        return [float(ms) for ms in self._ask(json.dumps(asked))]

    def batched_rates(self) -> dict[str, float]:
        """Prompts/s in batches of each size, once over the paraphrases; none when the probe did not start."""
        return self._ask("batched") or {}

    def _ask(self, line: str) -> Any:
        if self.error is not None or self.process is None:
            return []
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            if self.process.stdin is not None:
                self.process.stdin.close()  # its loop over stdin ends
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            if self.process.stdout is not None:
                self.process.stdout.close()


PAIRED_CHUNKS = 6


async def _paired_with_floor(
    pool: list[HttpClient], chat: str, prompts: list[str], requests: int, pid: int, probe: FloorProbe,
    *, pause_s: float | None,
) -> tuple[PhaseResult, dict[str, Any]]:  # fmt: skip
    """The semantic-hit phase in ``PAIRED_CHUNKS`` chunks, each followed by as many one-prompt
    embeddings in the floor's process (never at the same time: they would share the cores).

    Those embeddings run back to back, the figure the target compares with. Each chunk's
    paraphrases are also embedded once more, each after a pause of ``pause_s`` (the exact hit's
    p50): in a server, one model call follows another only after the rest of a request's work,
    and a call that follows other work, or a pause, runs on caches that work has taken."""
    merged, floor_ms, after_pause_ms = PhaseResult(), [], []
    chunk = max(1, requests // PAIRED_CHUNKS)
    for start in range(0, requests, chunk):
        count = min(chunk, requests - start)
        merged.extend(
            await run_phase(
                pool, chat, prompts, requests=count, expect="semantic", outcome_of=semcache_outcome, server_pid=pid
            )
        )
        floor_ms += await asyncio.to_thread(probe.one_prompt_ms, count)
        if pause_s:
            part = [prompts[n % len(prompts)] for n in range(count)]  # what run_phase asked
            after_pause_ms += await asyncio.to_thread(probe.texts_ms, part, pause_s)
    if not floor_ms:
        return merged, {"skipped": probe.error or "no timings"}
    paired: dict[str, Any] = {"one_prompt_p50_ms": round(statistics.median(floor_ms), 3), "count": len(floor_ms),
                              "chunks": PAIRED_CHUNKS}  # fmt: skip
    if after_pause_ms and pause_s:
        paired["after_pause"] = {"pause_ms": round(pause_s * 1000, 3),
                                 "one_prompt_p50_ms": round(statistics.median(after_pause_ms), 3)}  # fmt: skip
    return merged, paired


def _p50_s(phase: PhaseResult | None) -> float | None:
    """A phase's p50 in seconds; None with nothing counted."""
    if phase is None or not phase.samples_ms:
        return None
    return statistics.median(phase.samples_ms) / 1000


async def _batched_around(probe: FloorProbe, phase: Awaitable[PhaseResult]) -> tuple[PhaseResult, dict[str, Any]]:
    """``phase``, with the embedder's batched rate measured in the floor's process just before and
    just after it (never at the same time): the throughput target compares rates of the same
    minutes, as the machine's speed drifts."""
    before = await asyncio.to_thread(probe.batched_rates)
    result = await phase
    after = await asyncio.to_thread(probe.batched_rates)
    if not before or not after:
        return result, {"skipped": probe.error or "no timings"}
    by_size = {size: round((before[size] + after[size]) / 2, 1) for size in before}
    best = max(by_size, key=by_size.__getitem__)
    return result, {"batched_texts_per_s": by_size[best], "batched_best_size": int(best), "batched_by_size": by_size,
                    "before": before, "after": after}  # fmt: skip


async def _misses_paired_with_floor(
    pool: list[HttpClient], chat: str, prompts: list[str], pid: int, probe: FloorProbe, *, idle_s: float
) -> tuple[PhaseResult, dict[str, Any]]:
    """The miss phase in ``PAIRED_CHUNKS`` chunks, each followed by one-prompt embeddings of the
    chunk's own prompts in the floor's process: what a miss adds is held against one embedding of
    the prompts it embedded, which are longer than the paraphrases (new prompts, each numbered).
    Each prompt is embedded twice: back to back, the figure the target allows for, and after a
    pause of ``idle_s`` (the upstream's shortest wait), as a miss's embedding runs: on a server
    that sat idle while the last miss waited on the upstream."""
    merged, floor_ms, after_idle_ms = PhaseResult(), [], []
    chunk = max(1, len(prompts) // PAIRED_CHUNKS)
    for start in range(0, len(prompts), chunk):
        part = prompts[start : start + chunk]
        merged.extend(
            await run_phase(
                pool, chat, part, requests=len(part), expect="miss", outcome_of=semcache_outcome, server_pid=pid
            )
        )
        floor_ms += await asyncio.to_thread(probe.texts_ms, part)
        after_idle_ms += await asyncio.to_thread(probe.texts_ms, part, idle_s)
    if not floor_ms:
        return merged, {"skipped": probe.error or "no timings"}
    after_idle = {"idle_ms": round(idle_s * 1000, 1), "one_prompt_p50_ms": round(statistics.median(after_idle_ms), 3)}
    return merged, {"one_prompt_p50_ms": round(statistics.median(floor_ms), 3), "count": len(floor_ms),
                    "chunks": PAIRED_CHUNKS, "after_idle": after_idle}  # fmt: skip


async def _warm_up(pool: list[HttpClient], chat: str, workload: Workload) -> None:
    """Connect every client, and run both lookup paths once, before anything is timed."""
    for prompts in (workload.stored, workload.paraphrases):
        await run_phase(pool, chat, prompts, requests=max(len(pool), 5), expect="", outcome_of=semcache_outcome)


# --- the event loop under mixed load -----------------------------------------------------------


def part_lag(state: Run, workload: Workload, progress: Progress) -> None:
    """``/healthz`` polled every 20 ms while 16 clients get semantic hits, 4 send misses and 2
    stream hits (``benchmarks.loop_lag``), on a semcache of its own."""
    from .loop_lag import run as run_lag

    options = state.options
    task = progress.add_task(f"event loop: {options.lag_seconds:g} s of mixed load", total=None)
    result = run_lag(options.lag_seconds, options.upstream_delay_ms, env=options.semcache_env,
                     log_path=options.out / "semcache-lag.log")  # fmt: skip
    progress.remove_task(task)
    state.results["lag"] = result


# --- start-up on a large data folder ------------------------------------------------------------


def part_start(state: Run, workload: Workload, progress: Progress) -> None:
    """``semcache serve`` on a data folder of ``start_entries`` synthetic entries (embedded store and
    index snapshot) to ``/healthz`` 200 (``benchmarks.startup``). The folder is built once and kept
    (in quick mode, built in the run's own folder)."""
    from .startup import data_folder
    from .startup import run as run_start

    options = state.options
    folder = options.out / "start-data" if options.quick else data_folder(options.start_entries)
    task = progress.add_task(f"start: {options.start_entries:,} entries", total=None)
    state.results["start"] = run_start(options.start_entries, options.starts, options.semcache_env,
                                       log=options.out / "semcache-start.log", folder=folder)  # fmt: skip
    progress.remove_task(task)
    if options.quick:
        shutil.rmtree(folder, ignore_errors=True)


# --- GPTCache -----------------------------------------------------------------------------------


def part_gptcache(state: Run, workload: Workload, progress: Progress) -> None:
    options = state.options
    python = built_gptcache_venv()
    if python is None and not options.build_venvs:
        _skip_unbuilt(state, "gptcache", "GPTCache", GPTCACHE_VENV)
        return
    python = python or ensure_gptcache_venv()
    hits = max(options.hit_requests(c) for c in options.concurrency)
    requests = {"exact_hit": hits, "semantic_hit": hits, "miss": max(options.misses(c) for c in options.concurrency)}
    misses = workload.misses(requests["miss"], "gptcache")
    results, samples = measure_gptcache(python, workload, options.concurrency, requests, misses, progress)
    by_level = {level: results.pop(level) for level in [str(c) for c in options.concurrency]}
    state.results["gptcache"] = {**results, "by_concurrency": by_level, "transport": "in-process get() calls"}
    state.samples["gptcache"] = samples


def _skip_unbuilt(state: Run, key: str, name: str, venv: Path) -> None:
    reason = f"its venv {venv.relative_to(ROOT)} is not built; quick mode does not build it, a run without --quick does"
    state.results[key] = {"skipped": reason}
    stderr.print(f"[yellow]note:[/yellow] {name} skipped: {reason}")


# --- LiteLLM ------------------------------------------------------------------------------------


def part_litellm(state: Run, workload: Workload, progress: Progress) -> None:
    options = state.options
    command = built_litellm_venv()
    if command is None and not options.build_venvs:
        _skip_unbuilt(state, "litellm", "LiteLLM", LITELLM_VENV)
        return
    command = command or ensure_litellm_venv()
    low, high = options.upstream_delay_ms
    with standin_process(low / 1000, (high - low) / 1000) as upstream_url:
        task = progress.add_task("LiteLLM: starting the proxy", total=None)
        with litellm_proxy(command, upstream_url, options.litellm_cache, options.out / "litellm.log") as proxy:
            progress.remove_task(task)
            headers = {"authorization": f"Bearer {proxy.master_key}"}
            phases = _litellm_phases(proxy.base_url, proxy.pid, headers, workload, options, progress)
            measured, samples = asyncio.run(phases)
    state.results["litellm"] = {
        "config": proxy.config,
        "cache": options.litellm_cache,
        "semantic_hit": SEMANTIC_UNAVAILABLE,
        **measured,
    }
    state.samples["litellm"] = samples


async def _litellm_phases(
    base_url: str, pid: int, headers: dict[str, str], workload: Workload, options: Options, progress: Progress
) -> tuple[dict[str, Any], dict[str, dict[str, list[float]]]]:
    chat = f"{base_url}/chat/completions"
    by_level: dict[str, dict[str, Any]] = {}
    samples: dict[str, dict[str, list[float]]] = {}
    async with client_pool(32, headers=headers) as pool:
        filled = await fill(pool, chat, workload.stored, litellm_outcome)
        # Paraphrases of stored prompts: to show what they are to an exact cache (misses).
        paraphrases = await fill(pool, chat, workload.paraphrases[:8], litellm_outcome)
    for clients in options.concurrency:
        async with client_pool(clients, headers=headers) as pool:
            # Connect every client (exact hits) before anything is timed.
            await run_phase(pool, chat, workload.stored, requests=len(pool), expect="", outcome_of=litellm_outcome)
            task = progress.add_task(f"LiteLLM: {clients} clients", total=2)
            # The same new prompts semcache's misses used: the stand-in delays each one the same.
            misses = workload.misses(options.misses(clients), f"c{clients}")
            exact = await run_phase(
                pool,
                chat,
                workload.stored,
                requests=options.hit_requests(clients),
                expect="exact",
                outcome_of=litellm_outcome,
                server_pid=pid,
            )
            progress.advance(task)
            miss = await run_phase(
                pool,
                chat,
                misses,
                requests=len(misses),
                expect="miss",
                outcome_of=litellm_outcome,
                server_pid=pid,
            )
            progress.remove_task(task)
            by_level[str(clients)] = {"exact_hit": exact.summary(), "miss": miss.summary()}
            samples[str(clients)] = {"exact_hit": exact.samples_ms, "miss": miss.samples_ms}
    described = {"fill_outcomes": dict(filled), "paraphrase_outcomes": dict(paraphrases), "by_concurrency": by_level}
    return described, samples


# --- the vector index ---------------------------------------------------------------------------


def part_index(state: Run, workload: Workload, progress: Progress) -> None:
    """benchmarks.index_search's measurement at each size: HNSW (what a large scope uses) and flat
    (exact search, what a small scope uses and the reference for recall)."""
    import faiss
    import numpy as np

    from .index_search import DIMENSION, measure, synthetic

    options = state.options
    faiss.omp_set_num_threads(options.index_threads or os.cpu_count() or 1)
    rng = np.random.default_rng(7)
    results: dict[str, Any] = {
        "build_threads": faiss.omp_get_max_threads(),
        "search_threads": 1,  # one query per lookup; more OpenMP threads only add waits on 2 busy cores
        "queries": options.index_queries,
    }
    state.results["index"] = results
    task = progress.add_task("index", total=len(options.index_sizes) * 2)
    for size in options.index_sizes:
        progress.update(task, description=f"index: {size:,} synthetic vectors")
        vectors = synthetic(size, rng)
        picks = rng.integers(0, size, options.index_queries)
        noise = 0.05 * rng.standard_normal((options.index_queries, DIMENSION)).astype(np.float32)
        queries = vectors[picks] + noise
        faiss.normalize_L2(queries)
        exact = faiss.IndexFlatIP(DIMENSION)
        exact.add(vectors)
        truth = exact.search(queries, 1)[1][:, 0]
        del exact
        measured: dict[str, Any] = {}
        for kind in ("flat", "hnsw32"):
            progress.update(task, description=f"index: {kind} at {size:,}")
            figures = measure(kind, vectors, queries, truth, search_threads=1)
            figures.pop("_latencies")
            figures["bytes_per_entry"] = round(figures["serialized_mb"] * 2**20 / size)
            measured[kind] = figures
            progress.advance(task)
        results[str(size)] = measured
        del vectors
        state.save()  # a million entries takes minutes: keep each size as it comes
    progress.remove_task(task)


# --- hit quality over HTTP ----------------------------------------------------------------------


def part_hit_quality(state: Run, workload: Workload, progress: Progress) -> None:
    """benchmarks.hit_quality_http: both labelled traces, every mode, against fresh semcache processes."""
    options = state.options
    data = hit_quality_http.SHARED_DATA
    missing = [name for name in hit_quality_http.TRACES.values() if not (data / name).is_file()]
    if missing:
        state.results["hit_quality"] = {"skipped": f"needs ../shared/data ({', '.join(missing)} absent)"}
        return
    task = progress.add_task("hit quality: replaying traces", total=None)
    results = hit_quality_http.run(
        list(hit_quality_http.TRACES), list(hit_quality_http.MODES), options.hit_quality_limit, options.out,
        data=data, semcache_env=options.semcache_env, say=progress.console.print, command=options.command,
    )  # fmt: skip
    progress.remove_task(task)
    state.results["hit_quality"] = {"limit": options.hit_quality_limit, "runs": results["runs"],
                                    "plot": results.get("plot")}  # fmt: skip


def parse_parts(values: list[str]) -> set[str]:
    chosen = {part.strip() for value in values for part in value.split(",") if part.strip()}
    if unknown := chosen - set(PARTS):
        raise ValueError(f"unknown part(s) {', '.join(sorted(unknown))}; choose from {', '.join(PARTS)}")
    return chosen
