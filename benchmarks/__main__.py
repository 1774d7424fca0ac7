"""``python -m benchmarks run``: every benchmark in one run, as JSON and a markdown summary.

Examples:

    python -m benchmarks run                                  # full run (the 1M-entry index takes ~15 min;
                                                              # the 1M-entry data folder is built once, minutes)
    python -m benchmarks run --quick                          # end to end in about a minute, tiny sizes
    python -m benchmarks run --index-sizes 10000 100000 --requests 300
    python -m benchmarks run --skip index litellm --out /tmp/bench
    python -m benchmarks run --only start                     # the 1M-entry start alone
    python -m benchmarks run --embedding-backend onnx-int8    # semcache and the floor on ONNX int8
    python -m benchmarks run --only hit_quality               # hit quality over HTTP alone (opt-in part)

It writes DIR/results.json, DIR/samples.json (every latency), DIR/summary.md (targets with
PASS/MISS, tables) and DIR/latency.png, into benchmarks/results/<UTC timestamp>/ unless --out says
otherwise. The single benchmarks (latency, miss_overhead, index_search, quality_vs_gptcache,
replication) still run on their own with ``python -m benchmarks.<name>``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shlex
import sys
import typing
from pathlib import Path

from semcache.settings import Settings

from .quality_vs_gptcache import BenchmarkError, stderr
from .suite import OPT_IN_PARTS, PARTS, ROOT, Options, parse_parts, run

BACKENDS = list(typing.get_args(Settings.model_fields["embedding_backend"].annotation))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    sub = commands.add_parser(
        "run",
        help="run the benchmarks; write results.json and summary.md",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub.add_argument(
        "--quick",
        action="store_true",
        help="tiny sizes and few requests (for CI); uses the GPTCache/LiteLLM venvs only if built",
    )
    sub.add_argument("--out", type=Path, help="folder for the results (default benchmarks/results/<timestamp>)")
    sub.add_argument("--concurrency", type=int, nargs="+", metavar="N", help="concurrent clients (default 1 8 64)")
    sub.add_argument("--requests", type=int, metavar="N", help="hit requests per path and level (default 600)")
    sub.add_argument("--miss-requests", type=int, metavar="N", help="misses per level (default 40)")
    sub.add_argument(
        "--per-client", type=int, metavar="N", help="each client sends at least N requests per path (default 4)"
    )
    sub.add_argument(
        "--upstream-delay-ms",
        type=float,
        nargs=2,
        metavar=("MIN", "MAX"),
        help="the stand-in's delay before the first byte, spread per prompt (default 300 800)",
    )
    sub.add_argument(
        "--index-sizes",
        type=int,
        nargs="+",
        metavar="N",
        help="entries in the index benchmark (default 10000 100000 1000000)",
    )
    sub.add_argument("--index-queries", type=int, metavar="N", help="queries per index size (default 500)")
    sub.add_argument("--index-threads", type=int, metavar="N", help="FAISS threads for builds (default: all cores)")
    sub.add_argument("--embed-rounds", type=int, metavar="N", help="passes over the prompts for the embedder floor")
    sub.add_argument("--lag-seconds", type=float, metavar="S", help="seconds of mixed load for /healthz (default 20)")
    sub.add_argument("--start-entries", type=int, metavar="N", help="entries for the timed start (default 1000000)")
    sub.add_argument("--starts", type=int, metavar="N", help="timed starts, after one untimed (default 3)")
    sub.add_argument("--skip", nargs="+", default=[], metavar="PART", help=f"leave out parts: {', '.join(PARTS)}")
    sub.add_argument("--only", nargs="+", default=[], metavar="PART", help="run only these parts")
    sub.add_argument(
        "--with",
        dest="also",
        nargs="+",
        default=[],
        metavar="PART",
        help=f"also run these parts, which run only when named: {', '.join(OPT_IN_PARTS)}",
    )
    sub.add_argument(
        "--hit-quality-limit",
        type=int,
        metavar="N",
        help="hit_quality: requests per trace (default 1000, --quick 40; 0: whole traces)",
    )
    sub.add_argument(
        "--litellm-cache",
        choices=["local", "redis"],
        default="local",
        help="LiteLLM's cache type: in-process memory, or a private redis-server (default local)",
    )
    sub.add_argument(
        "--embedding-backend",
        choices=BACKENDS,
        metavar="NAME",
        help="semcache's embedding_backend setting, for semcache and the embedder floor",
    )
    sub.add_argument(
        "--semcache-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra SEMCACHE_* environment for the semcache process and the embedder floor",
    )
    return parser


def options_from(args: argparse.Namespace, parser: argparse.ArgumentParser, argv: list[str]) -> Options:
    out = args.out or ROOT / "benchmarks" / "results" / dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    options = Options.quick_defaults(out) if args.quick else Options(out)
    overrides = {
        "concurrency": args.concurrency,
        "requests": args.requests,
        "miss_requests": args.miss_requests,
        "per_client": args.per_client,
        "index_sizes": args.index_sizes,
        "index_queries": args.index_queries,
        "index_threads": args.index_threads,
        "embed_rounds": args.embed_rounds,
        "lag_seconds": args.lag_seconds,
        "start_entries": args.start_entries,
        "starts": args.starts,
        "upstream_delay_ms": tuple(args.upstream_delay_ms) if args.upstream_delay_ms else None,
    }
    for name, value in overrides.items():
        if value is not None:
            setattr(options, name, value)
    if any(n < 1 for n in options.concurrency + options.index_sizes) or options.requests < 1:
        parser.error("--concurrency, --requests and --index-sizes take positive numbers")
    low, high = options.upstream_delay_ms
    if not 0 <= low <= high:
        parser.error("--upstream-delay-ms takes MIN MAX with 0 <= MIN <= MAX")
    try:
        options.skip = parse_parts(args.skip)
        only = parse_parts(args.only)
        options.chosen = (parse_parts(args.also) | only) & set(OPT_IN_PARTS)
    except ValueError as exc:
        parser.error(str(exc))
    if only:
        options.skip |= set(PARTS) - only
    if args.hit_quality_limit is not None:
        if args.hit_quality_limit < 0:
            parser.error("--hit-quality-limit takes 0 or more")
        options.hit_quality_limit = args.hit_quality_limit or None
    options.litellm_cache = args.litellm_cache
    options.semcache_env = _semcache_env(args, parser)
    options.command = "python -m benchmarks " + shlex.join(argv)
    return options


def _semcache_env(args: argparse.Namespace, parser: argparse.ArgumentParser) -> dict[str, str]:
    env = {}
    for pair in args.semcache_env:
        key, sep, value = pair.partition("=")
        if not sep or not key.startswith("SEMCACHE_"):
            parser.error(f"--semcache-env takes SEMCACHE_NAME=VALUE, not {pair!r}")
        env[key] = value
    if args.embedding_backend is not None:
        env["SEMCACHE_EMBEDDING_BACKEND"] = args.embedding_backend
    return env


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    options = options_from(args, parser, argv)
    try:
        results = run(options)
    except (BenchmarkError, OSError) as exc:
        stderr.print(f"[red]error:[/red] {exc}")
        return 2
    for target in results.get("targets", []):
        stderr.print(f"{target['status']:>12}  {target['target']}: {target['measured']} (goal {target['goal']})")
    stderr.print(f"results: {options.out / 'results.json'}\nsummary: {options.out / 'summary.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
