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
