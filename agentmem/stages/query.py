"""The query's embedding, computed once per call and started as early as possible.

Embedding the query is the one model call on the default call path (~15 ms for MiniLM on two
CPU cores). ``prefetch`` starts it when the request arrives, so it runs on the inference
thread while the event loop hashes the history and talks to Redis; stages then ``await
query_vector``. Results are memoised by text, so an agent loop's retries and the stages of one
call never embed the same query twice.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict

import numpy as np

from agentmem.models.runtime import run_inference

_MEMO_SIZE = 1024
_done: OrderedDict[str, np.ndarray] = OrderedDict()
_pending: dict[tuple[int, str], asyncio.Task] = {}


def prefetch(text: str) -> None:
    """Start embedding ``text`` on the inference thread, unless it is known or under way."""
    if not text or text in _done:
        return
    loop = asyncio.get_running_loop()
    key = (id(loop), text)
    if key not in _pending:
        task = loop.create_task(_compute(text))
        task.add_done_callback(lambda done: (_pending.pop(key, None), done.exception()
                                             if not done.cancelled() else None))
        _pending[key] = task


async def query_vector(text: str) -> np.ndarray:
    """The unit-normalised MiniLM vector of ``text``."""
    if text in _done:
        _done.move_to_end(text)
        return _done[text]
    prefetch(text)
    return await asyncio.shield(_pending[(id(asyncio.get_running_loop()), text)])


async def _compute(text: str) -> np.ndarray:
    from agentmem.models.embedder import default_embedder

    vector = (await run_inference(default_embedder().encode, [text]))[0]
    _done[text] = vector
    while len(_done) > _MEMO_SIZE:
        _done.popitem(last=False)
    return vector
