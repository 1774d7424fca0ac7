"""The admin API for entries, end to end over HTTP with the real model: list and search, delete (by
id, namespace, age and meaning), flush, export and import, template reloads, the admin key, the
OpenAPI description, and the `semcache admin` commands. On the Redis store, a change made through
one replica reaches the others."""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest
from typer.testing import CliRunner

from semcache import cli
from semcache.embedders.sentence_transformer import SentenceTransformerEmbedder
from semcache.protocols import Embedder
from semcache.testing.standin_upstream import StandinUpstream
from testkit.redis_server import RedisServer

from .conftest import ask
from .test_replicas import Replicas, wait_for

pytestmark = pytest.mark.slow

ADMIN_KEY = "admin-secret-for-tests"
BREAD = "How do I bake sourdough bread at home?"
BREAD_PARAPHRASE = "How do you bake sourdough bread at home?"
BREAD_QUESTION = "How can I bake sourdough bread at home?"  # for semantic admin searches
FRANCE = "What is the capital of France?"
PYTHON = "How do I read a CSV file in Python?"
runner = CliRunner(env={"COLUMNS": "160"})
JSONL = {"Content-Type": "application/x-ndjson"}  # what an import takes (/admin refuses other bodies but JSON)


def admin(url: str, key: str | None = ADMIN_KEY) -> httpx.Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.Client(base_url=url, headers=headers, timeout=60)


def entries(url: str, **params: Any) -> list[dict[str, Any]]:
    with admin(url) as http:
        response = http.get("/admin/entries", params={"limit": 1000, **params})
    assert response.status_code == 200, response.text
    return list(response.json()["data"])


def figures(url: str) -> dict[str, Any]:
    return dict(httpx.get(f"{url}/stats", timeout=10).json())


@pytest.fixture
def cache(serve: Callable[..., str]) -> str:
    return serve(admin_key=ADMIN_KEY)


@pytest.fixture
def filled(cache: str, make_client: Callable[..., openai.OpenAI]) -> str:
    """Four entries: three questions in 'default' (one asked of a second model), one in 'other'."""
    client = make_client(cache)
    ask(client, BREAD)
    ask(client, FRANCE)
    ask(client, BREAD, model="other-model")  # another scope of the same namespace
    ask(client, PYTHON, extra_headers={"X-Semcache-Namespace": "other"})
    return cache


# -- the admin key ---------------------------------------------------------------------------


ADMIN_CALLS: list[tuple[str, str, dict[str, Any]]] = [
    ("GET", "/admin/entries", {}),
    ("GET", "/admin/entries?query=bread", {}),
    ("GET", "/admin/entries/export", {}),
    ("POST", "/admin/entries/import", {"content": b"{}\n", "headers": JSONL}),
    ("POST", "/admin/entries/delete", {"json": {"namespace": "default"}}),
    ("GET", "/admin/entries/1", {}),
    ("DELETE", "/admin/entries/1", {}),
    ("POST", "/admin/flush", {"json": {"confirm": True}}),
    ("POST", "/admin/templates/reload", {}),
]


def test_every_entry_operation_needs_the_admin_key(filled: str) -> None:
    for key, status, code in ((None, 401, "admin_key_required"), ("wrong-key", 403, "invalid_admin_key")):
        with admin(filled, key) as http:
            for method, path, kwargs in ADMIN_CALLS:
                response = http.request(method, path, **kwargs)
                assert response.status_code == status, (method, path, response.text)
                assert response.json()["error"]["code"] == code
    assert figures(filled)["entries"] == 4  # nothing was deleted, flushed or imported


# -- listing and searching -------------------------------------------------------------------


def test_list_filters_by_namespace_and_text_and_pages_with_a_cursor(filled: str) -> None:
    everything = entries(filled)
    assert [e["prompt"] for e in everything] == [BREAD, FRANCE, BREAD, PYTHON]  # id order
    first = everything[0]
    assert set(first) >= {"id", "namespace", "model", "prompt", "answer", "truncated", "created_at", "expires_at",
                          "last_access", "hits"}  # fmt: skip
    assert "vector" not in first and first["similarity"] is None
    assert (first["namespace"], first["model"], first["answer"]) == ("default", "test-model", f"Answer to: {BREAD}")
    assert first["expires_at"] > first["created_at"] and first["truncated"] is False

    assert [e["prompt"] for e in entries(filled, namespace="other")] == [PYTHON]
    assert [e["prompt"] for e in entries(filled, text="SOURDOUGH")] == [BREAD, BREAD]  # case-insensitive
    assert [e["prompt"] for e in entries(filled, text="answer to: what is")] == [FRANCE]  # answers too
    assert entries(filled, namespace="nobody") == []

    seen, cursor = [], None
    with admin(filled) as http:
        while True:
            page = http.get("/admin/entries", params={"limit": 3, **({"cursor": cursor} if cursor else {})}).json()
            seen += [e["id"] for e in page["data"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert seen == [e["id"] for e in everything]
        cut = http.get("/admin/entries", params={"max_chars": 10}).json()["data"][0]
        assert (cut["prompt"], cut["answer"], cut["truncated"]) == (BREAD[:10], "Answer to:", True)
        assert http.get("/admin/entries", params={"cursor": "nonsense"}).status_code == 400
        assert http.get("/admin/entries", params={"namespace": "bad name!"}).status_code == 400


def test_semantic_search_spans_the_namespace_scopes_best_first(filled: str) -> None:
    found = entries(filled, query=BREAD_QUESTION, min_similarity=0.8)
    assert [(e["prompt"], e["model"]) for e in found] == [(BREAD, "test-model"), (BREAD, "other-model")]
    assert all(0.8 <= e["similarity"] <= 1.0 for e in found)
    loose = entries(filled, query=BREAD_QUESTION, min_similarity=0.0, namespace="default")
    assert [e["prompt"] for e in loose][-1] == FRANCE and len(loose) == 3  # everything, nearest first
    assert loose == sorted(loose, key=lambda e: -e["similarity"])
    assert entries(filled, query=BREAD_QUESTION, namespace="other", min_similarity=0.5) == []
    # Without min_similarity, the namespace's threshold: what a semantic hit would need.
    assert len(entries(filled, query=BREAD_PARAPHRASE)) == 2
    with admin(filled) as http:
        page = http.get("/admin/entries", params={"query": BREAD_QUESTION, "min_similarity": 0, "limit": 2}).json()
        rest = http.get("/admin/entries", params={"query": BREAD_QUESTION, "min_similarity": 0, "limit": 2,
                                                  "cursor": page["next_cursor"]}).json()  # fmt: skip
        everything = entries(filled, query=BREAD_QUESTION, min_similarity=0.0)
        assert len(page["data"]) == 2 and rest["next_cursor"] is None and len(everything) >= 3
        assert [e["id"] for e in page["data"] + rest["data"]] == [e["id"] for e in everything]
        assert http.get("/admin/entries", params={"min_similarity": 0.5}).status_code == 400  # needs a query


# -- deleting --------------------------------------------------------------------------------


def test_get_and_delete_one_entry(filled: str, make_client: Callable[..., openai.OpenAI]) -> None:
    france = entries(filled, text="France")[0]
    with admin(filled) as http:
        assert http.get(f"/admin/entries/{france['id']}").json()["prompt"] == FRANCE
        assert http.delete(f"/admin/entries/{france['id']}").json() == {"id": france["id"], "deleted": True}
        assert http.get(f"/admin/entries/{france['id']}").status_code == 404
        assert http.delete(f"/admin/entries/{france['id']}").status_code == 404
        assert http.delete("/admin/entries/0").status_code == 400
    assert figures(filled)["index"]["entries"] == 3  # it left the index too
    assert ask(make_client(filled), FRANCE)[1]["x-semcache"] == "miss"


def test_delete_by_namespace_and_by_age(filled: str, make_client: Callable[..., openai.OpenAI]) -> None:
    old = {**exported_line("Who painted the Mona Lisa?", created_at=time.time() - 7200), "namespace": "default"}
    with admin(filled) as http:
        assert http.post("/admin/entries/import", content=json.dumps(old), headers=JSONL).json()["imported"] == 1
        preview = http.post("/admin/entries/delete", json={"older_than_s": 3600, "dry_run": True}).json()
        assert (preview["matched"], preview["deleted"]) == (1, 0)
        assert [e["prompt"] for e in preview["data"]] == ["Who painted the Mona Lisa?"]
        assert figures(filled)["entries"] == 5  # a dry run deletes nothing
        gone = http.post("/admin/entries/delete", json={"older_than_s": 3600}).json()
        assert (gone["matched"], gone["deleted"]) == (1, 1)

        gone = http.post("/admin/entries/delete", json={"namespace": "other"}).json()
        assert gone["deleted"] == 1 and [e["prompt"] for e in gone["data"]] == [PYTHON]
        refused = http.post("/admin/entries/delete", json={})
        assert refused.status_code == 400 and "/admin/flush" in refused.json()["error"]["message"]
    assert [e["prompt"] for e in entries(filled)] == [BREAD, FRANCE, BREAD]
    client = make_client(filled)
    assert ask(client, PYTHON, extra_headers={"X-Semcache-Namespace": "other"})[1]["x-semcache"] == "miss"
    assert ask(client, FRANCE)[1]["x-semcache-tier"] == "exact"


def test_semantic_delete_forgets_only_what_is_near(filled: str, make_client: Callable[..., openai.OpenAI]) -> None:
    request = {"query": BREAD_QUESTION, "min_similarity": 0.8, "namespace": "default"}
    with admin(filled) as http:
        preview = http.post("/admin/entries/delete", json={**request, "dry_run": True}).json()
        assert preview["matched"] == 2 and {e["model"] for e in preview["data"]} == {"test-model", "other-model"}
        assert all(e["similarity"] >= 0.8 for e in preview["data"])
        assert http.post("/admin/entries/delete", json=request).json()["deleted"] == 2
    assert [e["prompt"] for e in entries(filled)] == [FRANCE, PYTHON]
    assert figures(filled)["index"]["entries"] == 2
    client = make_client(filled)
    assert ask(client, BREAD_PARAPHRASE)[1]["x-semcache"] == "miss"
    assert ask(client, FRANCE)[1]["x-semcache-tier"] == "exact"


def test_flush_needs_confirmation_then_empties_store_and_index(
    filled: str, make_client: Callable[..., openai.OpenAI]
) -> None:
    with admin(filled) as http:
        for body in (None, {}, {"confirm": False}, {"confirm": "yes"}):
            refused = http.post("/admin/flush", json=body)
            assert refused.status_code == 400, body
        assert figures(filled)["entries"] == 4
        assert http.post("/admin/flush", json={"confirm": True}).json() == {"deleted": 4}
    stats = figures(filled)
    assert (stats["entries"], stats["index"]["entries"]) == (0, 0)
    assert ask(make_client(filled), BREAD)[1]["x-semcache"] == "miss"


# -- export and import -----------------------------------------------------------------------


def export(url: str, **params: Any) -> list[dict[str, Any]]:
    with admin(url) as http:
        response = http.get("/admin/entries/export", params=params)
    assert response.status_code == 200 and response.headers["content-type"].startswith("application/x-ndjson")
    return [json.loads(line) for line in response.text.splitlines()]


def import_lines(url: str, lines: list[dict[str, Any]] | bytes, **params: Any) -> dict[str, Any]:
    body = lines if isinstance(lines, bytes) else "".join(json.dumps(line) + "\n" for line in lines).encode()
    with admin(url) as http:
        response = http.post("/admin/entries/import", content=body, params=params, headers=JSONL)
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_export_flush_import_round_trip_hits_again(
    filled: str, make_client: Callable[..., openai.OpenAI], upstream: StandinUpstream, minilm: Embedder
) -> None:
    client = make_client(filled)
    ask(client, "What is the boiling point of water?", extra_headers={"X-Semcache-TTL": "0"})  # never expires
    lines = export(filled)
    assert len(lines) == 5 and all("vector" not in line for line in lines)
    assert set(lines[0]) >= {"namespace", "scope", "exact_key", "model", "prompt", "answer", "created_at",
                             "expires_at", "last_access", "hits"}  # fmt: skip
    assert [line["prompt"] for line in export(filled, namespace="other")] == [PYTHON]

    with admin(filled) as http:
        http.post("/admin/flush", json={"confirm": True}).raise_for_status()
    report = import_lines(filled, lines)
    assert (report["lines"], report["imported"], report["embedded"], report["failed"]) == (5, 5, 5, 0)
    assert figures(filled)["index"]["entries"] == 5
    calls = upstream.chat_calls()
    assert ask(client, BREAD)[1]["x-semcache-tier"] == "exact"
    answer, headers = ask(client, BREAD_PARAPHRASE)
    assert (answer, headers["x-semcache-tier"]) == (f"Answer to: {BREAD}", "semantic")
    assert ask(client, PYTHON, extra_headers={"X-Semcache-Namespace": "other"})[1]["x-semcache-tier"] == "exact"
    assert upstream.chat_calls() == calls
    assert [e["expires_at"] for e in entries(filled, text="boiling")] == [None]

    # With vectors, an import by the same model embeds nothing; importing again replaces.
    with_vectors = export(filled, vectors="true")
    assert all(line["vector_model"] == minilm.name and line["vector"] for line in with_vectors)
    report = import_lines(filled, with_vectors)
    assert (report["imported"], report["replaced"], report["embedded"]) == (5, 5, 0)
    assert figures(filled)["entries"] == 5
    assert ask(client, BREAD_PARAPHRASE)[1]["x-semcache-tier"] == "semantic"


def exported_line(prompt: str, **fields: Any) -> dict[str, Any]:
    digest = hashlib.sha256(prompt.encode()).hexdigest()
    line = {"namespace": "imported", "scope": "scope-" + digest[:8], "exact_key": digest, "model": "m"}
    return {**line, "prompt": prompt, "answer": f"Imported answer to: {prompt}", "created_at": time.time(), **fields}


def test_import_skips_expired_lines_and_reports_bad_ones_by_line_number(cache: str, minilm: Embedder) -> None:
    body = b"\n".join([
        json.dumps(exported_line("A good line")).encode(),
        b"",
        b"not json at all",
        json.dumps({**exported_line("No answer"), "answer": None}).encode(),
        json.dumps(exported_line("Expired", expires_at=time.time() - 10)).encode(),
        json.dumps({**exported_line("Bad namespace"), "namespace": "no spaces allowed"}).encode(),
        json.dumps(exported_line("Wrong vector", vector="AAAA", vector_model=minilm.name)).encode(),
        json.dumps(exported_line("Other model's vector", vector="AAAA", vector_model="another-model")).encode(),
    ])  # fmt: skip
    report = import_lines(cache, body, first_line=11)
    assert (report["lines"], report["imported"], report["skipped"], report["failed"]) == (7, 2, 1, 4)
    assert report["embedded"] == 2  # the other model's vector is not used: the prompt is embedded here
    errors = {e["line"]: e["message"] for e in report["errors"]}
    assert sorted(errors) == [13, 14, 16, 17]
    assert errors[13] == "not a JSON object" and "answer" in errors[14] and "namespace" in errors[16]
    assert "vector" in errors[17]
    assert [e["prompt"] for e in entries(cache)] == ["A good line", "Other model's vector"]


def test_import_embeds_in_batches_and_logs_its_progress(
    cache: str, minilm: SentenceTransformerEmbedder, caplog: pytest.LogCaptureFixture
) -> None:
    rng = np.random.default_rng(0)
    lines = []
    for n in range(1200):
        vector = rng.standard_normal(minilm.dimension).astype("<f4")
        encoded = base64.b64encode((vector / np.linalg.norm(vector)).astype("<f4").tobytes()).decode()
        lines.append(exported_line(f"Synthetic question number {n}", vector=encoded, vector_model=minilm.name))
    lines[5] = exported_line("One line without a vector")
    caplog.set_level(logging.INFO, logger="semcache.management")
    report = import_lines(cache, lines)
    assert (report["imported"], report["embedded"], report["failed"]) == (1200, 1, 0)
    progress = [r.getMessage() for r in caplog.records if r.name == "semcache.management"]
    assert any("import from line 1: 1024 lines, 1024 imported" in line for line in progress), progress
    assert any("import from line 1 done: 1200 lines, 1200 imported (1 embedded)" in line for line in progress)
    assert figures(cache)["index"]["entries"] == 1200


def test_an_import_body_over_the_size_limit_is_refused_whole(serve: Callable[..., str]) -> None:
    url = serve(admin_key=ADMIN_KEY, max_body_bytes=2048)
    body = "".join(json.dumps(exported_line(f"Question {n}")) + "\n" for n in range(20)).encode()
    assert len(body) > 2048
    with admin(url) as http:
        assert http.post("/admin/entries/import", content=body, headers=JSONL).status_code == 413
    assert entries(url) == []


# -- templates -------------------------------------------------------------------------------


def test_reload_templates_swaps_them_in_and_a_bad_file_changes_nothing(
    serve: Callable[..., str], make_client: Callable[..., openai.OpenAI], tmp_path: Path
) -> None:
    templates = tmp_path / "templates.yaml"
    templates.write_text(
        'templates:\n  - id: hours\n    questions: ["What are your opening hours?"]\n    answer: "9 to 5."\n'
    )
    url = serve(admin_key=ADMIN_KEY, templates=templates)
    client = make_client(url)
    assert ask(client, "What are your opening hours?")[0] == "9 to 5."

    templates.write_text(
        'templates:\n  - id: hours\n    questions: ["What are your opening hours?"]\n    answer: "8 to 8."\n'
        '  - id: parking\n    questions: ["Where can I park?"]\n    answer: "Behind the shop."\n'
    )
    with admin(url) as http:
        reloaded = http.post("/admin/templates/reload").json()
        assert reloaded == {"templates": 2, "phrasings": 2, "ids": ["hours", "parking"], "shared": False}
        assert ask(client, "What are your opening hours?")[0] == "8 to 8."
        answer, headers = ask(client, "Where could I park?")  # matched by meaning: the phrasings were embedded
        assert (answer, headers["x-semcache-tier"]) == ("Behind the shop.", "template")

        templates.write_text("templates:\n  - questions: []\n")
        refused = http.post("/admin/templates/reload")
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_templates"
        assert "questions" in refused.json()["error"]["message"]
        templates.unlink()
        assert http.post("/admin/templates/reload").status_code == 400
    assert ask(client, "What are your opening hours?")[0] == "8 to 8."


def test_reload_without_a_templates_file_says_so(cache: str) -> None:
    with admin(cache) as http:
        refused = http.post("/admin/templates/reload")
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "no_templates_file"


# -- OpenAPI ---------------------------------------------------------------------------------


def test_openapi_describes_every_admin_entry_operation(cache: str) -> None:
    spec = httpx.get(f"{cache}/openapi.json").json()
    expected = {
        ("/admin/entries", "get"), ("/admin/entries/export", "get"), ("/admin/entries/import", "post"),
        ("/admin/entries/delete", "post"), ("/admin/entries/{entry_id}", "get"),
        ("/admin/entries/{entry_id}", "delete"), ("/admin/flush", "post"), ("/admin/templates/reload", "post"),
    }  # fmt: skip
    for path, method in expected:
        operation = spec["paths"][path][method]
        assert operation["summary"] and "admin" in operation["tags"], (path, method)
    assert "application/x-ndjson" in spec["paths"]["/admin/entries/import"]["post"]["requestBody"]["content"]
    assert "EntryList" in spec["components"]["schemas"] and "DeleteRequest" in spec["components"]["schemas"]


# -- the command line ------------------------------------------------------------------------


@pytest.fixture
def no_admin_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SEMCACHE_ADMIN_KEY", raising=False)
    monkeypatch.setattr(cli.console, "width", 160)


def invoke(*args: str, env: dict[str, str] | None = None) -> Any:
    result = runner.invoke(cli.app, ["admin", *args], env=env)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result


@pytest.mark.usefixtures("no_admin_env")
def test_cli_lists_deletes_exports_flushes_and_imports(filled: str, tmp_path: Path) -> None:
    key = ["--url", filled, "--admin-key", ADMIN_KEY]
    listed = invoke("entries", "--namespace", "default", "--json", *key)
    assert listed.exit_code == 0 and [e["prompt"] for e in json.loads(listed.output)["data"]] == [BREAD, FRANCE, BREAD]
    table = invoke("entries", "--query", BREAD_QUESTION, "--min-similarity", "0.8", *key)
    assert table.exit_code == 0 and "similarity" in table.output and "sourdough" in table.output

    # The key may come from the environment instead.
    preview = invoke("delete", "--namespace", "other", "--dry-run", "--url", filled,
                     env={"SEMCACHE_ADMIN_KEY": ADMIN_KEY})  # fmt: skip
    assert preview.exit_code == 0 and "1 entry matches" in preview.output
    declined = runner.invoke(cli.app, ["admin", "delete", "--namespace", "other", *key], input="n\n")
    assert declined.exit_code == 1 and len(entries(filled)) == 4
    deleted = invoke("delete", "--namespace", "other", "--yes", "--json", *key)
    assert json.loads(deleted.output)["deleted"] == 1

    backup = tmp_path / "backup.jsonl"
    exported = invoke("export", str(backup), "--vectors", *key)
    assert exported.exit_code == 0 and "exported 3 entries" in exported.output
    assert len(backup.read_text().splitlines()) == 3

    assert runner.invoke(cli.app, ["admin", "flush", *key], input="n\n").exit_code == 1
    flushed = invoke("flush", "--yes", "--json", *key)
    assert json.loads(flushed.output) == {"deleted": 3}

    imported = invoke("import", str(backup), "--chunk-bytes", "4096", "--json", *key)  # one request per line or so
    report = json.loads(imported.output)
    assert (report["imported"], report["embedded"], report["failed"]) == (3, 0, 0)
    assert [e["prompt"] for e in entries(filled)] == [BREAD, FRANCE, BREAD]


@pytest.mark.usefixtures("no_admin_env")
def test_cli_errors_are_friendly(filled: str, tmp_path: Path) -> None:
    wrong = invoke("entries", "--url", filled, "--admin-key", "wrong")
    assert wrong.exit_code == 2 and "403" in wrong.output and "--admin-key" in wrong.output
    assert "Traceback" not in wrong.output
    missing = invoke("flush", "--yes", "--url", filled)
    assert missing.exit_code == 2 and "401" in missing.output
    unreachable = invoke("entries", "--url", "http://127.0.0.1:9")
    assert unreachable.exit_code == 2 and "cannot reach" in unreachable.output
    no_filter = invoke("delete", "--yes", "--url", filled, "--admin-key", ADMIN_KEY)
    assert no_filter.exit_code == 2 and "/admin/flush" in no_filter.output
    scripted = invoke("flush", "--json", "--url", filled, "--admin-key", ADMIN_KEY)
    assert scripted.exit_code == 2 and "--yes" in scripted.output
    no_templates = invoke("reload-templates", "--url", filled, "--admin-key", ADMIN_KEY)
    assert no_templates.exit_code == 2 and "--templates" in no_templates.output
    assert len(entries(filled)) == 4


def test_cli_help_has_examples() -> None:
    for command in ("entries", "delete", "flush", "reload-templates", "export", "import"):
        result = runner.invoke(cli.app, ["admin", command, "--help"])
        assert result.exit_code == 0 and "semcache admin" in result.output and "--admin-key" in result.output


# -- the Redis store: a change through one replica reaches the others ------------------------


@pytest.fixture
def redis_replicas(
    tmp_path: Path, upstream: StandinUpstream, minilm: SentenceTransformerEmbedder
) -> Iterator[Replicas]:
    with RedisServer(tmp_path / "redis") as server:
        group = Replicas(tmp_path, server.url, upstream, minilm)
        yield group
        for replica in list(group.running):
            group.stop(replica)


def test_on_redis_list_delete_flush_and_import_reach_every_replica(
    redis_replicas: Replicas, make_client: Callable[..., openai.OpenAI]
) -> None:
    a = redis_replicas.start("a", admin_key=ADMIN_KEY).url
    b = redis_replicas.start("b", admin_key=ADMIN_KEY).url
    client_a, client_b = make_client(a), make_client(b)
    for prompt in (BREAD, FRANCE, PYTHON):
        ask(client_a, prompt)
    wait_for(lambda: figures(b)["index"]["entries"] == 3)
    listed = entries(b)  # read from Redis, through the other replica
    assert [e["prompt"] for e in listed] == [BREAD, FRANCE, PYTHON] and "vector" not in listed[0]
    assert [e["prompt"] for e in entries(b, query=BREAD_QUESTION, min_similarity=0.8)] == [BREAD]

    with admin(a) as http:
        assert http.delete(f"/admin/entries/{listed[0]['id']}").status_code == 200  # through A ...
    wait_for(lambda: figures(b)["index"]["entries"] == 2)  # ... and B's index drops it from the feed
    assert ask(client_b, BREAD_PARAPHRASE)[1]["x-semcache"] == "miss"  # (stores the paraphrase)

    with admin(a) as http:
        gone = http.post("/admin/entries/delete", json={"text": "france"}).json()
        assert gone["deleted"] == 1
        backup = http.get("/admin/entries/export", params={"vectors": "true"}).content
        assert len(backup.splitlines()) == 2
        assert http.post("/admin/flush", json={"confirm": True}).json() == {"deleted": 2}
    wait_for(lambda: figures(b)["index"]["entries"] == 0)
    assert figures(b)["entries"] == 0 and entries(b) == []

    with admin(a) as http:
        report = http.post("/admin/entries/import", content=backup, headers=JSONL).json()
    assert (report["imported"], report["embedded"]) == (2, 0)
    wait_for(lambda: figures(b)["index"]["entries"] == 2)
    assert ask(client_b, PYTHON)[1]["x-semcache-tier"] == "exact"
    answer, headers = ask(client_b, BREAD)  # near the imported paraphrase
    assert headers["x-semcache-tier"] == "semantic" and answer == f"Answer to: {BREAD_PARAPHRASE}"


def test_on_redis_a_template_reload_reaches_every_replica(
    redis_replicas: Replicas, make_client: Callable[..., openai.OpenAI], tmp_path: Path
) -> None:
    templates = tmp_path / "templates.yaml"
    templates.write_text('templates:\n  - questions: ["What are your opening hours?"]\n    answer: "9 to 5."\n')
    a = redis_replicas.start("a", admin_key=ADMIN_KEY, templates=templates).url
    b = redis_replicas.start("b", admin_key=ADMIN_KEY).url
    assert ask(make_client(b), "What are your opening hours?")[0] == "9 to 5."
    templates.write_text('templates:\n  - questions: ["What are your opening hours?"]\n    answer: "Always."\n')
    with admin(a) as http:
        assert http.post("/admin/templates/reload").json()["shared"] is True
    wait_for(lambda: ask(make_client(b), "What are your opening hours?")[0] == "Always.")
