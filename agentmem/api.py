"""The Hygiene facade and the call path, top to bottom.

``Hygiene.prepare`` is the whole per-request path: validate, resolve the session, lock it,
match the client's history against the stored one, ingest new turns (sentences, tokens,
embeddings), run the policy's stages on a draft, validate the draft, and hand back the
clean request. ``Call.finish`` writes the new turns, the reply and the report in one
transaction and releases the lock; after the reply, the stages' ``after_reply`` hooks run in
the background. ``Hygiene.call`` owns that lifecycle (``async with hygiene.call(body) as
call``); the proxy and the library (``completion``, ``acompletion``, ``apply``) use it.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import logging
import re
import threading
import time
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import LockError

from agentmem.cache_marks import last_marked_message
from agentmem.config import Settings, checked_tenant
from agentmem.errors import HygieneUnavailable, InvalidRequest
from agentmem.identity import session_id_for
from agentmem.ingest import (
    build_turns,
    chain_hashes,
    message_tokens,
    messages_tokens,
    tools_tokens,
)
from agentmem.messages import (
    chain_hash,
    check_conversation,
    message_hash,
    parse_chat_request,
    text_of,
)
from agentmem.metrics import Metrics
from agentmem.models.embedder import Embedder, ModelsNotReady, default_embedder, to_bytes
from agentmem.models.runtime import in_background, on_call_path, run_inference
from agentmem.pending import AfterReplyJob, AfterReplyWork
from agentmem.policy import Policy, load_policy
from agentmem.process_exit import close_at_exit
from agentmem.report import Report, StageRun
from agentmem.stages import Channels, Draft, Stage, StageContext, build_stages
from agentmem.stages.base import ingest_counts
from agentmem.state import CacheLimits, EngineState
from agentmem.state.steps import shared_records
from agentmem.store import RedisConnector, SessionHandle, SessionStore, StoreUnavailable
from agentmem.store.sessions import PendingWrite, StoredPrefix, TurnRecord
from agentmem.streaming import CLIENT_DISCONNECTED, LibraryStream
from agentmem.sync import SyncStream
from agentmem.text import OFF_LOOP_CHARS, count_tokens
from agentmem.unsaved import UnsavedWrites
from agentmem.upstream import LitellmUpstream, Upstream
from agentmem.validate import OutgoingInvalid, validate_outgoing

log = logging.getLogger("agentmem")
_SYNC_LOCK = threading.Lock()


@dataclass
class HygieneResult:
    """What ``Hygiene.apply`` returns: the clean request and the report that explains it."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    request: dict[str, Any]
    report: Report
    kept_indices: list[int]  # for each outgoing message, its position in the incoming history


# After-reply jobs that keep their call (its whole request history) in memory until they run.
# Past this many queued, a job holds only its ids and reads the turns back from Redis when its
# turn comes: a load the CPU cannot keep up with grows a backlog of small records, not of
# histories (a soak at 6.5 calls/s held 3,000 calls, 5 GB, before this bound).
HELD_AFTER_REPLY_JOBS = 32


class Hygiene:
    """One engine for the proxy and the library: a policy, a store and the models."""

    def __init__(self, policy: Policy | str | None = None, *, redis_url: str | None = None,
                 data_dir: str | None = None, tenant: str = "default",
                 settings: Settings | None = None, embedder: Embedder | None = None,
                 upstream: Upstream | None = None, cache_limits: CacheLimits | None = None):
        """Args:
            policy: a preset name, a YAML path or a ``Policy`` (default: the settings').
            redis_url / data_dir: where sessions live (default: an embedded Redis).
            tenant: the tenant of library calls.
            settings: server settings (routes, keys); default from file and environment.
            embedder: the sentence embedder every stage and cache uses (default: MiniLM).
            upstream: where clean requests go (default: litellm, with the settings' routes).
            cache_limits: bounds of this engine's in-process caches.
        """
        self.settings = settings or Settings.load(redis_url=redis_url, data_dir=data_dir)
        if self.settings.model_runtime != "auto":  # before default_embedder() may load it
            from agentmem.models.backend import configure

            configure(self.settings.model_runtime)
        self.policy = load_policy(policy or self.settings.policy)
        self.tenant = checked_tenant(tenant)
        self.connector = RedisConnector(self.settings.redis_url, directory=self.settings.data_dir)
        self.embedder = embedder or default_embedder()
        self.upstream: Upstream = upstream or LitellmUpstream(self.settings.route)
        self.state = EngineState(self.embedder, cache_limits, self.upstream)
        self._stores: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._background: set[asyncio.Task] = set()
        self._sync = None
        self._policies: dict[str, Policy] = {}
        self.metrics = Metrics()
        alive = weakref.ref(self)  # the registry must not keep the engine alive
        self.metrics.watch(lambda: engine.background_pending if (engine := alive()) else None)
        self.unsaved = UnsavedWrites()
        close_at_exit(self)  # a script that never calls close() still gets its last turns' work

    # -- resources ---------------------------------------------------------------------------

    def store(self) -> SessionStore:
        """The session store for the running event loop (redis-py pools are per loop)."""
        loop = asyncio.get_running_loop()
        store = self._stores.get(loop)
        if store is None:
            try:
                store = SessionStore(self.connector.client())
            except Exception as error:  # the embedded server failed to start
                raise StoreUnavailable(f"{type(error).__name__}: {error}") from error
            self._stores[loop] = store
        return store

    async def aclose(self, *, drain: bool = True, grace_s: float = 5.0) -> None:
        """Close this loop's store, after its background work.

        ``drain`` (the library's way): finish all of it, so a script's last turns get their
        embeddings. ``drain=False`` (a server shutting down): wait at most ``grace_s`` for the
        writes of calls (their commits and job records), and cancel the work after the reply:
        its jobs stay recorded in Redis and the next start or another replica redoes them
        (``agentmem.pending``), so shutting down never waits minutes for a large paste.
        """
        loop = asyncio.get_running_loop()
        jobs = self._after_reply_jobs
        stopped = jobs.stop(cancel_jobs=not drain) if jobs is not None else []
        if drain:
            await self.drain()
        else:
            stopped += await self._finish_writes(loop, loop.time() + grace_s)
        if stopped:
            await asyncio.wait(stopped, timeout=grace_s)
        store = self._stores.pop(loop, None)
        if jobs is not None:
            await jobs.release(store)
        if store is not None:
            await store.close()

    async def _finish_writes(self, loop: asyncio.AbstractEventLoop, deadline: float
                             ) -> list[asyncio.Task]:
        """Wait for this loop's background writes until ``deadline``, cancelling after-reply
        jobs as they appear (a commit that lands queues one); returns the jobs cancelled."""
        jobs = self._after_reply_jobs
        cancelled: list[asyncio.Task] = []
        while True:
            if jobs is not None:
                cancelled += jobs.stop(cancel_jobs=True)
            writes = [task for task in self._background if task.get_loop() is loop
                      and not task.done() and (jobs is None or task not in jobs.tasks)]
            if not writes or loop.time() >= deadline:
                return cancelled
            await asyncio.wait(writes, timeout=deadline - loop.time(),
                               return_when=asyncio.FIRST_COMPLETED)

    async def warm_up(self, *, models: bool = True) -> None:
        """Do now what the first calls would otherwise pay for: litellm's first-call set-up,
        the token counter's tables and, with ``models``, loading MiniLM (the stages that need
        it are skipped by calls that arrive before it is in: ``ModelsNotReady``)."""
        load = None
        if models:
            self.embedder.will_load()  # from now on calls do not wait for it
            load = asyncio.ensure_future(run_inference(self.embedder.load))
        warm = getattr(self.upstream, "warm", None)
        if warm is not None:
            await warm()
        await asyncio.to_thread(count_tokens, "warm up")
        if load is not None:
            await load

    def close(self, *, drain_s: float | None = None) -> None:
        """Close everything (from sync code): the sync bridge's loop (its background work
        finished first, or for at most ``drain_s`` seconds: what is left stays recorded in
        Redis and is redone by the next start), and this engine's use of the embedded Redis,
        which the last process using the data folder stops. Also run at process exit
        (``agentmem.process_exit``).

        Stores opened on other running loops are closed by ``aclose`` on those loops.
        """
        if self._sync is not None:
            try:
                self._sync.run(asyncio.wait_for(self.aclose(), drain_s))
            except TimeoutError:
                self._sync.run(self.aclose(drain=False))
            self._sync.stop()
            self._sync = None
        self._finish_on_stopped_loops(drain_s)
        self.connector.close()

    def _finish_on_stopped_loops(self, timeout: float | None) -> None:
        """Background work left on an event loop that stopped before it was done (the OpenAI
        Agents SDK's ``Runner.run_sync`` stops its loop when a run returns): run that loop
        until the work is done, from the thread closing the engine. A closed loop's work
        (``asyncio.run`` cancels it) stays recorded in Redis for the next start."""
        pending = [task for task in self._background if not task.done()]
        for loop in {task.get_loop() for task in pending}:
            if not loop.is_running() and not loop.is_closed():
                mine = [task for task in pending if task.get_loop() is loop]
                loop.run_until_complete(asyncio.wait(mine, timeout=timeout))

    @property
    def background_pending(self) -> int:
        """After-reply jobs of this process not finished yet, those adopted from a stopped
        server included (``/healthz`` and ``/metrics`` report it: a history imported in one
        call leaves a backlog of embeddings and detection)."""
        adopted = self._after_reply_jobs.adopted_waiting if self._after_reply_jobs else 0
        return sum(not task.done() for task in self._background) + adopted

    async def drain(self) -> None:
        """Wait for this loop's background work (embeddings of the latest turns) to finish."""
        loop = asyncio.get_running_loop()
        while mine := [task for task in self._background if task.get_loop() is loop]:
            await asyncio.gather(*mine, return_exceptions=True)

    def run_sync(self, coroutine):
        """Run a coroutine of this engine from sync code, on the engine's private loop.

        One long-lived loop (not ``asyncio.run`` per call) because redis-py pools belong to
        the loop that made them. Used by ``completion`` and the sync paths of the adapters.
        """
        from agentmem.sync import SyncBridge

        with _SYNC_LOCK:
            if self._sync is None:
                self._sync = SyncBridge()
        return self._sync.run(coroutine)

    def iterate_sync(self, iterator):
        """A sync iterator over an async one, on the engine's private loop."""
        self.run_sync(asyncio.sleep(0))  # make sure the bridge exists
        return self._sync.iterate(iterator)

    def spawn(self, coroutine) -> asyncio.Task:
        """Background work that must finish even if the request that started it is gone."""
        task = asyncio.get_running_loop().create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background_done)
        return task

    _after_reply_jobs: AfterReplyWork | None = None  # made on first use (after_reply_jobs)

    def after_reply_jobs(self) -> AfterReplyWork:
        """This engine's after-reply jobs: run in the background, recorded in Redis until done."""
        if self._after_reply_jobs is None:
            self._after_reply_jobs = AfterReplyWork(self)
        return self._after_reply_jobs

    def defer_after_reply(self, call: Call, turns: list[TurnRecord]) -> None:
        """Queue a stored call's after-reply work (embeddings, the stages' hooks). It runs now,
        in the background, and is recorded in Redis until done: a shutdown need not wait for
        it and a crash does not lose it."""
        assert call.store is not None  # only a stored call has turns to work on
        job = AfterReplyJob(call.handle.tenant, call.handle.session_id,
                            tuple(turn.id for turn in turns), call.policy.name,
                            call.policy.ttl_seconds or 0)
        jobs = self.after_reply_jobs()
        if len(jobs.tasks) < HELD_AFTER_REPLY_JOBS:
            jobs.queue(call.store, job, lambda: call._after_reply(turns))
        else:  # a backlog: the job keeps its ids only, and reads its turns back when it runs
            jobs.queue(call.store, job, functools.partial(self.redo_after_reply, call.store, job),
                       in_turn=True)

    def resume_pending(self) -> None:
        """Redo, on this loop, the after-reply jobs that stopped or crashed servers left in
        Redis; keeps looking (every few seconds) until ``aclose``. Servers call it at start."""
        self.after_reply_jobs().adopt_orphans()

    async def redo_after_reply(self, store: SessionStore, job: AfterReplyJob) -> None:
        """Redo a recorded job from the stored session, by the path a live call takes
        (``Call._after_reply``), on the job's turns still in the history (a superseded turn
        needs no vectors and no detection)."""
        handle = SessionHandle(job.tenant, job.session_id)
        active = await store.active_turns(handle)
        wanted = set(job.turn_ids)
        turns = [turn for position, turn in enumerate(active)
                 if turn.id in wanted and turn.position == position]
        if not turns:
            return
        policy = self.after_reply_jobs().policy_for(job)
        model = str((await store.meta(handle) or {}).get("model", ""))
        history = [turn.message for turn in active]
        report = Report(tenant=handle.tenant, session_id=handle.session_id, policy=policy.name,
                        model=model)
        call = Call(self, policy, handle, {"model": model, "messages": history}, report,
                    history=history, store=store, chains=[turn.chain for turn in active])
        await call._after_reply(turns)

    def _background_done(self, task: asyncio.Task) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task failed", exc_info=task.exception())

    def policy_named(self, name: str | Policy | None) -> Policy:
        """The engine's policy, or another preset/file by name (parsed once, then cached)."""
        if name is None:
            return self.policy
        if isinstance(name, Policy):
            return name
        if name not in self._policies:
            self._policies[name] = load_policy(name)
        return self._policies[name]

    # -- the call path -----------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def call(self, body: dict[str, Any], *, tenant: str | None = None,
                   session_id: str | None = None, stateful: bool = False,
                   policy: Policy | str | None = None) -> AsyncIterator[Call]:
        """One call's whole lifecycle: prepare on entry; on exit the call is finished (no reply
        given: the request's turns are stored) or, if the block raised, failed. A block that
        hands the call to ``relay`` (a stream) leaves finishing to the relay.

            async with hygiene.call(body) as call:
                response = await call.send()
                await call.finish_with_response(response)
        """
        call = await self.prepare(body, tenant=tenant, session_id=session_id, stateful=stateful,
                                  policy=policy)
        try:
            yield call
        except BaseException as error:
            if call.state is CallState.PREPARED:
                await call.fail(error)
            raise
        if call.state is CallState.PREPARED:
            await call.finish(None)

    @contextlib.contextmanager
    def call_sync(self, body: dict[str, Any], **options: Any) -> Iterator[Call]:
        """``call`` for sync code: prepare, finish and fail run on the engine's private loop."""
        call = self.run_sync(self.prepare(body, **options))
        try:
            yield call
        except BaseException as error:
            if call.state is CallState.PREPARED:
                self.run_sync(call.fail(error))
            raise
        if call.state is CallState.PREPARED:
            self.run_sync(call.finish(None))

    async def prepare(self, body: dict[str, Any], *, tenant: str | None = None,
                      session_id: str | None = None, stateful: bool = False,
                      policy: Policy | str | None = None) -> Call:
        """Everything before the provider call. Raises InvalidRequest before touching Redis.

        Prefer ``call`` (it owns the lifecycle); this is for frameworks whose hooks split a
        call across callbacks: the caller must ``finish`` or ``fail`` the returned call.
        """
        started = time.perf_counter()
        parse_chat_request(body, check_structure=not stateful)
        policy = self.policy_named(policy)
        try:
            tenant = checked_tenant(tenant or self.tenant)
        except ValueError as error:
            raise InvalidRequest(str(error), param="tenant") from None
        handle = SessionHandle(tenant, session_id_for(body, session_id))
        if stateful and session_id is None and not (body.get("metadata") or {}).get("session_id"):
            raise InvalidRequest("stateful mode needs an explicit session id "
                                 "(X-Session-Id or metadata.session_id)", param="session_id")
        report = Report(tenant=handle.tenant, session_id=handle.session_id, policy=policy.name,
                        model=body.get("model"))
        report.ingest.stateful = stateful
        call = Call(self, policy, handle, body, report)
        stages = build_stages(policy.stages)
        with on_call_path():  # background Python work pauses meanwhile (see pause_point)
            # Embed what the stages will need (the query, the newest sentences) while ingest runs.
            early = [text for stage in stages for text in stage.wants_query(policy, body)]
            if early:
                self.state.queries.prefetch(*early)
            try:
                await self._ingest(call, stateful)
                await self._clean(call, stages)
            except BaseException:
                await call.release()
                raise
        call.prepared_at = time.perf_counter()
        report.latency_ms["hygiene"] = round((call.prepared_at - started) * 1000, 3)
        return call

    async def _ingest(self, call: Call, stateful: bool) -> None:
        """Lock the session, find what is new, and derive what later stages will need."""
        policy, body = call.policy, call.body
        history = body["messages"]
        if policy.store or stateful:
            try:
                call.store = self.store()
                await self.unsaved.settle(call.handle)  # a write retried since the store fell
                call.lock = await call.stack.enter_async_context(
                    call.store.locked(call.handle, timeout=policy.lock_timeout_s,
                                      wait=policy.lock_wait_s))
                if stateful:
                    history = await _stateful_history(call.store, call.handle) + history
                    check_conversation(history)
                chains = chain_hashes(history)
                call.prefix = await call.store.match_prefix(call.handle, chains, call.lock)
            except StoreUnavailable as error:
                if stateful:
                    raise HygieneUnavailable(f"stateful mode needs the session store: {error}") from None
                # the client learns the kind of fault; the log gets the detail (the server's
                # Redis address is not the client's business)
                kind = str(error).partition(":")[0]
                call.fault(f"session store unavailable ({kind}); request sent unchanged",
                           detail=str(error))
                await call.release()
                call.store, call.lock = None, None
        call.history = history
        if call.store is None:
            call.tokens_before = messages_tokens(history) + tools_tokens(body.get("tools"))
            return
        prefix = call.prefix
        assert prefix is not None  # matched above whenever the store is in use
        call.chains = chains
        call.new_turns = await _turns_of(history, chains, prefix.matched, prefix.next_turn_id)
        call.tokens_before = (prefix.tokens_matched + sum(t.tokens for t in call.new_turns)
                              + tools_tokens(body.get("tools")))
        report = call.report
        report.ingest.new_turns = len(call.new_turns)
        report.ingest.stored_turns = prefix.stored
        report.ingest.diverged_at = prefix.diverged_at
        report.ingest.superseded = prefix.stored - prefix.matched

    async def _clean(self, call: Call, stages: list[Stage]) -> None:
        """Run the stages on a draft; keep the client's request if anything goes wrong."""
        history, body, report = call.history, call.body, call.report
        draft = Draft.of(history, body.get("tools"), body.get("functions"))
        channels = Channels(tool_choice=body.get("tool_choice"),
                            function_call=body.get("function_call"))
        for stage in stages:
            run = report.stage(stage.name)
            started = time.perf_counter()
            context = call.stage_context(run, channels)
            # Only a loading model makes a stage stop half-way on purpose (ModelsNotReady): copy
            # the draft then, not on every call (2,000 messages cost ~2 ms per stage).
            before = draft.snapshot() if self.embedder.loading else None
            try:
                await stage.apply(draft, context)
            except ModelsNotReady as error:  # a server just started: serve now, unfiltered
                run.skipped = str(error)
                report.warnings.append(f"{stage.name} skipped: {error}")
                draft = before or Draft.of(history, body.get("tools"), body.get("functions"))
            except Exception as error:  # noqa: BLE001 - a stage bug must not break the call
                run.error = f"{type(error).__name__}: {error}"
                log.exception("stage %s failed", stage.name)
                call.fault(f"stage {stage.name} failed ({run.error}); its changes were discarded")
                draft = Draft.of(history, body.get("tools"), body.get("functions"))
                break
            finally:
                run.latency_ms = round((time.perf_counter() - started) * 1000, 3)
        call.channels = channels
        if call.policy.stages:
            try:
                validate_outgoing(history, draft)
            except OutgoingInvalid as error:
                call.fault(f"outgoing request failed validation ({error}); sent unchanged")
                draft = Draft.of(history, body.get("tools"), body.get("functions"))
        call.adopt(draft, await call.position_tokens() if _edited(draft, history) else None)

    def forget_session(self, tenant: str, session_id: str) -> None:
        """A session was deleted: drop what this engine and its stages cache about it."""
        self.state.forget_session(tenant, session_id)
        for stage in build_stages(sorted({name for p in [self.policy, *self._policies.values()]
                                          for name in p.stages})):
            stage.on_session_deleted(tenant, session_id)

    # -- library entry points ----------------------------------------------------------------

    async def apply(self, messages: list[dict[str, Any]], *, model: str = "gpt-4o",
                    tools: list[dict[str, Any]] | None = None, session_id: str | None = None,
                    stateful: bool = False, policy: Policy | str | None = None,
                    **params: Any) -> HygieneResult:
        """Clean a request without calling a model; the new turns are stored."""
        body = {"model": model, "messages": messages, **params}
        if tools is not None:
            body["tools"] = tools
        async with self.call(body, session_id=session_id, stateful=stateful, policy=policy) as call:
            pass
        return HygieneResult(call.outgoing["messages"], call.outgoing.get("tools"),
                             call.outgoing, call.report, call.kept_indices)

    async def acompletion(self, model: str, messages: list[dict[str, Any]], *,
                          session_id: str | None = None, stateful: bool = False,
                          policy: Policy | str | None = None, **kwargs: Any) -> Any:
        """Drop-in for ``litellm.acompletion``: hygiene first, then the provider, then storage."""
        body = {"model": model, "messages": messages, **kwargs}
        async with self.call(body, session_id=session_id, stateful=stateful, policy=policy) as call:
            response = await call.send()
            if kwargs.get("stream"):
                return LibraryStream(call.relay(response), call.headers())
            await call.finish_with_response(response)
        response._hidden_params["agentmem"] = call.headers()
        return response

    def completion(self, model: str, messages: list[dict[str, Any]], **kwargs: Any):
        """Drop-in for ``litellm.completion`` (runs the async path on a private loop)."""
        result = self.run_sync(self.acompletion(model, messages, **kwargs))
        if kwargs.get("stream"):
            return SyncStream(self.iterate_sync(result), result._hidden_params)
        return result


class CallState(enum.Enum):
    """Where a call is: prepared (holds the session lock), handed to a stream relay, or done."""

    PREPARED = "prepared"
    STREAMING = "streaming"
    FINISHED = "finished"
    FAILED = "failed"


@dataclass
class Call:
    """A request between hygiene and the provider; holds the session lock until finished."""

    hygiene: Hygiene
    policy: Policy
    handle: SessionHandle
    body: dict[str, Any]
    report: Report
    history: list[dict[str, Any]] = field(default_factory=list)
    outgoing: dict[str, Any] = field(default_factory=dict)
    store: SessionStore | None = None
    lock: Any = None
    prefix: StoredPrefix | None = None
    chains: list[str] = field(default_factory=list)
    new_turns: list[TurnRecord] = field(default_factory=list)
    tokens_before: int = 0
    channels: Channels | None = None  # what the call path's stages left (after the reply, commit)
    stack: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)
    state: CallState = CallState.PREPARED
    prepared_at: float = 0.0
    kept_indices: list[int] = field(default_factory=list)

    def stage_context(self, run: StageRun, channels: Channels | None = None) -> StageContext:
        """What a stage sees of this call."""
        stored = self.store is not None and self.prefix is not None
        return StageContext(
            self.policy, self.body.get("model", ""), self.history, self.hygiene.state, self.report,
            run, session=self.handle if stored else None, store=self.store if stored else None,
            stored_positions=self.prefix.matched if self.prefix else 0, chains=self.chains,
            next_turn_id=self.prefix.next_turn_id if self.prefix else 0,
            channels=channels or Channels(), new_turns=self.new_turns if stored else [],
            cache_mark=self.cache_mark)

    @functools.cached_property
    def cache_mark(self) -> int | None:
        """The last message marked for the provider's prompt cache, read once for all stages."""
        return last_marked_message(self.history)

    async def send(self) -> Any:
        """The clean request to the provider, through the engine's upstream."""
        return await self.hygiene.upstream.complete(self.outgoing)

    def relay(self, stream: Any) -> AsyncGenerator[Any, None]:
        """Hand a provider stream to the relay, which stores the reply when the stream ends."""
        from agentmem.streaming import relay_stream

        self.hand_off()
        return relay_stream(stream, self)

    def hand_off(self) -> None:
        """Something that outlives the ``call`` block (a stream being relayed) will finish or
        fail this call; leaving the block then neither finishes nor fails it."""
        if self.state is CallState.PREPARED:
            self.state = CallState.STREAMING

    def fault(self, message: str, *, detail: str | None = None) -> None:
        """Something of ours failed: the policy picks between a warning and a 503. ``detail``
        goes to the server's log only."""
        if self.policy.on_fault == "error":
            raise HygieneUnavailable(message)
        log.warning("session %s: %s%s", self.handle.session_id, message,
                    f" ({detail})" if detail else "")
        self.report.warnings.append(message)

    async def position_tokens(self) -> list[int] | None:
        """Tokens per history position from ingest (stored prefix + new turns), if known
        (read once per call: a stage may have read them already)."""
        if self.store is None or self.prefix is None:
            return None
        counts = await ingest_counts(self.channels or Channels(), self.store, self.handle,
                                     self.prefix.matched, self.new_turns)
        return counts if len(counts) == len(self.history) else None

    def adopt(self, draft: Draft, position_tokens: list[int] | None = None) -> None:
        """Build the outgoing body; an untouched draft sends the client's own objects."""
        history, body = self.history, self.body
        self.kept_indices = [kept.index for kept in draft.messages]
        unchanged_messages = (len(draft.messages) == len(history) and all(
            kept.message is history[kept.index] for kept in draft.messages))
        unchanged_tools = draft.tools is body.get("tools") and draft.functions is body.get("functions")
        if unchanged_messages and unchanged_tools:
            self.outgoing = body if history is body["messages"] else {**body, "messages": history}
            tokens_after = self.tokens_before
        else:
            self.outgoing = {**body, "messages": draft.plain_messages()}
            if "tools" in body:
                self.outgoing["tools"] = draft.tools
            if "functions" in body:
                self.outgoing["functions"] = draft.functions
            known = position_tokens or ()
            tokens_after = tools_tokens(self.outgoing.get("tools")) + sum(
                known[kept.index] if kept.index < len(known) and kept.message is history[kept.index]
                else kept.tokens if kept.tokens is not None
                else message_tokens(kept.message) for kept in draft.messages)
        report = self.report
        report.tokens_before, report.tokens_after = self.tokens_before, tokens_after
        report.messages_before, report.messages_after = len(history), len(self.outgoing["messages"])
        report.tools_before = len(body.get("tools") or ()) + len(body.get("functions") or ())
        report.tools_after = (len(self.outgoing.get("tools") or ())
                              + len(self.outgoing.get("functions") or ()))

    def headers(self) -> dict[str, str]:
        report = self.report
        out = {
            "X-Agentmem-Session": self.handle.session_id,
            "X-Agentmem-Report": report.id,
            "X-Agentmem-Policy": self.policy.name,
            "X-Agentmem-Tokens-Before": str(report.tokens_before),
            "X-Agentmem-Tokens-After": str(report.tokens_after),
            "X-Agentmem-Tools-Offered": str(report.tools_before),
            "X-Agentmem-Tools-Kept": str(report.tools_after),
        }
        if report.warnings:
            out["X-Agentmem-Warning"] = header_text("; ".join(report.warnings))
        return out

    async def finish_with_response(self, response: Any) -> None:
        message = response.choices[0].message if response.choices else None
        usage = getattr(response, "usage", None)
        self.report.usage = usage.model_dump() if usage is not None else None
        await self.finish(reply_message(message) if message is not None else None)

    async def finish(self, reply: dict[str, Any] | None, *, partial: bool = False,
                     error: str | None = None) -> None:
        """Store the new turns, the reply and the report at once; release the lock.

        The write runs as its own task, so a client hanging up now cannot cancel it halfway.
        """
        await asyncio.shield(self.hygiene.spawn(self._finish(reply, partial=partial, error=error)))

    async def fail(self, error: BaseException) -> None:
        """The provider call failed: keep the report, store none of the request's turns."""
        await asyncio.shield(self.hygiene.spawn(self._fail(error)))

    @property
    def done(self) -> bool:
        return self.state in (CallState.FINISHED, CallState.FAILED)

    async def _finish(self, reply: dict[str, Any] | None, *, partial: bool,
                      error: str | None) -> None:
        if self.done:
            return
        self.state = CallState.FINISHED
        report = self.report
        report.latency_ms["upstream"] = round((time.perf_counter() - self.prepared_at) * 1000, 3)
        report.status = "partial" if partial else "ok"
        report.error = error
        try:
            if self.store is not None and self.policy.store:
                prefix = self.prefix
                assert prefix is not None  # matched in prepare whenever the store is in use
                turns = list(self.new_turns)
                if reply is not None:
                    turns.append(self._reply_turn(reply, partial=partial, error=error))
                    report.reply_position = turns[-1].position
                write = PendingWrite(
                    turns=turns,
                    truncate_to=prefix.diverged_at, report=report,
                    meta={"policy": self.policy.name, "model": self.body.get("model", "")},
                    tokens_base=prefix.tokens_matched,
                    steps=shared_records(self.channels.step_records, reply, self.handle.session_id)
                    if self.channels is not None else {})
                try:
                    await self.store.commit(self.handle, self.lock, write, ttl=self.policy.ttl_seconds)
                except StoreUnavailable as failure:
                    if self.policy.commit_retry_s:
                        message = (f"the call is not stored yet ({failure}); its write is "
                                   f"retried for up to {self.policy.commit_retry_s:g}s")
                        self.hygiene.unsaved.keep(self, write, turns)
                    else:
                        message = f"the call could not be stored ({failure})"
                    log.error("session %s: %s", self.handle.session_id, message)
                    report.warnings.append(message)
                except LockError as failure:
                    message = f"the call could not be stored ({failure})"
                    log.error("session %s: %s", self.handle.session_id, message)
                    report.warnings.append(message)
                else:
                    if turns and self.policy.embed:
                        # Our own list: a caller appends the reply to theirs as soon as we
                        # return, while the background work below still reads the history.
                        self.history = list(self.history)
                        self.hygiene.defer_after_reply(self, turns)
        finally:
            await self.release()
            self.hygiene.metrics.observe(report)

    async def _fail(self, error: BaseException) -> None:
        if self.done:
            return
        self.state = CallState.FAILED
        self.report.status = "error"
        self.report.error = f"{type(error).__name__}: {error}"[:2000]
        try:
            if self.store is not None and self.policy.store:
                with contextlib.suppress(StoreUnavailable, LockError):
                    await self.store.commit(self.handle, self.lock, PendingWrite(report=self.report),
                                            ttl=self.policy.ttl_seconds)
        finally:
            await self.release()
            self.hygiene.metrics.observe(self.report)

    async def release(self) -> None:
        await self.stack.aclose()

    def _reply_turn(self, reply: dict[str, Any], *, partial: bool, error: str | None) -> TurnRecord:
        position = len(self.history)
        previous = self.chains[-1] if self.chains else ""
        chain = chain_hash(previous, message_hash(reply))
        assert self.prefix is not None  # only stored calls get a reply turn
        turn_id = self.prefix.next_turn_id + len(self.new_turns)
        [turn] = build_turns([*self.history, reply], [*self.chains, chain], position, turn_id)
        return turn.model_copy(update={"partial": partial, "error": error,
                                       "report_id": self.report.id})

    async def _after_reply(self, turns: list[TurnRecord]) -> None:
        """Sentence embeddings of the call's new turns, in one batch, after the reply is out;
        then each stage's ``after_reply`` (quarantine's detection). Nothing on this call's path
        needs them; later calls read the results from Redis.
        """
        if self.store is None:
            return
        with in_background():  # never in the way of a call's own inference
            await self._after_reply_work(turns)

    async def _after_reply_work(self, turns: list[TurnRecord]) -> None:
        assert self.store is not None
        metrics = self.hygiene.metrics
        started = time.perf_counter()
        try:
            # the call's vectors, the session's background fill, then the rest (fair, bounded)
            vectors = await self.hygiene.state.corpora.turn_vectors(
                self.handle.tenant, self.handle.session_id, turns)
            embeddings = {turn_id: to_bytes(v) for turn_id, v in vectors.items()}
            await self.store.add_embeddings(self.handle, embeddings, ttl=self.policy.ttl_seconds)
        except Exception as error:  # noqa: BLE001 - a model fault never fails a call
            log.warning("session %s: embeddings failed: %s", self.handle.session_id, error)
            return
        metrics.observe_after_reply("embeddings", time.perf_counter() - started)
        hooked = [stage for stage in build_stages(self.policy.stages)
                  if type(stage).after_reply is not Stage.after_reply]
        if not hooked:
            return
        context = self._reply_context(turns)
        for stage in hooked:
            started = time.perf_counter()
            try:
                await stage.after_reply(context, turns)
            except Exception as error:  # noqa: BLE001 - background work never fails a call
                log.warning("session %s: %s after the reply failed: %s", self.handle.session_id,
                            stage.name, error)
            metrics.observe_after_reply(stage.name, time.perf_counter() - started)

    def _reply_context(self, turns: list[TurnRecord]) -> StageContext:
        """The history as stored after this call (the reply appended), for after-reply hooks."""
        history, chains = list(self.history), list(self.chains)
        for turn in sorted(turns, key=lambda t: t.position):
            if turn.position == len(history):  # the reply
                history.append(turn.message)
                chains.append(turn.chain)
        report = Report(tenant=self.handle.tenant, session_id=self.handle.session_id,
                        policy=self.policy.name)
        return StageContext(self.policy, self.body.get("model", ""), history, self.hygiene.state,
                            report, report.stage("after_reply"), session=self.handle,
                            store=self.store, stored_positions=len(history), chains=chains,
                            channels=Channels(poison_checked=self.channels.poison_checked
                                              if self.channels is not None else None))


PreparedCall = Call  # the name adapters written before the lifecycle API use


def reply_message(message: Any) -> dict[str, Any]:
    """The provider's reply as a plain OpenAI message dict (nulls and litellm extras dropped)."""
    data = message.model_dump(exclude_none=True) if hasattr(message, "model_dump") else dict(message)
    out = {key: value for key, value in data.items()
           if key in {"role", "content", "tool_calls", "function_call", "refusal", "name"}}
    out.setdefault("role", "assistant")
    if "content" not in out:
        out["content"] = None
    if out.get("tool_calls"):
        out["tool_calls"] = [
            {"id": c.get("id"), "type": c.get("type") or "function",
             "function": {"name": c.get("function", {}).get("name"),
                          "arguments": c.get("function", {}).get("arguments") or ""}}
            for c in out["tool_calls"]
        ]
    else:
        out.pop("tool_calls", None)
    return out


def header_text(text: str) -> str:
    """Text as a legal HTTP header value: printable ASCII, no edge whitespace, bounded. A
    warning can quote client input (the names of dropped fields), which may hold anything."""
    return _NOT_HEADER_TEXT.sub("?", text)[:2000].strip()


_NOT_HEADER_TEXT = re.compile(r"[^\x20-\x7e]")


async def _stateful_history(store: SessionStore, handle: SessionHandle) -> list[dict[str, Any]]:
    """The stored history a stateful client's new message continues.

    A call whose stream broke off (the provider cut it, or it timed out) ended with an error
    event: the client was not answered and will ask again. Its turns are left out, so the model
    is not sent a truncated reply followed by the same question twice; the call's commit then
    marks them superseded (kept, as every turn is). A stream the client itself left is kept:
    the client has what it read."""
    turns = await store.active_turns(handle)
    last = turns[-1] if turns else None
    if last is not None and last.partial and last.error != CLIENT_DISCONNECTED and last.report_id:
        report = await store.report(handle, last.report_id)
        if report is not None:
            turns = turns[:max(0, len(turns) - 1 - report.ingest.new_turns)]
    return [turn.message for turn in turns]


async def _turns_of(history: list[dict[str, Any]], chains: list[str], start: int,
                   first_id: int) -> list[TurnRecord]:
    """``build_turns``, in a thread when the new text is large: splitting and counting a 1 MB
    paste is ~1 s of CPU that would stall every other session's call on this event loop."""
    if sum(len(text_of(m)) for m in history[start:]) > OFF_LOOP_CHARS:
        return await asyncio.to_thread(build_turns, history, chains, start, first_id)
    return build_turns(history, chains, start, first_id)


def _edited(draft: Draft, history: list[dict[str, Any]]) -> bool:
    return len(draft.messages) != len(history) or any(
        kept.message is not history[kept.index] for kept in draft.messages)
