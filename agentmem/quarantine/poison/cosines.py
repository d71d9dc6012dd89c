"""The clause-by-clause cosines of a poison detection, carried over from the previous one.

Between two detections a session's window of claim clauses changes at its ends: the new
turns' clauses are appended and, once the session is longer than the window, the oldest
turns' clauses fall off the front. The full product of a 2,000-clause window took 30-55 ms
and its scan for close pairs 11-17 ms on two cores, every detection, and an agent step pays
them on its call path (the poison check of the tool result it sends). Here the kept matrix's
run of clauses that the new window starts with is copied, with its close pairs; only the
other clauses' rows are computed and scanned.

Entries are never changed once kept (their arrays are read-only), so concurrent detections
of different sessions share them; the kept matrices are bounded in bytes, not in number.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

KEPT_BYTES = 64 << 20  # ~ three 2,000-clause windows, or many short sessions' windows
MIN_REUSED = 64  # rows: fewer, and the full product costs no more than finding them

__all__ = ["ClauseCosines", "clause_cosines", "close_pairs", "forget", "row_keys"]


@dataclass(frozen=True, eq=False)  # kept by identity: its arrays have no truth value
class ClauseCosines:
    """``vectors @ vectors.T`` and its pairs at or above ``bar`` (``close_pairs``), read-only."""

    vectors: np.ndarray
    keys: np.ndarray  # per row, a hash of its vector (``row_keys``)
    bar: float
    similarity: np.ndarray
    pairs: np.ndarray

    @property
    def nbytes(self) -> int:
        return self.vectors.nbytes + self.keys.nbytes + self.similarity.nbytes + self.pairs.nbytes


def close_pairs(similarity: np.ndarray, bar: float) -> np.ndarray:
    """The pairs (i, j), i < j, whose similarity is at or above ``bar``, in row order. (Every
    close pair, then the upper ones: half the time of masking the matrix's lower triangle.)"""
    left, right = np.nonzero(similarity >= bar)
    upper = left < right
    return np.stack((left[upper], right[upper]), axis=1)


_kept: list[ClauseCosines] = []
_lock = threading.Lock()
_MULTIPLIERS = np.random.default_rng(0x5EED).integers(1, 2**63, size=4096, dtype=np.uint64) | 1


def row_keys(vectors: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each row's bytes (a random linear form of its words): runs of equal
    rows are found by comparing keys, and only the chosen run is compared value by value."""
    words = np.ascontiguousarray(vectors).view(np.uint32).astype(np.uint64)
    with np.errstate(over="ignore"):  # arithmetic modulo 2**64
        return (words * _MULTIPLIERS[:words.shape[1]]).sum(axis=1, dtype=np.uint64)


def clause_cosines(vectors: np.ndarray, bar: float) -> ClauseCosines:
    """The cosines of these clause vectors and their pairs at or above ``bar``, carried over
    from a kept entry whose clauses (the same vectors, bit for bit, and the same bar) the
    window's first clauses are a run of."""
    vectors = np.array(vectors, dtype=np.float32)  # a copy: the entry outlives the caller's
    keys = row_keys(vectors)
    base, offset, reused = _reusable(vectors, keys, bar)
    if base is None:
        similarity = vectors @ vectors.T
        pairs = close_pairs(similarity, bar)
    else:
        n = len(vectors)
        similarity = np.empty((n, n), dtype=np.float32)
        similarity[:reused, :reused] = base.similarity[offset:offset + reused, offset:offset + reused]
        similarity[reused:] = vectors[reused:] @ vectors.T
        similarity[:reused, reused:] = similarity[reused:, :reused].T
        pairs = _carried_pairs(similarity, base.pairs, offset, reused, bar)
    for array in (vectors, keys, similarity, pairs):
        array.flags.writeable = False
    made = ClauseCosines(vectors, keys, bar, similarity, pairs)
    _keep(made, base)
    return made


def _carried_pairs(similarity: np.ndarray, old: np.ndarray, offset: int, reused: int,
                   bar: float) -> np.ndarray:
    """``close_pairs(similarity, bar)`` where the first ``reused`` rows are the kept rows
    from ``offset`` on and ``old`` are the kept entry's pairs: those within the run are
    renumbered, the rest read off the new rows (each pair once, by its upper element)."""
    inside = (old[:, 0] >= offset) & (old[:, 1] < offset + reused)
    carried = old[inside] - offset
    block = similarity[reused:] >= bar  # the new rows against every column
    rows, columns = np.nonzero(block[:, :reused])  # (column, new row): an old row first
    with_old = np.stack((columns, rows + reused), axis=1)
    rows, columns = np.nonzero(np.triu(block[:, reused:], k=1))  # two new rows, upper
    among_new = np.stack((rows + reused, columns + reused), axis=1)
    pairs = np.concatenate((carried, with_old, among_new))
    return pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))]


def _reusable(vectors: np.ndarray, keys: np.ndarray, bar: float
              ) -> tuple[ClauseCosines | None, int, int]:
    """The kept entry, the offset into it and the number of rows from there that the
    window's first rows equal (the most of any entry), or (None, 0, 0) below ``MIN_REUSED``.
    Candidates are compared by their rows' keys (a status line repeated at every turn makes
    hundreds of offsets to try), the chosen run by value."""
    best: tuple[ClauseCosines | None, int, int] = (None, 0, 0)
    if len(vectors) < MIN_REUSED:
        return best
    with _lock:
        kept = list(_kept)
    for entry in kept:
        if entry.bar != bar or entry.vectors.shape[1] != vectors.shape[1]:
            continue
        for offset in np.flatnonzero(entry.keys == keys[0]).tolist():
            span = min(len(entry.keys) - offset, len(keys))
            same = entry.keys[offset:offset + span] == keys[:span]
            reused = span if same.all() else int(np.argmin(same))
            if reused > best[2]:
                best = (entry, offset, reused)
    chosen, offset, reused = best
    if chosen is None:
        return best
    # equal keys, unequal rows (a collision): the run ends before that row
    same = (chosen.vectors[offset:offset + reused] == vectors[:reused]).all(axis=1)
    reused = reused if same.all() else int(np.argmin(same))
    return (chosen, offset, reused) if reused >= MIN_REUSED else (None, 0, 0)


def _keep(entry: ClauseCosines, replaced: ClauseCosines | None) -> None:
    """Keep the new entry in place of the one it was made from (the session moved on); the
    oldest entries go past ``KEPT_BYTES``."""
    if entry.nbytes > KEPT_BYTES:
        return
    with _lock:
        if replaced is not None and replaced in _kept:
            _kept.remove(replaced)
        _kept.append(entry)
        total = sum(e.nbytes for e in _kept)
        while total > KEPT_BYTES:
            total -= _kept.pop(0).nbytes


def forget() -> None:
    """Drop every kept matrix (tests; a caller that wants the memory back)."""
    with _lock:
        _kept.clear()
