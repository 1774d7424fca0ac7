"""Unit tests for semcache.cli, through typer's CliRunner; `stats` talks to a tiny local server."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.responses import PlainTextResponse
from typer.testing import CliRunner

from semcache import cli
from semcache.cli import app
from semcache.stats import Stats
from semcache.testing.servers import ThreadedUvicorn, free_port

runner = CliRunner(env={"COLUMNS": "120"})  # for typer's help screens


@pytest.fixture(autouse=True)
def clean_environment_and_wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("SEMCACHE_"):
            monkeypatch.delenv(name)
    # rich wraps to the terminal's width; keep the asserted text on one line
    monkeypatch.setattr(cli.console, "width", 120)  # the console that prints tables and errors


def stats_payload() -> dict[str, Any]:
    stats = Stats()
    for namespace, outcome, tier in [
        ("support", "hit", "exact"),
        ("support", "miss", None),
        ("billing", "hit", "semantic"),
        ("billing", "bypass", None),
    ]:
        stats.record(namespace, outcome, tier)
    return {**stats.snapshot(), "entries": 42, "ready": True}


@pytest.fixture(scope="module")
def stats_server() -> Iterator[str]:
    fake = FastAPI()
    fake.get("/stats")(stats_payload)
    fake.get("/not-semcache/stats", response_class=PlainTextResponse)(lambda: "<html>hello</html>")
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


def test_serve_with_an_invalid_value_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEMCACHE_TTL", "-5")
    assert_friendly(runner.invoke(app, ["serve"]), "invalid settings", "ttl")


def test_serve_with_an_unreadable_config_file(tmp_path: Path) -> None:
    result = runner.invoke(app, ["serve", "--config", str(tmp_path / "missing.yaml")])
    assert_friendly(result, "cannot read the configuration", "missing.yaml")


def test_serve_with_a_broken_template_file(tmp_path: Path) -> None:
    templates = tmp_path / "templates.yaml"
    templates.write_text("templates:\n  - questions: [unclosed\n")
    result = runner.invoke(app, ["serve", "--templates", str(templates), "--data-dir", str(tmp_path / "data")])
    assert_friendly(result, "error:", "not valid YAML")


def test_a_non_numeric_threshold_is_a_usage_error() -> None:
    result = runner.invoke(app, ["serve", "--threshold", "high"])
    assert result.exit_code == 2
    assert "Invalid value" in result.output


# -- stats ---------------------------------------------------------------------------------------


def test_stats_prints_a_table_with_every_namespace(stats_server: str) -> None:
    result = runner.invoke(app, ["stats", "--url", stats_server])
    assert result.exit_code == 0, result.output
    assert "support" in result.output and "billing" in result.output
    assert "hit rate" in result.output
    assert "entries: 42" in result.output
    assert "66.7%" in result.output  # overall: 2 hits of 3 cacheable requests


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
