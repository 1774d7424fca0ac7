"""Unit tests for semcache.cli, through typer's CliRunner; `stats` talks to a tiny local server."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import PlainTextResponse
from typer.testing import CliRunner

from semcache import cli
from semcache.cli import app
from semcache.settings import Settings
from semcache.stats import Stats
from semcache.testing.uvicorn_thread import ThreadedUvicorn, free_port
from testkit.servers import stop_process, wait_healthy

runner = CliRunner(env={"COLUMNS": "120"})  # for typer's help screens


@pytest.fixture(autouse=True)
def clean_environment_and_wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("SEMCACHE_"):
            monkeypatch.delenv(name)
    # rich wraps to the terminal's width; keep the asserted text on one line
    monkeypatch.setattr(cli.console, "width", 120)  # the console that prints tables and errors


def stats_payload(extra_requests: int = 0) -> dict[str, Any]:
    """What a real service's Stats report after a little traffic."""
    stats = Stats()
    for namespace, outcome, tier in [
        ("support", "hit", "exact"),
        ("support", "miss", None),
        ("support", "bypass", None),
        ("billing", "hit", "semantic"),
        ("billing", "bypass", None),
        *[("support", "miss", None)] * extra_requests,
    ]:
        stats.request(namespace, outcome, tier)
    stats.saved("support", 1200, 34, 0.00123)
    stats.saved("billing", 10, 20, None)
    for path, seconds in [("exact_hit", 0.0011), ("exact_hit", 0.0013), ("semantic_hit", 0.0168), ("miss", 0.25)]:
        stats.request_duration(path, seconds)  # type: ignore[arg-type]
    return {**stats.snapshot(), "entries": 42, "ready": True}


@pytest.fixture(scope="module")
def stats_server() -> Iterator[str]:
    fake = FastAPI()
    fake.get("/stats")(stats_payload)
    fake.get("/not-semcache/stats", response_class=PlainTextResponse)(lambda: "<html>hello</html>")
    reads: list[int] = []

    def growing() -> dict[str, Any]:
        """Every read finds one more request than the last: the figures a watcher sees change."""
        reads.append(len(reads) + 1)
        return stats_payload(extra_requests=len(reads))

    fake.get("/growing/stats")(growing)
    fake.get("/growing/reads")(lambda: len(reads))
    with ThreadedUvicorn(fake) as server:
        yield server.url


# -- help ----------------------------------------------------------------------------------------


def test_help_lists_the_commands() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "semantic cache" in result.output
    assert "serve" in result.output and "stats" in result.output


def test_no_arguments_shows_help() -> None:
    result = runner.invoke(app, [])
    assert "serve" in result.output and "Usage" in result.output


def test_serve_help_lists_every_option_and_an_example() -> None:
    result = runner.invoke(app, ["serve", "--help"])
    assert result.exit_code == 0
    for option in (
        "--host",
        "--port",
        "--upstream",
        "--data-dir",
        "--templates",
        "--threshold",
        "--ttl",
        "--max-entries",
        "--config",
    ):
        assert option in result.output
    assert "Example: semcache serve" in result.output


# -- serve: friendly errors before anything starts ----------------------------------------------


def assert_friendly(result: Any, *fragments: str) -> None:
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert isinstance(result.exception, SystemExit)  # a clean exit, not an uncaught exception
    for fragment in fragments:
        assert fragment in result.output


def test_serve_with_an_invalid_threshold() -> None:
    result = runner.invoke(app, ["serve", "--threshold", "7"])
    assert_friendly(result, "error:", "invalid settings", "threshold")


@pytest.mark.parametrize("flag", ["--ttl-s", "--ttl"])
def test_the_ttl_flag_keeps_its_old_spelling(flag: str) -> None:
    assert_friendly(runner.invoke(app, ["serve", flag, "-5"]), "invalid settings", "ttl_s")


def test_serve_with_an_invalid_value_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEMCACHE_TTL", "-5")
    assert_friendly(runner.invoke(app, ["serve"]), "invalid settings", "ttl_s")


def test_serve_with_an_unreadable_config_file(tmp_path: Path) -> None:
    result = runner.invoke(app, ["serve", "--config", str(tmp_path / "missing.yaml")])
    assert_friendly(result, "cannot read the configuration", "missing.yaml")


def test_serve_with_a_broken_template_file(tmp_path: Path) -> None:
    templates = tmp_path / "templates.yaml"
    templates.write_text("templates:\n  - questions: [unclosed\n")
    result = runner.invoke(app, ["serve", "--templates", str(templates), "--data-dir", str(tmp_path / "data")])
    assert_friendly(result, "error:", "not valid YAML")


def test_serve_with_a_misspelt_setting_in_the_config_file(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("treshold: 0.99\n")
    result = runner.invoke(app, ["serve", "--config", str(config)])
    assert_friendly(result, f"error: {config}, line 1: unknown setting 'treshold' (did you mean 'threshold'?)")
    assert len(result.output.strip().splitlines()) == 1


def test_serve_with_a_yaml_syntax_error_in_the_config_file(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("threshold: 0.9\n  ttl: 60\n")
    result = runner.invoke(app, ["serve", "--config", str(config)])
    assert_friendly(result, f"error: {config}, line 2: not valid YAML: mapping values are not allowed here")
    assert len(result.output.strip().splitlines()) == 1


def test_a_misspelt_environment_variable_is_warned_about(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SEMCACHE_TRESHOLD", "0.99")
    result = runner.invoke(app, ["config"])
    assert result.exit_code == 0
    assert "warning: SEMCACHE_TRESHOLD is not a semcache setting and is ignored (did you mean SEMCACHE_THRESHOLD?)" in (
        result.output
    )


def test_a_non_numeric_threshold_is_a_usage_error() -> None:
    result = runner.invoke(app, ["serve", "--threshold", "high"])
    assert result.exit_code == 2
    assert "Invalid value" in result.output


# -- config --------------------------------------------------------------------------------------


def test_config_shows_each_setting_in_force_and_where_it_came_from(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "semcache.yaml"
    config.write_text("threshold: 0.93\nupstream-url: http://user:hunter2@upstream.internal/v1\n")
    monkeypatch.setenv("SEMCACHE_TTL", "60")
    monkeypatch.setenv("SEMCACHE_ADMIN_KEY", "admin-secret-1234")
    monkeypatch.setattr(cli.console, "width", 200)
    result = runner.invoke(app, ["config", "--config", str(config)])
    assert result.exit_code == 0, result.output
    rows = {line.split("│")[1].strip(): line for line in result.output.splitlines() if line.count("│") == 4}
    assert "0.93" in rows["threshold"] and str(config) in rows["threshold"]
    assert "60" in rows["ttl_s"] and "SEMCACHE_TTL" in rows["ttl_s"]
    assert "default" in rows["port"] and "8080" in rows["port"]
    assert "(set)" in rows["admin_key"] and "admin-secret-1234" not in result.output
    assert "hunter2" not in result.output and "user:***@upstream.internal" in rows["upstream_url"]


def test_config_markdown_is_the_reference_page_with_every_setting_and_serve_flag() -> None:
    result = runner.invoke(app, ["config", "--markdown"])
    assert result.exit_code == 0
    page = result.output
    assert page.startswith("<!-- Generated from semcache/settings.py by `semcache config --markdown")
    for name in Settings.model_fields:
        assert f"| `{name}`<br>`SEMCACHE_{name.upper()}`" in page
    assert "| `upstream_url`<br>`SEMCACHE_UPSTREAM_URL`<br>`--upstream` | `https://api.openai.com/v1` |" in page
    assert "| `threshold`<br>`SEMCACHE_THRESHOLD`<br>`--threshold` | `0.91` | number ≥ 0.0, ≤ 1.0 |" in page


def test_every_serve_flag_sets_a_setting() -> None:
    flags = cli.serve_flags()  # a flag named unlike its setting needs an entry in cli._FLAG_SETTINGS
    assert set(flags) <= set(Settings.model_fields)
    assert flags["upstream_url"] == "--upstream" and flags["api_keys_file"] == "--api-keys"


# -- stats ---------------------------------------------------------------------------------------


def test_stats_prints_a_table_with_every_namespace(stats_server: str) -> None:
    result = runner.invoke(app, ["stats", "--url", stats_server])
    assert result.exit_code == 0, result.output
    assert "support" in result.output and "billing" in result.output
    assert "hit rate" in result.output
    assert "entries: 42" in result.output
    assert "66.7%" in result.output  # overall: 2 hits of 3 cacheable requests


def test_stats_shows_latency_savings_and_the_busiest_namespaces_first(stats_server: str) -> None:
    result = runner.invoke(app, ["stats", "--url", stats_server])
    assert result.exit_code == 0, result.output
    output = result.output
    assert output.index("support") < output.index("billing")  # 3 requests before 2
    latency = stats_payload()["latency"]["paths"]
    assert "latency in ms (this replica): since start | last 5 min" in output
    exact_hit = next(line for line in output.splitlines() if "exact hit" in line)
    lifetime, recent = latency["exact_hit"]["lifetime"], latency["exact_hit"]["recent"]
    cells = [cell.strip() for cell in exact_hit.split("│") if cell.strip()]
    assert cells == ["exact hit", "2", *(f"{lifetime[q]:g}" for q in ("p50_ms", "p90_ms", "p99_ms")),
                     "2", *(f"{recent[q]:g}" for q in ("p50_ms", "p90_ms", "p99_ms"))]  # fmt: skip
    assert "1,264" in output  # tokens saved: 1,200 + 34 + 10 + 20
    assert "$0.001230" in output  # the priced hit's cost
    assert "1 of them for models without a price" in output


def reads_of(stats_server: str) -> int:
    return int(httpx.get(f"{stats_server}/growing/reads").json())


def test_stats_watch_refreshes_until_its_count(stats_server: str) -> None:
    before = reads_of(stats_server)
    result = runner.invoke(app, ["stats", "--url", f"{stats_server}/growing", "--watch", "--interval", "0.1",
                                 "--count", "3"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert reads_of(stats_server) == before + 3
    assert "every 0.1 s; Ctrl-C stops" in result.output
    support = next(line for line in result.output.splitlines() if "support" in line)
    cells = [cell.strip() for cell in support.split("│") if cell.strip()]
    assert cells[:2] == ["support", str(3 + before + 3)]  # what the last read found


def test_stats_watch_json_prints_one_object_per_refresh(stats_server: str) -> None:
    result = runner.invoke(app, ["stats", "--url", f"{stats_server}/growing", "--watch", "--json", "--interval", "0.1",
                                 "--count", "2"])  # fmt: skip
    assert result.exit_code == 0, result.output
    first, second = (json.loads(line) for line in result.output.splitlines())
    assert second["requests"] == first["requests"] + 1


def test_stats_watch_reports_an_unreachable_server_in_place() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = runner.invoke(app, ["stats", "--url", url, "--watch", "--interval", "0.1", "--count", "2"])
    assert result.exit_code == 0 and "Traceback" not in result.output
    assert f"error: cannot read {url}/stats" in result.output


@pytest.mark.slow
def test_stats_watch_stops_cleanly_on_ctrl_c(stats_server: str) -> None:
    command = [sys.executable, "-m", "semcache", "stats", "--url", f"{stats_server}/growing", "--watch",
               "--interval", "0.1"]  # fmt: skip
    first = reads_of(stats_server)
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as watcher:
        try:
            deadline = time.monotonic() + 60
            while reads_of(stats_server) < first + 2:  # it has refreshed twice
                assert watcher.poll() is None and time.monotonic() < deadline, "the watcher never read the stats"
                time.sleep(0.05)
            watcher.send_signal(signal.SIGINT)
            out, err = watcher.communicate(timeout=30)
        finally:
            watcher.kill()
    assert watcher.returncode == 0, err.decode()
    assert "Traceback" not in err.decode()
    assert "semcache requests" in out.decode() and "Ctrl-C stops" in out.decode()


def test_stats_json_prints_the_servers_json(stats_server: str) -> None:
    result = runner.invoke(app, ["stats", "--url", f"{stats_server}/", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data == stats_payload()
    assert set(data["by_namespace"]) == {"support", "billing"}


def test_stats_of_an_unreachable_url() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = runner.invoke(app, ["stats", "--url", url])
    assert_friendly(result, "error:", "cannot read", url)


def test_stats_of_a_server_that_answers_with_an_error(stats_server: str) -> None:
    result = runner.invoke(app, ["stats", "--url", f"{stats_server}/nothing-here"])
    assert_friendly(result, "cannot read", "404")


def test_stats_of_a_server_that_is_not_semcache(stats_server: str) -> None:
    result = runner.invoke(app, ["stats", "--url", f"{stats_server}/not-semcache"])
    assert_friendly(result, "error:", "not-semcache", "did not answer with semcache statistics")


@pytest.mark.slow
def test_the_cli_finds_the_server_by_semcache_port_and_counts_in_words(tmp_path: Path, embedding_exports: Path) -> None:
    """``semcache serve`` and the CLI as a person runs them, with SEMCACHE_PORT set for both and no
    --url: the CLI reaches the server, says "1 entry" (never "1 entries"), and the server's text log
    has key=value fields, not Python dicts."""
    port = free_port()
    log_path = tmp_path / "semcache.log"
    env = {**os.environ, "SEMCACHE_PORT": str(port), "SEMCACHE_EMBEDDING_CACHE_DIR": str(embedding_exports),
           "SEMCACHE_LOG_FORMAT": "text", "COLUMNS": "200"}  # fmt: skip
    with open(log_path, "wb") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "semcache", "serve", "--data-dir", str(tmp_path / "data"),
             "--upstream", "http://127.0.0.1:9/v1"],
            env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        wait_healthy(f"http://127.0.0.1:{port}", process=server)
        stored = httpx.post(f"http://127.0.0.1:{port}/v1/semcache/store", timeout=30,
                            json={"prompt": "How many entries is one?", "answer": "One entry."})  # fmt: skip
        assert stored.status_code == 200, stored.text

        def semcache(*arguments: str) -> str:
            done = subprocess.run([sys.executable, "-m", "semcache", *arguments], cwd=tmp_path, env=env,
                                  capture_output=True, text=True, timeout=60)  # fmt: skip
            assert done.returncode == 0, done.stdout + done.stderr
            return done.stdout

        assert json.loads(semcache("stats", "--json"))["entries"] == 1
        assert "1 entry matches." in semcache("admin", "delete", "--namespace", "default", "--dry-run")
        assert "exported 1 entry to backup.jsonl" in semcache("admin", "export", "backup.jsonl")
        assert "deleted 1 entry" in semcache("admin", "flush", "--yes")
        assert "1 entries" not in semcache("stats")
    finally:
        stop_process(server, timeout_s=30)
    restored = [line for line in log_path.read_text().splitlines() if " index restored" in line]
    assert len(restored) == 1 and "{" not in restored[0], restored
    assert re.search(r" snapshot_loaded=false entries=0 added=0 removed=0 seconds=[0-9.]+$", restored[0]), restored
