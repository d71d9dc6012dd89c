"""Running the async engine from synchronous code, on one private event loop thread.

redis-py's asyncio pools belong to the loop that made them, so sync callers get one
long-lived loop rather than a new ``asyncio.run`` per call.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any


class SyncBridge:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="agentmem-sync",
                                       daemon=True)
        self.thread.start()

    def run(self, coroutine) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def iterate(self, iterator: AsyncIterator[Any]) -> Iterator[Any]:
        while True:
            try:
                yield self.run(iterator.__anext__())
            except StopAsyncIteration:
                return

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
