"""The Hygiene facade and the call path, top to bottom.

``Hygiene.prepare`` is the whole per-request path: validate, resolve the session, lock it,
match the client's history against the stored one, ingest new turns (sentences, tokens,
embeddings), run the policy's stages on a draft, validate the draft, and hand back the
clean request. ``PreparedCall.finish`` writes the new turns, the reply and the report in one
transaction and releases the lock. The proxy and the library (``completion``,
``acompletion``, ``apply``) are thin users of these two steps.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import LockError

from agentmem import upstream
from agentmem.config import Settings
from agentmem.errors import HygieneUnavailable, InvalidRequest
from agentmem.identity import session_id_for
from agentmem.ingest import (build_turns, chain_hashes, embed_turns, message_tokens, messages_tokens,
                             tools_tokens)
from agentmem.messages import check_conversation, message_hash, chain_hash, parse_chat_request
from agentmem.metrics import Metrics
from agentmem.models.embedder import Embedder, default_embedder
from agentmem.models.runtime import run_inference
from agentmem.policy import Policy, load_policy
from agentmem.report import Report
from agentmem.stages import Draft, StageContext, build_stages, needs_query_vector
from agentmem.stages.prune import query_of
from agentmem.stages.query import newest_user_sentences, prefetch
from agentmem.store import RedisConnector, SessionHandle, SessionStore, StoreUnavailable
from agentmem.store.sessions import PendingWrite, StoredPrefix, TurnRecord
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


class Hygiene:
    """One engine for the proxy and the library: a policy, a store and the models."""

    def __init__(self, policy: Policy | str | None = None, *, redis_url: str | None = None,
                 data_dir: str | None = None, tenant: str = "default",
                 settings: Settings | None = None, embedder: Embedder | None = None):
        self.settings = settings or Settings.load(redis_url=redis_url, data_dir=data_dir)
        self.policy = load_policy(policy or self.settings.policy)
        self.tenant = tenant
        self.connector = RedisConnector(self.settings.redis_url, directory=self.settings.data_dir)
        self.embedder = embedder or default_embedder()
        self._stores: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._background: set[asyncio.Task] = set()
        self._sync = None
        self._policies: dict[str, Policy] = {}
        self.metrics = Metrics()

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

    async def aclose(self) -> None:
        """Finish this loop's background work and close this loop's store."""
        loop = asyncio.get_running_loop()
        mine = [task for task in self._background if task.get_loop() is loop]
        if mine:
            await asyncio.gather(*mine, return_exceptions=True)
        store = self._stores.pop(loop, None)
        if store is not None:
            await store.close()

    def close(self) -> None:
        """Close everything (from sync code): the sync bridge's loop and the embedded Redis.

        Stores opened on other running loops are closed by ``aclose`` on those loops.
        """
        if self._sync is not None:
            self._sync.run(self.aclose())
            self._sync.stop()
            self._sync = None
        self.connector.close()

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

    async def prepare(self, body: dict[str, Any], *, tenant: str | None = None,
                      session_id: str | None = None, stateful: bool = False,
                      policy: Policy | str | None = None) -> "PreparedCall":
        """Everything before the provider call. Raises InvalidRequest before touching Redis."""
        started = time.perf_counter()
        parse_chat_request(body, check_structure=not stateful)
        policy = self.policy_named(policy)
        handle = SessionHandle(tenant or self.tenant, session_id_for(body, session_id))
        if stateful and session_id is None and not (body.get("metadata") or {}).get("session_id"):
            raise InvalidRequest("stateful mode needs an explicit session id "
                                 "(X-Session-Id or metadata.session_id)", param="session_id")
        report = Report(tenant=handle.tenant, session_id=handle.session_id, policy=policy.name,
                        model=body.get("model"))
        report.ingest.stateful = stateful
        call = PreparedCall(self, policy, handle, body, report)
        # Embed the query (and the newest user sentences quarantine checks) while ingest runs.
        early = [query_of(body["messages"])] if needs_query_vector(policy, body["messages"]) else []
        early += newest_user_sentences(policy, body["messages"])
        if early:
            prefetch(*early)
        try:
            await self._ingest(call, stateful)
            await self._clean(call)
        except BaseException:
            await call.release()
            raise
        call.prepared_at = time.perf_counter()
        report.latency_ms["hygiene"] = round((call.prepared_at - started) * 1000, 3)
        return call

    async def _ingest(self, call: PreparedCall, stateful: bool) -> None:
        """Lock the session, find what is new, and derive what later stages will need."""
        policy, body = call.policy, call.body
        history = body["messages"]
        if policy.store or stateful:
            try:
                call.store = self.store()
                call.lock = await call.stack.enter_async_context(
                    call.store.locked(call.handle, timeout=policy.lock_timeout_s,
                                      wait=policy.lock_wait_s))
                if stateful:
                    history = await call.store.active_messages(call.handle) + history
                    check_conversation(history)
                chains = chain_hashes(history)
                call.prefix = await call.store.match_prefix(call.handle, chains)
            except StoreUnavailable as error:
                if stateful:
                    raise HygieneUnavailable(f"stateful mode needs the session store: {error}") from None
                call.fault(f"session store unavailable ({error}); request sent unchanged")
                await call.release()
                call.store, call.lock = None, None
        call.history = history
        if call.store is None:
            call.tokens_before = messages_tokens(history) + tools_tokens(body.get("tools"))
            return
        prefix = call.prefix
        call.chains = chains
        call.new_turns = build_turns(history, chains, prefix.matched, prefix.next_turn_id)
        call.tokens_before = (prefix.tokens_matched + sum(t.tokens for t in call.new_turns)
                              + tools_tokens(body.get("tools")))
        report = call.report
        report.ingest.new_turns = len(call.new_turns)
        report.ingest.stored_turns = prefix.stored
        report.ingest.diverged_at = prefix.diverged_at
        report.ingest.superseded = prefix.stored - prefix.matched

    async def _clean(self, call: PreparedCall) -> None:
        """Run the stages on a draft; keep the client's request if anything goes wrong."""
        history, body, report = call.history, call.body, call.report
        draft = Draft.of(history, body.get("tools"), body.get("functions"))
        shared: dict[str, Any] = {}  # what a stage leaves for later ones (quarantined spans)
        shared.update(tool_choice=body.get("tool_choice"), function_call=body.get("function_call"))
        for stage in build_stages(call.policy.stages):
            run = report.stage(stage.name)
            started = time.perf_counter()
            context = StageContext(call.policy, body["model"], history,
                                   call.handle if call.store else None, report, run, call.store,
                                   call.prefix.matched if call.prefix else 0, call.chains,
                                   call.prefix.next_turn_id if call.prefix else 0, shared)
            try:
                await stage.apply(draft, context)
            except Exception as error:  # noqa: BLE001 - a stage bug must not break the call
                run.error = f"{type(error).__name__}: {error}"
                log.exception("stage %s failed", stage.name)
                call.fault(f"stage {stage.name} failed ({run.error}); its changes were discarded")
                draft = Draft.of(history, body.get("tools"), body.get("functions"))
                break
            finally:
                run.latency_ms = round((time.perf_counter() - started) * 1000, 3)
        if call.policy.stages:
            try:
                validate_outgoing(history, draft)
            except OutgoingInvalid as error:
                call.fault(f"outgoing request failed validation ({error}); sent unchanged")
                draft = Draft.of(history, body.get("tools"), body.get("functions"))
        call.adopt(draft, await call.position_tokens() if _edited(draft, history) else None)

    # -- library entry points ----------------------------------------------------------------

    async def apply(self, messages: list[dict[str, Any]], *, model: str = "gpt-4o",
                    tools: list[dict[str, Any]] | None = None, session_id: str | None = None,
                    stateful: bool = False, policy: Policy | str | None = None,
                    **params: Any) -> HygieneResult:
        """Clean a request without calling a model; the new turns are stored."""
        body = {"model": model, "messages": messages, **params}
        if tools is not None:
            body["tools"] = tools
        call = await self.prepare(body, session_id=session_id, stateful=stateful, policy=policy)
        await call.finish(None)
        return HygieneResult(call.outgoing["messages"], call.outgoing.get("tools"),
                             call.outgoing, call.report, call.kept_indices)

    async def acompletion(self, model: str, messages: list[dict[str, Any]], *,
                          session_id: str | None = None, stateful: bool = False,
                          policy: Policy | str | None = None, **kwargs: Any):
        """Drop-in for ``litellm.acompletion``: hygiene first, then the provider, then storage."""
        body = {"model": model, "messages": messages, **kwargs}
        call = await self.prepare(body, session_id=session_id, stateful=stateful, policy=policy)
        try:
            response = await upstream.acompletion(upstream.litellm_kwargs(call.outgoing, None))
        except BaseException as error:
            await call.fail(error)
            raise
        if kwargs.get("stream"):
            from agentmem.streaming import relay_stream

            return relay_stream(response, call)
        await call.finish_with_response(response)
        response._hidden_params["agentmem"] = call.headers()
        return response

    def completion(self, model: str, messages: list[dict[str, Any]], **kwargs: Any):
        """Drop-in for ``litellm.completion`` (runs the async path on a private loop)."""
        result = self.run_sync(self.acompletion(model, messages, **kwargs))
        if kwargs.get("stream"):
            return self.iterate_sync(result)
        return result


@dataclass
class PreparedCall:
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
    stack: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)
    done: bool = False
    prepared_at: float = 0.0
    kept_indices: list[int] = field(default_factory=list)

    def fault(self, message: str) -> None:
        """Something of ours failed: the policy picks between a warning and a 503."""
        if self.policy.on_fault == "error":
            raise HygieneUnavailable(message)
        log.warning("session %s: %s", self.handle.session_id, message)
        self.report.warnings.append(message)

    async def position_tokens(self) -> list[int] | None:
        """Tokens per history position from ingest (stored prefix + new turns), if known."""
        if self.store is None or self.prefix is None:
            return None
        try:
            stored = (await self.store.turn_tokens(self.handle))[: self.prefix.matched]
        except StoreUnavailable:
            return None
        counts = stored + [turn.tokens for turn in self.new_turns]
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
            out["X-Agentmem-Warning"] = "; ".join(report.warnings).encode(
                "ascii", "replace").decode()[:2000]
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

    async def _finish(self, reply: dict[str, Any] | None, *, partial: bool,
                      error: str | None) -> None:
        if self.done:
            return
        self.done = True
        report = self.report
        report.latency_ms["upstream"] = round((time.perf_counter() - self.prepared_at) * 1000, 3)
        report.status = "partial" if partial else "ok"
        report.error = error
        try:
            if self.store is not None and self.policy.store:
                turns = list(self.new_turns)
                if reply is not None:
                    turns.append(self._reply_turn(reply, partial=partial, error=error))
                    report.reply_position = turns[-1].position
                write = PendingWrite(
                    turns=turns,
                    truncate_to=self.prefix.diverged_at, report=report,
                    meta={"policy": self.policy.name, "model": self.body.get("model", "")},
                    tokens_base=self.prefix.tokens_matched)
                try:
                    await self.store.commit(self.handle, self.lock, write, ttl=self.policy.ttl_seconds)
                except (StoreUnavailable, LockError) as failure:
                    message = f"the call could not be stored ({failure})"
                    log.error("session %s: %s", self.handle.session_id, message)
                    report.warnings.append(message)
                else:
                    if turns and self.policy.embed:
                        # Our own list: a caller appends the reply to theirs as soon as we
                        # return, while the background work below still reads the history.
                        self.history = list(self.history)
                        self.hygiene.spawn(self._embed(turns))
        finally:
            await self.release()
            self.hygiene.metrics.observe(report)

    async def _fail(self, error: BaseException) -> None:
        if self.done:
            return
        self.done = True
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
        turn_id = self.prefix.next_turn_id + len(self.new_turns)
        [turn] = build_turns([*self.history, reply], [*self.chains, chain], position, turn_id)
        return turn.model_copy(update={"partial": partial, "error": error,
                                       "report_id": self.report.id})

    async def _embed(self, turns: list[TurnRecord]) -> None:
        """Sentence embeddings of the call's new turns, in one batch, after the reply is out.

        Nothing on this call's path needs them; later calls read them from Redis. A turn whose
        embedding is not there yet is treated by the stages as unknown (prune lets the pruner
        score it; budget embeds it on the spot).
        """
        try:
            from agentmem.models.embedder import to_bytes
            from agentmem.stages.corpus import known_vectors

            known = known_vectors(self.handle.tenant, self.handle.session_id, turns)
            embeddings = {turn_id: to_bytes(v) for turn_id, v in known.items()}
            rest = [turn for turn in turns if turn.id not in known]
            embeddings.update(await run_inference(embed_turns, self.hygiene.embedder, rest))
            await self.store.add_embeddings(self.handle, embeddings, ttl=self.policy.ttl_seconds)
        except Exception as error:  # noqa: BLE001 - a model fault never fails a call
            log.warning("session %s: embeddings failed: %s", self.handle.session_id, error)
            return
        settings = self.policy.quarantine
        if "quarantine" in self.policy.stages and (settings.clash or settings.poison):
            from agentmem.quarantine.background import detect_after

            try:
                await detect_after(self, turns)
            except Exception as error:  # noqa: BLE001 - detection never fails a call
                log.warning("session %s: quarantine detection failed: %s", self.handle.session_id, error)


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


def _edited(draft: Draft, history: list[dict[str, Any]]) -> bool:
    return len(draft.messages) != len(history) or any(
        kept.message is not history[kept.index] for kept in draft.messages)
