"""Unit tests for semcache.settings.Settings: defaults, environment, YAML file and precedence."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from semcache.settings import DEFAULT_THRESHOLD, Settings, SettingsError, unknown_environment_variables


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("SEMCACHE_"):
            monkeypatch.delenv(name)


def write_yaml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "semcache.yaml"
    path.write_text(text)
    return path


def test_defaults() -> None:
    settings = Settings()
    assert settings.host == "127.0.0.1"
    assert settings.port == 8080
    assert settings.upstream_url == "https://api.openai.com/v1"
    assert settings.threshold == DEFAULT_THRESHOLD == 0.91
    assert settings.ttl_s == 7 * 24 * 3600
    assert settings.data_dir == Path("index")
    assert settings.templates is None
    assert settings.config is None
    assert settings.embedding_model == "all-MiniLM-L6-v2"


def test_environment_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEMCACHE_THRESHOLD", "0.8")
    monkeypatch.setenv("SEMCACHE_UPSTREAM_URL", "http://127.0.0.1:8000/v1/")
    monkeypatch.setenv("SEMCACHE_TTL", "60")
    monkeypatch.setenv("SEMCACHE_DATA_DIR", "/var/lib/semcache")
    settings = Settings()
    assert settings.threshold == 0.8
    assert settings.upstream_url == "http://127.0.0.1:8000/v1"  # trailing slash dropped
    assert settings.ttl_s == 60.0
    assert settings.data_dir == Path("/var/lib/semcache")


def test_environment_variable_names_ignore_case(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("semcache_port", "9000")
    assert Settings().port == 9000


def test_unprefixed_variables_are_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("THRESHOLD", "0.5")
    assert Settings().threshold == DEFAULT_THRESHOLD


def test_yaml_file_given_as_config(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, "threshold: 0.85\nmax-entries: 500\nupstream-url: http://localhost:9/v1\n")
    settings = Settings(config=path)
    assert settings.threshold == 0.85
    assert settings.max_entries == 500
    assert settings.upstream_url == "http://localhost:9/v1"


def test_yaml_file_named_by_semcache_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_yaml(tmp_path, "ttl: 120\ndata_dir: /srv/cache\n")
    monkeypatch.setenv("SEMCACHE_CONFIG", str(path))
    settings = Settings()
    assert settings.ttl_s == 120
    assert settings.data_dir == Path("/srv/cache")
    assert settings.config == path


def test_empty_yaml_file_changes_nothing(tmp_path: Path) -> None:
    assert Settings(config=write_yaml(tmp_path, "")).threshold == DEFAULT_THRESHOLD


def test_yaml_file_that_is_not_a_mapping(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="must hold a mapping"):
        Settings(config=write_yaml(tmp_path, "- threshold\n- 0.8\n"))


def test_an_unknown_key_in_the_yaml_file_names_the_file_the_line_and_the_closest_setting(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, "port: 9000\ntreshold: 0.99\n")
    with pytest.raises(SettingsError) as caught:
        Settings(config=path)
    assert str(caught.value) == f"{path}, line 2: unknown setting 'treshold' (did you mean 'threshold'?)"


@pytest.mark.parametrize(
    ("key", "closest"),
    [("upstream-urll", "upstream_url"), ("SEMCACHE_THRESHOLD", "threshold"), ("Threshold", "threshold")],
)
def test_an_unknown_key_is_named_as_written(tmp_path: Path, key: str, closest: str) -> None:
    with pytest.raises(SettingsError) as caught:
        Settings(config=write_yaml(tmp_path, f"{key}: 1\n"))
    assert str(caught.value).endswith(f"line 1: unknown setting '{key}' (did you mean '{closest}'?)")


def test_an_unknown_key_with_no_close_setting_is_named_alone(tmp_path: Path) -> None:
    with pytest.raises(SettingsError) as caught:
        Settings(config=write_yaml(tmp_path, "zzqqxx: 1\n"))
    assert str(caught.value).endswith("unknown setting 'zzqqxx'")


def test_an_unknown_keyword_argument_is_an_error() -> None:
    with pytest.raises(SettingsError) as caught:
        Settings(treshold=0.99)
    assert str(caught.value) == "unknown setting 'treshold' (did you mean 'threshold'?)"


@pytest.mark.parametrize(
    ("text", "line"),
    [("threshold: 0.9\n  ttl: 5\n", 2), ("port: 1\nthreshold: [0.9\n", 3), ("a: 'open\n", 2), ("\tport: 1\n", 1)],
)
def test_a_yaml_syntax_error_is_one_line_with_the_file_and_the_line(tmp_path: Path, text: str, line: int) -> None:
    path = write_yaml(tmp_path, text)
    with pytest.raises(SettingsError) as caught:
        Settings(config=path)
    message = str(caught.value)
    assert message.startswith(f"{path}, line {line}: not valid YAML: ") and "\n" not in message


def test_unknown_semcache_variables_are_still_ignored_but_warned_about(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEMCACHE_TRESHOLD", "0.5")
    monkeypatch.setenv("SEMCACHE_RELIABILITY", "full")  # the test suite's own, not a setting
    monkeypatch.setenv("SEMCACHE_PORT", "9000")
    assert Settings().threshold == DEFAULT_THRESHOLD and Settings().port == 9000
    assert unknown_environment_variables(os.environ) == [
        "SEMCACHE_TRESHOLD is not a semcache setting and is ignored (did you mean SEMCACHE_THRESHOLD?)"
    ]


def test_precedence_kwargs_then_env_then_yaml_then_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_yaml(tmp_path, "threshold: 0.5\nttl: 10\nport: 7000\n")
    monkeypatch.setenv("SEMCACHE_THRESHOLD", "0.6")
    monkeypatch.setenv("SEMCACHE_TTL", "20")
    settings = Settings(config=path, threshold=0.7)
    assert settings.threshold == 0.7  # explicit beats env and YAML
    assert settings.ttl_s == 20  # env beats YAML
    assert settings.port == 7000  # YAML beats the default
    assert settings.host == "127.0.0.1"  # default


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("threshold", 1.5),
        ("threshold", -0.1),
        ("template_threshold", 2),
        ("port", 70000),
        ("ttl_s", -1),
        ("max_entries", 0),
    ],
)
def test_invalid_values_raise(field: str, value: float) -> None:
    with pytest.raises(ValidationError) as caught:
        Settings(**{field: value})
    assert caught.value.errors()[0]["loc"] == (field,)


def test_invalid_values_from_the_environment_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEMCACHE_THRESHOLD", "1.5")
    with pytest.raises(ValidationError, match="threshold"):
        Settings()


def test_invalid_values_from_yaml_raise(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="threshold"):
        Settings(config=write_yaml(tmp_path, "threshold: high\n"))


def test_prices_from_the_environment_and_from_yaml(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert Settings().prices == {}  # no vendor's prices are shipped
    monkeypatch.setenv("SEMCACHE_PRICES", '{"gpt-4o-mini": {"input_per_1m": 0.15, "output_per_1m": 0.6}}')
    price = Settings().prices["gpt-4o-mini"]
    assert (price.input_per_1m, price.output_per_1m) == (0.15, 0.6)
    monkeypatch.delenv("SEMCACHE_PRICES")
    config = write_yaml(tmp_path, "prices:\n  default: {input_per_1m: 1, output_per_1m: 3}\n")
    assert Settings(config=config).prices["default"].output_per_1m == 3


@pytest.mark.parametrize(
    "prices",
    [{"m": {"input_per_1m": -1, "output_per_1m": 1}}, {"m": {"input_per_1m": 1}}, {"m": {"input": 1, "output": 2}}],
    ids=["negative", "missing", "unknown-field"],
)
def test_invalid_prices_raise(prices: dict[str, dict[str, float]]) -> None:
    with pytest.raises(ValidationError, match="prices"):
        Settings(prices=prices)


def test_a_renamed_setting_is_still_read_under_its_old_name_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    assert Settings(ttl=30).ttl_s == 30
    assert "the argument 'ttl' is now 'ttl_s'" in caplog.text
    path = write_yaml(tmp_path, "ttl: 40\n")
    assert Settings(config=path).ttl_s == 40
    assert f"{path}: the setting 'ttl' is now 'ttl_s'" in caplog.text
    assert Settings(ttl=1, ttl_s=2).ttl_s == 2  # the new name wins
    monkeypatch.setenv("SEMCACHE_TTL", "50")  # the variable keeps its name, without a warning
    caplog.clear()
    assert Settings().ttl_s == 50 and caplog.text == ""
    monkeypatch.setenv("SEMCACHE_TTL_S", "60")  # and the new one wins
    assert Settings().ttl_s == 60
    assert unknown_environment_variables({"SEMCACHE_TTL": "1", "SEMCACHE_TTL_S": "1"}) == []


@pytest.mark.parametrize(
    ("arguments", "environment", "file_text", "expected"),
    [
        (["config"], {"SEMCACHE_THRESHOLD": "1.5"}, None, "threshold from SEMCACHE_THRESHOLD: "),
        (["config"], {"SEMCACHE_TTL": "-5"}, None, "ttl_s from SEMCACHE_TTL: "),
        (["config", "--config", "{file}"], {}, "data_dir: /tmp\n\nthreshold: 1.5\n", "threshold from {file}, line 3: "),
        (["config"], {"SEMCACHE_CONFIG": "{file}"}, "ttl: -5\n", "ttl_s from {file}, line 1: "),
        (["serve", "--threshold", "3"], {"SEMCACHE_CONFIG": "{file}"}, "threshold: 0.5\n",
         "threshold from --threshold: "),
        (["eval", "trace", "t.jsonl", "--threshold", "3"], {}, None, "threshold from --threshold: "),
        (["config"], {"SEMCACHE_PRICES": '{"m": {"input_per_1m": -1, "output_per_1m": 1}}'}, None,
         "prices.m.input_per_1m from SEMCACHE_PRICES: "),
        (["config"], {"SEMCACHE_PRICES": "cheap"}, None, "SEMCACHE_PRICES: prices takes JSON here"),
    ],
    ids=["variable", "old-variable", "file", "file-by-variable-old-key", "flag-over-file", "eval-flag", "nested",
         "not-json"],
)  # fmt: skip
def test_a_bad_value_names_where_it_came_from(
    tmp_path: Path, arguments: list[str], environment: dict[str, str], file_text: str | None, expected: str
) -> None:
    """The semcache command as a person runs it: the error names the flag, the variable, or the file
    and its line, of the value in force."""
    file = tmp_path / "semcache.yaml"
    if file_text is not None:
        file.write_text(file_text)
    env = {name: value for name, value in os.environ.items() if not name.startswith("SEMCACHE_")}
    env.update({name: value.replace("{file}", str(file)) for name, value in environment.items()}, COLUMNS="300")
    done = subprocess.run(
        [sys.executable, "-m", "semcache", *(a.replace("{file}", str(file)) for a in arguments)],
        capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert done.stdout.startswith("error: "), done.stdout
    assert expected.replace("{file}", str(file)) in done.stdout, done.stdout
