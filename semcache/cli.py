"""The ``semcache`` command line."""

from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, NoReturn, TextIO
from urllib.parse import urlsplit, urlunsplit

import httpx
import typer
from pydantic import ValidationError
from rich.console import Console, Group
from rich.markup import escape
from rich.progress import Progress
from rich.table import Table
from rich.text import Text

from .folder_lock import DataFolderInUse, DataFolderLock, lock_data_folder
from .settings import (
    ENV_PREFIX,
    OLD_ENV_NAMES,
    Settings,
    SettingsError,
    invalid_settings,
    read_config_file,
    unknown_environment_variables,
    unparsable_variable,
)
from .stats_report import stats_report
from .wording import counted

app = typer.Typer(
    help="semcache: a semantic cache in front of OpenAI-compatible chat APIs.",
    no_args_is_help=True,
    add_completion=False,
)
console = Console()
# uvicorn's listen backlog, and its exit code for a server that did not start.
_BACKLOG = 2048
_STARTUP_FAILURE = 3


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
        float | None,
        typer.Option(
            help="Prior line (cosine 0-1) for a semantic hit; each namespace learns its own. (env SEMCACHE_THRESHOLD)"
        ),
    ] = None,
    ttl_s: Annotated[
        float | None,
        typer.Option("--ttl-s", "--ttl", help="Default TTL in seconds, 0 = forever. (env SEMCACHE_TTL)"),
    ] = None,
    max_entries: Annotated[
        int | None, typer.Option(help="Size bound; the fullest namespace loses first. (env SEMCACHE_MAX_ENTRIES)")
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
    api_keys: Annotated[
        Path | None,
        typer.Option(help="JSON/YAML map of client API key to its namespaces. (env SEMCACHE_API_KEYS_FILE)"),
    ] = None,
    log_level: Annotated[
        str | None, typer.Option(help="debug, info, warning or error. (env SEMCACHE_LOG_LEVEL; default info)")
    ] = None,
    log_format: Annotated[
        str | None, typer.Option(help="'json' (one object per line) or 'text'. (env SEMCACHE_LOG_FORMAT; default json)")
    ] = None,
) -> None:
    """Run the caching proxy.

    The admin key has no flag, so that it never shows in `ps`: set SEMCACHE_ADMIN_KEY (or admin-key
    in the --config file). Without it, /admin answers only clients on this machine.
    """
    flags = {
        "host": host,
        "port": port,
        "upstream_url": upstream,
        "data_dir": data_dir,
        "templates": templates,
        "threshold": threshold,
        "ttl_s": ttl_s,
        "max_entries": max_entries,
        "config": config,
        "backend": backend,
        "model": model,
        "store": store,
        "redis_url": redis_url,
        "api_keys_file": api_keys,
        "log_level": log_level,
        "log_format": log_format,
    }
    settings = _settings({k: v for k, v in flags.items() if v is not None})
    # Before the slow imports and the app: a port that is taken, or a data folder that another
    # server holds, fails the start at once.
    listeners = _listen(settings.host, settings.port)
    folder_lock = None
    try:
        folder_lock = _lock_data_folder(settings)
        _serve(settings, listeners)
    finally:
        for sock in listeners:
            sock.close()
        if folder_lock is not None:
            folder_lock.release()


def _lock_data_folder(settings: Settings) -> DataFolderLock | None:
    """The embedded store's folder, for this process alone; on Redis, replicas may share one."""
    if settings.store != "embedded":
        return None
    try:
        return lock_data_folder(settings.data_dir)
    except DataFolderInUse as exc:
        _fail(str(exc))
    except OSError as exc:
        _fail(f"cannot use the data folder {settings.data_dir.absolute()}: {exc}")


def _serve(settings: Settings, listeners: list[socket.socket]) -> None:
    """Build the app and serve it on ``listeners`` until a signal stops it."""
    import logging

    import uvicorn

    from .logs import configure_logging
    from .server import create_app
    from .server.access import AccessPolicy
    from .server.fastpath import shorten_gil_switch_interval

    try:
        access = AccessPolicy.from_file(settings.api_keys_file)
    except (OSError, ValueError) as exc:
        _fail(f"cannot read the API keys: {exc}")
    try:
        application = create_app(settings, access=access)
    except (OSError, ValueError) as exc:
        _fail(str(exc))
    # Only once the app is built: a refused start leaves the process's logging as it found it.
    configure_logging(settings.log_level, settings.log_format, secrets=_secrets(settings, access.keys))
    warning = _admin_warning(settings, access.configured)
    if warning is not None:
        typer.echo(f"WARNING: {warning}", err=True)  # in words, for a terminal reading the JSON log lines
        logging.getLogger("semcache.server").warning(warning)
    logging.getLogger("semcache.server").info(startup_summary(settings, access.configured))
    if settings.fast_path:
        shorten_gil_switch_interval()
    # uvicorn's loggers go through the one redacting handler; its access log is replaced by ours.
    config = uvicorn.Config(
        application,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        log_config=None,
        access_log=False,
        http=_http_protocol(settings) or "h11",
        h11_max_incomplete_event_size=settings.max_header_bytes,
        timeout_keep_alive=settings.http_keep_alive_s,
        # /admin without a key trusts the TCP peer's address: uvicorn would otherwise replace it with
        # X-Forwarded-For from any peer that FORWARDED_ALLOW_IPS names.
        proxy_headers=False,
        # Past this, SIGTERM ends the requests still in progress: a long relay never holds a shutdown.
        timeout_graceful_shutdown=settings.shutdown_grace_s,
    )
    server = uvicorn.Server(config)
    with suppress(KeyboardInterrupt):
        server.run(sockets=listeners)
    if not server.started:
        raise typer.Exit(_STARTUP_FAILURE)


def _listen(host: str, port: int) -> list[socket.socket]:
    """Listening sockets on every address ``host`` names, set up as uvicorn's own (through asyncio)
    would be; on failure, one line and exit code 2."""
    listeners: list[socket.socket] = []
    try:
        addresses = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        for family, kind, proto, _, address in dict.fromkeys(addresses):  # once each, as asyncio binds them
            sock = socket.socket(family, kind, proto)
            listeners.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            # Listening now, not when uvicorn starts: another socket may have bound the port without listening.
            sock.listen(_BACKLOG)
            sock.set_inheritable(True)
    except OSError as exc:
        for sock in listeners:
            sock.close()
        reason = exc.strerror or str(exc)
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        _fail(f"cannot listen on {where}: {reason[:1].lower()}{reason[1:]}")
    return listeners


def startup_summary(settings: Settings, client_keys: bool) -> str:
    """One line on what this server runs with: upstream, store, data folder, embedder and /admin."""
    if settings.backend == "local":
        upstream = f"local model {settings.model}"
    else:
        upstream = without_credentials(settings.upstream_url)
    if settings.store == "redis":
        store = f"redis {without_credentials(settings.redis_url)}"
    else:
        store = f"embedded SQLite {settings.data_dir / 'entries.sqlite3'}"
    if settings.admin_key:
        admin = "admin key set"
    elif client_keys:
        admin = "closed (API keys without an admin key)"
    else:
        admin = "loopback only (no admin key)"
    return (
        f"semcache on {settings.host}:{settings.port}: upstream {upstream}; store {store}; "
        f"data folder {settings.data_dir}; embedder {settings.embedding_model} ({settings.embedding_backend}); "
        f"/admin {admin}"
    )


def without_credentials(url: str) -> str:
    """``url`` without its user, password, query and fragment: what a log line may show of it."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = f"{host}:{port}" if port is not None else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _http_protocol(settings: Settings) -> type[Any] | None:
    """Bounds on the request line and headers (a 431 in OpenAI's shape; h11: a plain 400) and
    deadlines on reading a request (a 408; h11: none), whatever fast_path says; with it, each
    response's head and body in one write. None without httptools."""
    from .server.fastpath import with_coalesced_writes
    from .server.protocol import bounded_http_protocol

    protocol = bounded_http_protocol(
        settings.max_header_bytes, settings.max_header_count, settings.header_timeout_s, settings.body_timeout_s
    )
    if protocol is None or not settings.fast_path:
        return protocol
    return with_coalesced_writes(protocol)


def _admin_warning(settings: Settings, client_keys: bool) -> str | None:
    """What to say when /admin has no key and the service listens beyond this machine."""
    from .server.admin import is_loopback_address, is_loopback_host

    if settings.admin_key or is_loopback_address(settings.host) or is_loopback_host(settings.host):
        return None
    if client_keys:
        return f"serving on {settings.host} without SEMCACHE_ADMIN_KEY: /admin is closed until it is set"
    return (
        f"serving on {settings.host} without SEMCACHE_ADMIN_KEY: /admin, and the entries, imports, flushes and "
        "namespace settings it guards, answers loopback clients only until SEMCACHE_ADMIN_KEY is set"
    )


def _secrets(settings: Settings, client_keys: list[str]) -> list[str | None]:
    """Every secret the configuration holds, for the log redactor to blank out."""
    return [*settings.secrets(), *client_keys]


_URL_HELP = (
    "Base URL of a running semcache; default: this machine, at the port in SEMCACHE_PORT (else 8080), as "
    "semcache serve listens."
)


def local_service_url() -> str:
    """Where ``semcache serve`` listens with the same environment: SEMCACHE_HOST (a loopback address
    for one that listens on every interface) and SEMCACHE_PORT, else 127.0.0.1:8080."""
    host = os.environ.get(f"{ENV_PREFIX}HOST", "").strip() or "127.0.0.1"
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1" if host == "0.0.0.0" else "::1"
    port = os.environ.get(f"{ENV_PREFIX}PORT", "").strip() or "8080"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


@app.command(
    epilog="Examples: semcache stats --url http://127.0.0.1:8080 | semcache stats --watch --interval 5 | "
    "semcache stats --json"
)
def stats(
    url: Annotated[str | None, typer.Option(help=_URL_HELP, show_default=False)] = None,
    key: Annotated[
        str | None,
        typer.Option(
            "--key",
            envvar=["SEMCACHE_METRICS_KEY", "SEMCACHE_ADMIN_KEY"],
            show_default=False,
            help="The metrics key or the admin key, which /stats needs when the server has API keys; "
            "prefer the environment variables, since flags show in ps.",
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print raw JSON (one line per refresh with --watch).")
    ] = False,
    watch: Annotated[bool, typer.Option("--watch", help="Refresh in place until Ctrl-C.")] = False,
    interval: Annotated[float, typer.Option(min=0.1, help="Seconds between refreshes, with --watch.")] = 2.0,
    count: Annotated[int | None, typer.Option(min=1, help="With --watch: stop after this many refreshes.")] = None,
) -> None:
    """Show hit rates, latency percentiles, savings and top namespaces of a running service."""
    url = url or local_service_url()
    if watch:
        _watch_stats(url, key, interval, count, as_json)
        return
    try:
        data = _read_stats(url, key)
    except _StatsUnreadable as exc:
        _fail(str(exc))
    if as_json:
        typer.echo(json.dumps(data, indent=2))
        return
    console.print(stats_report(data))


class _StatsUnreadable(Exception):
    pass


def _read_stats(url: str, key: str | None) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        response = httpx.get(f"{url.rstrip('/')}/stats", headers=headers, timeout=10)
        response.raise_for_status()
    except httpx.HTTPStatusError as exc:
        hint = " (pass --key or set SEMCACHE_METRICS_KEY)" if exc.response.status_code in (401, 403) else ""
        raise _StatsUnreadable(f"cannot read {url}/stats: {exc}{hint}") from exc
    except httpx.HTTPError as exc:
        raise _StatsUnreadable(f"cannot read {url}/stats: {exc}") from exc
    try:
        data = response.json()
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise _StatsUnreadable(f"{url}/stats did not answer with semcache statistics (a JSON object)")
    return data


def _watch_stats(url: str, key: str | None, interval_s: float, count: int | None, as_json: bool) -> None:
    """Read the figures every ``interval_s`` until Ctrl-C (or ``count`` times). A server that cannot
    be read is reported in place, and watched on: it may be restarting."""
    from rich.live import Live

    with _until_ctrl_c() as stopped:

        def readings() -> Iterator[tuple[dict[str, Any] | None, str | None]]:
            for refresh in itertools.count(1):
                try:
                    yield _read_stats(url, key), None
                except _StatsUnreadable as exc:
                    yield None, str(exc)
                if (count is not None and refresh >= count) or stopped.wait(interval_s):
                    return

        if as_json:
            for data, problem in readings():
                typer.echo(json.dumps(data) if data is not None else f"error: {problem}", err=data is None)
            return
        with Live(console=console, auto_refresh=False) as live:
            for data, problem in readings():
                live.update(_watch_view(url, interval_s, data, problem), refresh=True)


@contextmanager
def _until_ctrl_c() -> Iterator[threading.Event]:
    """Ctrl-C sets the event instead of raising KeyboardInterrupt wherever the program happens to
    be: raised inside rich's or a lock's ``with`` block, it could leave a lock held and hang the exit."""
    stopped = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: stopped.set())
    try:
        yield stopped
    finally:
        signal.signal(signal.SIGINT, previous)


def _watch_view(url: str, interval_s: float, data: dict[str, Any] | None, problem: str | None) -> Group:
    footer = Text(f"{url}, read at {time.strftime('%H:%M:%S')}, every {interval_s:g} s; Ctrl-C stops", style="dim")
    if data is None:
        return Group(Text(f"error: {problem}", style="red"), footer)
    return Group(stats_report(data), footer)


eval_app = typer.Typer(help="Measure hit quality on labelled data.", no_args_is_help=True)


class VerifyChoice(StrEnum):
    sync = "sync"
    async_ = "async"
    off = "off"


_VERIFY_HELP = (
    "Verify candidates under the line with a stand-in that knows the labels and errs like a model "
    "(rejects 3% of right pairs, accepts 10% of look-alikes and 2% of other wrong ones); default: the verify setting."
)
app.add_typer(eval_app, name="eval")


_PAIRS_SYNOPSIS = (
    "semcache eval pairs FILE.jsonl [--threshold T] [--guards a,b|none] [--target-precision 0.95] [--config FILE] "
    "[--verify sync|async|off] [--plot curve.png] [--json]"
)
_TRACE_SYNOPSIS = (
    "semcache eval trace FILE.jsonl [--learn|--static] [--threshold T] [--guards a,b|none] [--feedback-rate R] "
    "[--verify sync|async|off] [--seed N] [--common-share S] [--config FILE] [--plot sweep.png] [--json]"
)


@eval_app.command(
    "pairs",
    epilog=f"In full: {_PAIRS_SYNOPSIS}\n\nExample: semcache eval pairs ../shared/data/qqp_dev.jsonl --plot qqp.png",
)
def eval_pairs(
    file: Annotated[Path, typer.Argument(help="JSONL of {q1, q2, duplicate}; an optional 'source' splits the report.")],
    threshold: Annotated[float | None, typer.Option(help="Override the configured threshold.")] = None,
    guards: Annotated[str | None, typer.Option(help="Comma-separated guards, or 'none'.")] = None,
    target_precision: Annotated[
        float, typer.Option(help="Find the threshold with most recall at this precision.")
    ] = 0.95,
    config: Annotated[Path | None, typer.Option(help="YAML settings file.")] = None,
    verify: Annotated[VerifyChoice | None, typer.Option(help=_VERIFY_HELP)] = None,
    plot: Annotated[
        Path | None, typer.Option(help="Write the histogram and precision/recall curve to this PNG.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Precision, recall and F1 on labelled pairs, at the shipped or given settings."""
    from .evaluation import evaluate_pairs
    from .evaluation.report import pairs_table, plot_pairs

    settings = _settings(_eval_overrides(threshold, guards, config, verify))
    rows = _read(file, ("q1", "q2", "duplicate"))
    embedder, policy = _eval_parts(settings)
    with _progress(as_json) as progress:
        task = progress.add_task("embedding", total=len({t for r in rows for t in (r["q1"], r["q2"])}))
        report = evaluate_pairs(rows, embedder, policy, target_precision=target_precision,
                                advance=lambda n: progress.advance(task, n))  # fmt: skip
    if plot:
        plot_pairs(report, plot)
    if as_json:
        typer.echo(json.dumps(report.as_dict(), indent=2))
    else:
        console.print(pairs_table(report))


@eval_app.command(
    "trace",
    epilog=f"In full: {_TRACE_SYNOPSIS}\n\nExample: semcache eval trace ../shared/data/trace_qqp_dev.jsonl --static",
)
def eval_trace(
    file: Annotated[
        Path,
        typer.Argument(
            help="JSONL of {prompt, cluster, duplicate_of} in arrival order, or labelled pairs {q1, q2, duplicate}, "
            "whose texts are replayed once each in an order drawn from --seed."
        ),
    ],
    threshold: Annotated[float | None, typer.Option(help="Override the configured threshold.")] = None,
    guards: Annotated[str | None, typer.Option(help="Comma-separated guards, or 'none'.")] = None,
    config: Annotated[Path | None, typer.Option(help="YAML settings file.")] = None,
    verify: Annotated[VerifyChoice | None, typer.Option(help=_VERIFY_HELP)] = None,
    plot: Annotated[
        Path | None, typer.Option(help="Also replay at other thresholds and plot wrong hits against hits served.")
    ] = None,
    feedback_rate: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Share of wrong hits that simulated users report as wrong.")
    ] = 0.0,
    learn: Annotated[
        bool | None,
        typer.Option(
            "--learn/--static",
            help="Learn the line within target_error, as the service does, or keep the threshold; default: the "
            "learn_threshold setting.",
        ),
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option(
            help="Seed of the replay's chances (the stand-in's wording, exploration): another seed is another run "
            "of the same traffic; default: 20240601, the one the docs' figures come from."
        ),
    ] = None,
    common_share: Annotated[
        float | None,
        typer.Option(
            min=0.0,
            max=0.9,
            help="Share of the simulated upstream's answer sentences that every topic's answers share (caveats, "
            "stock sentences); default 0.3; near 0.9, answers differ in a few words across topics, as a support "
            "bot's templated answers do.",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Replay a trace through the real lookup pipeline and count correct and wrong hits."""
    import asyncio

    from .evaluation import evaluate_trace
    from .evaluation.data import is_pairs, trace_from_pairs
    from .evaluation.report import plot_trace_sweep, trace_table
    from .evaluation.trace import DEFAULT_SEED, Learning
    from .evaluation.wording import DEFAULT_COMMON_SHARE

    settings = _settings(_eval_overrides(threshold, guards, config, verify))
    seed = DEFAULT_SEED if seed is None else seed
    rows = _read(file, ())
    from_pairs = is_pairs(rows)  # labelled pairs are put in one arrival order, drawn from the seed
    rows = trace_from_pairs(rows, seed) if from_pairs else _read(file, ("prompt", "cluster", "duplicate_of"))
    embedder, policy = _eval_parts(settings)
    learning = None
    if settings.learn_threshold if learn is None else learn:
        learning = Learning(settings.learn_min_labels, settings.learn_confidence, settings.explore_share,
                            settings.judge_min_similarity)  # fmt: skip
    thresholds = [policy.threshold]
    if plot:
        thresholds += [t for t in (0.80, 0.83, 0.86, 0.88, 0.92, 0.95) if t != policy.threshold]
    reports = []
    with _progress(as_json) as progress:
        task = progress.add_task("replaying", total=len(rows) * len(thresholds))
        for number, value in enumerate(thresholds):
            replay = evaluate_trace(
                rows, embedder, policy.updated({"threshold": value}),
                learning=learning if number == 0 else None,  # the sweep is of fixed thresholds
                advance=lambda n: progress.advance(task, n), feedback_rate=feedback_rate,
                seed=seed,
                common_share=DEFAULT_COMMON_SHARE if common_share is None else common_share,
            )  # fmt: skip
            reports.append(asyncio.run(replay))
    report = reports[0]
    if from_pairs:
        report.from_pairs = True
    if plot:
        plot_trace_sweep(sorted(reports[1:] if learning else reports, key=lambda r: r.policy["threshold"]), plot,
                         learned=report if learning else None)  # fmt: skip
    if as_json:
        typer.echo(json.dumps(report.as_dict(), indent=2))
    else:
        console.print(trace_table(report))


def _eval_overrides(
    threshold: float | None, guards: str | None, config: Path | None, verify: VerifyChoice | None
) -> dict[str, Any]:
    values = {"threshold": threshold, "guards": guards, "config": config, "verify": verify and verify.value}
    return {k: v for k, v in values.items() if v is not None}


def _eval_parts(settings: Settings) -> tuple[Any, Any]:
    from .evaluation import load_evaluation_parts

    try:
        return load_evaluation_parts(settings)
    except (OSError, ValueError) as exc:
        _fail(str(exc))


def _read(path: Path, required: tuple[str, ...]) -> list[dict[str, Any]]:
    from .evaluation.data import read_jsonl

    try:
        return read_jsonl(path, required)
    except (OSError, ValueError) as exc:
        _fail(str(exc))


def _progress(quiet: bool) -> Progress:
    return Progress(console=Console(stderr=True), transient=True, disable=False)


def _settings(values: dict[str, Any]) -> Settings:
    for warning in unknown_environment_variables(os.environ):
        typer.echo(f"warning: {warning}", err=True)
    try:
        return Settings(**values)
    except ValidationError as exc:
        _fail(invalid_settings(exc, values, lambda name: serve_flags().get(name, f"--{name.replace('_', '-')}")))
    except SettingsError as exc:
        _fail(str(exc))  # already names the file and the line
    except (OSError, ValueError) as exc:
        _fail(unparsable_variable(exc) or f"cannot read the configuration: {exc}")


def _fail(message: str) -> NoReturn:
    console.print(f"[red]error:[/red] {escape(message)}", soft_wrap=True)  # one line, however long
    raise typer.Exit(2)


# -- semcache config: the settings in force, and their reference page -------------------------

# The serve flags whose names differ from the setting they set; the others share their setting's name.
_FLAG_SETTINGS = {"upstream": "upstream_url", "api_keys": "api_keys_file"}
# Settings shown only as set or unset.
_SECRET_SETTINGS = ("upstream_api_key", "admin_key", "metrics_key")


@app.command(
    "config",
    epilog="Examples: semcache config --config semcache.yaml | "
    "semcache config --markdown > docs/configuration.md (regenerates the reference page)",
)
def config_command(
    config: Annotated[Path | None, typer.Option(help="YAML settings file. (env SEMCACHE_CONFIG)")] = None,
    markdown: Annotated[
        bool, typer.Option("--markdown", help="Print the reference of every setting as Markdown, defaults only.")
    ] = False,
) -> None:
    """Show every setting in force and where it came from: the --config file, SEMCACHE_* or the default."""
    from .config_doc import configuration_markdown, format_value

    if markdown:
        typer.echo(configuration_markdown(serve_flags()), nl=False)
        return
    settings = _settings({"config": config} if config else {})
    from_file = read_config_file(settings.config) if settings.config else {}
    environment = {name.upper() for name in os.environ}
    table = Table("setting", "value", "from")
    for name in Settings.model_fields:
        value = getattr(settings, name)
        if name in _SECRET_SETTINGS and value:
            shown = "(set)"
        elif name in ("upstream_url", "redis_url"):
            shown = format_value(_without_password(value))
        else:
            shown = format_value(value)
        if name == "config" and config:
            source = "--config"
        elif f"{ENV_PREFIX}{name.upper()}" in environment:
            source = f"{ENV_PREFIX}{name.upper()}"
        elif OLD_ENV_NAMES.get(name) in environment:
            source = OLD_ENV_NAMES[name]
        elif name in from_file:
            source = str(settings.config)
        else:
            source = "default"
        table.add_row(name, shown.strip("`"), source)
    console.print(table)


def serve_flags() -> dict[str, str]:
    """Each setting that ``semcache serve`` takes as a flag, with that flag."""
    command = typer.main.get_command(app)
    serve_command = command.commands["serve"]  # type: ignore[attr-defined]
    flags = {}
    for parameter in serve_command.params:
        if parameter.name and parameter.opts and parameter.opts[0].startswith("--"):
            flags[_FLAG_SETTINGS.get(parameter.name, parameter.name)] = parameter.opts[0]
    return flags


def _without_password(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@", 1)).geturl()


# -- semcache admin: the /admin API from the command line -------------------------------------

admin_app = typer.Typer(
    help="Manage a running service: list, search, delete, flush, export and import entries; reload templates.",
    no_args_is_help=True,
)
app.add_typer(admin_app, name="admin")

UrlOption = Annotated[str | None, typer.Option("--url", help=_URL_HELP, show_default=False)]
AdminKeyOption = Annotated[
    str | None,
    typer.Option(
        "--admin-key",
        envvar="SEMCACHE_ADMIN_KEY",
        help="The admin key; prefer the environment variable, since flags show in ps.",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON, for scripts.")]
NamespaceOption = Annotated[str | None, typer.Option(help="Only this namespace.")]
TextOption = Annotated[str | None, typer.Option(help="Prompt or answer contains this (case-insensitive).")]


class _AdminClient:
    """The /admin API over HTTP; every failure becomes a one-line error and exit code 2."""

    def __init__(self, url: str | None, admin_key: str | None, timeout_s: float = 600.0) -> None:
        self.url = (url or local_service_url()).rstrip("/")
        headers = {"Authorization": f"Bearer {admin_key}"} if admin_key else {}
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s)

    def __enter__(self) -> _AdminClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.http.close()

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            _fail(f"cannot reach {self.url}: {exc}")
        self.check(response)
        try:
            return response.json()
        except ValueError:
            _fail(f"{self.url}{path} did not answer with JSON; is it a semcache?")

    def check(self, response: httpx.Response) -> None:
        if response.status_code < 400:
            return
        try:
            message = str(response.json()["error"]["message"])
        except (ValueError, KeyError, TypeError):
            message = response.text[:200] or response.reason_phrase
        key_hint = " (pass --admin-key or set SEMCACHE_ADMIN_KEY)"
        hints = {401: key_hint, 403: key_hint, 413: " (an import sends less at once with a smaller --chunk-bytes)"}
        hint = hints.get(response.status_code, "")
        _fail(f"{response.status_code} from {self.url}: {message}{hint}")


@admin_app.command(
    "entries",
    epilog="Examples:\n\n"
    "semcache admin entries --namespace support\n\n"
    "semcache admin entries --text refund --limit 20\n\n"
    "semcache admin entries --query 'How do I reset my password?' --min-similarity 0.8 --json",
)
def admin_entries(
    namespace: NamespaceOption = None,
    text: TextOption = None,
    query: Annotated[str | None, typer.Option(help="Search semantically: entries near this question.")] = None,
    min_similarity: Annotated[
        float | None, typer.Option(help="With --query: least cosine (0-1); default: the namespace's threshold.")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Entries per page.")] = 50,
    cursor: Annotated[str | None, typer.Option(help="The next page: the cursor the previous page printed.")] = None,
    max_chars: Annotated[int, typer.Option(min=0, help="Cut prompts and answers; 0: whole.")] = 60,
    url: UrlOption = None,
    admin_key: AdminKeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """List cache entries, filtered by namespace or text, or searched by meaning."""
    params = {"namespace": namespace, "text": text, "query": query, "min_similarity": min_similarity,
              "limit": limit, "cursor": cursor, "max_chars": 0 if as_json else max_chars}  # fmt: skip
    with _AdminClient(url, admin_key) as client:
        page = client.call("GET", "/admin/entries", params=_present(params))
    if as_json:
        typer.echo(json.dumps(page, indent=2))
        return
    table = _entries_table(page["data"], semantic=query is not None)
    if page.get("next_cursor"):
        table.caption = f"more: --cursor {page['next_cursor']}"
    console.print(table)


@admin_app.command(
    "delete",
    epilog="Examples:\n\n"
    "semcache admin delete 17 42\n\n"
    "semcache admin delete --namespace old-tenant --yes\n\n"
    "semcache admin delete --older-than-s 86400 --dry-run\n\n"
    "semcache admin delete --query 'What is our refund policy?' --min-similarity 0.85",
)
def admin_delete(
    ids: Annotated[list[int] | None, typer.Argument(help="Entry ids.", show_default=False)] = None,
    namespace: NamespaceOption = None,
    text: TextOption = None,
    older_than_s: Annotated[
        float | None, typer.Option(min=0, help="Entries created more than this many seconds ago.")
    ] = None,
    query: Annotated[str | None, typer.Option(help="Forget everything near this question.")] = None,
    min_similarity: Annotated[
        float | None, typer.Option(help="With --query: least cosine (0-1); default: the namespace's threshold.")
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only show what would be deleted.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    url: UrlOption = None,
    admin_key: AdminKeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Delete entries by id, namespace, text, age or meaning. Every filter given must match."""
    if as_json and not (yes or dry_run):
        _fail("--json needs --yes (or --dry-run): a script cannot answer the confirmation")
    body = _present({"ids": ids or None, "namespace": namespace, "text": text, "older_than_s": older_than_s,
                     "query": query, "min_similarity": min_similarity})  # fmt: skip
    with _AdminClient(url, admin_key) as client:
        if dry_run or not yes:
            shown = {"dry_run": True, "limit": 20, "max_chars": 0 if as_json else 60}
            preview = client.call("POST", "/admin/entries/delete", json={**body, **shown})
            if as_json:
                typer.echo(json.dumps(preview, indent=2))
                return
            console.print(_entries_table(preview["data"], semantic=query is not None))
            matched = preview["matched"]
            console.print(f"{counted(matched, 'entry')} {'matches' if matched == 1 else 'match'}.")
            if dry_run or not preview["matched"]:
                return
            typer.confirm(f"Delete {counted(preview['matched'], 'entry')}?", abort=True)
        result = client.call("POST", "/admin/entries/delete", json={**body, "limit": 0})
    if as_json:
        typer.echo(json.dumps(result, indent=2))
    else:
        console.print(f"deleted {counted(result['deleted'], 'entry')}")


@admin_app.command("flush", epilog="Example: semcache admin flush --yes --url http://127.0.0.1:8080")
def admin_flush(
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    url: UrlOption = None,
    admin_key: AdminKeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Delete every entry of the cache (with Redis: on every replica)."""
    if not yes:
        if as_json:
            _fail("--json needs --yes: a script cannot answer the confirmation")
        typer.confirm(f"Delete every entry of {url or local_service_url()}?", abort=True)
    with _AdminClient(url, admin_key) as client:
        result = client.call("POST", "/admin/flush", json={"confirm": True})
    if as_json:
        typer.echo(json.dumps(result, indent=2))
    else:
        console.print(f"deleted {counted(result['deleted'], 'entry')}")


@admin_app.command("reload-templates", epilog="Example: semcache admin reload-templates --url http://127.0.0.1:8080")
def admin_reload_templates(
    url: UrlOption = None, admin_key: AdminKeyOption = None, as_json: JsonOption = False
) -> None:
    """Re-read the server's --templates file and serve it at once (a bad file changes nothing)."""
    with _AdminClient(url, admin_key) as client:
        result = client.call("POST", "/admin/templates/reload")
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    shared = " and shared with the other replicas" if result.get("shared") else ""
    phrasings = counted(result["phrasings"], "phrasing")
    console.print(f"reloaded {counted(result['templates'], 'template')} ({phrasings}){shared}")


@admin_app.command(
    "export",
    epilog="Examples:\n\n"
    "semcache admin export backup.jsonl\n\n"
    "semcache admin export support.jsonl --namespace support --vectors\n\n"
    "semcache admin export - | gzip > backup.jsonl.gz",
)
def admin_export(
    file: Annotated[str, typer.Argument(help="JSONL file to write; '-' for standard output.")],
    namespace: NamespaceOption = None,
    text: TextOption = None,
    vectors: Annotated[
        bool, typer.Option("--vectors", help="Include vectors, so an import with the same model skips embedding.")
    ] = False,
    url: UrlOption = None,
    admin_key: AdminKeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Export entries as JSONL, one entry per line, to warm another deployment."""
    params = _present({"namespace": namespace, "text": text, "vectors": vectors or None})
    with _AdminClient(url, admin_key) as client:
        count = _export_to(client, file, params)
    if as_json:
        typer.echo(json.dumps({"exported": count, "file": file}))
    elif file != "-":
        console.print(f"exported {counted(count, 'entry')} to {file}")


def _export_to(client: _AdminClient, file: str, params: dict[str, Any]) -> int:
    """Stream the export into ``file`` line by line; returns the number of entries written."""
    count = 0
    try:
        with client.http.stream("GET", "/admin/entries/export", params=params) as response:
            if response.status_code >= 400:
                response.read()
                client.check(response)
            with _open_output(file) as out, _progress(quiet=True) as progress:
                task = progress.add_task("exporting", total=None)
                for line in response.iter_lines():
                    if line.startswith('{"error"'):
                        problem = json.loads(line)["error"]["message"]
                        _fail(f"the export stopped after {counted(count, 'entry')}: {problem}")
                    if line:
                        out.write(line + "\n")
                        count += 1
                        progress.update(task, completed=count, description=f"exported {count}")
    except httpx.HTTPError as exc:
        _fail(f"the export from {client.url} failed after {counted(count, 'entry')}: {exc}")
    except OSError as exc:
        _fail(f"cannot write {file}: {exc}")
    return count


@admin_app.command(
    "import",
    epilog="Examples:\n\n"
    "semcache admin import backup.jsonl --url http://new-host:8080\n\n"
    "semcache admin import big.jsonl --chunk-bytes 500000 --json",
)
def admin_import(
    file: Annotated[
        Path, typer.Argument(help="JSONL written by 'semcache admin export'.", exists=True, dir_okay=False)
    ],
    chunk_bytes: Annotated[
        int, typer.Option(min=1024, help="Most bytes per request; keep it under the server's max_body_bytes.")
    ] = 1_000_000,
    url: UrlOption = None,
    admin_key: AdminKeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Import entries from JSONL: sent in chunks of whole lines, embedded and stored by the server."""
    with _AdminClient(url, admin_key) as client:
        totals = _import_from(client, file, chunk_bytes)
    if as_json:
        typer.echo(json.dumps(totals, indent=2))
        return
    console.print(
        f"{counted(totals['lines'], 'line')}: imported {totals['imported']} ({totals['embedded']} embedded, "
        f"{totals['replaced']} replaced an entry), skipped {totals['skipped']} expired, failed {totals['failed']}"
    )
    for error in totals["errors"][:20]:
        console.print(f"  line {error['line']}: {error['message']}")


def _import_from(client: _AdminClient, file: Path, chunk_bytes: int) -> dict[str, Any]:
    """Send ``file`` in chunks under a progress bar; returns the servers' reports added up."""
    counts = ("lines", "imported", "replaced", "skipped", "embedded", "failed")
    totals: dict[str, Any] = {**dict.fromkeys(counts, 0), "errors": []}
    try:
        with _progress(quiet=True) as progress:
            task = progress.add_task("importing", total=file.stat().st_size)
            for first_line, chunk in _line_chunks(file, chunk_bytes):
                report = client.call("POST", "/admin/entries/import", params={"first_line": first_line},
                                     content=chunk, headers={"Content-Type": "application/x-ndjson"})  # fmt: skip
                for name in counts:
                    totals[name] += int(report.get(name, 0))
                totals["errors"] += report.get("errors", [])
                progress.update(task, advance=len(chunk), description=f"imported {totals['imported']}, "
                                f"skipped {totals['skipped']}, failed {totals['failed']}")  # fmt: skip
    except OSError as exc:
        _fail(f"cannot read {file}: {exc}")
    return totals


def _line_chunks(path: Path, chunk_bytes: int) -> Iterator[tuple[int, bytes]]:
    """Whole lines, at most ``chunk_bytes`` together (one longer line goes alone), with the
    number of each chunk's first line."""
    parts: list[bytes] = []
    size, first = 0, 1
    with path.open("rb") as handle:
        for number, line in enumerate(handle, start=1):
            if parts and size + len(line) > chunk_bytes:
                yield first, b"".join(parts)
                parts, size, first = [], 0, number
            parts.append(line)
            size += len(line)
    if parts:
        yield first, b"".join(parts)


@contextmanager
def _open_output(file: str) -> Iterator[TextIO]:
    if file == "-":
        yield sys.stdout
        return
    with open(file, "w", encoding="utf-8") as handle:
        yield handle


def _entries_table(entries: list[dict[str, Any]], *, semantic: bool) -> Table:
    table = Table(title="semcache entries")
    columns = ["id", "namespace", "model", "prompt", "answer", "hits", "created"]
    if semantic:
        columns.append("similarity")
    for column in columns:
        table.add_column(column, justify="right" if column in ("id", "hits", "similarity") else "left")
    for entry in entries:
        row = [str(entry["id"]), entry["namespace"], entry["model"], entry["prompt"], entry["answer"],
               str(entry["hits"]), _age(entry["created_at"])]  # fmt: skip
        if semantic:
            row.append(f"{entry.get('similarity') or 0:.3f}")
        table.add_row(*row)
    return table


def _age(timestamp: float) -> str:
    seconds = max(time.time() - timestamp, 0)
    for unit, length in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= length:
            return f"{seconds / length:.0f}{unit} ago"
    return f"{seconds:.0f}s ago"


def _present(values: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}


if __name__ == "__main__":
    app()
