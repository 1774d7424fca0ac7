"""Unit tests for semcache.settings.Settings: defaults, environment, YAML file and precedence."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from semcache.settings import DEFAULT_THRESHOLD, Settings


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
    assert settings.ttl == 7 * 24 * 3600
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
    assert settings.ttl == 60.0
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
    assert settings.ttl == 120
    assert settings.data_dir == Path("/srv/cache")
    assert settings.config == path


def test_empty_yaml_file_changes_nothing(tmp_path: Path) -> None:
    assert Settings(config=write_yaml(tmp_path, "")).threshold == DEFAULT_THRESHOLD


def test_yaml_file_that_is_not_a_mapping(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="must hold a mapping"):
        Settings(config=write_yaml(tmp_path, "- threshold\n- 0.8\n"))


def test_precedence_kwargs_then_env_then_yaml_then_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_yaml(tmp_path, "threshold: 0.5\nttl: 10\nport: 7000\n")
    monkeypatch.setenv("SEMCACHE_THRESHOLD", "0.6")
    monkeypatch.setenv("SEMCACHE_TTL", "20")
    settings = Settings(config=path, threshold=0.7)
    assert settings.threshold == 0.7  # explicit beats env and YAML
    assert settings.ttl == 20  # env beats YAML
    assert settings.port == 7000  # YAML beats the default
    assert settings.host == "127.0.0.1"  # default


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("threshold", 1.5),
        ("threshold", -0.1),
        ("template_threshold", 2),
        ("port", 70000),
        ("ttl", -1),
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
