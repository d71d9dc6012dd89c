"""Session-wide tables extended reply by reply: each reply's input is the previous one's
plus new rows, so a kept table is extended instead of rebuilt.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

# Session-wide tables, extended reply by reply. A session's statements grow at the end, so
# the tables of the previous reply's statements are a prefix of this reply's: each is kept
# with the input it was computed from, and a call whose input extends a kept one computes
# only the rows past it (a different or edited input computes from scratch). Entries are
# never changed once stored, so concurrent callers can share them.
_GROWN_KEPT = 8  # inputs kept per table: a few sessions' worth
_grown_lock = threading.Lock()


_Entry = TypeVar("_Entry")


def _extended(kept: list[_Entry], inputs: Callable[[_Entry], tuple[Any, ...]],
              *current: Any) -> _Entry | None:
    """The kept entry this call extends: each of its inputs (lists or arrays) a prefix of the
    current input in the same place, the longest such entry; None: compute from scratch."""
    def extends(entry: _Entry) -> bool:
        return all(len(old) <= len(new) and (np.array_equal(new[:len(old)], old)
                                             if isinstance(old, np.ndarray) else new[:len(old)] == old)
                   for old, new in zip(inputs(entry), current))

    with _grown_lock:
        return max((e for e in kept if extends(e)),
                   key=lambda e: sum(len(old) for old in inputs(e)), default=None)


def _keep(kept: list[_Entry], entry: _Entry, replaced: _Entry | None) -> None:
    """Store a table's new entry in place of the one it extended (the session moved on)."""
    with _grown_lock:
        if replaced is not None and replaced in kept:
            kept.remove(replaced)
        kept.append(entry)
        del kept[:-_GROWN_KEPT]
