"""Tables and plots of evaluation reports."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from rich.table import Table

from .pairs import PairsReport, Scores
from .trace import TraceReport


def pairs_table(report: PairsReport) -> Table:
    table = Table(
        title=f"pairs at threshold {_thresholds(report.policy)} with guards {report.policy['guards'] or 'none'}"
    )
    for column in ("source", "precision", "recall", "F1", "accepted", "positives"):
        table.add_column(column, justify="left" if column == "source" else "right")
    rows = [("all", report.at_policy)]
    if len(report.by_source) > 1:
        rows += report.by_source.items()
    mixed = len(report.by_language) > 1
    if mixed:
        rows += [
            (f"script {name} (threshold {part.threshold})", part.at_policy) for name, part in report.by_language.items()
        ]
    for name, scores in rows:
        table.add_row(name, f"{scores.precision:.3f}", f"{scores.recall:.3f}", f"{scores.f1:.3f}",
                      str(scores.accepted), str(scores.positives))  # fmt: skip
    asked = report.verification.get("asked", 0)
    if asked:
        table.add_row(f"verified (verify {report.policy['verify']})", "", "", "",
                      f"{report.verification['approved']} of {asked}", "")  # fmt: skip
    if mixed:
        table.caption = "; ".join(
            f"{name}: {_best_caption(report.target_precision, part.best_threshold, part.best)}"
            for name, part in report.by_language.items()
        )
    else:
        (part,) = report.by_language.values()
        table.caption = _best_caption(report.target_precision, part.best_threshold, part.best)
    return table


def _thresholds(policy: dict[str, Any]) -> str:
    """ "0.91 (han 0.985, other 0.985)": the threshold, and those of scripts with their own."""
    own = ", ".join(f"{script} {value}" for script, value in sorted(policy.get("thresholds", {}).items()))
    return f"{policy['threshold']} ({own})" if own else str(policy["threshold"])


def _best_caption(target: float, threshold: float | None, best: Scores | None) -> str:
    if threshold is None or best is None:
        return f"no threshold reaches precision {target}"
    return (
        f"most recall at precision ≥ {target}: threshold {threshold} "
        f"(precision {best.precision:.3f}, recall {best.recall:.3f})"
    )


def trace_table(report: TraceReport) -> Table:
    how = "learning within target_error " + f"{report.policy['target_error']:.1%}, prior" if report.learned else "at"
    table = Table(
        title=f"trace replay {how} threshold {_thresholds(report.policy)}, guards {report.policy['guards'] or 'none'}"
    )
    table.add_column("measure")
    table.add_column("value", justify="right")
    rows = [
        ("requests", f"{report.requests} (labelled pairs, order from seed {report.seed})" if report.from_pairs
         else report.requests),
        ("hits (exact / template / semantic)",
         f"{report.hits} ({report.tiers['exact']} / {report.tiers['template']} / {report.tiers['semantic']})"),
        ("correct hits", report.correct_hits),
        ("wrong hits", report.wrong_hits),
        ("wrong-hit rate", f"{report.wrong_hit_rate:.1%}"),
        ("share of possible hits served", f"{report.served_share:.1%} of {report.possible_hits}"),
        ("second half: wrong-hit rate / share served",
         f"{report.second_half['wrong_hit_rate']:.1%} / {report.second_half['served_share']:.1%}"),
        ("upstream calls", report.upstream_calls),
        ("extra upstream calls", f"{report.extra_upstream_calls} ({report.extra_upstream_share:.1%} of requests)"),
        ("wrong hits reported by simulated users", report.reported_wrong),
    ]  # fmt: skip
    verification = report.verification
    if verification and verification["mode"] != "off":
        verdicts = verification["verdicts"]
        rows += [
            (f"verifications ({verification['mode']})",
             f"{verification['asked']} ({verification['share_of_requests']:.1%} of requests), band from "
             f"{verification['band']['lower_edge']}"),
            ("verifier: yes / no on right pairs; yes / no on wrong pairs",
             f"{verdicts.get('yes_right', 0)} / {verdicts.get('no_right', 0)}; "
             f"{verdicts.get('yes_wrong', 0)} / {verdicts.get('no_wrong', 0)}"),
        ]  # fmt: skip
    if report.learned:
        budget, calibration = report.budget, report.calibration
        low, high = budget["interval"]
        rows += [
            ("decision line at the end", budget["decision_line"]),
            ("labels (near miss / explored / feedback)",
             " / ".join(str(budget["labels"][s]) for s in ("near_miss", "explored", "feedback"))),
            ("explored would-be hits", report.explored),
            (f"estimated wrong share ({budget['confidence']:.0%} interval)",
             f"{budget['estimated_error']:.1%} ({low:.1%}-{high:.1%})"),
            (f"observed wrong share of semantic hits after request {calibration['from_request']:.0f}",
             f"{calibration['observed']:.1%} of {calibration['semantic_hits']:.0f}"),
            ("judge: right / wrong / abstained", " / ".join(str(sum(v for k, v in report.judge.items()
                                                                    if k.startswith(p))) for p in
                                                             ("right", "wrong", "abstained"))),
        ]  # fmt: skip
    for name, value in rows:
        table.add_row(name, str(value))
    return table


def plot_pairs(report: PairsReport, path: Path) -> None:
    plt = _pyplot()
    figure, (histogram, curve) = plt.subplots(1, 2, figsize=(12, 4.5))
    similarities, labels = np.array(report.similarities), np.array(report.labels)
    bins = np.linspace(max(similarities.min(), 0.0), 1.0, 50)
    histogram.hist(similarities[labels], bins=bins, alpha=0.6, label="duplicates")
    histogram.hist(similarities[~labels], bins=bins, alpha=0.6, label="not duplicates")
    histogram.axvline(report.policy["threshold"], color="black", linestyle="--", label="threshold")
    histogram.set_xlabel("cosine similarity")
    histogram.set_ylabel("pairs")
    histogram.set_title("similarity by label")
    histogram.legend()
    thresholds = [c["threshold"] for c in report.curve]
    curve.plot(thresholds, [c["precision"] for c in report.curve], marker=".", label="precision")
    curve.plot(thresholds, [c["recall"] for c in report.curve], marker=".", label="recall")
    curve.axhline(report.target_precision, color="grey", linestyle=":", label=f"target {report.target_precision}")
    if report.best_threshold is not None:
        curve.axvline(report.best_threshold, color="black", linestyle="--", label=f"best {report.best_threshold}")
    curve.set_xlabel("threshold (with guards and verification as configured)")
    curve.set_title("precision and recall against threshold")
    curve.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def plot_trace_sweep(points: list[TraceReport], path: Path, learned: TraceReport | None = None) -> None:
    """Wrong share against served share at fixed thresholds; with ``learned``, where the learned line
    landed, and its learning curve: the line, and the estimated against the observed wrong share."""
    plt = _pyplot()
    figure, axes = plt.subplots(1, 2 if learned else 1, figsize=(13 if learned else 7, 4.5), squeeze=False)
    axis = axes[0][0]
    axis.plot([p.served_share for p in points], [p.wrong_hit_rate for p in points], marker="o", label="fixed")
    for point in points:
        axis.annotate(str(point.policy["threshold"]), (point.served_share, point.wrong_hit_rate), fontsize=8)
    if learned is not None:
        axis.plot([learned.served_share], [learned.wrong_hit_rate], marker="*", markersize=14, linestyle="",
                  label=f"learned (target {learned.policy['target_error']:.0%})")  # fmt: skip
        axis.legend()
    axis.set_xlabel("share of possible hits served")
    axis.set_ylabel("share of hits that were wrong")
    axis.set_title("trace replay over thresholds")
    axis.grid(alpha=0.3)
    if learned is not None:
        curve = axes[0][1]
        requests = [c["requests"] for c in learned.curve]
        curve.plot(requests, [c["estimated_error"] for c in learned.curve], label="estimated wrong share")
        curve.plot(requests, [c["observed_error"] for c in learned.curve], label="observed wrong share (so far)")
        curve.plot(requests, [c["served_share"] for c in learned.curve], label="share of possible hits served")
        curve.axhline(learned.policy["target_error"], color="grey", linestyle=":", label="target_error")
        line = curve.twinx()
        line.plot(requests, [c["line"] for c in learned.curve], color="black", linestyle="--", label="decision line")
        line.set_ylabel("decision line (cosine)")
        curve.set_xlabel("requests replayed")
        curve.set_title("learning curve")
        curve.legend(loc="upper left", fontsize=8)
        line.legend(loc="upper right", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
