"""Where model inference runs: small jobs, fair queues, call paths first.

One session's huge job must not hold up anyone else's call: a 1 MB paste is ~10,000
sentences, minutes of MiniLM on two cores, and when it ran as one job on the one inference
thread every other session's query waited behind it (71 s measured). So:

- Work comes as small jobs: an embedding chunk of at most ``chunk_size()`` sentences
  (``embed``), or one other model call (``run_inference``). Each job belongs to a *lane* (the
  call's task by default, a session for background work) and a *class*: call path or
  background (``in_background``).
- Call-path jobs run on one worker thread per core; background jobs on their own worker,
  which lowers its scheduling priority, so background work uses idle CPU and never a call
  path's worker. Within a class, lanes are served round robin, one job at a time: a call's
  job waits for at most one chunk of each other lane with work queued, never for a whole job.
- Background embedding has a bounded queue (sentences): chunks past it are shed (logged,
  counted in ``scheduler().shed``), never queued and never waited for; whoever needed them
  recomputes them on demand later.

Each worker runs its inference single-threaded (torch's threads, or each ONNX Runtime
session's: ``agentmem.models.backend.threads``): on a small machine one thread per inference
and one inference per core does best, and it leaves a core's worth of room per worker.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import sys
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Iterator, Sequence
from concurrent.futures import Future
from contextvars import ContextVar
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, TypeVar

import numpy as np

from agentmem.models.runs import runs

T = TypeVar("T")
log = logging.getLogger("agentmem.inference")

_background: ContextVar[bool] = ContextVar("agentmem_background", default=False)

BACKGROUND_NICE = 10  # Linux: a nice-10 thread gets ~1/10 of a core that nice-0 threads want


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def chunk_size() -> int:
    """Sentences per embedding job: small enough that waiting for one is tens of ms on a
    loaded core, large enough that batching still pays."""
    return max(1, int(os.environ.get("AGENTMEM_INFERENCE_CHUNK", "8")))


@dataclass
class Job:
    func: Callable[..., Any]
    args: tuple[Any, ...]
    future: Future[Any]
    size: int  # sentences, counted against the bound of a bounded queue


class FairQueue:
    """Jobs by lane, served round robin: each ``pop`` takes the oldest job of the lane whose
    turn it is. Optionally bounded by the total size of the queued jobs."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = limit
        self.queued = 0  # total size of the queued jobs
        self.jobs = 0  # how many jobs are queued
        self._lanes: OrderedDict[Hashable, deque[Job]] = OrderedDict()

    def __bool__(self) -> bool:
        return bool(self._lanes)

    def room_for(self, size: int) -> bool:
        return self.limit is None or self.queued + size <= self.limit

    def push(self, lane: Hashable, job: Job) -> None:
        """A lane new to the queue goes first: a call's small job should not wait behind the
        lane being served (which goes to the back after its next job anyway)."""
        if lane not in self._lanes:
            self._lanes[lane] = deque()
            self._lanes.move_to_end(lane, last=False)
        self._lanes[lane].append(job)
        self.queued += job.size
        self.jobs += 1

    def pop(self) -> Job:
        """The next lane's oldest job; the lane goes to the back of the line."""
        lane, jobs = next(iter(self._lanes.items()))
        job = jobs.popleft()
        if jobs:
            self._lanes.move_to_end(lane)
        else:
            del self._lanes[lane]
        self.queued -= job.size
        self.jobs -= 1
        return job


class _Pool:
    """Worker threads taking jobs from one fair queue."""

    def __init__(self, name: str, workers: int, queue: FairQueue, nice: int = 0) -> None:
        self.name, self.workers, self.queue, self.nice = name, workers, queue, nice
        self._ready = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._closing = False

    def submit(self, lane: Hashable, job: Job) -> bool:
        """Queue a job; False (the job is not queued) when a bounded queue has no room."""
        with self._ready:
            if self._closing:
                raise RuntimeError("inference is shutting down")
            if not self.queue.room_for(job.size):
                return False
            self.queue.push(lane, job)
            self._start()
            self._ready.notify()
        return True

    def _start(self) -> None:
        """Workers start with the first job. Daemons: an exiting process waits at most for
        the chunks they are running (``Scheduler.stop`` at exit), never for queued work, which
        whoever needs it recomputes on demand."""
        while len(self._threads) < self.workers:
            thread = threading.Thread(target=self._work, daemon=True,
                                      name=f"agentmem-{self.name}-{len(self._threads)}")
            self._threads.append(thread)
            thread.start()

    def stop(self, deadline: float) -> None:
        """Drop the queued jobs (their callers see them cancelled) and wait until ``deadline``
        (``time.monotonic``) for the running ones: a worker killed inside torch at interpreter
        exit aborts the process ("terminate called without an active exception")."""
        with self._ready:
            self._closing = True
            while self.queue:
                self.queue.pop().future.cancel()
            self._ready.notify_all()
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _work(self) -> None:
        _init_thread(self.nice)
        while True:
            with self._ready:
                while not self.queue and not self._closing:
                    self._ready.wait()
                if self._closing:
                    return
                job = self.queue.pop()
            if job.future.set_running_or_notify_cancel():  # False: its caller gave up
                try:
                    job.future.set_result(job.func(*job.args))
                except BaseException as error:  # noqa: BLE001 - handed to the awaiting caller
                    job.future.set_exception(error)


class Scheduler:
    """The call-path pool (one worker per core) and the background pool (lowered priority,
    bounded queue; one worker by default: measured, it keeps other sessions' calls at their
    quiet latency while a paste is embedded)."""

    def __init__(self, workers: int, background_limit: int, background_workers: int = 1) -> None:
        self.call_path = _Pool("inference", workers, FairQueue())
        self.background = _Pool("background", background_workers, FairQueue(background_limit),
                                BACKGROUND_NICE)
        self.shed = 0  # background sentences shed since start (the queue was full)

    def submit(self, func: Callable[..., T], args: tuple[Any, ...], *, lane: Hashable,
               background: bool, size: int = 0) -> Future[T] | None:
        """Queue one job; None when it was shed (background, bounded queue full)."""
        job = Job(func, args, Future(), size)
        if (self.background if background else self.call_path).submit(lane, job):
            return job.future
        self.shed += size
        return None

    def stop(self, timeout: float = 5.0) -> None:
        """Stop both pools (at interpreter exit): queued work is dropped, running jobs (a chunk
        each) finish first, for at most ``timeout`` seconds in all."""
        deadline = time.monotonic() + timeout
        self.call_path.stop(deadline)
        self.background.stop(deadline)


def scheduler_if_started() -> Scheduler | None:
    """The process's scheduler if anything has used it yet (``/metrics`` reads it without
    starting one)."""
    return scheduler() if scheduler.cache_info().currsize else None


@lru_cache(maxsize=1)
def scheduler() -> Scheduler:
    """The process's scheduler: the cores and the model are the process's, not an engine's."""
    workers = int(os.environ.get("AGENTMEM_INFERENCE_THREADS", "0")) or min(_cores(), 8)
    limit = int(os.environ.get("AGENTMEM_BACKGROUND_QUEUE", "20000"))
    made = Scheduler(workers, limit, int(os.environ.get("AGENTMEM_BACKGROUND_THREADS", "1")))
    atexit.register(made.stop)
    return made


def _init_thread(nice: int) -> None:
    from agentmem.models.backend import runtime_for, threads

    # ONNX Runtime sessions set their own threads (models.ort); torch is set up only where it
    # serves the shipped models or is already in use (importing it costs seconds and memory)
    if runtime_for(None) == "torch" or "torch" in sys.modules:
        import torch

        torch.set_num_threads(threads())
    _one_blas_pool(threads())
    _thread.background = bool(nice)
    if nice:
        with contextlib.suppress(AttributeError, OSError):  # Linux: per thread; else skipped
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)


@lru_cache(maxsize=1)
def _one_blas_pool(count: int) -> None:
    """numpy's BLAS (OpenBLAS) with ``count`` threads, process-wide (its setting is global),
    once: the same rule as the models'. Its own threads spin at full priority waiting for a
    caller that a niced background worker is, and on a busy 2-core box a 200 x 384 x 600
    product took ~30 ms instead of under one; the after-reply work of a 660-turn chat session
    (LoCoMo text) took 45-200 ms of CPU a turn instead of ~11. Needs ``threadpoolctl``
    (without it, BLAS keeps its default)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return
    threadpool_limits(limits=count, user_api="blas")


_thread = threading.local()  # .background: this thread is a background inference worker
MAX_PAUSE_S = 0.25  # the longest one pause_point waits: background work still progresses


class _CallsInProgress:
    """How many calls are on their call path right now (process-wide, like the cores)."""

    def __init__(self) -> None:
        self.count = 0
        self.idle = threading.Condition()

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        with self.idle:
            self.count += 1
        try:
            yield
        finally:
            with self.idle:
                self.count -= 1
                self.idle.notify_all()  # pause_point waits for 0, yield_to_other_calls for 1


_calls = _CallsInProgress()


def on_call_path() -> contextlib.AbstractContextManager[None]:
    """Mark a call's preparation: background Python work pauses at its next ``pause_point``."""
    return _calls.active()


def pause_point() -> None:
    """In a background worker's pure-Python loop: wait while a call is being prepared (at most
    ``MAX_PAUSE_S``); elsewhere a no-op.

    Why: a thread running Python holds the GIL in 5 ms slices, and torch takes the GIL back
    between ops, hundreds of times per forward pass. Measured on 2 cores: a one-text MiniLM
    query took 20 ms alone and 840 ms next to one busy Python thread (the clash rules or the
    poison grouping of a long session after a reply), so calls saw 500-900 ms spikes. Pausing
    the background's Python for the few tens of ms a call needs costs it almost nothing."""
    if not getattr(_thread, "background", False) or not _calls.count:
        return
    with _calls.idle:
        _calls.idle.wait_for(lambda: not _calls.count, timeout=MAX_PAUSE_S)


SWITCH_INTERVAL_S = 0.001  # a server's (see favour_latency); Python's default is 0.005


def favour_latency() -> None:
    """A server's setting: hand the GIL between threads every millisecond, not every five.

    A call's coroutine releases the GIL at each await and must then get it back from whatever
    thread holds it (another session's paste being split, a background batch's tokenizer); at
    Python's 5 ms switch interval each of those hand-overs may cost 5 ms, and a call makes
    dozens. Measured with one busy Python thread: a 20 ms query embedding took 840 ms at 5 ms,
    158 ms at 1 ms. ``AGENTMEM_SWITCH_INTERVAL_MS`` overrides it (5 restores Python's)."""
    import sys

    sys.setswitchinterval(switch_interval_s())


def switch_interval_s() -> float:
    """The server's GIL switch interval: ``AGENTMEM_SWITCH_INTERVAL_MS`` (a positive number of
    milliseconds) or ``SWITCH_INTERVAL_S``; anything else is a one-line settings error."""
    from agentmem.errors import PolicyError

    value = os.environ.get("AGENTMEM_SWITCH_INTERVAL_MS")
    if not value:
        return SWITCH_INTERVAL_S
    try:
        milliseconds = float(value)
    except ValueError:
        milliseconds = 0.0
    if not 0 < milliseconds < 10_000:
        raise PolicyError(f"AGENTMEM_SWITCH_INTERVAL_MS={value!r}: expected milliseconds, "
                          "a number above 0 (5 is Python's own)")
    return milliseconds / 1000


# A 2,000-message request allocates ~10^5 tracked objects that reference counting frees at
# the call's end; at Python's (700, 10, 10) they triggered ~100 young collections a call, and
# every tenth of those a full one.
GC_THRESHOLDS = (50_000, 20, 20)


def freeze_startup_objects() -> None:
    """A server's setting, once its imports and models are loaded: move every object alive
    now out of the cyclic garbage collector's reach (``gc.freeze``).

    litellm, pydantic, transformers' tokenizers and the models leave ~10^6 tracked objects
    that live as long as the process. Each full collection walked all of them, and a long
    session's traffic triggers one every few calls: on a 2,000-turn session every 8th call
    took 250-400 ms more, all of it in ``gen2`` collections that freed nothing. Frozen
    objects are still freed by reference counting; only cycles among them would stay, and
    startup objects are never garbage. ``AGENTMEM_GC_FREEZE=0`` leaves the collector alone
    (an application that mounts the proxy in its own process may tune it itself)."""
    import gc

    if os.environ.get("AGENTMEM_GC_FREEZE", "1") == "0":
        return
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


YIELD_PAUSE_S = 0.05  # the longest one yield_to_other_calls waits


def yield_to_other_calls() -> None:
    """In one call's own bulk Python work off the loop (a 1 MB paste's sentences and terms):
    wait, at most ``YIELD_PAUSE_S``, while another call is being prepared. Big work yields to
    small: the paste's thread held the GIL in 1 ms slices, and another session's 20 ms query
    embedding, which takes the GIL back hundreds of times, took 550 ms next to it."""
    if _calls.count <= 1:
        return
    with _calls.idle:
        _calls.idle.wait_for(lambda: _calls.count <= 1, timeout=YIELD_PAUSE_S)


def let_threads_run() -> None:
    """Hand the GIL over for a moment; call it every few dozen items of a long pure-Python loop.

    An inference worker needs the GIL between torch ops, hundreds of times per forward pass;
    while a Python loop holds it, each of those waits for the interpreter's 5 ms switch
    interval: an 8-sentence chunk measured 65 ms alone, 316 ms next to a thread counting a
    paste's tokens, and 100 ms when that thread let go every 64 sentences."""
    time.sleep(0)


@contextlib.contextmanager
def in_background() -> Iterator[None]:
    """Inference started inside this block (and tasks it creates) is background work."""
    token = _background.set(True)
    try:
        yield
    finally:
        _background.reset(token)


def is_background() -> bool:
    return _background.get()


def current_lane() -> Hashable:
    """The lane of work started here: this task. A call runs in one task and holds its
    session's lock, so on the call path a call's lane is its session's; background work
    names its session's lane itself."""
    task = asyncio.current_task()
    return ("task", id(task)) if task is not None else ("thread", threading.get_ident())


async def run_inference(func: Callable[..., T], *args: Any) -> T:
    """One model call as one job of the current lane and class (never shed)."""
    future = scheduler().submit(func, args, lane=current_lane(), background=is_background())
    assert future is not None  # only sized background jobs are ever shed
    return await asyncio.wrap_future(future)


async def run_inference_each(func: Callable[..., T], calls: Sequence[tuple[Any, ...]]) -> list[T]:
    """Several model calls as jobs of the current lane, queued at once: idle workers take
    them in parallel (a long passage's blocks on both cores of a 2-core machine), while other
    lanes keep their turn between them, since each job is one pop of the fair queue."""
    lane, background = current_lane(), is_background()
    futures = [scheduler().submit(func, args, lane=lane, background=background) for args in calls]
    assert all(future is not None for future in futures)  # only sized jobs are ever shed
    return list(await asyncio.gather(*(asyncio.wrap_future(f) for f in futures if f is not None)))


async def read_passage(pruner: Any, query: str, sentences: Sequence[str]) -> Any:
    """A pruner's ``SentenceScores`` for one passage on the call path. A passage longer than
    one model block (a large tool output, a highlighted document) is read block by block as
    separate jobs of the current lane, so idle workers read its blocks in parallel; each block
    is the same model input as in one pass, so the scores are the same: on two cores a 3-block
    passage waits for two blocks' time, not three. A runtime that reads one block at a time
    (torch) scores the passage as one job."""
    if not sentences or not getattr(pruner, "reads_concurrently", False):
        [score] = await run_inference(pruner.score_batch, [(query, list(sentences))])
        return score
    blocks = await run_inference(pruner.blocks, query, sentences)
    parts = await run_inference_each(pruner.forward_blocks, [([block],) for block in blocks])
    return pruner.assemble(len(sentences), blocks, [part for [part] in parts])


def _chunks(lengths: list[int], size: int) -> list[list[int]]:
    """Indices in chunks of similar length, each at most ``size`` texts and, past one text, at
    most ``size`` x 128 padded characters: a batch is padded to its longest text, so a query
    among short sentences made its chunk several times slower (and the wait behind it). The
    grouping is the models' own (``agentmem.models.runs``), counted in characters here."""
    return runs(lengths, tokens=size * 128, rows=size)


async def embed(encode: Callable[[list[str]], np.ndarray], texts: Sequence[str], *,
                lane: Hashable | None = None, bounded: bool = True) -> list[np.ndarray | None]:
    """``encode(texts)`` row by row, computed as jobs of at most ``chunk_size()`` texts in the
    current class and the given lane (default: this task's). In the background, chunks past
    the queue's bound are shed: their rows are None (``bounded=False``: a few texts someone
    is waiting for, never shed).

    Cancelling the caller drops its chunks that have not started."""
    if not texts:
        return []
    lane = current_lane() if lane is None else lane
    background, size, pool = is_background(), chunk_size(), scheduler()
    chunks = _chunks([len(text) for text in texts], size)
    futures = [pool.submit(encode, ([texts[i] for i in chunk],), lane=lane,
                           background=background, size=len(chunk) if bounded else 0)
               for chunk in chunks]
    shed = sum(len(chunk) for chunk, future in zip(chunks, futures) if future is None)
    if shed:
        log.warning("background inference queue full: %d of %d sentences shed (recomputed on "
                    "demand later)", shed, len(texts))
    done = iter(await asyncio.gather(*(asyncio.wrap_future(f) for f in futures if f is not None)))
    rows: list[np.ndarray | None] = [None] * len(texts)
    for chunk, future in zip(chunks, futures):
        if future is not None:
            for i, row in zip(chunk, next(done)):
                rows[i] = row
    return rows
