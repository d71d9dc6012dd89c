"""The ONNX Runtime backend: the three shipped models without torch or transformers.

Each model is the ``model.onnx`` that ``agentmem export-onnx`` wrote next to its checkpoint
(see ``agentmem.models.export_onnx``), tokenised by the ``tokenizers`` library from the
checkpoint's own ``tokenizer.json``, so the token ids are the ones the torch path feeds its
model. What each class returns matches its torch twin row for row (the parity tests in
``tests/test_onnx_runtime.py`` hold them to it): ``OnnxSentenceEncoder`` for the embedder,
``OnnxProvence`` as the pruner's forward pass, ``OnnxNLIModel`` for the NLI backstop.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from agentmem.models.backend import threads
from agentmem.models.export_onnx import ONNX_FILE, RECORD_FILE, sha256_of
from agentmem.models.runs import runs


class MissingOnnxModel(FileNotFoundError):
    """A checkpoint folder without its exported ONNX file while the ONNX runtime is in use."""


def onnx_file(folder: str | Path, *, verify: bool = False) -> Path:
    """``folder``'s model.onnx; ``verify``: its sha256 must be the one its onnx.json records
    (the shipped files: a damaged or swapped file is refused, as the torch path refuses
    weights that are not all-MiniLM-L6-v2)."""
    path = Path(folder) / ONNX_FILE
    if not path.is_file():
        raise MissingOnnxModel(
            f"{folder} has no {ONNX_FILE}: the ONNX runtime needs the checkpoint exported "
            "(`agentmem export-onnx`, with torch installed), or use model_runtime: torch")
    if verify:
        record = json.loads((Path(folder) / RECORD_FILE).read_text())
        digest = sha256_of(path)
        if digest != record["onnx_sha256"]:
            raise RuntimeError(f"{path} has sha256 {digest}, not the exported file's "
                               f"{record['onnx_sha256']} ({RECORD_FILE}); reinstall agentmem-hygiene")
        if record.get("weights_file"):
            # the graph reads its tensors at fixed offsets of this file: other weights (a
            # retrained checkpoint without a new export) would load as silent garbage
            weights = Path(folder) / record["weights_file"]
            if sha256_of(weights) != record["source_sha256"]:
                raise RuntimeError(f"{weights} is not the file {path} was exported from "
                                   f"({RECORD_FILE}); run `agentmem export-onnx` after retraining")
    return path


def session(path: Path) -> Any:
    """An inference session on the CPU, ``threads()`` threads per run: the scheduler already
    runs one inference per core (``agentmem.models.runtime``)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads()
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # warnings about unused initializers are not the user's
    return onnxruntime.InferenceSession(str(path), sess_options=options,
                                        providers=["CPUExecutionProvider"])


class WordPieceTokenizer:
    """The part of a transformers fast tokenizer the pruner and the compressor call, over
    the ``tokenizers`` library: ``tok(text, add_special_tokens=False)["input_ids"]`` (and
    ``offset_mapping``), the special token ids, ``convert_ids_to_tokens``."""

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer

        self.backend = Tokenizer.from_file(str(path))
        self.backend.no_truncation()
        self.backend.no_padding()
        self.cls_token_id = self._id("[CLS]")
        self.sep_token_id = self._id("[SEP]")
        self.pad_token_id = self._id("[PAD]")

    def _id(self, token: str) -> int:
        found = self.backend.token_to_id(token)
        if found is None:
            raise ValueError(f"tokenizer has no {token} token (not a BERT WordPiece tokenizer)")
        return int(found)

    def __call__(self, text: str, *, add_special_tokens: bool = True,
                 return_offsets_mapping: bool = False) -> dict[str, Any]:
        encoding = self.backend.encode(text, add_special_tokens=add_special_tokens)
        out: dict[str, Any] = {"input_ids": list(encoding.ids)}
        if return_offsets_mapping:
            out["offset_mapping"] = list(encoding.offsets)
        return out

    def convert_ids_to_tokens(self, ids: Sequence[int]) -> list[str]:
        return [self.backend.id_to_token(int(i)) or "[UNK]" for i in ids]


def _batch(encodings: Sequence[Any]) -> dict[str, np.ndarray]:
    """Pad encodings to the longest (what the torch path's ``padding=True`` does)."""
    width = max(len(e.ids) for e in encodings)
    ids = np.zeros((len(encodings), width), dtype=np.int64)
    mask = np.zeros_like(ids)
    types = np.zeros_like(ids)
    for row, encoding in enumerate(encodings):
        n = len(encoding.ids)
        ids[row, :n] = encoding.ids
        mask[row, :n] = 1
        types[row, :n] = encoding.type_ids
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


class OnnxSentenceEncoder:
    """all-MiniLM-L6-v2 as sentence-transformers runs it: at most 256 word pieces, mean
    pooling over the mask, L2-normalised (pooling and normalisation are in the graph)."""

    max_seq_length = 256

    def __init__(self, folder: str | Path, *, verify: bool = True) -> None:
        from tokenizers import Tokenizer

        self.folder = Path(folder)
        self.session = session(onnx_file(self.folder, verify=verify))
        self.tokenizer = Tokenizer.from_file(str(self.folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(self.max_seq_length)
        self.tokenizer.no_padding()
        self.dimension = int(self.session.get_outputs()[0].shape[-1])

    def encode(self, texts: list[str]) -> np.ndarray:
        """One unit vector per text, in passes of a few rows (``agentmem.models.runs``)."""
        encodings = self.tokenizer.encode_batch(texts)
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for rows in runs([len(e.ids) for e in encodings]):
            [vectors] = self.session.run(["sentence_embedding"],
                                         _batch([encodings[i] for i in rows]))
            out[rows] = vectors
        return out


class OnnxProvence:
    """The pruner's forward pass: (rank logit [B], token keep probability [B, T])."""

    takes_numpy = True  # Pruner._forward hands it numpy arrays, not torch tensors

    def __init__(self, folder: str | Path) -> None:
        self.session = session(onnx_file(folder, verify=True))
        record = Path(folder) / RECORD_FILE
        # an int8 graph quantises its activations per run: a block run with others would get
        # scores that depend on them (and pay for their padding), so each block runs alone
        self.one_block_per_run = bool(record.is_file() and
                                      json.loads(record.read_text()).get("dynamic_int8"))

    def __call__(self, ids: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if not self.one_block_per_run or len(ids) == 1:
            return self._run(ids, mask)
        rank = np.zeros(len(ids), np.float32)
        probabilities = np.zeros(ids.shape, np.float32)
        for row, length in enumerate(mask.sum(axis=1).tolist()):
            length = max(int(length), 1)
            one_rank, one_tokens = self._run(ids[row:row + 1, :length], mask[row:row + 1, :length])
            rank[row], probabilities[row, :length] = one_rank[0], one_tokens[0]
        return rank, probabilities

    def _run(self, ids: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rank, tokens = self.session.run(["rank_logits", "token_logits"],
                                        {"input_ids": ids, "attention_mask": mask})
        return np.asarray(rank, dtype=np.float32), _softmax(tokens)[..., 1]


def _softmax(logits: Any) -> np.ndarray:
    values = np.asarray(logits, dtype=np.float32)
    shifted = np.exp(values - values.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def load_pruner(folder: str | Path) -> Any:
    """A Provence-layout checkpoint's ``Pruner`` running on ONNX Runtime."""
    from agentmem.models.pruner import Pruner

    folder = Path(folder)
    # config.json as attributes: Pruner reads the window and the calibrated keep rule off it
    config = SimpleNamespace(**json.loads((folder / "config.json").read_text()))
    if "BertTaggerForSentenceExtractionWithBackoff" in (getattr(config, "architectures", None) or ()):
        raise MissingOnnxModel(f"{folder}: the OpenSearch highlighter runs on torch only; "
                               "use model_runtime: torch")
    return Pruner(OnnxProvence(folder), WordPieceTokenizer(folder / "tokenizer.json"), config)


class OnnxNLIModel:
    """The NLI cross-encoder: (contradiction, entailment, neutral) probabilities per pair,
    pairs truncated longest-first to ``max_length`` tokens as the torch path does."""

    def __init__(self, folder: str | Path, *, max_length: int = 128) -> None:
        from tokenizers import Tokenizer

        from agentmem.models.nli import label_order

        folder = Path(folder)
        self.session = session(onnx_file(folder, verify=True))
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length, strategy="longest_first")
        self.tokenizer.no_padding()
        self.max_length = max_length
        config = json.loads((folder / "config.json").read_text())
        self.order = label_order(config.get("id2label") or {})

    def predict(self, pairs: Sequence[tuple[str, str]], batch_size: int = 32) -> np.ndarray:
        """Probabilities, shape (n, 3) float32, columns in LABELS order; rows follow ``pairs``."""
        out = np.zeros((len(pairs), 3), dtype=np.float32)
        if not pairs:
            return out
        order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]) + len(pairs[i][1]))
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            feeds = _batch(self.tokenizer.encode_batch([(pairs[i][0], pairs[i][1]) for i in rows]))
            [logits] = self.session.run(["logits"], feeds)
            out[rows] = _softmax(logits)[:, self.order]
        return out

    def contradiction(self, pairs: Sequence[tuple[str, str]], batch_size: int = 32) -> np.ndarray:
        """P(contradiction) per pair, shape (n,) float32."""
        from agentmem.models.nli import CONTRADICTION

        return self.predict(pairs, batch_size=batch_size)[:, CONTRADICTION].copy()
