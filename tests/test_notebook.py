"""The tuning notebook runs headless on its shipped sample (as ``make notebook`` runs it) and
against a live service, so it cannot rot; its sample is well formed and hard."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import nbformat
import pytest
from nbclient import NotebookClient

from notebooks.run import NOTEBOOK, main, parameter_defaults
from semcache.settings import Settings
from semcache.testing.standin_upstream import StandinUpstream

from .conftest import SHARED_DATA

REPO = NOTEBOOK.parents[1]


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def files_under(folder: Path) -> set[Path]:
    return {path for path in folder.rglob("*") if "__pycache__" not in path.parts}


def test_the_committed_notebook_has_no_outputs_and_reads_the_shipped_sample() -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert all(cell.outputs == [] and cell.execution_count is None for cell in code)
    defaults = parameter_defaults(notebook)
    for name in ("PAIRS_FILE", "TRACE_FILE"):
        shipped = (NOTEBOOK.parent / defaults[name]).resolve()
        assert shipped.is_file() and shipped.is_relative_to(NOTEBOOK.parent / "sample"), (name, defaults[name])
    assert defaults["SERVICE_URL"] is None and defaults["APPLY"] is False
    assert "make notebook" in notebook.cells[0].source  # how to run it, first thing a reader sees


def test_the_shipped_sample_pairs_paraphrases_with_look_alikes() -> None:
    pairs = read_rows(NOTEBOOK.parent / "sample" / "pairs.jsonl")
    assert 120 <= len(pairs) <= 200
    assert all({"q1", "q2", "duplicate", "source"} <= set(row) for row in pairs)
    duplicates = [row for row in pairs if row["duplicate"]]
    assert len(duplicates) * 2 == len(pairs)
    kinds = {row["kind"] for row in pairs if not row["duplicate"]}
    assert {"number", "negation", "entity", "direction", "opposite"} <= kinds
    assert len({(row["q1"], row["q2"]) for row in pairs}) == len(pairs)


def test_the_shipped_trace_points_each_repeat_at_its_first_asking() -> None:
    trace = read_rows(NOTEBOOK.parent / "sample" / "trace.jsonl")
    pair_texts = {
        text for row in read_rows(NOTEBOOK.parent / "sample" / "pairs.jsonl") for text in (row["q1"], row["q2"])
    }
    assert [row["idx"] for row in trace] == list(range(len(trace)))
    first: dict[str, int] = {}
    for row in trace:
        assert row["duplicate_of"] == first.get(row["cluster"])
        assert all(trace[earlier]["cluster"] != row["cluster"] for earlier in row["hard_negative_of"])
        assert all(earlier < row["idx"] for earlier in row["hard_negative_of"])
        first.setdefault(row["cluster"], row["idx"])
    assert {row["prompt"] for row in trace} >= pair_texts
    assert sum(row["duplicate_of"] is not None for row in trace) >= 50
    assert sum(bool(row["hard_negative_of"]) for row in trace) >= 30


def test_make_notebook_refuses_a_parameter_the_notebook_lacks(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_code:
        main(["--set", "SERVICE_ULR=http://127.0.0.1:8080"])  # refused before a kernel starts
    assert exit_code.value.code == 2
    error = capsys.readouterr().err
    assert "no parameter named SERVICE_ULR" in error and "SERVICE_URL" in error
    with pytest.raises(SystemExit):
        main(["--set", "APPLY"])
    assert "'APPLY' is not NAME=VALUE" in capsys.readouterr().err


@pytest.mark.slow
def test_make_notebook_runs_on_the_shipped_sample_and_leaves_no_files(tmp_path: Path) -> None:
    """``make notebook``'s command as a user runs it: no ../shared, no service, and the model's
    export folder left to the settings' default (``data_dir``, a relative path)."""
    environment = dict(os.environ)
    for name in ("SEMCACHE_EMBEDDING_CACHE_DIR", "SEMCACHE_DATA_DIR"):  # the suite's shared export folder
        environment.pop(name, None)
    before, committed = files_under(NOTEBOOK.parent), NOTEBOOK.read_bytes()
    output = tmp_path / "executed.ipynb"
    run = subprocess.run(
        [sys.executable, "-m", "notebooks.run", "--output", str(output)],
        cwd=REPO, env=environment, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert files_under(NOTEBOOK.parent) == before and NOTEBOOK.read_bytes() == committed

    shown = run.stdout
    settings = Settings()
    assert f"Embedder: {settings.embedding_model} on backend {settings.embedding_backend} (" in shown
    scratch = re.search(r"exported to (\S+) for this session", shown)
    assert scratch and not Path(scratch[1]).exists()  # removed when the kernel stopped
    at_policy = re.search(rf"160 pairs, 160 in script 'latin'; at the configured threshold {settings.threshold}: "
                          r"precision ([0-9.]+), recall ([0-9.]+)", shown)  # fmt: skip
    assert at_policy, shown
    assert 0.0 < float(at_policy[1]) <= 1.0 and 0.0 < float(at_policy[2]) <= 1.0
    assert re.search(r"Threshold 0\.\d+: precision|No threshold reaches precision 0.95", shown)
    passing = re.search(r"(\d+) non-duplicates pass the guards at 0\.\d+ \(before verification\)", shown)
    assert passing and int(passing[1]) > 0  # look-alikes that no threshold alone stops: not an easy sample
    assert "learned line" in shown and "fixed threshold" in shown
    assert shown.count("SERVICE_URL is not set") == 3
    executed = nbformat.read(output, as_version=4)
    images = sum("image/png" in out.get("data", {}) for cell in executed.cells for out in cell.get("outputs", []))
    assert images >= 3 and shown.count("[plot]") == images


@pytest.mark.slow
@pytest.mark.shared_data
@pytest.mark.parametrize(
    ("pairs", "language", "apply"), [("qqp_dev.jsonl", "latin", False), ("zh_pairs_dev.jsonl", "han", True)]
)
def test_notebook_picks_a_threshold_and_applies_it_only_when_asked(
    serve: Callable[..., str], tmp_path: Path, upstream: StandinUpstream, pairs: str, language: str, apply: bool
) -> None:
    url = serve(admin_key="notebook-admin")
    httpx.post(f"{url}/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "hi there"}]})
    settings = Settings()  # what the service runs with, from the same environment
    config_file = tmp_path / "semcache.yaml"
    config_file.write_text(f"embedding-backend: {settings.embedding_backend}\n")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    parameters = next(c for c in notebook.cells if "parameters" in c.metadata.get("tags", []))
    parameters.source = (
        f"PAIRS_FILE = {str(SHARED_DATA / pairs)!r}\nSAMPLE = 200\nTARGET_PRECISION = 0.9\nGUARDS = None\n"
        f"CONFIG_FILE = {str(config_file)!r}\nSERVICE_URL = {url!r}\nADMIN_KEY = 'notebook-admin'\n"
        f"NAMESPACE = 'tuned'\nLANGUAGE = None\nAPPLY = {apply}\n"
        f"TRACE_FILE = {str(SHARED_DATA / 'trace_faq_dev.jsonl')!r}\nTRACE_SAMPLE = 150\n"
    )
    NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()

    outputs = "".join(
        output.get("text", "") for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs
    )
    images = sum("image/png" in output.get("data", {}) for cell in notebook.cells for output in cell.get("outputs", []))
    assert images >= 3 and "200 pairs" in outputs
    assert "learned line" in outputs and "fixed threshold" in outputs
    assert "namespace 'tuned', script 'latin': line" in outputs
    assert f"Embedder: {settings.embedding_model} on backend {settings.embedding_backend} (" in outputs
    assert "at the server's threshold" in outputs
    assert f"in script {language!r}" in outputs
    assert f"Would change namespace 'tuned' on {url}: threshold for script {language!r}" in outputs
    config = httpx.get(f"{url}/admin/namespaces/tuned/config", headers={"Authorization": "Bearer notebook-admin"})
    overrides = config.json()["overrides"]  # each script's threshold is tuned apart
    if not apply:
        assert overrides == {} and "Not applied: set APPLY = True" in outputs
        return
    chosen = overrides["threshold"] if language == "latin" else overrides["thresholds"][language]
    assert f"Threshold {chosen}" in outputs or f"most precise one is {chosen}" in outputs
    assert "Applied:" in outputs
