"""Clause vectors: a clause that is its whole sentence reuses the sentence's vector;
others are embedded once per process (LRU by text).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable

import numpy as np

from agentmem.quarantine.poison.clauses import Clause
from agentmem.quarantine.statements import Statements

Encoder = Callable[[list[str]], np.ndarray]


# --------------------------------------------------------------------------- vectors

_CACHE_SIZE = 50_000
_cache: OrderedDict[str, np.ndarray] = OrderedDict()
_cache_lock = threading.Lock()


def _default_encoder() -> Encoder:
    from agentmem.models.embedder import default_embedder

    return default_embedder().encode


def _clause_vectors(texts: list[str], encode: Encoder | None) -> np.ndarray | None:
    """Vectors of clause texts, each embedded once per process (LRU by text)."""
    with _cache_lock:
        missing = [t for t in dict.fromkeys(texts) if t not in _cache]
    if missing:
        try:
            fresh = (encode or _default_encoder())(missing)
        except Exception:  # noqa: BLE001 - no embedder: sentence vectors stand in
            return None
        with _cache_lock:
            for text, vector in zip(missing, fresh):
                _cache[text] = np.asarray(vector, dtype=np.float32)
            while len(_cache) > _CACHE_SIZE:
                _cache.popitem(last=False)
    with _cache_lock:
        for text in texts:
            _cache.move_to_end(text)
        return np.vstack([_cache[t] for t in texts]) if texts else None


def uncached(texts: Iterable[str]) -> list[str]:
    """The clause texts no vector is kept for yet, in order."""
    with _cache_lock:
        return [text for text in texts if text not in _cache]


def remember_clause_vectors(texts: list[str], vectors: list[np.ndarray | None]) -> None:
    """Clause vectors computed outside the detection (None: shed; embedded when needed)."""
    with _cache_lock:
        for text, vector in zip(texts, vectors):
            if vector is not None:
                _cache[text] = np.asarray(vector, dtype=np.float32)
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)


def _vectors_for(statements: Statements, clauses: list[Clause], encode: Encoder | None) -> np.ndarray:
    """A clause that is its whole sentence reuses the sentence's vector; others are embedded."""
    vectors = statements.vectors[[c.row for c in clauses]].astype(np.float32, copy=True)
    own = _own_vectors(statements, clauses)
    if own:
        fresh = _clause_vectors([clauses[k].text for k in own], encode)
        if fresh is not None and fresh.shape[1] == vectors.shape[1]:
            vectors[own] = fresh
    return vectors


def _own_vectors(statements: Statements, clauses: list[Clause]) -> list[int]:
    """The clauses that need a vector of their own: not their whole sentence."""
    counts: dict[int, int] = {}
    for clause in clauses:
        counts[clause.row] = counts.get(clause.row, 0) + 1
    return [k for k, c in enumerate(clauses)
            if counts[c.row] > 1 or len(c.text) < 0.8 * len(statements.texts[c.row])]
