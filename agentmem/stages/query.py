"""The query's embedding, computed once per call and started as early as possible.

Embedding the query is the one model call on the default call path (~15 ms for MiniLM on two
CPU cores). ``prefetch`` starts it when the request arrives, so it runs on the inference
thread while the event loop hashes the history and talks to Redis; stages then ``await
query_vector``. Results are memoised by text, so an agent loop's retries and the stages of one
call never embed the same query twice.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict

import numpy as np

from agentmem.models.runtime import run_inference

_MEMO_SIZE = 1024
_done: OrderedDict[str, np.ndarray] = OrderedDict()
_pending: dict[tuple[int, str], asyncio.Task] = {}


def prefetch(*texts: str) -> None:
    """Start embedding the texts (one batch) on the inference thread, unless known or under way."""
    loop = asyncio.get_running_loop()
    wanted = list(dict.fromkeys(t for t in texts if t and t not in _done
                                and (id(loop), t) not in _pending))
    if not wanted:
        return
    task = loop.create_task(_compute(wanted))
    keys = [(id(loop), text) for text in wanted]
    for key in keys:
        _pending[key] = task

    def finished(done: asyncio.Task) -> None:
        for key in keys:
            _pending.pop(key, None)
        if not done.cancelled():
            done.exception()  # retrieved: a failure surfaces in query_vector, not as a warning

    task.add_done_callback(finished)


def newest_user_sentences(policy, messages: list[dict]) -> list[str]:
    """The sentences of the newest user message, when the quarantine stage will check them
    for clashes (the corpus picks their vectors up from here instead of embedding again)."""
    if "quarantine" not in policy.stages or not policy.quarantine.clash:
        return []
    from agentmem.messages import text_of
    from agentmem.text import split_sentences

    last = next((m for m in reversed(messages) if m.get("role") == "user"), None)
    text = text_of(last) if last is not None else ""
    return [text[s.start:s.end] for s in split_sentences(text)]


async def prefetched(text: str) -> np.ndarray | None:
    """The vector of ``text`` if a prefetch computed it or is computing it (then wait for it:
    embedding it a second time would compete for the same cores)."""
    if text in _done:
        return _done[text]
    task = _pending.get((id(asyncio.get_running_loop()), text))
    if task is None:
        return None
    with contextlib.suppress(Exception):
        await asyncio.shield(task)
    return _done.get(text)


async def query_vector(text: str) -> np.ndarray:
    """The unit-normalised MiniLM vector of ``text``."""
    if text in _done:
        _done.move_to_end(text)
        return _done[text]
    prefetch(text)
    key = (id(asyncio.get_running_loop()), text)
    if key in _pending:
        await asyncio.shield(_pending[key])
    return _done[text] if text in _done else (await _compute([text]))[0]


async def _compute(texts: list[str]) -> list[np.ndarray]:
    from agentmem.models.embedder import default_embedder

    vectors = list(await run_inference(default_embedder().encode, texts))
    for text, vector in zip(texts, vectors):
        _done[text] = vector
    while len(_done) > _MEMO_SIZE:
        _done.popitem(last=False)
    return vectors
