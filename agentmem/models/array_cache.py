"""A small thread-safe LRU of arrays keyed by strings: model outputs that are pure functions of
their key (a window's pruner scores for a query, a sentence's embedding), kept in memory so a
repeated input is not read again. The caller's key says what the value depends on, and scopes
it (a tenant) where a hit must not tell one caller what another has sent."""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np


class ArrayCache:
    """At most ``size`` arrays; the least recently read or written goes first."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.items: OrderedDict[str, np.ndarray] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: str) -> np.ndarray | None:
        with self.lock:
            value = self.items.get(key)
            if value is not None:
                self.items.move_to_end(key)
            return value

    def put(self, key: str, value: np.ndarray) -> None:
        with self.lock:
            self.items[key] = value
            self.items.move_to_end(key)
            while len(self.items) > self.size:
                self.items.popitem(last=False)
