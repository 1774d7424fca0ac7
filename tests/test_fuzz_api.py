"""Fuzzing the HTTP API from its own OpenAPI schema (schemathesis), against the real service on loopback.

Every operation gets generated requests, valid and invalid, with the client key, with the admin
key, and with no key at all. Checks: no 5xx, responses that match the schema (status codes,
content types, bodies). Short in CI; ``SEMCACHE_RELIABILITY=full`` runs many more examples.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from testkit.reliability import full_mode

pytestmark = [pytest.mark.reliability, pytest.mark.slow]

CLIENT_KEY = "sk-fuzz-client"
ADMIN_KEY = "fuzz-admin-key"
MAX_EXAMPLES = 100 if full_mode() else 8
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
# POST /admin/entries/import takes JSONL, declared as a string: send the generated strings as they are.
schemathesis.serializer.alias("application/x-ndjson", "text/plain")
FUZZ_SETTINGS = settings(
    max_examples=MAX_EXAMPLES,
    derandomize=True,  # the same requests on every CI run
    deadline=None,
    suppress_health_check=list(HealthCheck),  # one service for every example: intended
    database=None,
)


@pytest.fixture
def api(serve: Callable[..., str], tmp_path: Path) -> tuple[str, dict[str, Any]]:
    """The service, with client API keys and an admin key, and its OpenAPI schema."""
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({CLIENT_KEY: ["default", "team-a"]}))
    url = serve(api_keys_file=keys, admin_key=ADMIN_KEY)
    return url, httpx.get(f"{url}/openapi.json", timeout=10).json()


def fuzz(url: str, key_for: Callable[[str], str | None]) -> list[str]:
    """Run every operation of the service's schema; the failures, one line each (all, not just the first)."""
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    failures = []
    for result in schema.get_all_operations():
        operation = result.ok()
        cases = st.one_of(
            operation.as_strategy(GenerationMode.POSITIVE), operation.as_strategy(GenerationMode.NEGATIVE)
        )

        @FUZZ_SETTINGS
        @given(case=cases)
        def call(case: Any) -> None:
            key = key_for(case.path)
            headers = {"Authorization": f"Bearer {key}"} if key else None
            case.call_and_validate(headers=headers, checks=CHECKS, timeout=30)

        try:
            call()
        except (Exception, BaseExceptionGroup) as exc:  # schemathesis groups an operation's failures
            failures.append(f"{operation.method.upper()} {operation.path}: {exc}")
    return failures


def test_api_with_keys(api: tuple[str, dict[str, Any]]) -> None:
    url, _ = api
    failures = fuzz(url, lambda path: ADMIN_KEY if path.startswith("/admin") else CLIENT_KEY)
    assert not failures, "\n\n".join(failures)


def test_api_without_keys(api: tuple[str, dict[str, Any]]) -> None:
    """Nothing answers a 5xx, and nothing under /v1 or /admin, nor /stats or /metrics (a key file is
    configured), answers anything but a 4xx."""
    url, _ = api
    failures = fuzz(url, lambda path: None)
    assert not failures, "\n\n".join(failures)
    for path in ("/v1/models", "/admin/decisions", "/admin/entries", "/stats", "/metrics"):
        status = httpx.get(f"{url}{path}", timeout=10).status_code
        assert status in (401, 403), (path, status)


def test_the_schema_declares_openai_shaped_errors(api: tuple[str, dict[str, Any]]) -> None:
    """What the fuzzers validate against: every operation documents its 4xx in OpenAI's error shape."""
    _, document = api
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            responses = operation["responses"]
            assert "422" not in responses, f"{method} {path} documents FastAPI's 422, which it never sends"
            error = responses["4XX"]["content"]["application/json"]["schema"]
            assert error == {"$ref": "#/components/schemas/OpenAIErrorResponse"}, (method, path)
