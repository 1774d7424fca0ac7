"""The tuning notebook runs headless against a sample and a live service, so it cannot rot."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import nbformat
import pytest
from nbclient import NotebookClient

from semcache.settings import Settings
from semcache.testing.standin_upstream import StandinUpstream

from .conftest import SHARED_DATA

pytestmark = [pytest.mark.slow, pytest.mark.shared_data]
NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "threshold_tuning.ipynb"


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
