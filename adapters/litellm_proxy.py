"""agentmem inside LiteLLM's own proxy: a callback that cleans each conversation it routes.

LiteLLM loads it from its ``config.yaml``::

    litellm_settings:
      callbacks: ["agentmem.adapters.litellm_proxy.handler"]

The proxy calls these hooks of that one instance; they map onto the engine's two steps:

* ``async_pre_call_hook`` runs ``Hygiene.prepare`` and rewrites ``data["messages"]`` and
  ``data["tools"]`` in place, before LiteLLM routes the call (streaming calls included). On
  LiteLLM's ``/v1/messages`` (Anthropic's Messages API, what Claude Code sends) the body is
  translated to the engine's chat form and the cleaned request written back in Messages form
  (``messages``, ``system``, ``tools``, ``tool_choice``), see ``litellm_messages``; an invalid
  one gets Anthropic's error shape, and one with server tools or blocks agentmem has no chat
  form for passes through unchanged (the log says so once). ``/v1/responses`` passes through
  unchanged and unstored (said once in the log);
* ``async_log_success_event`` stores the reply (LiteLLM hands it the assembled chat response,
  also for streams and for ``/v1/messages``) with ``Call.finish_with_response``; a stream the
  client left before its end is stored as a partial reply, with the reason, as agentmem's own
  proxy does;
* ``async_log_failure_event`` and ``async_post_call_failure_hook`` end it with ``fail``;
* ``async_post_call_streaming_iterator_hook`` relays a stream and sees how it ends: a client
  that leaves before the first chunk (LiteLLM fires no callback then) fails the call at once,
  and a provider stream that breaks off is stored partial with what the client received (the
  failure callback that follows carries none of it); a ``/v1/messages`` stream arrives here as
  Anthropic's SSE bytes, folded by ``litellm_messages.MessagesStreamAssembler``;
* ``async_post_call_response_headers_hook`` adds the ``X-Agentmem-*`` headers to the reply.

The prepared call holds its session's lock between the pre-call hook and a callback, so the
calls wait here keyed by LiteLLM's ``litellm_call_id`` (the proxy sets it before the hook and
the logging callbacks receive it in ``kwargs``). A call whose callback never comes is failed
after ``call_timeout_s`` (``AGENTMEM_LITELLM_CALL_TIMEOUT_S``, default 600 s), which releases
the lock; otherwise the lock's keep-alive would hold the session forever.

Tenants are LiteLLM teams (else a hash of the virtual key). The session is the client's
``metadata.session_id``, else an ``X-Session-Id`` header, else the session LiteLLM read from
its own session headers (on ``/v1/messages`` also Claude Code's, from its
``metadata.user_id``), else agentmem derives one from the conversation's opening. Policy,
Redis and data folder come from ``AGENTMEM_POLICY``, ``AGENTMEM_REDIS_URL`` and
``AGENTMEM_DATA_DIR``; a client may pick another preset with ``X-Agentmem-Policy`` (preset
names only, never a file path) unless the settings forbid it.

LiteLLM has no shutdown hook for callbacks, so an embedded Redis started here is stopped from
``atexit``. Stop the proxy with SIGINT (Ctrl-C) for that: on SIGTERM uvicorn re-raises the
signal and the process ends without running ``atexit`` (the next start reuses the server).
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import contextlib
import hashlib
import logging
import os
from collections.abc import AsyncGenerator, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from fastapi import HTTPException
from litellm.integrations.custom_logger import CustomLogger

from agentmem import Call, Hygiene, Policy
from agentmem.adapters.litellm_messages import (
    ANTHROPIC_MESSAGES,
    MessagesStreamAssembler,
    chat_request,
    messages_body,
    refusal,
    unmodelled,
    write_back,
)
from agentmem.api import reply_message
from agentmem.config import TENANT_PATTERN
from agentmem.errors import AgentmemError
from agentmem.identity import derive_session_id
from agentmem.models.runtime import run_inference
from agentmem.policy import preset_names
from agentmem.streaming import CLIENT_DISCONNECTED, ReplyAssembler, store_unfinished, stream_failure

log = logging.getLogger("agentmem.litellm_proxy")

_CHAT_CALL_TYPES = frozenset({"completion", "acompletion"})
# Conversation routes this plugin does not clean (their bodies are not chat messages): said
# once in the log, so an operator whose clients speak them learns why nothing changes.
_UNCLEANED_ROUTES = {"aresponses": "/v1/responses", "responses": "/v1/responses"}
# The request fields the engine reads or rewrites; LiteLLM's own keys stay out of its view.
_BODY_KEYS = ("model", "messages", "tools", "tool_choice", "functions", "function_call",
              "parallel_tool_calls")
_REWRITTEN_KEYS = ("messages", "tools", "tool_choice", "functions", "function_call")
_GENERATED_SESSION_FLAG = "litellm_session_id_generated"  # litellm.constants, set for minted ids
_KEPT_HEADER_SETS = 10_000  # headers waiting for a response-headers hook that may never come


@dataclass
class _Pending:
    """A prepared call waiting for LiteLLM's callback, on the loop that owns its store."""

    call: Call
    loop: asyncio.AbstractEventLoop
    timer: asyncio.TimerHandle
    # folds the chunks LiteLLM relays into the reply, when a stream stops early
    assembler: Callable[[], ReplyAssembler] = field(default=ReplyAssembler)


class AgentmemCallback(CustomLogger):
    """LiteLLM proxy callback running agentmem's hygiene on chat completions and
    ``/v1/messages``."""

    def __init__(self, hygiene: Hygiene | None = None, *, policy: Policy | str | None = None,
                 call_timeout_s: float | None = None) -> None:
        super().__init__()
        self._hygiene = hygiene  # built on first use: LiteLLM imports callbacks at config load
        self.policy = policy
        self.call_timeout_s = call_timeout_s or float(
            os.environ.get("AGENTMEM_LITELLM_CALL_TIMEOUT_S", "600"))
        self._pending: dict[str, _Pending] = {}
        self._headers: collections.OrderedDict[str, dict[str, str]] = collections.OrderedDict()
        self._warming: asyncio.Task | None = None
        self._warned_routes: set[str] = set()
        # LiteLLM imports callbacks inside its startup event: load MiniLM there, not on a call.
        # Imported outside an event loop (a script, a test), RuntimeError: models load on first use.
        with contextlib.suppress(RuntimeError):
            self._warming = asyncio.get_running_loop().create_task(self._warm())

    @property
    def hygiene(self) -> Hygiene:
        if self._hygiene is None:
            self._hygiene = Hygiene(self.policy)
            atexit.register(self._hygiene.connector.close)
        return self._hygiene

    async def _warm(self) -> None:
        try:
            if self.hygiene.policy.embed:
                await run_inference(self.hygiene.embedder.load)
        except Exception:  # noqa: BLE001 - the first call will load (or report) it instead
            log.warning("agentmem could not preload its models", exc_info=True)

    def pending(self) -> int:
        """How many calls hold a session lock while waiting for their callback."""
        return len(self._pending)

    # -- before the call ---------------------------------------------------------------------

    async def async_pre_call_hook(self, user_api_key_dict: Any, cache: Any, data: dict,
                                  call_type: str) -> dict:
        """Clean ``messages`` and ``tools``; LiteLLM routes the rewritten ``data``."""
        call_id = data.get("litellm_call_id")
        if call_type in _UNCLEANED_ROUTES:
            self._warn_once(call_type, "agentmem cleans LiteLLM's chat completions and "
                            "/v1/messages only: %s requests pass through unchanged and are not "
                            "stored (agentmem serve speaks that API itself)",
                            _UNCLEANED_ROUTES[call_type])
        if not call_id:
            return data
        if call_type == ANTHROPIC_MESSAGES and isinstance(data.get("messages"), list):
            return await self._prepare_messages(user_api_key_dict, data, call_id)
        if call_type not in _CHAT_CALL_TYPES or not isinstance(data.get("messages"), list):
            return data  # embeddings, the Responses route: not chat completions
        body = {key: data[key] for key in _BODY_KEYS if key in data}
        call = await self._prepare(call_id, body, user_api_key_dict, data, session_of(data),
                                   _chat_refusal)
        if call is None:
            return data
        for key in _REWRITTEN_KEYS:
            if key in call.outgoing:
                if call.outgoing[key] in (None, []):
                    data.pop(key, None)
                else:
                    data[key] = call.outgoing[key]
        if "tools" in body and "tools" not in data:  # no tool left: nothing to choose among
            data.pop("tool_choice", None)
            data.pop("parallel_tool_calls", None)
        return data

    async def _prepare_messages(self, user_api_key_dict: Any, data: dict, call_id: str) -> dict:
        """``/v1/messages``: the Messages body as a chat request for the engine, and the
        cleaned request back in Messages form (``agentmem.adapters.litellm_messages``)."""
        body = messages_body(data)
        reason = unmodelled(body)
        if reason is not None:
            self._warn_once(f"{ANTHROPIC_MESSAGES}:{reason}", "agentmem has no chat form for "
                            "%s: /v1/messages requests with them pass through unchanged and are "
                            "not stored", reason)
            return data
        try:
            chat = chat_request(body)
        except AgentmemError as error:
            raise refusal(error) from None
        # Not the chat path's default (the ``user`` field): Claude Code sends one
        # metadata.user_id for all its conversations, as agentmem's own /v1/messages notes.
        session_id = session_of(data) or derive_session_id(chat["messages"])
        call = await self._prepare(call_id, chat, user_api_key_dict, data, session_id, refusal,
                                   MessagesStreamAssembler)
        if call is not None:
            write_back(data, call.outgoing, body)
        return data

    async def _prepare(self, call_id: str, body: dict, user_api_key_dict: Any, data: dict,
                       session_id: str | None,
                       refuse: Callable[[AgentmemError], HTTPException],
                       assembler: Callable[[], ReplyAssembler] = ReplyAssembler) -> Call | None:
        """``Hygiene.prepare`` for one LiteLLM call, kept until its callback; ``None`` when
        agentmem failed (the request then goes out unchanged). ``refuse`` answers a request the
        engine refuses, in the route's own error shape."""
        # A proxy that re-runs its hooks (fallbacks) must not wait on its own session lock.
        await self._settle(call_id, None, RuntimeError("the pre-call hook ran again for this call"))
        policy = self._policy_of(data)
        try:
            call = await self.hygiene.prepare(body, tenant=tenant_of(user_api_key_dict),
                                              session_id=session_id, policy=policy)
        except AgentmemError as error:
            raise refuse(error) from None
        except Exception:  # noqa: BLE001 - a bug of ours must not take the proxy's calls down
            log.exception("agentmem failed; the request goes out unchanged")
            return None
        loop = asyncio.get_running_loop()
        timer = loop.call_later(self.call_timeout_s, self._expire, call_id)
        self._pending[call_id] = _Pending(call, loop, timer, assembler)
        self._headers[call_id] = call.headers()
        while len(self._headers) > _KEPT_HEADER_SETS:
            self._headers.popitem(last=False)
        return call

    def _warn_once(self, topic: str, message: str, *args: object) -> None:
        if topic not in self._warned_routes:
            self._warned_routes.add(topic)
            log.warning(message, *args)

    def _policy_of(self, data: dict) -> str | None:
        if not self.hygiene.settings.allow_policy_header:
            return None
        name = _headers_of(data).get("x-agentmem-policy")
        if name is None:
            return None
        if name not in preset_names():  # a header must never name a file on the proxy's disk
            raise HTTPException(status_code=400, detail={
                "message": f"unknown policy {name!r}; presets: {preset_names()}",
                "type": "invalid_request_error", "param": "X-Agentmem-Policy", "code": None})
        return name

    # -- after the call ----------------------------------------------------------------------

    async def async_log_success_event(self, kwargs: dict, response_obj: Any, start_time: Any,
                                      end_time: Any) -> None:
        """Store the reply; for streams LiteLLM passes the response assembled from the chunks.

        When the client hangs up mid-stream, LiteLLM's proxy still fires this success event
        (to bill what was streamed) with the chunks received so far, assembled by
        ``stream_chunk_builder``, which fills in ``finish_reason="stop"`` itself. The only mark
        of the cut is the ``client_disconnected`` flag the proxy puts in the call's metadata.
        """
        response = (kwargs.get("async_complete_streaming_response")
                    or kwargs.get("complete_streaming_response") or response_obj)
        partial = CLIENT_DISCONNECTED if client_disconnected(kwargs) else None
        await self._settle(kwargs.get("litellm_call_id"), response, None, partial=partial)

    async def async_log_failure_event(self, kwargs: dict, response_obj: Any, start_time: Any,
                                      end_time: Any) -> None:
        error = kwargs.get("exception") or RuntimeError("the LiteLLM call failed")
        await self._settle(kwargs.get("litellm_call_id"), None, error)

    async def async_post_call_failure_hook(self, request_data: dict, original_exception: Exception,
                                           user_api_key_dict: Any,
                                           traceback_str: str | None = None) -> None:
        """Also covers calls rejected after our hook, which never reach a provider."""
        await self._settle(request_data.get("litellm_call_id"), None, original_exception)

    async def async_post_call_response_headers_hook(
            self, data: dict, user_api_key_dict: Any, response: Any,
            request_headers: dict[str, str] | None = None,
            litellm_call_info: dict[str, object] | None = None) -> dict[str, str] | None:
        return self._headers.pop(data.get("litellm_call_id") or "", None)

    async def async_post_call_streaming_iterator_hook(
            self, user_api_key_dict: Any, response: Any, request_data: dict,
    ) -> AsyncGenerator[Any, None]:
        """Pass the chunks on; end the call here when the stream stops early.

        The success callback still stores a stream that ran to its end (with LiteLLM's usage).
        """
        call_id = request_data.get("litellm_call_id")
        waiting = self._pending.get(call_id) if call_id else None
        assembler = waiting.assembler() if waiting is not None else ReplyAssembler()
        try:
            async for chunk in response:
                assembler.add(chunk)
                yield chunk
        except (asyncio.CancelledError, GeneratorExit):
            pending = self._pending.pop(call_id, None) if call_id else None
            if pending is not None:  # taken now, so the billing callback that follows is a no-op
                self.hygiene.spawn(self._run(pending, store_unfinished(
                    pending.call, assembler, CLIENT_DISCONNECTED)))
            raise
        except Exception as error:
            pending = self._pending.pop(call_id, None) if call_id else None
            if pending is not None:
                await self._run(pending, store_unfinished(pending.call, assembler,
                                                          stream_failure(error)))
            raise

    async def _settle(self, call_id: str | None, response: Any, error: BaseException | None,
                      *, partial: str | None = None) -> None:
        """Finish or fail the pending call (once).

        ``partial``: the reason the reply is incomplete; it is stored marked partial.
        """
        pending = self._pending.pop(call_id, None) if call_id else None
        if pending is None:
            return
        call = pending.call
        if error is not None:
            outcome: Coroutine[Any, Any, None] = call.fail(error)
        elif partial is not None:
            outcome = _finish_partial(call, response, partial)
        elif getattr(response, "choices", None):
            outcome = call.finish_with_response(response)
        else:
            outcome = call.finish(None)
        await self._run(pending, outcome)

    @staticmethod
    async def _run(pending: _Pending, outcome: Coroutine[Any, Any, None]) -> None:
        """Run a taken call's ending on the event loop that prepared it (its store's
        connections live there), cancelling its timeout."""
        running = asyncio.get_running_loop()
        if running is pending.loop:
            pending.timer.cancel()
            await outcome
        else:  # LiteLLM ran this callback elsewhere; the store's connections live on that loop
            pending.loop.call_soon_threadsafe(pending.timer.cancel)
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(outcome, pending.loop))

    def _expire(self, call_id: str) -> None:
        pending = self._pending.pop(call_id, None)
        if pending is not None:
            log.warning("call %s: no LiteLLM callback after %gs; releasing its session",
                        call_id, self.call_timeout_s)
            self.hygiene.spawn(pending.call.fail(TimeoutError(
                f"no LiteLLM callback within {self.call_timeout_s:g}s")))


async def _finish_partial(call: Call, response: Any, reason: str) -> None:
    """Store what arrived before the cut as a partial reply, as ``agentmem.streaming`` does;
    a cut before any reply arrived fails the call."""
    choices = getattr(response, "choices", None)
    message = getattr(choices[0], "message", None) if choices else None
    if message is None:
        await call.fail(RuntimeError(reason))
        return
    usage = getattr(response, "usage", None)
    call.report.usage = usage.model_dump() if hasattr(usage, "model_dump") else None
    await call.finish(reply_message(message), partial=True, error=reason)


def _chat_refusal(error: AgentmemError) -> HTTPException:
    """OpenAI's error shape, which LiteLLM's chat route sends on as the detail says."""
    return HTTPException(status_code=error.status_code, detail=error.to_body()["error"])


def client_disconnected(kwargs: dict) -> bool:
    """Whether LiteLLM's proxy marked this call's client as gone before the stream ended.

    The proxy sets ``client_disconnected`` in the logging object's metadata (and strips it
    from a client's own metadata, so a request cannot forge it).
    """
    params = kwargs.get("litellm_params")
    for metadata in (params.get("metadata") if isinstance(params, dict) else None,
                     kwargs.get("metadata")):
        if isinstance(metadata, dict) and metadata.get("client_disconnected") is True:
            return True
    return False


def tenant_of(user_api_key_dict: Any) -> str:
    """The LiteLLM team, else a hash of the key (never the key itself), else ``default``."""
    team = getattr(user_api_key_dict, "team_id", None)
    if isinstance(team, str) and team:
        return team if TENANT_PATTERN.match(team) else "team-" + _digest(team)
    key = getattr(user_api_key_dict, "token", None) or getattr(user_api_key_dict, "api_key", None)
    if isinstance(key, str) and key:
        return "key-" + _digest(key)
    return "default"


def session_of(data: dict) -> str | None:
    """The client's session id, if it sent one; ``None`` lets agentmem derive it."""
    metadata = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    requested = metadata.get("requester_metadata")  # the client's own metadata, as sent
    if isinstance(requested, dict) and requested.get("session_id") is not None:
        return requested["session_id"]
    header = _headers_of(data).get("x-session-id")
    if header:
        return header
    # LiteLLM's session headers, or a client's metadata; on /v1/messages LiteLLM keeps its own
    # in ``litellm_metadata`` (Claude Code's session, read from its metadata.user_id, too)
    for bucket in (metadata, data.get("litellm_metadata")):
        if isinstance(bucket, dict) and bucket.get("session_id") is not None \
                and not bucket.get(_GENERATED_SESSION_FLAG):
            return bucket["session_id"]
    return None


def _headers_of(data: dict) -> dict[str, str]:
    request = data.get("proxy_server_request")
    headers = request.get("headers") if isinstance(request, dict) else None
    if not isinstance(headers, dict):
        metadata = data.get("metadata")
        headers = metadata.get("headers") if isinstance(metadata, dict) else None
    if not isinstance(headers, dict):
        return {}
    return {str(k).lower(): v for k, v in headers.items() if isinstance(v, str)}


def _digest(value: str) -> str:
    return hashlib.blake2b(value.encode(), digest_size=8).hexdigest()


handler = AgentmemCallback()
"""The instance ``litellm_settings.callbacks`` names; settings come from the environment."""
