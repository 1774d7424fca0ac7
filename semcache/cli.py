"""The ``semcache`` command line."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Annotated, Any, NoReturn

import httpx
import typer
from pydantic import ValidationError
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from .settings import Settings

app = typer.Typer(
    help="semcache: a semantic cache in front of OpenAI-compatible chat APIs.",
    no_args_is_help=True,
    add_completion=False,
)
console = Console()


@app.command(epilog="Example: semcache serve --upstream http://127.0.0.1:8000/v1 --port 8080")
def serve(
    host: Annotated[
        str | None, typer.Option(help="Interface to listen on. (env SEMCACHE_HOST; default 127.0.0.1)")
    ] = None,
    port: Annotated[int | None, typer.Option(help="Port. (env SEMCACHE_PORT; default 8080)")] = None,
    upstream: Annotated[
        str | None, typer.Option(help="OpenAI-compatible base URL. (env SEMCACHE_UPSTREAM_URL)")
    ] = None,
    data_dir: Annotated[
        Path | None, typer.Option(help="Entries and index folder. (env SEMCACHE_DATA_DIR; default index/)")
    ] = None,
    templates: Annotated[
        Path | None, typer.Option(help="Template file, YAML or JSON. (env SEMCACHE_TEMPLATES)")
    ] = None,
    threshold: Annotated[
        float | None, typer.Option(help="Minimum cosine (0-1) for a semantic hit. (env SEMCACHE_THRESHOLD)")
    ] = None,
    ttl: Annotated[float | None, typer.Option(help="Default TTL in seconds, 0 = forever. (env SEMCACHE_TTL)")] = None,
    max_entries: Annotated[
        int | None, typer.Option(help="Size bound, LRU eviction. (env SEMCACHE_MAX_ENTRIES)")
    ] = None,
    config: Annotated[Path | None, typer.Option(help="YAML file with any setting. (env SEMCACHE_CONFIG)")] = None,
    backend: Annotated[
        str | None, typer.Option(help="'remote' (an OpenAI-compatible API) or 'local'. (env SEMCACHE_BACKEND)")
    ] = None,
    model: Annotated[
        Path | None, typer.Option(help="Local Hugging Face model folder, with --backend local. (env SEMCACHE_MODEL)")
    ] = None,
    store: Annotated[
        str | None, typer.Option(help="'embedded' (SQLite) or 'redis' (shared by replicas). (env SEMCACHE_STORE)")
    ] = None,
    redis_url: Annotated[
        str | None, typer.Option(help="Redis URL, with --store redis. (env SEMCACHE_REDIS_URL)")
    ] = None,
    log_level: Annotated[str, typer.Option(help="Log level.")] = "info",
) -> None:
    """Run the caching proxy."""
    import uvicorn

    from .server import create_app

    flags = {
        "host": host,
        "port": port,
        "upstream_url": upstream,
        "data_dir": data_dir,
        "templates": templates,
        "threshold": threshold,
        "ttl": ttl,
        "max_entries": max_entries,
        "config": config,
        "backend": backend,
        "model": model,
        "store": store,
        "redis_url": redis_url,
    }
    settings = _settings({k: v for k, v in flags.items() if v is not None})
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        application = create_app(settings)
    except (OSError, ValueError) as exc:
        _fail(str(exc))
    uvicorn.run(application, host=settings.host, port=settings.port, log_level=log_level.lower())


@app.command(epilog="Example: semcache stats --url http://127.0.0.1:8080")
def stats(
    url: Annotated[str, typer.Option(help="Base URL of a running semcache.")] = "http://127.0.0.1:8080",
    as_json: Annotated[bool, typer.Option("--json", help="Print raw JSON.")] = False,
) -> None:
    """Show hit-rate statistics of a running service."""
    try:
        response = httpx.get(f"{url.rstrip('/')}/stats", timeout=10)
        response.raise_for_status()
    except httpx.HTTPError as exc:
        _fail(f"cannot read {url}/stats: {exc}")
    try:
        data = response.json()
    except ValueError:
        data = None
    if not isinstance(data, dict):
        _fail(f"{url}/stats did not answer with semcache statistics (a JSON object)")
    if as_json:
        typer.echo(json.dumps(data, indent=2))
        return
    console.print(_stats_table(data))


eval_app = typer.Typer(help="Measure hit quality on labelled data.", no_args_is_help=True)
app.add_typer(eval_app, name="eval")


@eval_app.command("pairs", epilog="Example: semcache eval pairs ../shared/data/qqp_dev.jsonl --plot qqp.png")
def eval_pairs(
    file: Annotated[Path, typer.Argument(help="JSONL of {q1, q2, duplicate}; an optional 'source' splits the report.")],
    threshold: Annotated[float | None, typer.Option(help="Override the configured threshold.")] = None,
    guards: Annotated[str | None, typer.Option(help="Comma-separated guards, or 'none'.")] = None,
    target_precision: Annotated[
        float, typer.Option(help="Find the threshold with most recall at this precision.")
    ] = 0.95,
    config: Annotated[Path | None, typer.Option(help="YAML settings file.")] = None,
    plot: Annotated[
        Path | None, typer.Option(help="Write the histogram and precision/recall curve to this PNG.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Precision, recall and F1 on labelled pairs, at the shipped or given settings."""
    from .evaluation import evaluate_pairs
    from .evaluation.report import pairs_table, plot_pairs

    settings = _settings(_eval_overrides(threshold, guards, config))
    rows = _read(file, ("q1", "q2", "duplicate"))
    embedder, verifier, policy = _eval_parts(settings)
    with _progress(as_json) as progress:
        task = progress.add_task("embedding", total=len({t for r in rows for t in (r["q1"], r["q2"])}))
        report = evaluate_pairs(rows, embedder, policy, verifier=verifier, target_precision=target_precision,
                                advance=lambda n: progress.advance(task, n))  # fmt: skip
    if plot:
        plot_pairs(report, plot)
    if as_json:
        typer.echo(json.dumps(report.as_dict(), indent=2))
    else:
        console.print(pairs_table(report))


@eval_app.command("trace", epilog="Example: semcache eval trace ../shared/data/trace_qqp_dev.jsonl")
def eval_trace(
    file: Annotated[Path, typer.Argument(help="JSONL of {prompt, cluster, duplicate_of} in arrival order.")],
    threshold: Annotated[float | None, typer.Option(help="Override the configured threshold.")] = None,
    guards: Annotated[str | None, typer.Option(help="Comma-separated guards, or 'none'.")] = None,
    config: Annotated[Path | None, typer.Option(help="YAML settings file.")] = None,
    plot: Annotated[
        Path | None, typer.Option(help="Also replay at other thresholds and plot wrong hits against hits served.")
    ] = None,
    feedback_rate: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Share of wrong hits that simulated users report as wrong.")
    ] = 0.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Replay a trace through the real lookup pipeline and count correct and wrong hits."""
    import asyncio

    from .evaluation import evaluate_trace
    from .evaluation.report import plot_trace_sweep, trace_table

    settings = _settings(_eval_overrides(threshold, guards, config))
    rows = _read(file, ("prompt", "cluster", "duplicate_of"))
    embedder, verifier, policy = _eval_parts(settings)
    thresholds = [policy.threshold]
    if plot:
        thresholds += [t for t in (0.80, 0.83, 0.86, 0.88, 0.92, 0.95) if t != policy.threshold]
    reports = []
    with _progress(as_json) as progress:
        task = progress.add_task("replaying", total=len(rows) * len(thresholds))
        for value in thresholds:
            replay = evaluate_trace(
                rows, embedder, policy.updated({"threshold": value}), verifier=verifier,
                advance=lambda n: progress.advance(task, n), feedback_rate=feedback_rate,
            )  # fmt: skip
            reports.append(asyncio.run(replay))
    if plot:
        plot_trace_sweep(sorted(reports, key=lambda r: r.policy["threshold"]), plot)
    report = reports[0]
    if as_json:
        typer.echo(json.dumps(report.as_dict(), indent=2))
    else:
        console.print(trace_table(report))


def _eval_overrides(threshold: float | None, guards: str | None, config: Path | None) -> dict[str, Any]:
    values = {"threshold": threshold, "guards": guards, "config": config}
    return {k: v for k, v in values.items() if v is not None}


def _eval_parts(settings: Settings) -> tuple[Any, Any, Any]:
    from .embedders import load_embedder
    from .evaluation.embedding_cache import CachedEmbedder
    from .quality import default_policy
    from .verifiers import load_verifier

    try:
        embedder = CachedEmbedder(load_embedder(settings.embedding_model))
        verifier = load_verifier(settings)
    except (OSError, ValueError) as exc:
        _fail(str(exc))
    return embedder, verifier, default_policy(settings)


def _read(path: Path, required: tuple[str, ...]) -> list[dict[str, Any]]:
    from .evaluation.data import read_jsonl

    try:
        return read_jsonl(path, required)
    except (OSError, ValueError) as exc:
        _fail(str(exc))


def _progress(quiet: bool) -> Progress:
    return Progress(console=Console(stderr=True), transient=True, disable=False)


def _stats_table(data: dict[str, Any]) -> Table:
    table = Table(title="semcache")
    for column in ("namespace", "requests", "hits", "misses", "bypass", "hit rate"):
        table.add_column(column, justify="left" if column == "namespace" else "right")
    rows = [("all", data), *sorted(data.get("by_namespace", {}).items())]
    for name, counts in rows:
        table.add_row(
            name,
            *(str(counts.get(k, 0)) for k in ("requests", "hits", "misses", "bypass")),
            f"{counts.get('hit_rate', 0.0):.1%}",
        )
    tiers = data.get("tiers", {})
    table.caption = (
        f"entries: {data.get('entries')}   tiers: exact {tiers.get('exact', 0)}, "
        f"template {tiers.get('template', 0)}, semantic {tiers.get('semantic', 0)}"
    )
    return table


def _settings(values: dict[str, Any]) -> Settings:
    try:
        return Settings(**values)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        _fail(f"invalid settings: {problems}")
    except (OSError, ValueError) as exc:
        _fail(f"cannot read the configuration: {exc}")


def _fail(message: str) -> NoReturn:
    console.print(f"[red]error:[/red] {message}")
    raise typer.Exit(2)


if __name__ == "__main__":
    app()
