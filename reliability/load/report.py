"""Reading a load run's results: latency per outcome, error rate, memory over requests, verdict.

Pure functions over the request log the locustfile writes and the memory samples ``__main__``
takes, so they can be tested without running anything. See ``reliability/load/__main__.py`` for
how memory growth is judged and why.
"""

from __future__ import annotations

import csv
import statistics
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

MIB = 1024 * 1024
OUTCOMES = ("exact", "semantic", "template", "miss", "bypass", "error")
LATENCY_PARTS = ("all", "not_coalesced", "coalesced", "non_stream", "stream", "stream_first_content")


@dataclass(frozen=True)
class RequestRow:
    time: float
    namespace: str
    kind: str
    intent: str
    stream: bool
    outcome: str
    coalesced: bool
    status: int
    latency_ms: float
    ttfb_ms: float | None
    ok: bool
    error: str


@dataclass(frozen=True)
class MemorySample:
    """semcache's resident memory and counters at one moment of the run."""

    elapsed_s: float
    rss_bytes: int
    requests: int
    entries: int
    evicted: int
    tombstones: int


@dataclass(frozen=True)
class MemoryBounds:
    """When memory growth fails a run; see the module docstring of ``__main__``."""

    max_growth_bytes_per_1k_requests: float
    noise_floor_bytes: float
    min_warmup_s: float
    min_requests_judged: int  # fewer after warm-up, and the slope measures first-use allocations


def read_requests(path: Path) -> list[RequestRow]:
    with path.open(newline="", encoding="utf-8") as file:
        return [
            RequestRow(
                time=float(row["time"]),
                namespace=row["namespace"],
                kind=row["kind"],
                intent=row["intent"],
                stream=row["stream"] == "1",
                outcome=row["outcome"],
                coalesced=row["coalesced"] == "1",
                status=int(row["status"]),
                latency_ms=float(row["latency_ms"]),
                ttfb_ms=float(row["ttfb_ms"]) if row["ttfb_ms"] else None,
                ok=row["ok"] == "1",
                error=row["error"],
            )
            for row in csv.DictReader(file)
        ]


def percentiles(values_ms: list[float]) -> dict[str, float | int | None]:
    """count, p50, p90, p99 and mean, in milliseconds (nearest rank)."""
    ordered = sorted(values_ms)
    if not ordered:
        return {"count": 0, "p50_ms": None, "p90_ms": None, "p99_ms": None, "mean_ms": None}

    def rank(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)

    return {
        "count": len(ordered),
        "p50_ms": round(statistics.median(ordered), 2),
        "p90_ms": rank(0.9),
        "p99_ms": rank(0.99),
        "mean_ms": round(statistics.fmean(ordered), 2),
    }


def latency_by_outcome(rows: list[RequestRow]) -> dict[str, dict[str, Any]]:
    """Per outcome: every request, those served from the cache itself and those that waited for another
    request's upstream call (coalesced), non-streamed ones, streamed ones (whole stream) and the
    streams' time to first content. Failed requests are counted under ``error`` only."""
    groups: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        outcome = row.outcome if row.ok else "error"
        group = groups[outcome]
        group["all"].append(row.latency_ms)
        group["coalesced" if row.coalesced else "not_coalesced"].append(row.latency_ms)
        group["stream" if row.stream else "non_stream"].append(row.latency_ms)
        if row.stream and row.ttfb_ms is not None:
            group["stream_first_content"].append(row.ttfb_ms)
    ordered = [o for o in OUTCOMES if o in groups] + sorted(set(groups) - set(OUTCOMES))
    return {outcome: {part: percentiles(groups[outcome][part]) for part in LATENCY_PARTS} for outcome in ordered}


def outcomes_by_intent(rows: list[RequestRow]) -> dict[str, dict[str, int]]:
    """What each kind of request turned out to be: are repeats exact hits, rewordings semantic?"""
    table: dict[str, Counter[str]] = defaultdict(Counter)
    for row in rows:
        table[f"{row.kind} {row.intent}"][row.outcome if row.ok else "error"] += 1
    return {intent: dict(counts) for intent, counts in sorted(table.items())}


def errors_summary(rows: list[RequestRow]) -> dict[str, Any]:
    failed = [row for row in rows if not row.ok]
    kinds = Counter(row.error.split(":", 2)[0] + (f": {row.status}" if row.status else "") for row in failed)
    return {
        "requests": len(rows),
        "errors": len(failed),
        "error_rate": round(len(failed) / len(rows), 6) if rows else None,
        "kinds": dict(kinds.most_common(10)),
        "examples": sorted({row.error for row in failed})[:5],
    }


def throughput(rows: list[RequestRow]) -> dict[str, float | None]:
    if len(rows) < 2:
        return {"duration_s": None, "requests_per_s": None}
    duration = max(row.time for row in rows) - min(row.time - row.latency_ms / 1000 for row in rows)
    return {"duration_s": round(duration, 1), "requests_per_s": round(len(rows) / duration, 2)}


def slope(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of ys over xs, or None without two distinct xs."""
    if len(xs) < 2 or len(set(xs)) < 2:
        return None
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread


def warmup_end(samples: list[MemorySample], min_warmup_s: float) -> int | None:
    """Index of the first sample after warm-up: the store is full (the size bound has evicted
    something) and ``min_warmup_s`` has passed. None when the store never filled."""
    for index, sample in enumerate(samples):
        if sample.evicted > 0 and sample.elapsed_s >= min_warmup_s:
            return index
    return None


def memory_analysis(samples: list[MemorySample], bounds: MemoryBounds) -> dict[str, Any]:
    """RSS start, end and peak; RSS per stored entry while the store filled; RSS growth per 1,000
    requests once it was full, and whether that growth breaks the bound."""
    if not samples:
        return {"samples": 0, "verdict": "fail", "reason": "no memory samples were taken"}
    rss = [s.rss_bytes for s in samples]
    result: dict[str, Any] = {
        "samples": len(samples),
        "rss_start_mib": round(rss[0] / MIB, 1),
        "rss_end_mib": round(rss[-1] / MIB, 1),
        "rss_peak_mib": round(max(rss) / MIB, 1),
        "entries_end": samples[-1].entries,
        "evicted_end": samples[-1].evicted,
        "tombstones_end": samples[-1].tombstones,
        "bounds": asdict(bounds),
    }
    start = warmup_end(samples, bounds.min_warmup_s)
    # The first third of the filling is left out: it also pays for first-use allocations.
    filling = samples[: start + 1] if start is not None else samples
    filling = filling[len(filling) // 3 :]
    per_entry = slope([float(s.entries) for s in filling], [float(s.rss_bytes) for s in filling])
    result["rss_bytes_per_entry_while_filling"] = None if per_entry is None else round(per_entry)
    if start is None:
        result.update(verdict="not judged", reason="the store never filled up (nothing was evicted)")
        return result
    steady = samples[start:]
    requests = [float(s.requests) for s in steady]
    growth = slope(requests, [float(s.rss_bytes) for s in steady])
    window = requests[-1] - requests[0]
    result.update(
        warmup_s=round(steady[0].elapsed_s, 1),
        requests_after_warmup=int(window),
        entries_growth_per_1k_requests=_per_1k(slope(requests, [float(s.entries) for s in steady])),
        growth_bytes_per_1k_requests=_per_1k(growth),
        growth_mib_per_1k_requests=None if growth is None else round(growth * 1000 / MIB, 3),
        fitted_growth_after_warmup_mib=None if growth is None else round(growth * window / MIB, 1),
    )
    if growth is None or len(steady) < 3 or window < bounds.min_requests_judged:
        result.update(verdict="not judged", reason=f"fewer than {bounds.min_requests_judged} requests after warm-up")
    elif growth * 1000 > bounds.max_growth_bytes_per_1k_requests and growth * window > bounds.noise_floor_bytes:
        result.update(verdict="fail", reason="memory grows with requests after the store is full")
    else:
        result.update(verdict="pass", reason="flat within the bound")
    return result


def _per_1k(value: float | None) -> float | None:
    return None if value is None else round(value * 1000, 1)


def summary_markdown(summary: dict[str, Any]) -> str:
    """The human-readable report."""
    run, errors, memory, scan = summary["run"], summary["errors"], summary["memory"], summary["secret_scan"]
    verdict = f"**Verdict: {summary['verdict'].upper()}**"
    if summary["failures"]:
        verdict += ": " + "; ".join(summary["failures"])
    rate = summary["throughput"]
    lines = [
        f"# Load run {run['started']}",
        "",
        verdict,
        "",
        f"{run['users']} users for {run['duration']}, questions from {run['question_source']}; "
        f"upstream stand-in {run['upstream']}; semcache `{' '.join(run['semcache_args'])}`.",
        "",
        f"- throughput: {rate['requests_per_s']} requests/s over {rate['duration_s']} s",
        f"- requests: {errors['requests']}, errors: {errors['errors']} (rate {errors['error_rate']}, "
        f"bound {summary['bounds']['max_error_rate']})",
        f"- memory: RSS {memory.get('rss_start_mib')} MiB at start, {memory.get('rss_end_mib')} MiB at end, "
        f"peak {memory.get('rss_peak_mib')} MiB; {_kib(memory.get('rss_bytes_per_entry_while_filling'))} KiB of RSS "
        f"per entry while the store filled; after warm-up ({memory.get('warmup_s')} s, "
        f"{memory.get('requests_after_warmup')} requests): {memory.get('growth_mib_per_1k_requests')} MiB per 1,000 "
        f"requests, {memory.get('fitted_growth_after_warmup_mib')} MiB in all: **{memory['verdict']}** "
        f"({memory['reason']})",
        f"- secret scan: {scan['lines_scanned']} lines in {len(scan['files_scanned'])} files, "
        f"{len(scan['findings'])} findings",
        "",
        "| outcome | requests | p50 | p99 | not coalesced p50 / p99 | coalesced: requests, p50 | streamed p50 / p99 "
        "| stream first content p50 / p99 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for outcome, parts in summary["latency_by_outcome"].items():
        every, own, waited = parts["all"], parts["not_coalesced"], parts["coalesced"]
        stream, first = parts["stream"], parts["stream_first_content"]
        lines.append(
            f"| {outcome} | {every['count']} | {_ms(every['p50_ms'])} | {_ms(every['p99_ms'])} | "
            f"{_ms(own['p50_ms'])} / {_ms(own['p99_ms'])} | {waited['count']}, {_ms(waited['p50_ms'])} | "
            f"{_ms(stream['p50_ms'])} / {_ms(stream['p99_ms'])} | {_ms(first['p50_ms'])} / {_ms(first['p99_ms'])} |"
        )
    lines += ["", "| request | " + " | ".join(OUTCOMES) + " |", "|---" * (len(OUTCOMES) + 1) + "|"]
    for intent, counts in summary["outcomes_by_intent"].items():
        lines.append(f"| {intent} | " + " | ".join(str(counts.get(o, 0)) for o in OUTCOMES) + " |")
    if errors["errors"]:
        lines += ["", "Errors: " + ", ".join(f"{kind} ×{n}" for kind, n in errors["kinds"].items())]
    if scan["findings"]:
        lines += ["", "Secret scan findings (secrets masked):", ""]
        lines += [f"- {f['path']}:{f['line_number']}: {f['kind']}: `{f['excerpt']}`" for f in scan["findings"][:20]]
    return "\n".join(lines) + "\n"


def _kib(value: float | None) -> str:
    return "—" if value is None else f"{value / 1024:.1f}"


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f} ms"


def plot_memory(samples: list[MemorySample], warmup_s: float | None, path: Path, pyplot: Any) -> None:
    figure, (by_time, by_requests) = pyplot.subplots(1, 2, figsize=(11, 4))
    times = [s.elapsed_s / 60 for s in samples]
    rss_mib = [s.rss_bytes / MIB for s in samples]
    by_time.plot(times, rss_mib, label="RSS")
    by_time.set(xlabel="minutes", ylabel="semcache RSS (MiB)", title="Memory over time")
    entries_axis = by_time.twinx()
    entries_axis.plot(times, [s.entries for s in samples], color="tab:orange", alpha=0.6, label="entries")
    entries_axis.set_ylabel("stored entries")
    by_requests.plot([s.requests for s in samples], rss_mib)
    by_requests.set(xlabel="requests served", ylabel="semcache RSS (MiB)", title="Memory over requests")
    if warmup_s is not None:
        by_time.axvline(warmup_s / 60, color="grey", linestyle="--", label="end of warm-up")
    by_time.legend(loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    pyplot.close(figure)


def plot_latency(rows: list[RequestRow], path: Path, pyplot: Any) -> None:
    """Latency over time, one colour per outcome (log scale: hits and misses differ 100-fold)."""
    figure, axis = pyplot.subplots(figsize=(9, 4))
    start = min((row.time for row in rows), default=0.0)
    for outcome in OUTCOMES:
        chosen = [row for row in rows if (row.outcome if row.ok else "error") == outcome]
        if chosen:
            axis.scatter(
                [(r.time - start) / 60 for r in chosen], [r.latency_ms for r in chosen], s=2, label=outcome, alpha=0.5
            )
    axis.set(xlabel="minutes", ylabel="latency (ms)", yscale="log", title="Request latency by outcome")
    axis.legend(markerscale=5)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    pyplot.close(figure)
