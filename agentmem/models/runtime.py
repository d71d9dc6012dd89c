"""Where model inference runs: one call-path worker thread, one background worker thread,
one torch thread each.

On a 2-core machine a server does best running each inference single-threaded, off the
event loop. Work after the reply (embedding new turns, quarantine detection) runs on its own
worker, so a call's query embedding never queues behind another call's background work; the
two workers fit the two cores.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from functools import lru_cache
from typing import TypeVar

T = TypeVar("T")

_background: ContextVar[bool] = ContextVar("agentmem_background", default=False)


@lru_cache(maxsize=1)
def inference_executor() -> ThreadPoolExecutor:
    workers = int(os.environ.get("AGENTMEM_INFERENCE_THREADS", "1"))
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="agentmem-inference",
                              initializer=_init_thread)


@lru_cache(maxsize=1)
def background_executor() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentmem-background",
                              initializer=_init_thread)


def _init_thread() -> None:
    import torch

    torch.set_num_threads(int(os.environ.get("AGENTMEM_TORCH_THREADS", "1")))


@contextlib.contextmanager
def in_background() -> Iterator[None]:
    """Inference started inside this block (and tasks it creates) uses the background worker."""
    token = _background.set(True)
    try:
        yield
    finally:
        _background.reset(token)


async def run_inference(func: Callable[..., T], *args) -> T:
    executor = background_executor() if _background.get() else inference_executor()
    return await asyncio.get_running_loop().run_in_executor(executor, func, *args)
