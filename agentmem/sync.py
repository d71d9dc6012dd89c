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
        """A sync iterator over an async one. Every step runs on the bridge's loop, so an async
        generator's hooks are that loop's; a caller that stops early (``close()``, or dropping
        the iterator) closes it there too, so a stream's call is finished as partial, as on
        the async path, and not torn down later on a thread with no loop."""
        finished = False
        try:
            while True:
                try:
                    yield self.run(_step(iterator))
                except StopAsyncIteration:
                    finished = True
                    return
        finally:
            aclose = getattr(iterator, "aclose", None)
            if not finished and aclose is not None and self.loop.is_running():
                self.run(aclose())

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)


async def _step(iterator: AsyncIterator[Any]) -> Any:
    return await iterator.__anext__()


class SyncStream:
    """The sync library's stream: the chunks, ``_hidden_params`` as the async stream's, and
    ``close()`` (or ``with stream:``) to leave early; the call is then stored partial."""

    def __init__(self, chunks: Iterator[Any], hidden_params: dict[str, Any]) -> None:
        self._chunks = chunks
        self._hidden_params = hidden_params

    def __iter__(self) -> SyncStream:
        return self

    def __next__(self) -> Any:
        return next(self._chunks)

    def close(self) -> None:
        close = getattr(self._chunks, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> SyncStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
