"""Sentence-transformers models on ONNX Runtime, in fp32 or int8, exported here and offline.

The graph is made from the installed weights, without a network and without optimum: the
transformer is traced with ``torch.onnx.export`` (the TorchScript exporter, which needs no
onnxscript), with mean pooling and L2 normalisation inside the graph; for int8,
``quantize_dynamic`` quantizes the weights of its matrix products per output channel. The files
are kept in ``cache_dir`` under a name that hashes the weights, the recipe and ONNX Runtime's
version, so a deployment pays the export (seconds) once, and replicas sharing the data folder
share it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

# Bump when the export recipe changes: every cached export is then made again.
_RECIPE = "onnx-export-2"
_OPSET = 17
_INPUTS = ("input_ids", "attention_mask")
# Files whose content identifies a sentence-transformers model folder.
_IDENTITY_FILES = (
    "config.json",
    "tokenizer.json",
    "modules.json",
    "sentence_bert_config.json",
    "1_Pooling/config.json",
    "model.safetensors",
    "pytorch_model.bin",
)


@dataclass(frozen=True)
class ModelFolder:
    """What the export needs to know about a mean-pooled sentence-transformers folder."""

    path: Path
    name: str
    max_seq_length: int
    hidden_size: int

    @classmethod
    def read(cls, path: Path, name: str) -> ModelFolder:
        pooling = _read_json(path / "1_Pooling" / "config.json")
        if not pooling.get("pooling_mode_mean_tokens") or any(
            pooling.get(key) for key in ("pooling_mode_cls_token", "pooling_mode_max_tokens")
        ):
            raise ValueError(f"{path}: the onnx backends support mean-pooled models only; use embedding_backend torch")
        config = _read_json(path / "config.json")
        if config.get("model_type") != "bert":
            raise ValueError(f"{path}: the onnx backends support BERT models only; use embedding_backend torch")
        limit = int(config.get("max_position_embeddings", 512))
        max_seq_length = int(_read_json(path / "sentence_bert_config.json").get("max_seq_length") or limit)
        return cls(path, name, min(max_seq_length, limit), int(config["hidden_size"]))

    def fingerprint(self, quantized: bool) -> str:
        import onnxruntime

        digest = hashlib.sha256(f"{_RECIPE}|opset{_OPSET}|ort{onnxruntime.__version__}|int8={quantized}".encode())
        for name in _IDENTITY_FILES:
            file = self.path / name
            if file.is_file():
                digest.update(name.encode())
                with file.open("rb") as handle:
                    for block in iter(lambda: handle.read(1 << 20), b""):
                        digest.update(block)
        return digest.hexdigest()[:16]


def exported_model(folder: ModelFolder, cache_dir: Path, *, quantized: bool) -> Path:
    """The ONNX file for ``folder``, exported into ``cache_dir`` unless it is there already.

    Concurrent exports (replicas starting together on one volume) each write a private temporary
    folder and rename it into place; the first rename wins and the others discard their copy.
    """
    kind = "int8" if quantized else "fp32"
    target = cache_dir / f"{folder.name}-{kind}-{folder.fingerprint(quantized)}"
    model_file = target / "model.onnx"
    if model_file.is_file():
        return model_file
    cache_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    logger.info("exporting %s to ONNX (%s) into %s; this happens once", folder.name, kind, target)
    work = Path(tempfile.mkdtemp(prefix=".export-", dir=cache_dir))
    try:
        _export(folder, work, quantized=quantized)
        work.chmod(0o755)  # mkdtemp made it private; replicas running as other users read it too
        try:
            work.rename(target)
        except OSError:
            if not model_file.is_file():
                raise  # not a lost race: a real failure
    finally:
        shutil.rmtree(work, ignore_errors=True)
    logger.info("exported %s (%s) in %.1f s", folder.name, kind, time.perf_counter() - started)
    return model_file


def _export(folder: ModelFolder, work: Path, *, quantized: bool) -> None:
    if not quantized:
        logger.info("ONNX export: tracing the transformer with torch")
        _trace(folder, work / "model.onnx")
        return
    logger.info("ONNX export 1/2: tracing the transformer with torch")
    _trace(folder, work / "fp32.onnx")
    logger.info("ONNX export 2/2: quantizing the weights of its matrix products to int8, per channel")
    _quantize(work / "fp32.onnx", work / "model.onnx")
    (work / "fp32.onnx").unlink()


def _trace(folder: ModelFolder, out: Path) -> None:
    import torch
    from transformers import AutoModel

    # Eager attention traces to plain MatMul and Softmax ops, which export and quantize cleanly.
    model = AutoModel.from_pretrained(str(folder.path), attn_implementation="eager").eval()

    class MeanPooled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            hidden = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2.0, dim=1)

    # A padded sample, so the mask's path through the graph is traced as it is used.
    input_ids = torch.tensor([[101, 7592, 2088, 102], [101, 7592, 102, 0]], dtype=torch.long)
    attention_mask = (input_ids != 0).to(torch.long)
    with warnings.catch_warnings(), torch.no_grad():
        # The TorchScript exporter warns that it is deprecated, and the tracer about Python-side shape
        # checks in transformers' mask code; outputs are checked against torch in the tests.
        warnings.simplefilter("ignore")
        torch.onnx.export(
            MeanPooled(),
            (input_ids, attention_mask),
            str(out),
            dynamo=False,
            input_names=list(_INPUTS),
            output_names=["embedding"],
            dynamic_axes={
                "input_ids": {0: "batch", 1: "sequence"},
                "attention_mask": {0: "batch", 1: "sequence"},
                "embedding": {0: "batch"},
            },
            opset_version=_OPSET,
        )


def _quantize(fp32: Path, out: Path) -> None:
    """Dynamic int8 quantization of the MatMul weights, one scale per output channel.

    Measured on the eval prompts (cosine to torch fp32): per channel keeps the minimum at 0.98, per
    tensor drops it to 0.89; signed weights (QInt8) ran 1.5x faster than unsigned (QUInt8) here; also
    quantizing the embedding table (Gather) or fusing attention first gained no speed.
    """
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # The quantizer logs on the root logger, suggesting a pre-processing step it does not need here.
    with _quiet([logging.getLogger()]):
        quantize_dynamic(
            str(fp32), str(out), weight_type=QuantType.QInt8, per_channel=True, op_types_to_quantize=["MatMul"]
        )


class _ErrorsOnly(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR


@contextmanager
def _quiet(loggers: list[logging.Logger]) -> Iterator[None]:
    """Drop what ``loggers`` log below ERROR (a logger's filter sees only its own records, so the
    root logger's filter leaves records that propagate from other loggers alone)."""
    only_errors = _ErrorsOnly()
    for log in loggers:
        log.addFilter(only_errors)
    try:
        yield
    finally:
        for log in loggers:
            log.removeFilter(only_errors)


# Tokens in one model call (rows times the longest row); see _model_calls for the measurement.
DEFAULT_BATCH_TOKENS = 256


class OnnxEmbedder:
    """A mean-pooled sentence-transformers model run by ONNX Runtime on the CPU.

    Vectors come out of the graph L2-normalised. fp32 gives the same vectors as torch (cosine
    above 0.99999), so it keeps the model's name; int8 vectors differ slightly (cosine about 0.99),
    so that backend gets its own name and stored vectors are re-embedded, not mixed.
    """

    def __init__(
        self,
        model_path: str | Path,
        cache_dir: Path,
        *,
        quantized: bool,
        name: str | None = None,
        threads: int = 0,
        batch_tokens: int = DEFAULT_BATCH_TOKENS,
    ) -> None:
        if batch_tokens < 1:
            raise ValueError("batch_tokens must be at least 1")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for the hub at run time
        import onnxruntime
        from tokenizers import Tokenizer

        folder = ModelFolder.read(Path(model_path), name or Path(model_path).name)
        self.threads = threads or max(1, (os.cpu_count() or 2) - 1)
        self.batch_tokens = batch_tokens
        self.name = f"{folder.name}+int8" if quantized else folder.name
        self.dimension = folder.hidden_size
        self.model_file = exported_model(folder, cache_dir, quantized=quantized)
        self._tokenizer = Tokenizer.from_file(str(folder.path / "tokenizer.json"))
        self.max_seq_length = folder.max_seq_length
        self._tokenizer.enable_truncation(max_length=folder.max_seq_length)
        self._pad_id = (self._tokenizer.padding or {}).get("pad_id", 0)
        self._tokenizer.no_padding()  # tokenizer.json pads to a fixed 128: _run pads to the longest text instead
        self._session = onnxruntime.InferenceSession(
            str(self.model_file), _session_options(self.threads), providers=["CPUExecutionProvider"]
        )

    def reads_whole(self, text: str) -> bool:
        """Whether the model reads all of ``text``, not just the start its window holds."""
        surely = surely_whole(text, self.max_seq_length)
        if surely is not None:
            return surely
        window = self._window(text)
        return len(window) == len(text) and not self._tokenizer.encode(window).overflowing

    def _window(self, text: str) -> str:
        """The start of ``text`` that holds all the model reads of it: the same tokens fill its window.

        The tokenizer holds the GIL for all of a text, and so every other thread and the event
        loop: a long text is tokenized by growing starts until one overflows the window by more
        than its last word can hold (a cut word changes only its own tokens, at most 100), and past
        what surely fits the window a text is not read whole, so no hit is served on its vector.
        """
        readable = 101 * self.max_seq_length
        start = 16 * self.max_seq_length
        while start < min(len(text), readable):
            encoding = self._tokenizer.encode(text[:start])
            if sum(len(window.ids) - 2 for window in encoding.overflowing) > 100:  # less [CLS] and [SEP]
                return text[:start]
            start *= 4
        return text[:readable]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        texts = [self._window(text) for text in texts]
        if len(texts) == 1:
            return self._run([self._tokenizer.encode(texts[0])])
        encodings = self._tokenizer.encode_batch(list(texts))
        vectors = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for rows in _model_calls([len(e.ids) for e in encodings], self.batch_tokens):
            vectors[rows] = self._run([encodings[row] for row in rows])
        return vectors

    def _run(self, encodings: list[Any]) -> np.ndarray:
        width = max(len(e.ids) for e in encodings)
        ids = np.full((len(encodings), width), self._pad_id, dtype=np.int64)
        mask = np.zeros((len(encodings), width), dtype=np.int64)
        for row, encoding in enumerate(encodings):
            ids[row, : len(encoding.ids)] = encoding.ids
            mask[row, : len(encoding.ids)] = 1
        (vectors,) = self._session.run(["embedding"], {"input_ids": ids, "attention_mask": mask})
        return np.ascontiguousarray(vectors, dtype=np.float32)


def surely_whole(text: str, max_tokens: int) -> bool | None:
    """Whether a WordPiece model of ``max_tokens`` reads all of ``text``, when its length alone
    tells: every token holds at least one character (two tokens are [CLS] and [SEP]), and at most
    a word of 100 (a longer word is one [UNK]). None: only the tokenizer can tell."""
    if len(text) <= max_tokens - 2:
        return True
    if len(text) > 101 * max_tokens:
        return False
    return None


def _model_calls(lengths: list[int], batch_tokens: int) -> list[list[int]]:
    """The rows of each model call: texts of similar lengths, at most ``batch_tokens`` tokens a call
    (rows times the longest, padding included), and always at least one text.

    Past a few hundred tokens a call gets slower per text, not faster, as its activations outgrow
    the core's cache (``python -m benchmarks.embedders`` compares batch sizes).
    """
    calls: list[list[int]] = []
    for group in _similar_lengths(lengths):  # ascending lengths: a call's last row is its longest
        call: list[int] = []
        for row in group:
            if call and (len(call) + 1) * lengths[row] > batch_tokens:
                calls.append(call)
                call = []
            call.append(row)
        calls.append(call)
    return calls


def _similar_lengths(lengths: list[int]) -> list[list[int]]:
    """Rows grouped so that no text is padded to more than twice its length (and 16 tokens).

    A batch runs at the width of its longest text: one long conversation among short questions
    would otherwise make every question in the batch cost as much as it.
    """
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    groups: list[list[int]] = []
    for row in order:
        if groups and lengths[row] <= max(2 * lengths[groups[-1][0]], 16):
            groups[-1].append(row)
        else:
            groups.append([row])
    return groups


def _session_options(threads: int) -> Any:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    # Idle intra-op threads would spin after each call, taking the core the event loop needs.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise ValueError(f"{path.parent}: not a sentence-transformers model folder ({path.name} missing)") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return data
