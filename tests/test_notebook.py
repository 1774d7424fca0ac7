"""The tuning notebook runs headless against a sample and a live service, so it cannot rot."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import nbformat
import pytest
from nbclient import NotebookClient

from semcache.testing.standin_upstream import StandinUpstream

from .conftest import SHARED_DATA

pytestmark = [pytest.mark.slow, pytest.mark.shared_data]
NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "threshold_tuning.ipynb"


@pytest.mark.parametrize(("pairs", "language"), [("qqp_dev.jsonl", "latin"), ("zh_pairs_dev.jsonl", "han")])
def test_notebook_picks_a_threshold_and_applies_it(
    serve: Callable[..., str], tmp_path: Path, upstream: StandinUpstream, pairs: str, language: str
) -> None:
    url = serve(admin_key="notebook-admin")
    httpx.post(f"{url}/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "hi there"}]})
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    parameters = next(c for c in notebook.cells if "parameters" in c.metadata.get("tags", []))
    parameters.source = (
        f"PAIRS_FILE = {str(SHARED_DATA / pairs)!r}\nSAMPLE = 200\nTARGET_PRECISION = 0.9\nGUARDS = None\n"
        f"SERVICE_URL = {url!r}\nADMIN_KEY = 'notebook-admin'\nNAMESPACE = 'tuned'\nLANGUAGE = None\n"
    )
    NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()

    outputs = "".join(
        output.get("text", "") for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs
    )
    images = sum("image/png" in output.get("data", {}) for cell in notebook.cells for output in cell.get("outputs", []))
    assert images >= 2 and "200 pairs" in outputs
    config = httpx.get(f"{url}/admin/namespaces/tuned/config", headers={"Authorization": "Bearer notebook-admin"})
    overrides = config.json()["overrides"]  # each script's threshold is tuned apart
    chosen = overrides["threshold"] if language == "latin" else overrides["thresholds"][language]
    assert f"in script {language!r}" in outputs
    assert f"Threshold {chosen}" in outputs or f"most precise one is {chosen}" in outputs
