"""The proxy's default executor: litellm's request building runs on the event loop, not in a
thread, for providers whose request building does no I/O.

Why: ``litellm.acompletion`` hands its synchronous ``completion`` (which, asked for an async
call, only builds the request and returns a coroutine) to ``loop.run_in_executor(None, ...)``.
On two cores that thread hop (queue, thread wake-up, GIL hand-over, the loop woken back) cost
the ``off`` proxy ~0.3-0.9 ms a call of its ~6 ms overhead (README: Benchmarks, Overhead).
Running it inline does the same work without the hop.

Only where it is safe: ``inline_setup()`` (opened by ``agentmem.upstream`` around a call to a
provider in ``INLINE_PROVIDERS`` once a call to that provider has run litellm's one-time set-up
in a thread) arms a one-shot flag in the calling task's context, and the executor runs inline
only the next submission, and only if it is litellm's ``completion`` wrapped as
``acompletion`` wraps it; the flag is gone when the call returns.
Everything else (a DNS lookup inside the same call, another library's blocking work, a newer
litellm that submits something else) goes to the thread pool as before. Providers whose
request building may block (cloud credential refreshes: Azure AD, AWS, Vertex) are never
inlined.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextvars import ContextVar
from typing import Any

# litellm providers whose ``completion(acompletion=True)`` builds the request from its
# arguments and the environment only (no network, no file or credential refresh).
INLINE_PROVIDERS = frozenset({"openai", "hosted_vllm"})


class _Armed:
    __slots__ = ("pending",)

    def __init__(self) -> None:
        self.pending = True


_armed: ContextVar[_Armed | None] = ContextVar("agentmem_inline_setup", default=None)


@contextlib.contextmanager
def inline_setup() -> Iterator[None]:
    """While open, the executor may run the calling task's next litellm ``completion``
    submission inline."""
    token = _armed.set(_Armed())
    try:
        yield
    finally:
        _armed.reset(token)


def _is_litellm_setup(fn: Callable[..., Any]) -> bool:
    """``acompletion`` submits ``partial(ctx.run, partial(completion, **kwargs))``."""
    # Imported here, not at the top: litellm must first be imported by agentmem.upstream,
    # which sets its offline environment; and ``completion`` is read at each call, so the
    # check follows whatever ``litellm.main.completion`` is now.
    from litellm import main as litellm_main

    inner = fn.args[0] if isinstance(fn, functools.partial) and fn.args else None
    return isinstance(inner, functools.partial) and inner.func is litellm_main.completion


class InlineSetupExecutor(ThreadPoolExecutor):
    """A thread pool that runs one armed litellm request building on the caller's thread."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        armed = _armed.get()
        if armed is None or not armed.pending:
            return super().submit(fn, *args, **kwargs)
        armed.pending = False  # one shot: later submissions of this call use threads
        if not _is_litellm_setup(fn):
            return super().submit(fn, *args, **kwargs)
        future: Future[Any] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as error:  # noqa: BLE001 - handed to the awaiting caller
            future.set_exception(error)
        return future


def install(loop: asyncio.AbstractEventLoop | None = None) -> None:
    """Make ``InlineSetupExecutor`` the loop's default executor (the proxy's lifespan calls
    this on the loop it owns; a library caller's loop is left as its owner set it)."""
    (loop or asyncio.get_running_loop()).set_default_executor(InlineSetupExecutor())
