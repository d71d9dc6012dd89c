"""Dev-time export of the three shipped models to ONNX (``agentmem export-onnx``; needs torch).

The light install runs the models on ONNX Runtime without torch, so the ONNX files cannot be
made at first use (that would need torch, the thing the light install leaves out): they are
exported here from the torch models and shipped in the package, one ``model.onnx`` next to
each checkpoint's weights, with an ``onnx.json`` recording the sha256 of the weights they were
exported from. A test compares that record with the weights in the repository, so a retrained
checkpoint whose ONNX file was not re-exported fails the suite instead of serving a stale model.

Weights are stored in float16 and cast to float32 inside the graph (ONNX Runtime folds the
casts once, at session start, so inference runs in float32 as the torch path does). The
pruner's and NLI's ONNX files hold no weights of their own: they read them from the
checkpoint's ``model.safetensors`` (``_share_weights``), so the package carries them once. Why
float16 rather than int8: the pruner and NLI checkpoints are float16 already, so the ONNX
files hold exactly their numbers (parity with torch is float32 rounding, not quantisation
error), and every file stays under 50 MB; the embedder's float32 weights lose only float16
rounding (cosine to the torch vectors above 0.9999), which matters because its vectors are
stored in Redis and compared with vectors the other backend made.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np

ONNX_FILE = "model.onnx"
RECORD_FILE = "onnx.json"
OPSET = 18


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _store_float16(path: Path) -> None:
    """Rewrite ``path`` with its large float32 initializers stored as float16 plus a Cast."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(str(path))
    graph = model.graph
    initializers, casts = [], []
    for tensor in graph.initializer:
        if tensor.data_type == TensorProto.FLOAT and int(np.prod(tensor.dims)) >= 1024:
            half = numpy_helper.from_array(numpy_helper.to_array(tensor).astype(np.float16),
                                           f"{tensor.name}__float16")
            initializers.append(half)
            casts.append(helper.make_node("Cast", [half.name], [tensor.name],
                                          to=TensorProto.FLOAT, name=f"{tensor.name}__cast"))
        else:
            initializers.append(tensor)
    del graph.initializer[:]
    graph.initializer.extend(initializers)
    nodes = casts + list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def _safetensors_index(path: Path) -> dict[str, tuple[str, list[int], int, bytes]]:
    """name -> (dtype, shape, byte offset in the file, raw bytes), read from the header (the
    format: an 8-byte little-endian header size, a JSON header, then the tensors' bytes)."""
    raw = path.read_bytes()
    size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + size])
    out = {}
    for name, entry in header.items():
        if name != "__metadata__":
            start, end = entry["data_offsets"]
            out[name] = (entry["dtype"], entry["shape"], 8 + size + start,
                         raw[8 + size + start:8 + size + end])
    return out


def _share_weights(path: Path, weights: Path) -> int:
    """Point the graph's float16 initializers at the checkpoint's own ``model.safetensors``
    (ONNX external data: file, offset, length) instead of holding a copy: the pruner and NLI
    checkpoints are float16 in the safetensors layout ONNX reads, so the ONNX file shrinks from
    44 MB to ~1 MB and the package holds their weights once. The exporter stores some weights
    transposed; those get a Transpose of the shared tensor, folded once at session start like
    the casts. Returns how many tensors are shared; the ones not found stay inline."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    index = _safetensors_index(weights)
    found: dict[bytes, tuple[str, bool]] = {}
    for name, (dtype, shape, _, raw) in index.items():
        if dtype == "F16":
            array = np.frombuffer(raw, dtype=np.float16).reshape(shape)
            found[hashlib.sha256(array.tobytes()).digest()] = (name, False)
            if array.ndim == 2:
                found[hashlib.sha256(np.ascontiguousarray(array.T).tobytes()).digest()] = (name, True)
    model = onnx.load(str(path))
    graph = model.graph
    inline = {tensor.name: tensor for tensor in graph.initializer}
    shared: dict[str, Any] = {}
    head, rest = [], []
    for node in graph.node:
        source = node.input[0] if node.op_type == "Cast" and node.input else ""
        hit = None
        if source.endswith("__float16") and source in inline:
            half = np.ascontiguousarray(numpy_helper.to_array(inline[source]))
            hit = found.get(hashlib.sha256(half.tobytes()).digest())
        if hit is None:
            rest.append(node)
            continue
        name, transposed = hit
        if name not in shared:
            dtype, shape, offset, raw = index[name]
            tensor = TensorProto(name=f"weights/{name}", data_type=TensorProto.FLOAT16, dims=shape,
                                 data_location=TensorProto.EXTERNAL)
            for key, value in (("location", weights.name), ("offset", str(offset)),
                               ("length", str(len(raw)))):
                entry = tensor.external_data.add()
                entry.key, entry.value = key, value
            shared[name] = tensor
        source_name = f"weights/{name}"
        if transposed:
            head.append(helper.make_node("Transpose", [source_name], [f"{node.output[0]}__t"],
                                         perm=[1, 0]))
            source_name = f"{node.output[0]}__t"
        head.append(helper.make_node("Cast", [source_name], [node.output[0]], to=TensorProto.FLOAT))
        del inline[source]
    del graph.initializer[:]
    graph.initializer.extend([*inline.values(), *shared.values()])
    del graph.node[:]
    graph.node.extend(head + rest)
    onnx.save(model, str(path))
    onnx.checker.check_model(str(path))
    return len(shared)


def _export(module: Any, inputs: tuple[Any, ...], names: list[str], outputs: list[str],
            target: Path, *, float16: bool = True) -> None:
    import torch

    batch, tokens = torch.export.Dim("batch"), torch.export.Dim("tokens", max=512)
    shapes = tuple({0: batch, 1: tokens} for _ in inputs)
    torch.onnx.export(module.eval(), inputs, str(target), dynamo=True, opset_version=OPSET,
                      input_names=names, output_names=outputs, dynamic_shapes=shapes,
                      external_data=False, verbose=False)
    if float16:
        _store_float16(target)


def _record(folder: Path, source: Path, source_sha256: str, what: str, *,
            shared: int = 0) -> dict[str, Any]:
    import torch

    record: dict[str, Any] = {
        "model": what, "source": str(source.name), "source_sha256": source_sha256,
        "onnx_sha256": sha256_of(folder / ONNX_FILE), "opset": OPSET,
        "exported_with": f"torch {torch.__version__}",
        "storage": "float16 weights, cast to float32 in the graph"}
    if shared:  # the graph reads these tensors from the checkpoint's safetensors file
        record["weights_file"] = source.name
        record["shared_tensors"] = shared
    (folder / RECORD_FILE).write_text(json.dumps(record, indent=2) + "\n")
    return record


def export_embedder(target: Path) -> dict[str, Any]:
    """all-MiniLM-L6-v2 (verified weights) with its mean pooling and L2 normalisation."""
    import torch

    from agentmem.models.embedder import WEIGHTS_SHA256, Embedder

    embedder = Embedder()
    model = embedder.load()
    bert = model[0].auto_model.float()

    class Sentence(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    token_type_ids: torch.Tensor) -> torch.Tensor:
            hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                               token_type_ids=token_type_ids)[0]
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2, dim=1)

    target.mkdir(parents=True, exist_ok=True)
    ids = torch.ones((2, 16), dtype=torch.long)
    _export(Sentence(), (ids, torch.ones_like(ids), torch.zeros_like(ids)),
            ["input_ids", "attention_mask", "token_type_ids"], ["sentence_embedding"], target / ONNX_FILE)
    shutil.copyfile(Path(embedder.path) / "tokenizer.json", target / "tokenizer.json")
    return _record(target, Path(embedder.path) / "model.safetensors", WEIGHTS_SHA256,
                   "sentence-transformers/all-MiniLM-L6-v2")


def _eager(model: Any) -> Any:
    """A pruner whose attention is exported as its plain products and softmax. The default
    (PyTorch's fused attention) is exported as a longer decomposition that ONNX Runtime runs
    ~25% slower on a 512-token block on this CPU (a 1,200-token passage 452 -> 358 ms, one
    block per pass, stop 46); the outputs agree to float rounding."""
    model.backbone.config._attn_implementation = "eager"
    return model


def _export_pruner(model: Any, target: Path, *, float16: bool = True) -> None:
    """A Provence-layout model's graph: (rank logit [B], token logits [B, T, 2])."""
    import torch

    class Heads(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor]:
            return self.model(input_ids, attention_mask)

    ids = torch.ones((2, 16), dtype=torch.long)
    _export(Heads(), (ids, torch.ones_like(ids)), ["input_ids", "attention_mask"],
            ["rank_logits", "token_logits"], target, float16=float16)


def export_pruner(folder: Path) -> dict[str, Any]:
    """A Provence-layout checkpoint, its weights shared with the checkpoint's safetensors."""
    from agentmem.models.provence import load_model

    model, _, _ = load_model(folder)
    _export_pruner(_eager(model.float()), folder / ONNX_FILE)
    source = folder / "model.safetensors"
    shared = _share_weights(folder / ONNX_FILE, source)
    return _record(folder, source, sha256_of(source), "pruner", shared=shared)


def _nli_logits(model: Any) -> Any:
    import torch

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    token_type_ids: torch.Tensor) -> torch.Tensor:
            return self.model(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).logits

    return Logits()


def _export_nli(model: Any, target: Path, *, float16: bool = True) -> None:
    import torch

    ids = torch.ones((2, 16), dtype=torch.long)
    _export(_nli_logits(model), (ids, torch.ones_like(ids), torch.zeros_like(ids)),
            ["input_ids", "attention_mask", "token_type_ids"], ["logits"], target, float16=float16)


def export_nli(folder: Path) -> dict[str, Any]:
    """A sequence classifier: logits [B, labels] in the checkpoint's own label order."""
    from agentmem.models.nli import NLIModel

    _export_nli(NLIModel.load(folder).model.float(), folder / ONNX_FILE)
    source = folder / "model.safetensors"
    shared = _share_weights(folder / ONNX_FILE, source)
    return _record(folder, source, sha256_of(source), "nli", shared=shared)


def export_nli_int8(source: Path, target: Path, calibration: Path) -> dict[str, Any]:
    """The NLI checkpoint in ``source`` as an int8 ONNX model in ``target``: the clash check's
    screen (``quarantine.nli_screen``). On a 2-core CPU that is ~1.5 ms a sentence pair
    instead of ~5, at 23 MB. Its inputs are smoothed first (``agentmem.models.smoothing``,
    maxima read on ``calibration``'s training pairs), which nearly halves its distance to the
    float model (mean 0.025 -> 0.014 on dialogue pairs); still it decides nothing on its own:
    it lets go the pairs it is sure of and the float model scores the rest (see
    ``_quantise``)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from agentmem.models.nli import label_order
    from agentmem.models.smoothing import calibration_pairs

    model = AutoModelForSequenceClassification.from_pretrained(
        str(source), local_files_only=True, dtype=torch.float32, attn_implementation="eager").eval()
    label_order(model.config.id2label or {})  # a 3-way NLI model, or stop here
    tokenizer = AutoTokenizer.from_pretrained(str(source), local_files_only=True)
    inputs = [dict(tokenizer(premise, hypothesis, truncation=True, max_length=128,  # as they read
                             return_tensors="pt"))
              for premise, hypothesis in calibration_pairs(calibration)]
    smoothing = _smooth(model, inputs, calibration, "calibration_pairs")
    return _quantise(lambda path: _export_nli(model, path, float16=False), source, target,
                     "nli-int8", smoothing=smoothing)


def export_pruner_int8(source: Path, target: Path, calibration: Path) -> dict[str, Any]:
    """The pruner checkpoint in ``source`` as an int8 ONNX model in ``target``
    (``prune.checkpoint: pruner-minilm-int8``).

    Why: the pruner reads on the call path (a large tool output, ``/v1/highlight``), where a
    512-token block costs ~0.12 s in float32 on one core of a 2-core CPU; the int8 copy reads a
    1,200-token output 1.8x faster, with nearly the float model's decisions (model card:
    ``checkpoints/pruner-minilm-int8/MODEL_CARD.md``). Before quantising, each product's input
    is smoothed (``agentmem.models.smoothing``) with maxima read on ``calibration``'s
    training passages, which halves the int8 copy's distance to the float model. Its
    activations are quantised per run, so ``OnnxProvence`` runs it one block at a time: a
    block's scores never depend on which other blocks share its batch."""
    from agentmem.models.provence import load_model
    from agentmem.models.pruner import Pruner
    from agentmem.models.smoothing import block_inputs, calibration_passages

    model, tokenizer, config = load_model(source)
    model = _eager(model.float())  # also the matrix products the quantiser recognises
    reader = Pruner(model, tokenizer, config)
    blocks = [block.input_ids for question, sentences in calibration_passages(calibration)
              for block in reader.blocks(question, sentences)]
    smoothing = _smooth(model, list(block_inputs(blocks)), calibration, "calibration_blocks")
    return _quantise(lambda path: _export_pruner(model, path, float16=False),
                     source, target, "pruner-int8", smoothing=smoothing)


def _smooth(model: Any, inputs: list[dict[str, Any]], calibration: Path, unit: str
            ) -> dict[str, Any]:
    """``model`` smoothed on ``inputs`` (read from ``calibration``), in place; returns what
    ``onnx.json`` says of it: enough to redo it."""
    from agentmem.models.smoothing import ALPHA, input_maxima, smooth

    smooth(model, input_maxima(model, inputs), ALPHA)
    return {"alpha": ALPHA, "calibration": f"{calibration.parent.name}/{calibration.name}",
            "calibration_sha256": sha256_of(calibration), unit: len(inputs)}


def _quantise(export: Any, source: Path, target: Path, what: str,
              smoothing: dict[str, Any] | None = None) -> dict[str, Any]:
    """``export(path)`` writes the float32 graph; it is stored in ``target`` in int8.

    Weights (the encoder's matrices per output channel, and the embeddings) are stored in int8
    and activations quantised per run (ONNX Runtime's dynamic quantisation); the products of
    two activations (attention scores and context) stay in float32. Attention must be exported
    in its plain ("eager") form, whose matrix products the quantiser recognises. The config
    (and with it a pruner's calibrated keep rule) and tokenizer files are copied from
    ``source``; the record names the weights the graph was made from, so a retrained
    checkpoint whose int8 copy was not redone fails ``tests/test_onnx_runtime.py``."""
    import tempfile

    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic

    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        float32 = Path(scratch) / ONNX_FILE
        export(float32)
        quantize_dynamic(float32, target / ONNX_FILE, weight_type=QuantType.QInt8,
                         op_types_to_quantize=["MatMul", "Gather"], per_channel=True,
                         nodes_to_exclude=_activation_products(float32))
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(source / name, target / name)
    weights = source / "model.safetensors"
    record = {"model": what, "source": f"../{source.name}/{weights.name}",
              "source_sha256": sha256_of(weights), "onnx_sha256": sha256_of(target / ONNX_FILE),
              "opset": OPSET, "exported_with": f"torch {torch.__version__}",
              "storage": "int8 weights per output channel and int8 embeddings; activations "
                         "quantised per call (onnxruntime quantize_dynamic)",
              "dynamic_int8": True}
    if smoothing:
        record["smoothing"] = smoothing
    (target / RECORD_FILE).write_text(json.dumps(record, indent=2) + "\n")
    return record


def _activation_products(path: Path) -> list[str]:
    """MatMul nodes whose operands are both computed (attention): left in float32."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    constants = {tensor.name for tensor in graph.initializer}
    return [node.name for node in graph.node if node.op_type == "MatMul"
            and not any(name in constants for name in node.input)]


def export_all(which: list[str], calibration: Path | None = None,
               nli_calibration: Path | None = None) -> list[dict[str, Any]]:
    """Export the shipped models named in ``which`` (embedder, pruner, pruner-int8, nli,
    nli-int8) in place; ``calibration`` and ``nli_calibration``: the training passages and
    pairs the int8 copies' smoothing reads (``prune/squad_train.jsonl`` and
    ``nli/dnli/data.csv`` of the shared data)."""
    from agentmem.models.registry import (
        default_embedder_onnx_path,
        default_nli_path,
        default_nli_screen_path,
        default_pruner_int8_path,
        default_pruner_path,
    )

    jobs = {"embedder": lambda: export_embedder(Path(default_embedder_onnx_path())),
            "pruner": lambda: export_pruner(Path(default_pruner_path())),
            "pruner-int8": lambda: export_pruner_int8(Path(default_pruner_path()),
                                                      Path(default_pruner_int8_path()),
                                                      _calibration_file(calibration)),
            "nli": lambda: export_nli(Path(default_nli_path())),
            "nli-int8": lambda: export_nli_int8(Path(default_nli_path()),
                                                Path(default_nli_screen_path()),
                                                _calibration_file(nli_calibration))}
    return [jobs[name]() for name in which]


def _calibration_file(calibration: Path | None) -> Path:
    if calibration is None or not calibration.is_file():
        raise FileNotFoundError(f"an int8 copy's smoothing reads training data: {calibration} "
                                "is not a file (--calibration, --nli-calibration)")
    return calibration
