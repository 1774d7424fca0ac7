"""Hit quality over HTTP, as a new user meets it: ``semcache serve`` at its shipped defaults, a fresh
data folder, labelled traffic it has not seen, sent in arrival order with the official openai SDK,
and an upstream that answers and judges like a model.

The upstream is the stand-in (``semcache.testing``), a real HTTP server, told two things:

- each chat completion is answered about the prompt's labelled cluster, worded anew every call
  (``semcache.evaluation.trace.ClusterUpstream``), so no two answers are the same string and the
  benchmark reads back, from the answer a client was served, which cluster it was about;
- each verification (``X-Semcache-Verification: true``) is judged from the two prompts its
  message quotes, with the replays' erring verdicts (``semcache.evaluation.verifier``): a right
  pair is refused 3% of the time, a wrong look-alike approved 10%, another wrong pair 2%.

Modes: ``verify`` (the defaults: ``verify: sync``), ``off`` (``SEMCACHE_VERIFY=off``), and
``off-boilerplate`` (``off``, with answers that share most of their sentences across topics, as a
support bot's templated answers do: stock sentences around one that names two facts of the topic
(``BOILERPLATE_SHARE`` of an answer's sentences are common to every topic), so answers to different
questions differ in a few words and read alike to an answer judge).

A hit is wrong when the answer it served was written for another cluster. Possible hits are the
requests whose cluster came earlier in the replay. Full answers beyond misses are the upstream's
full chat completions less the misses (exploration's answers; verifications are counted apart).

    python -m benchmarks.hit_quality_http                       # both traces, every mode
    python -m benchmarks.hit_quality_http --limit 0 --modes verify off  # whole traces
    python -m benchmarks run --only hit_quality                 # as a part of the suite

Writes ``hit_quality.json``, ``hit_quality.txt`` and ``hit_quality.png`` into ``--out``
(default ``benchmarks/results/hit-quality-<UTC timestamp>/``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import re
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from semcache.decision.budget import wilson
from semcache.evaluation.data import DEFAULT_SEED
from semcache.evaluation.trace import ClusterUpstream
from semcache.evaluation.verifier import ErringVerifier, looks_alike
from semcache.evaluation.wording import DEFAULT_COMMON_SHARE
from semcache.testing.standin_upstream import StandinState, StandinUpstream
from testkit.plots import pyplot
from testkit.servers import SemcacheProcess

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
# The ONNX export of the embedding model, shared by runs: a cache of a file, no setting of the service.
MODEL_EXPORTS = ROOT / "benchmarks" / "results" / ".models"
TRACES = {"quora": "trace_qqp_dev.jsonl", "faq": "trace_faq_dev.jsonl"}
# The goals, per trace: the most wrong share of hits, and the least share of possible hits
# served with verification on.
MAX_WRONG = {"quora": 0.02, "faq": 0.01}
MIN_SERVED = {"quora": 0.60, "faq": 0.70}
MAX_EXTRA_SHARE = 0.10  # full upstream answers beyond the misses, per request
DEFAULT_LIMIT = 1000  # requests per trace: every mode of both traces in well under ten minutes on two busy cores
Z95 = 1.96
_QUOTED = re.compile(r"<<<\n(.*?)\n>>>", re.DOTALL)
_EXAMPLES = 8
_PROGRESS_EVERY = 100
_PLOT_MAX_WRONG = 10  # percent: a run with few hits has an upper bound far above every goal


@dataclass(frozen=True)
class Mode:
    name: str
    verify: str | None  # SEMCACHE_VERIFY, or None for the shipped default
    boilerplate: bool
    about: str


MODES = {
    "verify": Mode("verify", None, False, "shipped defaults (verify: sync)"),
    "off": Mode("off", "off", False, "verify: off"),
    "off-boilerplate": Mode("off-boilerplate", "off", True, "verify: off; answers share most sentences across topics"),
}

# The share of an answer's sentences common to every topic in ``off-boilerplate``: all but one.
BOILERPLATE_SHARE = 0.8


class ModelLikeUpstream:
    """The stand-in upstream, answering like a model about labelled clusters and judging like one.

    ``cluster_of_answer`` and ``prompt_of_answer`` say, for every answer it gave, which cluster and
    which prompt it was written for (answers are unique: each call words its own)."""

    def __init__(self, rows: list[dict[str, Any]], *, boilerplate: bool, seed: int, similarity: Similarity) -> None:
        self.cluster_of = {str(r["prompt"]): str(r["cluster"]) for r in rows}
        share = BOILERPLATE_SHARE if boilerplate else DEFAULT_COMMON_SHARE
        self._words = ClusterUpstream(self.cluster_of, seed, share)
        self._similarity = similarity
        self.cluster_of_answer: dict[str, str] = {}
        self.prompt_of_answer: dict[str, str] = {}
        self.verifier = ErringVerifier(self._same, seed)
        self.verifications: list[dict[str, Any]] = []
        self.unparsed_verifications = 0
        self._lock = threading.Lock()
        state = StandinState(word_answer=self.answer, judge=self.judge)
        self.server = StandinUpstream(state)

    def _same(self, query: str, cached: str) -> bool:
        first, second = self.cluster_of.get(query), self.cluster_of.get(cached)
        return first is not None and first == second

    def answer(self, prompt: str) -> str:
        with self._lock:
            text = self._words.answer(prompt) if prompt in self.cluster_of else f"Answer to: {prompt}"
            self.cluster_of_answer[text] = self.cluster_of.get(prompt, "")
            self.prompt_of_answer[text] = prompt
            return text

    def judge(self, message: str) -> str:
        quoted = _QUOTED.findall(message)
        if len(quoted) < 2:
            with self._lock:
                self.unparsed_verifications += 1
            return "no"
        query, cached = quoted[0], quoted[1]
        similarity = self._similarity.cosine(query, cached)
        with self._lock:
            approve = self.verifier.decide(query, cached, similarity)
            self.verifications.append({"query": query, "cached": cached, "similarity": round(similarity, 4),
                                       "same": self._same(query, cached), "approved": approve,
                                       "looks_alike": looks_alike(query, cached, similarity)})  # fmt: skip
        return "yes" if approve else "no"

    def __enter__(self) -> ModelLikeUpstream:
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()


class Similarity:
    """The cosine of two prompts by the service's default model, as the verifier's sense of a
    look-alike; each prompt embedded once."""

    def __init__(self) -> None:
        from semcache.embedders.sentence_transformer import DEFAULT_MODEL, load_embedder

        MODEL_EXPORTS.mkdir(parents=True, exist_ok=True)
        self._embedder = load_embedder(DEFAULT_MODEL, threads=1, backend="onnx-int8", cache_dir=MODEL_EXPORTS)
        self._vectors: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()

    def cosine(self, first: str, second: str) -> float:
        with self._lock:
            todo = [t for t in dict.fromkeys((first, second)) if t not in self._vectors]
            if todo:
                for text, vector in zip(todo, self._embedder.embed(todo), strict=True):
                    self._vectors[text] = vector / (np.linalg.norm(vector) or 1.0)
            return float(self._vectors[first] @ self._vectors[second])


def read_trace(data: Path, trace: str, limit: int | None) -> list[dict[str, Any]]:
    path = data / TRACES[trace]
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return rows[:limit] if limit else rows


def replay(
    trace: str,
    mode: Mode,
    rows: list[dict[str, Any]],
    similarity: Similarity,
    out: Path,
    *,
    seed: int = DEFAULT_SEED,
    semcache_env: dict[str, str] | None = None,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """One trace in one mode, against a fresh ``semcache serve``; the figures of ``summarise``."""
    import openai

    env = {"SEMCACHE_EMBEDDING_CACHE_DIR": str(MODEL_EXPORTS), **(semcache_env or {})}
    if mode.verify is not None:
        env["SEMCACHE_VERIFY"] = mode.verify
    served: list[dict[str, Any]] = []
    with (
        ModelLikeUpstream(rows, boilerplate=mode.boilerplate, seed=seed, similarity=similarity) as upstream,
        tempfile.TemporaryDirectory(prefix="semcache-hit-quality-") as folder,
    ):
        service = SemcacheProcess(data_dir=Path(folder), upstream_url=upstream.server.base_url, env=env,
                                  log_path=out / f"semcache-{trace}-{mode.name}.log")  # fmt: skip
        started = time.monotonic()
        try:
            service.start(timeout_s=600)
            startup_s = time.monotonic() - started
            client = openai.OpenAI(base_url=f"{service.url}/v1", api_key="hit-quality", max_retries=0, timeout=120)
            replay_started = time.monotonic()
            for position, row in enumerate(rows):
                served.append(_ask(client, row, upstream))
                if (position + 1) % _PROGRESS_EVERY == 0 or position + 1 == len(rows):
                    hits = [s for s in served if s["outcome"] == "hit"]
                    wrong = sum(not s["right"] for s in hits)
                    say(f"  {trace}/{mode.name}: {position + 1}/{len(rows)} requests, {len(hits)} hits, "
                        f"{wrong} wrong, {time.monotonic() - replay_started:.0f} s")  # fmt: skip
            replay_s = time.monotonic() - replay_started
            # What the namespace learned (its line, labels, band, judge): /admin answers loopback callers.
            quality = httpx.get(f"{service.url}/admin/namespaces/default/quality", timeout=30).json()
        finally:
            service.stop()
        calls = upstream.server.chat_calls()
        verifications = len(upstream.server.verification_calls())
    report = summarise(trace, mode, rows, served, full_answers=calls, verifications=verifications,
                       upstream=upstream)  # fmt: skip
    report["quality_at_end"] = quality
    report["startup_seconds"] = round(startup_s, 1)
    report["replay_seconds"] = round(replay_s, 1)
    return report


def _ask(client: Any, row: dict[str, Any], upstream: ModelLikeUpstream) -> dict[str, Any]:
    raw = client.chat.completions.with_raw_response.create(
        model="standin-model", messages=[{"role": "user", "content": str(row["prompt"])}]
    )
    answer = raw.parse().choices[0].message.content or ""
    headers = raw.headers
    outcome = headers.get("x-semcache", "")
    similarity = headers.get("x-semcache-similarity")
    cluster = str(row["cluster"])
    served_cluster = upstream.cluster_of_answer.get(answer)
    return {
        "idx": row.get("idx"),
        "prompt": str(row["prompt"]),
        "cluster": cluster,
        "possible": row.get("duplicate_of") is not None,
        "outcome": outcome,
        "tier": headers.get("x-semcache-tier"),
        "verified": headers.get("x-semcache-verified") == "true",
        "explored": headers.get("x-semcache-explored") == "true",
        "similarity": float(similarity) if similarity else None,
        "right": served_cluster == cluster,
        "matched": upstream.prompt_of_answer.get(answer),
    }


def _share(part: int, whole: int) -> float:
    return round(part / whole, 4) if whole else 0.0


def summarise(
    trace: str,
    mode: Mode,
    rows: list[dict[str, Any]],
    served: list[dict[str, Any]],
    *,
    full_answers: int,
    verifications: int,
    upstream: ModelLikeUpstream,
) -> dict[str, Any]:
    requests = len(served)
    hits = [s for s in served if s["outcome"] == "hit"]
    wrong = [s for s in hits if not s["right"]]
    correct = len(hits) - len(wrong)
    explored = sum(s["explored"] for s in served)
    misses = sum(s["outcome"] == "miss" and not s["explored"] for s in served)
    bypassed = sum(s["outcome"] not in ("hit", "miss") for s in served)
    possible = sum(s["possible"] for s in served)
    half = served[requests // 2 :]
    late_hits = [s for s in half if s["outcome"] == "hit"]
    late_wrong = sum(not s["right"] for s in late_hits)
    late_possible = sum(s["possible"] for s in half)
    extra = full_answers - misses
    wrong_share = _share(len(wrong), len(hits))
    upper = round(wilson(len(wrong) / len(hits), len(hits), Z95)[1], 4) if hits else 1.0
    report: dict[str, Any] = {
        "trace": trace,
        "file": TRACES[trace],
        "mode": mode.name,
        "about": mode.about,
        "requests": requests,
        "hits": len(hits),
        "tiers": dict(Counter(str(s["tier"]) for s in hits)),
        "verified_hits": sum(s["verified"] for s in hits),
        "correct_hits": correct,
        "wrong_hits": len(wrong),
        "wrong_share": wrong_share,
        "wrong_share_upper95": upper,
        "possible_hits": possible,
        "served_share": _share(correct, possible),
        "second_half": {
            "requests": len(half),
            "possible_hits": late_possible,
            "hits": len(late_hits),
            "wrong_hits": late_wrong,
            "served_share": _share(len(late_hits) - late_wrong, late_possible),
            "wrong_share": _share(late_wrong, len(late_hits)),
        },
        "misses": misses,
        "misses_share": _share(misses, requests),
        "explored": explored,
        "bypassed": bypassed,
        "upstream_full_answers": full_answers,
        "upstream_share": _share(full_answers, requests),
        "extra_full_answers": extra,
        "extra_share": _share(extra, requests),
        "verifications": verifications,
        "verification_share": _share(verifications, requests),
        "verifier_verdicts": dict(upstream.verifier.verdicts),
        "unparsed_verifications": upstream.unparsed_verifications,
        "wrong_by": _wrong_by(hits),
        "wrong_examples": [
            {k: s[k] for k in ("prompt", "matched", "tier", "verified", "similarity")} for s in wrong[:_EXAMPLES]
        ],
    }
    report["targets"] = _targets(trace, mode, report)
    return report


def _wrong_by(hits: list[dict[str, Any]]) -> dict[str, Any]:
    """Where the hits went wrong: by how they were served, and by similarity bin of 0.02."""

    def how(s: dict[str, Any]) -> str:
        return "verified" if s["verified"] else str(s["tier"])

    kinds: dict[str, dict[str, int]] = {}
    bins: dict[str, dict[str, int]] = {}
    for s in hits:
        kind = kinds.setdefault(how(s), {"hits": 0, "wrong": 0})
        kind["hits"] += 1
        kind["wrong"] += not s["right"]
        if s["similarity"] is not None:
            low = math.floor(s["similarity"] / 0.02) * 0.02
            cell = bins.setdefault(f"{low:.2f}", {"hits": 0, "wrong": 0})
            cell["hits"] += 1
            cell["wrong"] += not s["right"]
    return {"how_served": kinds, "similarity_bins": dict(sorted(bins.items()))}


def _targets(trace: str, mode: Mode, report: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's goals for this trace and mode, each PASS, MISS or not measured (no hits to judge)."""
    hits, wrong, upper = report["hits"], report["wrong_share"], report["wrong_share_upper95"]
    found = [_goal(f"wrong share of hits ≤ {MAX_WRONG[trace]:.0%}", wrong <= MAX_WRONG[trace] if hits else None,
                   f"{wrong:.1%} of {hits} hits (95% upper {upper:.1%})")]  # fmt: skip
    if mode.verify is None:
        goal, served = MIN_SERVED[trace], report["served_share"]
        found.append(_goal(f"possible hits served ≥ {goal:.0%}", served >= goal if report["possible_hits"] else None,
                           f"{served:.1%} of {report['possible_hits']}"))  # fmt: skip
    extra = report["extra_share"]
    found.append(_goal(f"full answers beyond misses ≤ {MAX_EXTRA_SHARE:.0%} of requests", extra <= MAX_EXTRA_SHARE,
                       f"{extra:.1%}"))  # fmt: skip
    return found


def _goal(goal: str, ok: bool | None, measured: str) -> dict[str, Any]:
    return {"goal": goal, "measured": measured, "status": "not measured" if ok is None else "PASS" if ok else "MISS"}


def run(
    traces: list[str],
    modes: list[str],
    limit: int | None,
    out: Path,
    *,
    data: Path = SHARED_DATA,
    seed: int = DEFAULT_SEED,
    semcache_env: dict[str, str] | None = None,
    say: Callable[[str], None] = print,
    command: str = "",
) -> dict[str, Any]:
    """Every trace in every mode; writes hit_quality.json, .txt and .png into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    for trace in traces:
        if not (data / TRACES[trace]).is_file():
            raise FileNotFoundError(f"{data / TRACES[trace]} is missing: this benchmark needs ../shared/data")
    results: dict[str, Any] = {"command": command, "limit": limit, "seed": seed,
                               "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                               "semcache_env": sorted((semcache_env or {}).keys()), "runs": []}  # fmt: skip
    similarity = Similarity()
    for trace in traces:
        rows = read_trace(data, trace, limit)
        for name in modes:
            say(f"{trace} ({len(rows)} requests), {MODES[name].about}: starting semcache")
            report = replay(trace, MODES[name], rows, similarity, out, seed=seed, semcache_env=semcache_env, say=say)
            results["runs"].append(report)
            write(results, out)
    results["finished"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    write(results, out)
    if plot(results, out / "hit_quality.png") is not None:
        results["plot"] = "hit_quality.png"
        write(results, out)
    return results


def write(results: dict[str, Any], out: Path) -> None:
    (out / "hit_quality.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "hit_quality.txt").write_text(table(results) + "\n")


TABLE_HEAD = ["trace", "mode", "requests", "hits", "wrong (95% upper)", "possible", "served (2nd half)",
              "verifications", "upstream answers", "misses", "beyond misses", "targets"]  # fmt: skip


def table_rows(results: dict[str, Any]) -> list[list[str]]:
    rows = []
    for r in results.get("runs", []):
        statuses = ", ".join(t["status"] for t in r["targets"])
        rows.append([
            r["trace"], r["mode"], str(r["requests"]), f"{r['hits']} ({r['verified_hits']} verified)",
            f"{r['wrong_hits']} = {r['wrong_share']:.1%} (≤ {r['wrong_share_upper95']:.1%})", str(r["possible_hits"]),
            f"{r['served_share']:.1%} ({r['second_half']['served_share']:.1%})",
            f"{r['verifications']} ({r['verification_share']:.1%})",
            f"{r['upstream_full_answers']} ({r['upstream_share']:.1%})",
            f"{r['misses']} ({r['misses_share']:.1%})", f"{r['extra_full_answers']} ({r['extra_share']:.1%})",
            statuses,
        ])  # fmt: skip
    return rows


def table(results: dict[str, Any]) -> str:
    rows = [TABLE_HEAD, *table_rows(results)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(TABLE_HEAD))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)) for row in rows]
    goals = []
    for r in results.get("runs", []):
        checked = "; ".join(f"{t['goal']} {t['status']} ({t['measured']})" for t in r["targets"])
        goals.append(f"{r['trace']}/{r['mode']}: {checked}")
    return "\n".join([f"command: {results.get('command')}", *lines, "", *goals])


def plot(results: dict[str, Any], path: Path) -> Path | None:
    """Share of possible hits served against the wrong share of hits (to its 95% upper bound), one
    point per trace and mode, with each trace's goals."""
    runs = results.get("runs", [])
    plt = pyplot() if runs else None
    if plt is None:
        return None
    traces = list(dict.fromkeys(r["trace"] for r in runs))
    figure, axes = plt.subplots(1, len(traces), figsize=(6 * len(traces), 4.5), squeeze=False)
    markers = {"verify": "o", "off": "s", "off-boilerplate": "^"}
    for axis, trace in zip(axes[0], traces, strict=True):
        for r in (r for r in runs if r["trace"] == trace):
            served, wrong = 100 * r["served_share"], 100 * r["wrong_share"]
            axis.errorbar([served], [wrong], yerr=[[0], [100 * r["wrong_share_upper95"] - wrong]], capsize=4,
                          marker=markers.get(r["mode"], "x"), linestyle="none",
                          label=f"{r['mode']}: {r['hits']} hits of {r['requests']} requests")  # fmt: skip
        axis.axhline(100 * MAX_WRONG[trace], color="grey", linestyle="--", linewidth=1, label="most wrong share")
        axis.axvline(100 * MIN_SERVED[trace], color="grey", linestyle=":", linewidth=1, label="least served (verify)")
        axis.set_xlim(0, 100)
        axis.set_ylim(0, _PLOT_MAX_WRONG)
        axis.set_xlabel("possible hits served (%)")
        axis.set_ylabel(f"wrong share of hits (%), bar to 95% upper bound (cut at {_PLOT_MAX_WRONG}%)")
        axis.set_title(f"{trace} ({TRACES[trace]})")
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=7, loc="upper left")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.hit_quality_http", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    parser.add_argument("--traces", nargs="+", choices=list(TRACES), default=list(TRACES))
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    parser.add_argument(
        "--limit",
        type=int,
        default=DEFAULT_LIMIT,
        help=f"requests per trace, from its start (default {DEFAULT_LIMIT}; 0: the whole trace)",
    )
    parser.add_argument("--data", type=Path, default=SHARED_DATA, help="the folder of the traces (../shared/data)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="seed of the wording and of the verdicts")
    parser.add_argument("--out", type=Path, help="default benchmarks/results/hit-quality-<UTC timestamp>")
    args = parser.parse_args(argv)
    if args.limit < 0:
        parser.error("--limit takes 0 or more")
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or ROOT / "benchmarks" / "results" / f"hit-quality-{stamp}"
    command = "python -m benchmarks.hit_quality_http " + " ".join(argv)
    try:
        results = run(args.traces, args.modes, args.limit or None, out, data=args.data, seed=args.seed,
                      say=lambda text: print(text, file=sys.stderr, flush=True), command=command.strip())  # fmt: skip
    except (FileNotFoundError, RuntimeError, TimeoutError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(table(results))
    print(f"\nresults: {out / 'hit_quality.json'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
