"""Where model inference runs: one worker thread, one torch thread.

On a 2-core machine a server does best running each inference single-threaded, off the
event loop; a single worker also keeps models from fighting over the cores.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from typing import TypeVar

T = TypeVar("T")


@lru_cache(maxsize=1)
def inference_executor() -> ThreadPoolExecutor:
    workers = int(os.environ.get("AGENTMEM_INFERENCE_THREADS", "1"))
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="agentmem-inference",
                              initializer=_init_thread)


def _init_thread() -> None:
    import torch

    torch.set_num_threads(int(os.environ.get("AGENTMEM_TORCH_THREADS", "1")))


async def run_inference(func: Callable[..., T], *args) -> T:
    return await asyncio.get_running_loop().run_in_executor(inference_executor(), func, *args)
