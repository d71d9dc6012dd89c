"""An engine's last work when its process exits without closing it.

A script that calls ``agentmem.completion`` and simply ends never calls ``close()``: its last
turns' embeddings (and the detection that reads them) would be cut off, and the embedded Redis
it started would outlive it. So every engine is closed when its process exits: the sync
bridge's background work gets up to ``EXIT_DRAIN_S`` to finish (what does not finish stays
recorded in Redis and the next start redoes it, ``agentmem.pending``), then the engine
detaches from the embedded server, which the last process using the folder stops. An engine
closed before exit has nothing left to do here.

The hook is one of ``threading``'s exit hooks, not ``atexit``'s: those run first, while the
interpreter still takes work on thread pools (``concurrent.futures`` stops at its own
threading hook, registered earlier and so run later) and before the model scheduler's
``atexit`` stop, so the drain can still run the models it waits for.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
import weakref
from typing import Protocol

EXIT_DRAIN_S = 10.0


class Closable(Protocol):
    def close(self, *, drain_s: float | None = None) -> None: ...


def close_at_exit(engine: Closable) -> None:
    """Close ``engine`` when the process exits, if it is still alive and open then."""
    ref = weakref.ref(engine)

    def close() -> None:
        alive = ref()
        if alive is not None:
            alive.close(drain_s=EXIT_DRAIN_S)

    register = getattr(threading, "_register_atexit", None) or atexit.register
    with contextlib.suppress(RuntimeError):  # already shutting down: nothing to hook into
        register(close)
