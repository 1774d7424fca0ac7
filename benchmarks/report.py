"""What ``python -m benchmarks run`` concludes from its results: the ratios, the performance targets
with PASS/MISS, the markdown summary and the latency plot.

Every ratio is computed from figures of the same run. Latency "speed-ups" are the other cache's p50
divided by semcache's; throughput ratios are semcache's requests/s divided by the other's, each at
its best concurrency level.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from testkit.plots import pyplot

from .hit_quality_http import TABLE_HEAD as HIT_QUALITY_HEAD
from .hit_quality_http import table_rows as hit_quality_rows

PASS, MISS, UNMEASURED = "PASS", "MISS", "not measured"


# --- reading figures ----------------------------------------------------------------------------


def _levels(results: dict[str, Any], system: str) -> dict[str, dict[str, Any]]:
    part = results.get(system)
    return part.get("by_concurrency", {}) if isinstance(part, dict) else {}


def _lowest(results: dict[str, Any], system: str) -> str | None:
    levels = _levels(results, system)
    return min(levels, key=int) if levels else None


def p50(results: dict[str, Any], system: str, phase: str, clients: str | None = None) -> float | None:
    """p50 in ms of ``phase`` at ``clients`` (default: the fewest clients measured)."""
    clients = clients or _lowest(results, system)
    figures = _levels(results, system).get(clients or "", {}).get(phase, {})
    value = figures.get("p50_ms")
    return float(value) if value else None


def peak_rps(results: dict[str, Any], system: str, phase: str) -> tuple[float | None, str | None]:
    """(best requests/s of ``phase`` over the concurrency levels, at how many clients)."""
    best: tuple[float | None, str | None] = (None, None)
    for clients, phases in _levels(results, system).items():
        rps = phases.get(phase, {}).get("throughput_rps")
        if rps and (best[0] is None or rps > best[0]):
            best = (float(rps), clients)
    return best


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return round(numerator / denominator, 2)


def _paired_floor(results: dict[str, Any]) -> dict[str, Any]:
    """The one-prompt timings taken between the chunks of the semantic-hit phase, if any."""
    return (results.get("semcache") or {}).get("paired_floor") or {}


def one_prompt_floor(results: dict[str, Any]) -> tuple[float | None, str]:
    """The time to embed one prompt that the semantic hit is compared with: the timings paired
    with the semantic-hit phase when there are some, else the embedder part's."""
    paired = _paired_floor(results)
    if paired.get("one_prompt_p50_ms"):
        return paired["one_prompt_p50_ms"], "paired"
    return (results.get("embedder") or {}).get("one_prompt_p50_ms"), "embedder part"


def miss_prompt_floor(results: dict[str, Any]) -> tuple[float | None, str]:
    """One embedding of the prompts the fewest clients' misses sent, timed between the chunks of
    that miss phase; where it was not measured, the semantic hit's (``one_prompt_floor``)."""
    paired = _paired_floor(results).get("miss_prompts") or {}
    if paired.get("one_prompt_p50_ms"):
        return paired["one_prompt_p50_ms"], "one embedding of the miss prompts, timed between the phase's chunks"
    floor, source = one_prompt_floor(results)
    return floor, f"one embedding of the paraphrases, {source}"


def miss_prompt_after_idle(results: dict[str, Any]) -> str:
    """The miss prompts' embedding after a pause, as a clause of the miss target's figure, if it
    was measured: the allowance uses the back-to-back embedding, and this shows what the machine
    does to the same call when it follows a wait, as a miss's does."""
    after = (_paired_floor(results).get("miss_prompts") or {}).get("after_idle") or {}
    if not after.get("one_prompt_p50_ms"):
        return ""
    idle, ms = after.get("idle_ms"), after["one_prompt_p50_ms"]
    return f"; the same embedding after {idle} ms idle, as a miss's follows a wait: {ms} ms"


def hit_prompt_after_pause(results: dict[str, Any], semantic: float | None) -> str:
    """The paraphrases' embedding after a pause as long as an exact hit, and the semantic hit over
    it, as a clause of the semantic-hit target's figure, if it was measured: the target uses the
    back-to-back embedding; in a server each model call follows the rest of a request's work."""
    after = _paired_floor(results).get("after_pause") or {}
    ms = after.get("one_prompt_p50_ms")
    if not ms:
        return ""
    over = _ratio(semantic, ms)
    return (f"; over the same embedding after a pause as long as an exact hit ({after.get('pause_ms')} ms), "
            f"as a hit's model call follows a request's other work: {over}× ({ms} ms)")  # fmt: skip


def batched_floor(results: dict[str, Any]) -> tuple[float | None, str]:
    """The embedder's best batched rate that the most clients' semantic hits/s is compared with:
    measured around that phase when it was, else the embedder part's."""
    paired = _paired_floor(results).get("batched") or {}
    if paired.get("batched_texts_per_s"):
        return paired["batched_texts_per_s"], "measured just before and after the phase"
    return (results.get("embedder") or {}).get("batched_texts_per_s"), "embedder part"


def ratios(results: dict[str, Any]) -> dict[str, Any]:
    batched, _ = batched_floor(results)
    one_prompt, _ = one_prompt_floor(results)
    semantic_peak, _ = peak_rps(results, "semcache", "semantic_hit")
    exact_peak, _ = peak_rps(results, "semcache", "exact_hit")
    exact, semantic = p50(results, "semcache", "exact_hit"), p50(results, "semcache", "semantic_hit")
    miss_overhead = {}
    for clients, phases in _levels(results, "semcache").items():
        miss, direct = p50(results, "semcache", "miss", clients), p50(results, "semcache", "direct_upstream", clients)
        difference = None if miss is None or direct is None else round(miss - direct, 2)
        # Paired: the median over prompts of (miss - the same prompt sent straight to the stand-in),
        # whose delay is fixed per prompt. Results without the pairs fall back on the p50s' difference.
        paired = (phases.get("miss") or {}).get("added_over_direct") or {}
        miss_overhead[clients] = {
            "miss_over_direct_p50": _ratio(miss, direct),
            "added_p50_ms": paired.get("p50_ms", difference),
            "paired_prompts": paired.get("pairs"),
            "p50_difference_ms": difference,
        }
    return {
        "vs_embedder": {
            "semantic_hit_p50_over_one_prompt_embed": _ratio(semantic, one_prompt),
            "semantic_hit_peak_throughput_over_batched_embed": _ratio(semantic_peak, batched),
        },
        "vs_gptcache": {
            "exact_hit_speedup_p50": _ratio(p50(results, "gptcache", "exact_hit"), exact),
            "semantic_hit_speedup_p50": _ratio(p50(results, "gptcache", "semantic_hit"), semantic),
            "exact_hit_throughput_ratio": _ratio(exact_peak, peak_rps(results, "gptcache", "exact_hit")[0]),
            "semantic_hit_throughput_ratio": _ratio(semantic_peak, peak_rps(results, "gptcache", "semantic_hit")[0]),
        },
        "vs_litellm": {
            "exact_hit_speedup_p50": _ratio(p50(results, "litellm", "exact_hit"), exact),
            # LiteLLM's cache is exact only: a paraphrase is one of its misses.
            "paraphrase_speedup_p50": _ratio(p50(results, "litellm", "miss"), semantic),
            "exact_hit_throughput_ratio": _ratio(exact_peak, peak_rps(results, "litellm", "exact_hit")[0]),
            "semantic_hit_throughput_ratio": None,
        },
        "miss_overhead": miss_overhead,
    }


# --- targets ------------------------------------------------------------------------------------


def _target(name: str, goal: str, value: float | None, ok: bool | None, shown: str) -> dict[str, Any]:
    status = UNMEASURED if value is None or ok is None else PASS if ok else MISS
    return {
        "target": name,
        "goal": goal,
        "value": value,
        "measured": shown if value is not None else "—",
        "status": status,
    }


def _highest(results: dict[str, Any], system: str) -> str | None:
    levels = _levels(results, system)
    return max(levels, key=int) if levels else None


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's performance targets, each with the measured value and PASS, MISS or not measured."""
    found = ratios(results)
    batched, batched_source = batched_floor(results)
    one_prompt, floor_source = one_prompt_floor(results)
    exact, semantic = p50(results, "semcache", "exact_hit"), p50(results, "semcache", "semantic_hit")
    lowest = _lowest(results, "semcache") or "1"
    most = _highest(results, "semcache")
    at_most_clients = _levels(results, "semcache").get(most or "", {})
    semantic_at_most = (at_most_clients.get("semantic_hit") or {}).get("throughput_rps")
    over_embed = found["vs_embedder"]["semantic_hit_p50_over_one_prompt_embed"]
    # What no semantic hit can beat here: an exact hit's HTTP and store work, and one embedding.
    exact_plus_embed = None if exact is None or one_prompt is None else _ratio(exact + one_prompt, one_prompt)
    over_batched = _ratio(semantic_at_most, batched)
    miss_added = (found["miss_overhead"].get(lowest) or {}).get("added_p50_ms")
    pairs = (found["miss_overhead"].get(lowest) or {}).get("paired_prompts")
    miss_pairs = f" over {pairs} prompts paired" if pairs else ""
    miss_floor, miss_floor_source = miss_prompt_floor(results)
    miss_allowed = None if miss_floor is None else round(2.0 + miss_floor, 2)
    miss_after_idle = miss_prompt_after_idle(results)
    start = results.get("start") or {}
    ready = start.get("ready_p50_s")
    lag = (results.get("lag") or {}).get("healthz") or {}
    lag_p99 = lag.get("p99_ms")
    gpt = found["vs_gptcache"]

    def at_least(value: float | None, goal: float) -> bool | None:
        return None if value is None else value >= goal

    def at_most(value: float | None, goal: float | None) -> bool | None:
        return None if value is None or goal is None else value <= goal

    return [
        _target(
            f"semantic-hit p50 ({lowest} client) over one embedding of the same prompts",
            "≤ 1.3×",
            over_embed,
            at_most(over_embed, 1.3),
            f"{over_embed}× ({semantic} ms vs {one_prompt} ms, {floor_source}; an exact hit plus one embedding, "
            f"this machine's floor: {exact_plus_embed}×{hit_prompt_after_pause(results, semantic)})",
        ),
        _target(
            f"semantic hits/s at {most} clients over the embedder's best batched rate",
            "≥ 90%",
            over_batched,
            at_least(over_batched, 0.9),
            f"{over_batched:.0%} ({semantic_at_most}/s vs {batched}/s, {batched_source})" if over_batched else "",
        ),
        _target(
            f"exact-hit p50 ({lowest} client)",
            "≤ 0.5 ms",
            exact,
            at_most(exact, 0.5),
            f"{exact} ms",
        ),
        _target(
            f"what a miss adds ({lowest} client) beyond the upstream's own time, p50",
            "≤ 2 ms + one embedding",
            miss_added,
            at_most(miss_added, miss_allowed),
            f"{miss_added} ms{miss_pairs} (allowed {miss_allowed} ms: 2 ms + {miss_floor_source}{miss_after_idle})",
        ),
        _target(
            f"start on {start.get('entries', 1_000_000):,} entries to /healthz ready, p50",
            "≤ 5 s",
            ready,
            at_most(ready, 5.0),
            f"{ready} s ({start.get('store')}, {start.get('page_cache', '').split(' (')[0]} page cache)",
        ),
        _target(
            "/healthz p99 under mixed load (polled every 20 ms)",
            "≤ 20 ms",
            lag_p99,
            at_most(lag_p99, 20.0),
            f"{lag_p99} ms (max {lag.get('max_ms')} ms, {lag.get('count')} polls)",
        ),
        _target(
            "exact hits vs GPTCache, p50",
            "≥ 15× faster",
            gpt["exact_hit_speedup_p50"],
            at_least(gpt["exact_hit_speedup_p50"], 15),
            f"{gpt['exact_hit_speedup_p50']}×",
        ),
        _target(
            "semantic hits vs GPTCache, p50",
            "≥ 3× faster",
            gpt["semantic_hit_speedup_p50"],
            at_least(gpt["semantic_hit_speedup_p50"], 3),
            f"{gpt['semantic_hit_speedup_p50']}×",
        ),
        _target(
            "semantic-hit throughput vs GPTCache (each at its best concurrency)",
            "≥ 8×",
            gpt["semantic_hit_throughput_ratio"],
            at_least(gpt["semantic_hit_throughput_ratio"], 8),
            f"{gpt['semantic_hit_throughput_ratio']}×",
        ),
        *_hit_quality_targets(results),
    ]


def _hit_quality_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The hit_quality part's goals, when it ran: per trace and mode, each PASS, MISS or not measured."""
    found = []
    for run in (results.get("hit_quality") or {}).get("runs", []):
        for goal in run["targets"]:
            found.append({"target": f"hit quality over HTTP, {run['trace']} / {run['mode']}", "goal": goal["goal"],
                          "value": None, "measured": goal["measured"], "status": goal["status"]})  # fmt: skip
    return found


# --- markdown -----------------------------------------------------------------------------------

PHASE_NAMES = {
    "exact_hit": "exact hit",
    "semantic_hit": "semantic hit",
    "miss": "miss",
    "direct_upstream": "stand-in called directly",
    "direct": "no cache",
}
SYSTEM_NAMES = {"semcache": "semcache", "gptcache": "GPTCache", "litellm": "LiteLLM proxy", "upstream": "stand-in"}


def markdown(results: dict[str, Any]) -> str:
    sections = [
        _header(results),
        _targets_section(results),
        _http_section(results),
        _embedder_section(results),
        _steps_section(results),
        _comparison_section(results),
        _lag_section(results),
        _start_section(results),
        _index_section(results),
        _hit_quality_section(results),
        _notes_section(results),
    ]
    return "\n\n".join(s for s in sections if s) + "\n"


def _table(head: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join("—" if cell is None else str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _header(results: dict[str, Any]) -> str:
    meta = results.get("meta", {})
    load = meta.get("load_average_before")
    lines = [
        "# semcache benchmarks",
        "",
        f"`{meta.get('command', 'python -m benchmarks run')}` ({meta.get('mode')} mode), started {meta.get('started')} "
        f"on {meta.get('host')} ({meta.get('cpus')} cores, load average {load} before"
        + (f", {meta['load_average_after']} after" if meta.get("load_average_after") else "")
        + f"), commit {meta.get('commit')}.",
        f"Upstream: {meta.get('upstream')}. Clients, semcache, the stand-in and the other caches share the machine.",
    ]
    return "\n".join(lines)


def _targets_section(results: dict[str, Any]) -> str:
    rows = [[t["target"], t["goal"], t["measured"], f"**{t['status']}**"] for t in results.get("targets", [])]
    return "## Targets\n\n" + _table(["target", "goal", "measured", "status"], rows)


PHASE_HEAD = ["system", "path", "clients", "p50 ms", "p99 ms", "requests/s", "counted/sent"]
PHASE_HEAD += ["client cores", "server cores"]


def _phase_rows(results: dict[str, Any], system: str) -> list[list[Any]]:
    rows = []
    for clients, phases in sorted(_levels(results, system).items(), key=lambda item: int(item[0])):
        for phase, f in phases.items():
            sent = sum(f.get("outcomes", {}).values())
            rows.append(
                [
                    SYSTEM_NAMES[system],
                    PHASE_NAMES.get(phase, phase),
                    clients,
                    f.get("p50_ms"),
                    f.get("p99_ms"),
                    f.get("throughput_rps"),
                    f"{f.get('count', 0)}/{sent}",
                    f.get("client_cores"),
                    f.get("server_cores"),
                ]
            )
    return rows


def _http_section(results: dict[str, Any]) -> str:
    part = results.get("semcache", {})
    if not _levels(results, "semcache"):
        return "## HTTP latency and throughput\n\n" + _why_not(part)
    text = [
        "## HTTP latency and throughput",
        "",
        "Closed loop: each client sends its next request when its last is answered. Misses are new prompts "
        "(each with its own number); the same prompts also go straight to the stand-in, for the miss overhead. "
        "`counted/sent`: requests with the expected outcome (only those count) out of all sent. "
        "`requests/s`: counted requests over the time from the phase's start to its last counted answer; a "
        "request not counted (a paraphrase the verifier refused waits for the stand-in, hundreds of ms) may "
        "hold the phase open longer, and that tail is not the counted path's speed (the outcomes and the "
        "whole wall time are in `results.json`). "
        "`client cores`, `server cores`: CPU time of the load generator and of the server over the phase's wall "
        "time; on 2 cores, a sum near 2 means the machine, not the server alone, set the pace.",
        "",
        _table(
            PHASE_HEAD,
            _phase_rows(results, "semcache"),
        ),
    ]
    overhead = results.get("ratios", {}).get("miss_overhead", {})
    if overhead:
        rows = [
            [c, o["miss_over_direct_p50"], o["added_p50_ms"], o.get("paired_prompts"), o.get("p50_difference_ms")]
            for c, o in sorted(overhead.items(), key=lambda i: int(i[0]))
        ]
        text += [
            "",
            "Miss overhead. Each new prompt went straight to the stand-in, then through semcache; the stand-in "
            "waits the same for a prompt on both paths. `added p50 ms`: the median over prompts of (its miss "
            "through semcache - its direct call), the figure the target judges; `ratio` and `difference of "
            "p50s` compare the two phases' medians, which carry the spread of the upstream's delays.",
            "",
            _table(["clients", "ratio", "added p50 ms", "prompts paired", "difference of p50s ms"], rows),
        ]
    if results.get("meta", {}).get("plot"):
        text += ["", f"![latency distributions]({results['meta']['plot']})"]
    return "\n".join(text)


def _p50_row(measured: dict[str, Any], label: str) -> list[list[str]]:
    """A row of ``measured``'s one-prompt p50 under ``label``; none where it was not measured."""
    if not measured.get("one_prompt_p50_ms"):
        return []
    return [[label, f"{measured['one_prompt_p50_ms']} ms"]]


def _embedder_section(results: dict[str, Any]) -> str:
    embedder = results.get("embedder", {})
    if "one_prompt_p50_ms" not in embedder:
        return "## Embedder floor\n\n" + _why_not(embedder)
    described = embedder.get("embedder", {})
    setup = ", ".join(f"{k} {v}" for k, v in described.items())
    rows = [
        ["one prompt per call, p50", f"{embedder.get('one_prompt_p50_ms')} ms"],
        ["one prompt per call, p99", f"{embedder.get('one_prompt_p99_ms')} ms"],
    ]
    idle = embedder.get("after_idle") or {}
    rows += _p50_row(
        idle, f"one prompt per call, p50, each after {idle.get('idle_ms')} ms idle ({idle.get('count')} calls)"
    )
    paired = _paired_floor(results)
    rows += _p50_row(
        paired, f"one prompt per call, p50, between the chunks of the semantic-hit phase ({paired.get('count')} calls)"
    )
    pause = paired.get("after_pause") or {}
    rows += _p50_row(pause, f"the same prompts, each after a pause of {pause.get('pause_ms')} ms (an exact hit's p50)")
    around = paired.get("batched") or {}
    if around.get("batched_texts_per_s"):
        rates = ", ".join(f"{size}: {rate}" for size, rate in around.get("batched_by_size", {}).items())
        rows.append([
            "best batched rate, just before and after the most clients' semantic-hit phase (by batch size: "
            f"{rates})", f"{around['batched_texts_per_s']} prompts/s",
        ])  # fmt: skip
    misses = paired.get("miss_prompts") or {}
    rows += _p50_row(
        misses,
        f"one prompt per call, p50, the miss phase's own prompts, between its chunks ({misses.get('count')} calls)",
    )
    idle = misses.get("after_idle") or {}
    rows += _p50_row(idle, f"the same prompts, each after {idle.get('idle_ms')} ms idle")
    by_size = embedder.get("batched_by_size") or {str(embedder.get("batch_size")): embedder.get("batched_texts_per_s")}
    best = str(embedder.get("batched_best_size", embedder.get("batch_size")))
    for size, rate in by_size.items():
        rows.append([f"batches of {size}" + (" (the floor: the best)" if size == best else ""), f"{rate} prompts/s"])
    return f"## Embedder floor\n\nThe embedder semcache is configured with ({setup}), in its own process:\n\n" + _table(
        ["measure", "value"], rows
    )


_STEP_NAMES = {
    "exact_lookup": "exact lookup (store)",
    "embedding": "embedding (the model alone)",
    "index_search": "index search",
    "candidate_read": "candidate read (store)",
    "guards": "guards",
}


def _steps_section(results: dict[str, Any]) -> str:
    semcache = results.get("semcache")
    if not isinstance(semcache, dict) or "by_concurrency" not in semcache:
        return ""  # the HTTP part did not run: its section says why
    found = semcache.get("semantic_hit_steps") or {"skipped": "not recorded"}
    title = "## Where a semantic hit's time goes"
    if "steps" not in found:
        return f"{title}\n\n" + _why_not(found)
    rows = [[_STEP_NAMES.get(step, step), value["mean_ms"], value["calls_per_hit"]]
            for step, value in found["steps"].items()]  # fmt: skip
    rows.append(["the rest (about): request parsing, keys, the template tier, the hand-off to the embedding "
                 "thread and back, the decision, the response, the log line", found["rest_ms"], "—"])  # fmt: skip
    rows.append(["**the server's semantic hit** (`semcache_request_duration_seconds`)", found["server_mean_ms"], 1])
    if "client_mean_ms" in found:
        rows.append(["beyond the server: HTTP on loopback and the client's own work", found["beyond_server_ms"], "—"])
        rows.append(["**the client's semantic hit**", found["client_mean_ms"], 1])
    intro = (
        f"Means over the {found['semantic_hits']} semantic hits of the one-client phase, from the server's own step "
        "histograms (`/metrics`, read before and after it; `benchmarks/hit_steps.py`). Each step is the mean of its "
        "calls; a step with more calls than hits also ran for the phase's few other requests (the embedding's then "
        "include the answer judge's embeddings of two answers after a miss), so the rest is approximate."
    )
    return f"{title}\n\n{intro}\n\n" + _table(["step", "mean ms", "calls per hit"], rows)


def _comparison_section(results: dict[str, Any]) -> str:
    text = ["## Side by side: semcache, GPTCache, LiteLLM", ""]
    found = results.get("ratios", {})
    gpt, lite = found.get("vs_gptcache", {}), found.get("vs_litellm", {})

    def cell(system: str, phase: str, kind: str) -> Any:
        if kind == "p50":
            return p50(results, system, phase)
        rps, at = peak_rps(results, system, phase)
        return None if rps is None else f"{rps} ({at} client{'' if at == '1' else 's'})"

    lite_semantic = "no semantic cache" if _levels(results, "litellm") else None
    rows = [
        [
            "exact hit p50 ms (fewest clients)",
            cell("semcache", "exact_hit", "p50"),
            cell("gptcache", "exact_hit", "p50"),
            cell("litellm", "exact_hit", "p50"),
            gpt.get("exact_hit_speedup_p50"),
            lite.get("exact_hit_speedup_p50"),
        ],
        [
            "semantic hit p50 ms (fewest clients)",
            cell("semcache", "semantic_hit", "p50"),
            cell("gptcache", "semantic_hit", "p50"),
            None if lite_semantic is None else f"{lite_semantic}: a miss, {p50(results, 'litellm', 'miss')}",
            gpt.get("semantic_hit_speedup_p50"),
            lite.get("paraphrase_speedup_p50"),
        ],
        [
            "exact hits/s (best)",
            cell("semcache", "exact_hit", "rps"),
            cell("gptcache", "exact_hit", "rps"),
            cell("litellm", "exact_hit", "rps"),
            gpt.get("exact_hit_throughput_ratio"),
            lite.get("exact_hit_throughput_ratio"),
        ],
        [
            "semantic hits/s (best)",
            cell("semcache", "semantic_hit", "rps"),
            cell("gptcache", "semantic_hit", "rps"),
            lite_semantic,
            gpt.get("semantic_hit_throughput_ratio"),
            None,
        ],
    ]
    text.append(_table(["", "semcache", "GPTCache", "LiteLLM", "× vs GPTCache", "× vs LiteLLM"], rows))
    text += [
        "",
        "× columns: p50 rows are the other's p50 over semcache's (times faster); throughput rows are "
        "semcache's requests/s over the other's.",
    ]
    for system in ("gptcache", "litellm"):
        part = results.get(system, {})
        if _levels(results, system):
            text += [
                "",
                f"{SYSTEM_NAMES[system]} by concurrency:",
                "",
                _table(
                    PHASE_HEAD,
                    _phase_rows(results, system),
                ),
            ]
            text += ["", _setup_line(system, part)]
        else:
            text += ["", f"{SYSTEM_NAMES[system]}: {_why_not(part)}"]
    return "\n".join(text)


def _setup_line(system: str, part: dict[str, Any]) -> str:
    if system == "gptcache":
        c = part.get("config", {})
        return (
            f"GPTCache {c.get('version')}: {c.get('setup')}; torch threads {c.get('torch_threads')}; "
            f"similarity threshold {c.get('similarity_threshold')} (cosine ≥ {c.get('equivalent_min_cosine')}). "
            "Measured as in-process `get()` calls from as many threads as clients, with no HTTP in the way "
            "(which favours it)."
        )
    return (
        f"LiteLLM proxy with `cache: true`, `cache_params: {{type: {part.get('cache')}}}`, one worker. "
        f"Paraphrases of stored prompts: {part.get('paraphrase_outcomes')}. {part.get('semantic_hit')}."
    )


def _lag_section(results: dict[str, Any]) -> str:
    part = results.get("lag", {})
    if "healthz" not in part:
        return "## The event loop under mixed load\n\n" + _why_not(part)
    health = part["healthz"]
    rows = [
        [
            "`/healthz` (every 20 ms)",
            health.get("count"),
            health.get("p50_ms"),
            health.get("p99_ms"),
            health.get("max_ms"),
            f"{health.get('over_20ms')} over 20 ms, {health.get('errors')} errors",
        ]
    ]
    for kind, f in part.get("load", {}).items():
        rows.append([f"{kind} ({f.get('clients')} clients)", f.get("count"), f.get("p50_ms"), f.get("p99_ms"), None,
                     ", ".join(f"{k} {v}" for k, v in f.get("outcomes", {}).items())])  # fmt: skip
    intro = (
        f"`benchmarks.loop_lag`, {part.get('seconds')} s: `/healthz` polled every 20 ms from a thread of its own "
        "while closed-loop clients get semantic hits (paraphrases of stored prompts), send new prompts (misses, "
        "the stand-in's delay as above) and stream stored prompts. `/healthz` does no work: its latency is the "
        "wait for semcache's event loop."
    )
    head = ["requests", "count", "p50 ms", "p99 ms", "max ms", "outcomes"]
    return "## The event loop under mixed load\n\n" + intro + "\n\n" + _table(head, rows)


def _start_section(results: dict[str, Any]) -> str:
    part = results.get("start", {})
    if "ready_s" not in part:
        return "## Start-up on a large data folder\n\n" + _why_not(part)
    sizes = ", ".join(f"{name} {size / 2**20:,.0f} MiB" for name, size in part.get("folder_bytes", {}).items())
    lines = [
        f"`benchmarks.startup`: `semcache serve` on a data folder of {part['entries']:,} entries "
        f"({part.get('store')}; {part.get('entry_bytes')}; {part.get('index')}; {sizes}), from launch to the "
        f"first 200 of `/healthz` polled every 20 ms. Page cache: {part.get('page_cache')}. Model export: "
        f"{part.get('model_export')}.",
        "",
        _table(
            ["starts (s)", "p50 s", "CPU s at ready (all threads)", "first request after"],
            [
                [
                    ", ".join(map(str, part["ready_s"])),
                    part["ready_p50_s"],
                    ", ".join(map(str, part.get("cpu_s", []))),
                    ", ".join(map(str, part["first_request"])),
                ]
            ],
        ),
    ]
    return "## Start-up on a large data folder\n\n" + "\n".join(lines)


def _index_section(results: dict[str, Any]) -> str:
    part = results.get("index", {})
    sizes = [k for k in part if k.isdigit()]
    if not sizes:
        return "## Vector index\n\n" + _why_not(part)
    rows = []
    for size in sorted(sizes, key=int):
        for kind, f in part[size].items():
            rows.append(
                [
                    f"{int(size):,}",
                    kind,
                    f["build_s"],
                    f["search_p50_ms"],
                    f["search_p99_ms"],
                    f["recall_at_1"],
                    f["serialized_mb"],
                    f["bytes_per_entry"],
                    f["peak_rss_growth_mb"],
                ]
            )
    head = [
        "entries",
        "index",
        "build s",
        "search p50 ms",
        "search p99 ms",
        "recall@1 vs exact",
        "index MB",
        "bytes/entry",
        "peak RSS growth MB",
    ]
    intro = (
        f"`benchmarks.index_search` on synthetic clustered 384-d unit vectors, {part.get('queries')} noisy "
        f"queries one at a time; FAISS built with {part.get('build_threads')} threads and searched with "
        f"{part.get('search_threads')}. semcache searches a scope flat (exact) below `hnsw_min_entries` and "
        "with HNSW (M=32) above it."
    )
    return "## Vector index\n\n" + intro + "\n\n" + _table(head, rows)


def _hit_quality_section(results: dict[str, Any]) -> str:
    part = results.get("hit_quality")
    if part is None:
        return ""  # an opt-in part, not asked for
    if not part.get("runs"):
        return "## Hit quality over HTTP\n\n" + _why_not(part)
    text = [
        "## Hit quality over HTTP",
        "",
        f"`benchmarks.hit_quality_http`: each labelled trace ({part.get('limit') or 'every'} requests each) in "
        "arrival order through a fresh `semcache serve` at its defaults, the upstream a labelled stand-in that "
        "words each answer anew and errs in its verdicts like a model.",
        "",
        _table(HIT_QUALITY_HEAD, hit_quality_rows(part)),
    ]
    if part.get("plot"):
        text += ["", f"![hit quality]({part['plot']})"]
    return "\n".join(text)


def _notes_section(results: dict[str, Any]) -> str:
    notes = list(results.get("notes", []))
    for part in ("embedder", "semcache", "lag", "gptcache", "litellm", "index", "start", "hit_quality"):
        if isinstance(results.get(part), dict) and "skipped" in results[part]:
            notes.append(f"{part}: skipped ({results[part]['skipped']})")
    if not notes:
        return ""
    return "## Not measured, and other notes\n\n" + "\n".join(f"- {note}" for note in dict.fromkeys(notes))


def _why_not(part: Any) -> str:
    if isinstance(part, dict) and part.get("skipped"):
        return f"skipped: {part['skipped']}."
    if isinstance(part, dict) and part.get("error"):
        return f"failed: {part['error']}"
    return "not measured."


# --- the plot -----------------------------------------------------------------------------------


def plot(samples: dict[str, dict[str, dict[str, list[float]]]], path: Path) -> Path | None:
    """Latency distributions (ECDF, log scale) at the fewest and the most clients, one line per
    cache and path; returns ``path``, or None when nothing was measured or matplotlib is missing."""
    levels = sorted({int(c) for by_level in samples.values() for c in by_level})
    plt = pyplot() if levels else None
    if plt is None:
        return None
    from matplotlib import ticker

    shown = [levels[0], levels[-1]] if len(levels) > 1 else levels
    figure, axes = plt.subplots(1, len(shown), figsize=(7 * len(shown), 4.8), squeeze=False)
    for axis, clients in zip(axes[0], shown, strict=True):
        for system, by_level in samples.items():
            for phase, values in by_level.get(str(clients), {}).items():
                if not values:
                    continue
                ordered = sorted(values)
                fractions = [(i + 1) / len(ordered) for i in range(len(ordered))]
                label = f"{SYSTEM_NAMES.get(system, system)}: {PHASE_NAMES.get(phase, phase)}"
                axis.step(ordered, fractions, where="post", label=f"{label} (p50 {statistics.median(ordered):.1f} ms)")
        axis.set_xscale("log")
        axis.xaxis.set_major_formatter(ticker.FuncFormatter(lambda value, _: f"{value:g}"))
        axis.xaxis.set_minor_formatter(ticker.NullFormatter())  # minor labels overlap within a decade
        axis.set_xlabel("latency (ms, log scale)")
        axis.set_ylabel("fraction of requests")
        axis.set_title(f"{clients} concurrent client{'s' if clients > 1 else ''}")
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=7, loc="best")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
