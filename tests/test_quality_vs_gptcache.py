"""benchmarks.quality_vs_gptcache: semcache's column and the table, without GPTCache (CI never installs it)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from benchmarks import quality_vs_gptcache as bench
from semcache.embedders.sentence_transformer import SentenceTransformerEmbedder
from semcache.evaluation.embedding_cache import CachedEmbedder
from semcache.settings import Settings

from .conftest import SHARED_DATA

pytestmark = pytest.mark.slow

PAIRS = SHARED_DATA / "qqp_dev.jsonl"
TRACE = SHARED_DATA / "trace_qqp_dev.jsonl"


def render(table: object) -> str:
    console = Console(record=True, width=160, file=io.StringIO())
    console.print(table)
    return console.export_text()


@pytest.mark.shared_data
def test_the_table_shows_semcache_and_placeholders_for_an_unmeasured_gptcache(
    minilm: SentenceTransformerEmbedder,
) -> None:
    inputs = bench.load_inputs([PAIRS], TRACE, sample=40)
    assert len(inputs.pairs["qqp_dev"]) == 40 and len(inputs.trace["trace_qqp_dev"]) == 40
    with bench.progress_bar() as progress:
        semcache = bench.measure_semcache(inputs, Settings(), CachedEmbedder(minilm), progress)

    scores = semcache.pairs["qqp_dev"]
    assert scores.positives == sum(bool(r["duplicate"]) for r in inputs.pairs["qqp_dev"])
    assert 0.0 <= scores.precision <= 1.0 and 0.0 <= scores.recall <= 1.0
    trace = semcache.trace["trace_qqp_dev"]
    assert trace.requests == 40 and trace.hits == trace.correct_hits + trace.wrong_hits
    assert trace.possible_hits == sum(r["duplicate_of"] is not None for r in inputs.trace["trace_qqp_dev"])
    assert semcache.config["policy"]["threshold"] == Settings().threshold

    text = render(bench.build_table(inputs, semcache, None))
    assert bench.GPTCACHE_COLUMN in text and bench.SEMCACHE_COLUMN in text
    measure_rows = 4 + 5  # precision, recall, F1, accepted; then the five trace measures
    assert text.count(f" {bench.PLACEHOLDER} ") >= measure_rows
    assert f"{scores.precision:.3f}" in text and f"{trace.served_share:.1%}" in text
    assert "GPTCache: not measured" in text


def test_gptcache_outcomes_are_scored_like_semcache_pairs() -> None:
    scores = bench._scores([True, True, False, False], [True, False, True, False])
    assert (scores.precision, scores.recall, scores.accepted, scores.positives) == (0.5, 0.5, 2, 2)
    trace = bench.TraceScores.of(correct=3, wrong=1, rows=[{"duplicate_of": None}, {"duplicate_of": 0}] * 3)
    assert (trace.hits, trace.wrong_hit_rate, trace.possible_hits, trace.served_share) == (4, 0.25, 3, 1.0)


@pytest.mark.shared_data
def test_no_gptcache_run_writes_json_without_touching_its_venv(
    minilm: SentenceTransformerEmbedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse() -> None:
        raise AssertionError("--no-gptcache must not build the GPTCache venv")

    monkeypatch.setattr(bench, "ensure_gptcache_venv", refuse)
    monkeypatch.setattr(bench, "_semcache_embedder", lambda settings: CachedEmbedder(minilm))
    out = tmp_path / "results.json"
    assert bench.main(["--pairs", str(PAIRS), "--no-trace", "--sample", "12", "--no-gptcache", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["gptcache"] is None and data["data"] == {"qqp_dev": {"file": str(PAIRS), "rows": 12}}
    assert data["semcache"]["pairs"]["qqp_dev"]["positives"] == sum(
        bool(r["duplicate"]) for r in bench.load_inputs([PAIRS], None, 12).pairs["qqp_dev"]
    )
