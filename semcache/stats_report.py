"""``GET /stats`` as tables for people, for ``semcache stats``.

Reads only the JSON: fields an older server lacks are left out, never guessed.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from .wording import counted

_PATHS = (
    ("exact_hit", "exact hit"),
    ("template_hit", "template hit"),
    ("semantic_hit", "semantic hit"),
    ("miss", "miss"),
    ("bypass", "bypass"),
    ("error", "error"),
)
_NAMESPACE_ROWS = 10


def stats_report(data: dict[str, Any]) -> RenderableType:
    parts: list[RenderableType] = [_requests_table(data)]
    latency = data.get("latency")
    if isinstance(latency, dict) and isinstance(latency.get("paths"), dict):
        parts.append(_latency_table(latency))
    savings = data.get("savings")
    if isinstance(savings, dict):
        parts.append(_savings_table(savings))
    upkeep = _upkeep_line(data)
    if upkeep:
        parts.append(upkeep)
    return Group(*parts)


def _requests_table(data: dict[str, Any]) -> Table:
    scope = data.get("scope")
    table = Table(title="semcache requests" + (f" ({scope})" if scope else ""), title_justify="left")
    columns = ("namespace", "requests", "hits", "misses", "bypass", "errors", "hit rate", "tokens saved", "saved $")
    for column in columns:
        table.add_column(column, justify="left" if column == "namespace" else "right")
    by_namespace: dict[str, Any] = data.get("by_namespace") or {}
    top = {row["namespace"]: row for row in data.get("top_namespaces") or [] if isinstance(row, dict)}
    # The busiest first (the server ranks them), then the rest by name.
    order = [*top, *sorted(ns for ns in by_namespace if ns not in top)]
    table.add_row(*_request_cells("all", data, data.get("savings") or {}, total=True), end_section=True)
    for namespace in order[:_NAMESPACE_ROWS]:
        table.add_row(*_request_cells(namespace, by_namespace.get(namespace, {}), top.get(namespace, {})))
    tiers = data.get("tiers", {})
    caption = (
        f"entries: {data.get('entries')}   tiers: exact {tiers.get('exact', 0)}, "
        f"template {tiers.get('template', 0)}, semantic {tiers.get('semantic', 0)}"
    )
    if len(order) > _NAMESPACE_ROWS:
        caption += f"   (and {len(order) - _NAMESPACE_ROWS} more namespaces)"
    table.caption = caption
    return table


def _request_cells(name: str, counts: dict[str, Any], saved: dict[str, Any], total: bool = False) -> list[str]:
    tokens = saved.get("total_tokens" if total else "tokens_saved")
    cost = saved.get("cost_usd" if total else "cost_saved_usd")
    return [
        name,
        *(str(counts.get(k, 0)) for k in ("requests", "hits", "misses", "bypass", "errors")),
        f"{counts.get('hit_rate', 0.0):.1%}",
        "" if tokens is None else f"{tokens:,}",
        "" if cost is None else _dollars(cost),
    ]


def _latency_table(latency: dict[str, Any]) -> Table:
    window_min = latency.get("recent_window_s", 300) / 60
    scope = "this replica" if latency.get("scope") == "replica" else latency.get("scope", "")
    table = Table(title=f"latency in ms ({scope}): since start | last {window_min:g} min", title_justify="left")
    table.add_column("path")
    for period in ("", " recent"):
        for column in ("count", "p50", "p90", "p99"):
            table.add_column(column + period, justify="right")
    for key, label in _PATHS:
        figures = latency["paths"].get(key)
        if not isinstance(figures, dict):
            continue
        cells = [label]
        for period in ("lifetime", "recent"):
            row = figures.get(period) or {}
            cells += [str(row.get("count", 0)), *(_ms(row.get(q)) for q in ("p50_ms", "p90_ms", "p99_ms"))]
        table.add_row(*cells)
    return table


def _savings_table(savings: dict[str, Any]) -> Table:
    table = Table(title="saved by the cache (answers that needed no upstream call)", title_justify="left")
    for column in ("prompt tokens", "completion tokens", "total tokens", "estimated cost"):
        table.add_column(column, justify="right")
    table.add_row(
        f"{savings.get('prompt_tokens', 0):,}",
        f"{savings.get('completion_tokens', 0):,}",
        f"{savings.get('total_tokens', 0):,}",
        _dollars(savings.get("cost_usd", 0.0)),
    )
    unpriced = savings.get("unpriced_requests", 0)
    if unpriced:
        table.caption = f"{unpriced} of them for models without a price (set 'prices'): not in the cost"
    return table


def _upkeep_line(data: dict[str, Any]) -> Text | None:
    parts = []
    index = data.get("index")
    if isinstance(index, dict):
        parts.append(
            f"index: {counted(index.get('entries', 0), 'vector')}, {counted(index.get('tombstones', 0), 'tombstone')}, "
            f"{index.get('partitions', 0)} partitions, {index.get('rebuilds', 0)} rebuilds"
        )
    if "expired" in data or "evicted" in data:
        parts.append(f"expired {data.get('expired', 0)}, evicted {data.get('evicted', 0)}")
    embedding = data.get("embedding")
    if isinstance(embedding, dict):
        parts.append(
            f"embedding: {embedding.get('batches', 0)} batches, mean size {embedding.get('mean_batch_size', 0)}"
        )
    embeddings = data.get("embeddings")
    if isinstance(embeddings, dict) and embeddings.get("requests"):
        parts.append(
            f"/v1/embeddings: {embeddings.get('inputs_from_cache', 0)} of {embeddings.get('inputs', 0)} inputs "
            f"from the cache, {embeddings.get('tokens_saved', 0)} tokens saved"
        )
    return Text("   ".join(parts), style="dim") if parts else None


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _dollars(value: float) -> str:
    if not value:
        return "$0"
    return f"${value:,.2f}" if value >= 1 else f"${value:.6f}"
