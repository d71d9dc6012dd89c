"""The query's embedding, computed once per call and started as early as possible.

Embedding the query is the one model call on the default call path (~15 ms for MiniLM on two
CPU cores). ``prefetch`` starts it when the request arrives, so it runs on the inference
thread while the event loop hashes the history and talks to Redis; stages then ``await
vector``. Results are memoised by text, so an agent loop's retries and the stages of one call
never embed the same query twice. One instance per engine: its embedder, its memory.

A prefetch embeds at most ``prefetch_limit`` texts (the call path's embedding budget): a
1 MB paste's thousands of sentences are left to the corpus, which embeds what the budget
allows and hands the rest to the background.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Hashable

import numpy as np

from agentmem.models.embedder import Embedder, ModelsNotReady
from agentmem.models.runtime import current_lane, embed, is_background


class QueryVectors:
    """Memoised, prefetchable text embeddings (bounded LRU by text)."""

    def __init__(self, embedder: Embedder, memo_size: int = 1024,
                 prefetch_limit: int = 64) -> None:
        self.embedder = embedder
        self.memo_size = memo_size
        self.prefetch_limit = prefetch_limit
        self._done: OrderedDict[str, np.ndarray] = OrderedDict()
        self._pending: dict[tuple[int, str], asyncio.Task[list[np.ndarray]]] = {}

    def prefetch(self, *texts: str) -> None:
        """Start embedding the texts (the first ``prefetch_limit`` not known or under way), in
        the caller's lane: the prefetch is part of the call that asked for it."""
        if self.embedder.loading:  # a call does not wait for the model (see vector)
            return
        loop = asyncio.get_running_loop()
        wanted = list(dict.fromkeys(t for t in texts if t and t not in self._done
                                    and (id(loop), t) not in self._pending))[:self.prefetch_limit]
        if not wanted:
            return
        task = loop.create_task(self._compute(wanted, current_lane()))
        keys = [(id(loop), text) for text in wanted]
        for key in keys:
            self._pending[key] = task

        def finished(done: asyncio.Task[list[np.ndarray]]) -> None:
            for key in keys:
                self._pending.pop(key, None)
            if not done.cancelled():
                done.exception()  # retrieved: a failure surfaces in vector(), not as a warning

        task.add_done_callback(finished)

    async def prefetched(self, text: str) -> np.ndarray | None:
        """The vector of ``text`` if a prefetch computed it or is computing it (then wait for it:
        embedding it a second time would compete for the same cores)."""
        if text in self._done:
            return self._done[text]
        task = self._pending.get((id(asyncio.get_running_loop()), text))
        if task is None:
            return None
        with contextlib.suppress(Exception):
            await asyncio.shield(task)
        return self._done.get(text)

    async def vector(self, text: str) -> np.ndarray:
        """The unit-normalised vector of ``text``. On a call path while the model is still
        loading (a server just started): ``ModelsNotReady``, so the call does not wait."""
        if text in self._done:
            self._done.move_to_end(text)
            return self._done[text]
        self.ready_or_raise()
        self.prefetch(text)
        key = (id(asyncio.get_running_loop()), text)
        if key in self._pending:
            await asyncio.shield(self._pending[key])
        return self._done[text] if text in self._done else (await self._compute([text]))[0]

    def ready_or_raise(self) -> None:
        """Raise ``ModelsNotReady`` on a call path while the model loads; background work waits."""
        if self.embedder.loading and not is_background():
            raise ModelsNotReady("the embedding model is still loading (the server just started)")

    async def _compute(self, texts: list[str], lane: Hashable | None = None) -> list[np.ndarray]:
        rows = await embed(self.embedder.encode, texts, lane=lane, bounded=False)
        vectors = [row for row in rows if row is not None]  # all: unbounded work is never shed
        for text, vector in zip(texts, vectors):
            self._done[text] = vector
        while len(self._done) > self.memo_size:
            self._done.popitem(last=False)
        return vectors
