"""Sentence-transformers models on ONNX Runtime, in fp32 or int8, exported here and offline.

The graph is made from the installed weights, without a network and without optimum: the
transformer is traced with ``torch.onnx.export`` (the TorchScript exporter, which needs no
onnxscript), with mean pooling and L2 normalisation inside the graph. For int8, every matrix
product with a weight matrix runs on int8: the weights quantized per output channel, and the
activations going into it at a scale fixed at export from the calibration texts (static
quantization), so that a text's vector does not depend on the texts it is embedded with. The
files are kept in ``cache_dir`` under a name that hashes the weights, the recipe, the calibration
texts and ONNX Runtime's version, so a deployment pays the export (seconds) once, and replicas
sharing the data folder share it.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .calibration import CALIBRATION_TEXTS

logger = logging.getLogger(__name__)

# Bump when the export recipe changes: every cached export is then made again.
_RECIPE = "onnx-export-3"
_OPSET = 17
_INPUTS = ("input_ids", "attention_mask")
# What int8 vectors are recorded under beside the model's name. Change it with any change to the
# int8 recipe or to its calibration texts that changes vectors, so that a store re-embeds its
# entries rather than mixing vectors of two recipes ("+int8" named the earlier per-call scales).
QUANTIZED_SUFFIX = "+int8-static"
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
        if quantized:
            digest.update("\0".join(CALIBRATION_TEXTS).encode())
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
    logger.info("ONNX export 1/3: tracing the transformer with torch")
    _trace(folder, work / "fp32.onnx")
    logger.info("ONNX export 2/3: measuring its activations on %d calibration texts", len(CALIBRATION_TEXTS))
    ranges = _calibrate(folder, work / "fp32.onnx")
    logger.info("ONNX export 3/3: quantizing its matrix products to int8, activations at fixed scales")
    _quantize(work / "fp32.onnx", work / "model.onnx", ranges)
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


# Activation values are counted in this many bins between their least and greatest, to choose the
# range each is quantized over.
_HISTOGRAM_BINS = 2048
# The fractions of the measured range tried as the quantized range, at each end.
_CLIPPING = np.linspace(0.05, 1.0, 39)
# A channel of a product's input whose values reach this many times further than the median
# channel's is an outlier: BERT's [CLS] token carries huge values in one or two channels of the
# residual stream and of the feed-forward, and a range wide enough for them leaves the other
# channels few steps.
_OUTLIER_RATIO = 5.0
# Tokens in one calibration call: the fp32 graph gives a text the same values in any batch.
_CALIBRATION_BATCH_TOKENS = 4096


@dataclass(frozen=True)
class _InputRange:
    """How one weight product's input is quantized."""

    low: float  # the uint8 range, 0 within it
    high: float
    # Outlier channels, left out of the range, and the parts each is split into to fit it.
    outliers: dict[int, int]


def _weight_products(model: Any) -> list[Any]:
    """The graph's MatMul nodes whose second input is a weight matrix."""
    weights = {tensor.name for tensor in model.graph.initializer if len(tensor.dims) == 2}
    return [node for node in model.graph.node if node.op_type == "MatMul" and node.input[1] in weights]


def _calibrate(folder: ModelFolder, fp32: Path) -> dict[str, _InputRange]:
    """How each weight product's input is quantized, from its values on the calibration texts
    (their padding left out): its outlier channels, and the range of the others, clipped where that
    costs less squared error than the coarser steps of their whole range.

    The ranges are fixed in the graph, so that a text's vector does not depend on the batch it rides
    in: quantizing each call's activations over that call's own range (onnxruntime's dynamic
    quantization) gave a prompt a different vector in every batch, and a lookup a similarity that
    moved with other clients' traffic.
    """
    import onnx
    import onnxruntime

    model = onnx.load(str(fp32))
    names = list(dict.fromkeys(node.input[0] for node in _weight_products(model)))
    for name in names:  # every product's input as an output too, to be measured
        model.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    tokenizer, pad_id = _tokenizer(folder)
    encodings = tokenizer.encode_batch(list(CALIBRATION_TEXTS))

    def measured() -> Iterator[dict[str, np.ndarray]]:
        """The product inputs of the calibration texts, some texts at a time, one row per token
        (padding left out)."""
        for rows in _model_calls([len(e.ids) for e in encodings], _CALIBRATION_BATCH_TOKENS):
            width = max(len(encodings[row].ids) for row in rows)
            ids = np.full((len(rows), width), pad_id, dtype=np.int64)
            mask = np.zeros((len(rows), width), dtype=np.int64)
            for at, row in enumerate(rows):
                ids[at, : len(encodings[row].ids)] = encodings[row].ids
                mask[at, : len(encodings[row].ids)] = 1
            values = session.run(names, {"input_ids": ids, "attention_mask": mask})
            yield {name: value[mask == 1] for name, value in zip(names, values, strict=True)}

    least: dict[str, np.ndarray] = {}
    most: dict[str, np.ndarray] = {}
    for text in measured():
        for name, rows in text.items():
            least[name] = np.minimum(least.get(name, 0.0), rows.min(axis=0))  # 0 is in every range
            most[name] = np.maximum(most.get(name, 0.0), rows.max(axis=0))
    regular = {}
    for name in names:
        extent = np.maximum(most[name], -least[name])
        regular[name] = extent <= _OUTLIER_RATIO * np.median(extent)
    counts = {name: np.zeros(_HISTOGRAM_BINS, dtype=np.int64) for name in names}
    for text in measured():  # a second pass, once the bins are known: the values would not fit in memory
        for name, rows in text.items():
            span = (float(least[name][regular[name]].min()), float(most[name][regular[name]].max()))
            counts[name] += np.histogram(rows[:, regular[name]], bins=_HISTOGRAM_BINS, range=span)[0]
    ranges = {}
    for name in names:
        low, high = _clipped_range(
            float(least[name][regular[name]].min()), float(most[name][regular[name]].max()), counts[name]
        )
        outliers = {
            int(channel): int(np.ceil(max(most[name][channel] / high if high > 0 else 1.0,
                                          least[name][channel] / low if low < 0 else 1.0)))
            for channel in np.flatnonzero(~regular[name])
        }  # fmt: skip
        ranges[name] = _InputRange(low, high, outliers)
    return ranges


def _clipped_range(low: float, high: float, counts: np.ndarray) -> tuple[float, float]:
    """The range, within [low, high], whose uint8 quantization of the counted values has the least
    expected squared error: clipping the values outside it, rounding those inside to its steps."""
    edges = np.linspace(low, high, len(counts) + 1)
    centres = (edges[:-1] + edges[1:]) / 2
    best = (np.inf, low, high)
    for lower in low * _CLIPPING if low < 0 else [low]:
        clipped_below = ((lower - centres).clip(min=0) ** 2) @ counts
        for upper in high * _CLIPPING if high > 0 else [high]:
            step = (upper - lower) / 255
            inside = counts[(centres >= lower) & (centres <= upper)].sum()
            error = clipped_below + ((centres - upper).clip(min=0) ** 2) @ counts + inside * step * step / 12
            if error < best[0]:
                best = (error, lower, upper)
    return best[1], best[2]


def _quantize(fp32: Path, out: Path, ranges: dict[str, _InputRange]) -> None:
    """Each weight product (and the bias added to it) becomes one ``MatMulIntegerToFloat``: weights
    signed int8 (faster than unsigned), one scale per output channel (one per tensor lost far more);
    its input quantized to uint8 over its calibrated range by a ``QuantizeLinear``, shared by the
    products that read the same input (query, key and value). The embedding table stays fp32, and
    attention is not fused (ONNX Runtime's fused attention ran slower on batches).

    An input's outlier channels take one of two ways around its range. Into a product that narrows
    it (the feed-forward's second, 1536 to 384 wide), they are multiplied in fp32 and added to the
    int8 product, whose weights leave them out. Into the others, each is split into parts that fit
    the range: scaled down, and copied beside the input as many times over, each copy with the
    channel's weights. Each way was the faster on its product: it costs a pass over the narrower
    side. Without them, the outliers' range left the other channels few steps, and the int8 vectors
    were hardly closer to fp32's than with per-call scales.
    """
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(fp32))
    graph = model.graph
    tensors = {tensor.name: tensor for tensor in graph.initializer}
    readers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    products = _weight_products(model)
    widths = {node.input[1]: tuple(tensors[node.input[1]].dims) for node in products}
    # Inputs whose outliers go around in fp32: those read only by products that narrow them.
    narrowing = {node.input[0]: True for node in products}
    for node in products:
        rows, columns = widths[node.input[1]]
        narrowing[node.input[0]] &= columns < rows
    in_fp32 = {source for source, narrows in narrowing.items() if narrows}
    added: list[Any] = []
    quantized_inputs: dict[str, list[int]] = {}  # input -> the channels copied beside it
    replaced: dict[int, list[Any]] = {}
    dropped: set[int] = set()

    def constant(value: np.ndarray, name: str) -> str:
        added.append(numpy_helper.from_array(value, name))
        return name

    for node in products:
        source, weight_name = node.input
        quantizing = ranges[source]
        outliers = sorted(quantizing.outliers)
        fp32_outliers = source in in_fp32 and outliers
        nodes = []
        if source not in quantized_inputs:
            scale = max(quantizing.high - quantizing.low, 1e-8) / 255
            constant(np.array(scale, dtype=np.float32), f"{source}_scale")
            constant(np.array(round(-quantizing.low / scale), dtype=np.uint8), f"{source}_zero_point")
            copies, split = [], source
            if fp32_outliers:
                channels = constant(np.array(outliers, dtype=np.int64), f"{source}_outlier_channels")
                nodes.append(helper.make_node("Gather", [source, channels], [f"{source}_outliers"], axis=-1))
            elif outliers:
                shrink = np.ones(widths[weight_name][0], dtype=np.float32)
                for channel, parts in quantizing.outliers.items():
                    shrink[channel] = 1 / parts
                    copies += [channel] * (parts - 1)
                split = f"{source}_split"
                nodes += [
                    helper.make_node("Mul", [source, constant(shrink, f"{source}_shrink")], [f"{source}_shrunk"]),
                    helper.make_node(
                        "Gather",
                        [f"{source}_shrunk", constant(np.array(copies, dtype=np.int64), f"{source}_copied")],
                        [f"{source}_copies"],
                        axis=-1,
                    ),
                    helper.make_node("Concat", [f"{source}_shrunk", f"{source}_copies"], [split], axis=-1),
                ]
            quantized_inputs[source] = copies
            nodes.append(
                helper.make_node(
                    "QuantizeLinear",
                    [split, f"{source}_scale", f"{source}_zero_point"],
                    [f"{source}_quantized"],
                    name=f"{source}_QuantizeLinear",
                )
            )
        weights = numpy_helper.to_array(tensors[weight_name]).astype(np.float32)
        int8_weights = np.vstack([weights, weights[quantized_inputs[source]]])  # the copies' rows
        if fp32_outliers:
            int8_weights[outliers] = 0
        channel_scales = np.maximum(np.abs(int8_weights).max(axis=0), 1e-12) / 127
        constant(np.round(int8_weights / channel_scales).astype(np.int8), f"{weight_name}_int8")
        constant(channel_scales.astype(np.float32), f"{weight_name}_scale")
        constant(np.zeros(weights.shape[1], dtype=np.int8), f"{weight_name}_zero_point")
        output, bias = node.output[0], []
        (follower, *others) = readers.get(output, [None])
        if follower is not None and not others and follower.op_type == "Add":
            (addend,) = [name for name in follower.input if name != output] or [""]
            if addend in tensors and list(tensors[addend].dims) == [weights.shape[1]]:
                output, bias = follower.output[0], [addend]
                dropped.add(id(follower))
        int8_output = f"{output}_int8" if fp32_outliers else output
        inputs = [f"{source}_quantized", f"{weight_name}_int8", f"{source}_scale", f"{weight_name}_scale"]
        inputs += [f"{source}_zero_point", f"{weight_name}_zero_point", *bias]
        nodes.append(
            helper.make_node(
                "MatMulIntegerToFloat", inputs, [int8_output], name=f"{node.name}_int8", domain="com.microsoft"
            )
        )
        if fp32_outliers:
            rows = constant(weights[outliers], f"{weight_name}_outlier_rows")
            nodes += [
                helper.make_node("MatMul", [f"{source}_outliers", rows], [f"{output}_outliers"]),
                helper.make_node("Add", [int8_output, f"{output}_outliers"], [output]),
            ]
        replaced[id(node)] = nodes
    kept = [new for node in graph.node if id(node) not in dropped for new in replaced.get(id(node), [node])]
    del graph.node[:]
    graph.node.extend(kept)
    read = {name for node in kept for name in node.input}
    initializers = [tensor for tensor in [*graph.initializer, *added] if tensor.name in read]
    del graph.initializer[:]
    graph.initializer.extend(initializers)
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    onnx.save(model, str(out))


# Tokens in one model call (rows times the longest row); see _model_calls for the measurement.
DEFAULT_BATCH_TOKENS = 256


class OnnxEmbedder:
    """A mean-pooled sentence-transformers model run by ONNX Runtime on the CPU.

    Vectors come out of the graph L2-normalised. fp32 gives the same vectors as torch (cosine
    above 0.99999), so it keeps the model's name; int8 vectors differ slightly (cosine about 0.99),
    so that backend gets its own name and stored vectors are re-embedded, not mixed. Either way a
    text gets one vector, whatever else is in its model call and however far the call pads it.
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

        folder = ModelFolder.read(Path(model_path), name or Path(model_path).name)
        self.threads = threads or max(1, (os.cpu_count() or 2) - 1)
        self.batch_tokens = batch_tokens
        self.name = f"{folder.name}{QUANTIZED_SUFFIX}" if quantized else folder.name
        self.dimension = folder.hidden_size
        self.model_file = exported_model(folder, cache_dir, quantized=quantized)
        self._tokenizer, self._pad_id = _tokenizer(folder)
        self.max_seq_length = folder.max_seq_length
        self._session = onnxruntime.InferenceSession(
            str(self.model_file),
            _session_options(self.threads),
            providers=["CPUExecutionProvider"],
            # ONNX Runtime's fused SkipLayerNormalization ran several times slower on the CPU than the
            # Add and LayerNormalization it replaces, and slowed the int8 model, alone and in batches.
            disabled_optimizers=["SkipLayerNormFusion"],
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


def _tokenizer(folder: ModelFolder) -> tuple[Any, int]:
    """The model's tokenizer, truncating to its window and padding nothing, and its padding id."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(folder.path / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=folder.max_seq_length)
    pad_id = int((tokenizer.padding or {}).get("pad_id", 0))
    tokenizer.no_padding()  # tokenizer.json pads to a fixed 128: _run pads to the longest text instead
    return tokenizer, pad_id


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
