"""A long tool output whose answer sits in its third block, and a recorder of the threads a
pruner's blocks are read on (the parallel-read tests of the stage and ``/v1/highlight``)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

SENTENCES = [f"Step {i}: the deploy script copied build {i} to host-{i % 7} and restarted the "
             f"worker pool, which logged a warning about stale sockets." for i in range(70)]
SENTENCES[41] = "Sessions are stored in Redis under the agentmem prefix."


def record_threads(monkeypatch: pytest.MonkeyPatch, pruner: Any) -> set[str]:
    """The names of the threads ``pruner.forward_blocks`` runs on from now on (filled in as it
    runs); each call is slowed so that a second idle worker takes the next block."""
    threads: set[str] = set()
    forward = pruner.forward_blocks

    def recording(chunk, batch_size=32):
        threads.add(threading.current_thread().name)
        time.sleep(0.05)
        return forward(chunk, batch_size)

    monkeypatch.setattr(pruner, "forward_blocks", recording)
    return threads
