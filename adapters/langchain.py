"""LangChain / LangGraph adapter: agentmem in front of every model call of an agent.

Two ways in, one shared core:

* :class:`AgentmemMiddleware` for LangChain v1 agents (``create_agent(...,
  middleware=[AgentmemMiddleware()])``). It wraps each model call: the request's system
  message, messages and tools go through the engine, the model sees the cleaned request, and
  its reply is written back to the session.
* :class:`AgentmemChatModel` for older code that builds chains around a chat model: it wraps
  any ``BaseChatModel`` (``bind_tools`` included) and does the same inside ``invoke`` and
  ``stream``: a streamed reply is stored when the stream ends, or as ``partial`` if it is cut.

The engine speaks OpenAI dicts, LangChain speaks message objects. The adapter converts for
the engine only; what the model receives are the caller's own objects (a pruned message is a
copy with new content, a dropped one is gone, tools are kept by name), so provider-specific
fields survive. The session key is, in order: the ``session_id`` given here, LangGraph's
``configurable.thread_id``, or the engine's default (derived from the opening messages).

Both sync and async paths exist; sync code runs the async engine on the engine's private
event-loop thread (``Hygiene.run_sync``), as ``Hygiene.completion`` does.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain.agents.middleware.types import ExtendedModelResponse
from langchain_core.callbacks import (
    AsyncCallbackManager,
    AsyncCallbackManagerForLLMRun,
    CallbackManager,
    CallbackManagerForLLMRun,
)
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    SystemMessage,
    convert_to_openai_messages,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.config import ensure_config
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict, Field

from agentmem.api import Call, Hygiene
from agentmem.errors import InvalidRequest
from agentmem.report import Report
from agentmem.store.keys import ID_PATTERN
from agentmem.streaming import CLIENT_DISCONNECTED, stream_failure

log = logging.getLogger("agentmem.adapters.langchain")

ReportHook = Callable[[Report], None]

__all__ = ["AgentmemChatModel", "AgentmemMiddleware", "ReportHook"]


# -- the shared core ----------------------------------------------------------------------------


@dataclass
class _Cleaned:
    """A request after hygiene: the caller's own objects, minus what agentmem removed."""

    call: Call | None  # None when the request was passed through untouched
    messages: list[BaseMessage]
    tools: list[Any]
    # set inside ``_Engine.call`` (by a stream, as its chunks arrive); stored when the block ends
    reply: AIMessage | None = None


def _tool_name(tool: Any) -> str | None:
    """The function name a tool is offered under, or None for provider built-ins
    (``{"type": "web_search"}``): those are not the engine's to drop, so they always stay."""
    try:
        converted = convert_to_openai_tool(tool)
    except Exception:  # noqa: BLE001 - an unconvertible tool is simply left alone
        return None
    function = converted.get("function") if converted.get("type") == "function" else None
    return function.get("name") if isinstance(function, dict) else None


def _openai_tool_choice(choice: Any, names: set[str]) -> Any:
    """LangChain's tool_choice spellings in OpenAI's, so the engine keeps a forced tool."""
    if choice in ("auto", "none", "required"):
        return choice
    if choice in ("any", True):
        return "required"
    if isinstance(choice, str) and choice in names:
        return {"type": "function", "function": {"name": choice}}
    if isinstance(choice, dict) and choice.get("type") == "function":
        return choice if (choice.get("function") or {}).get("name") in names else None
    return None


def _model_name(model: Any) -> str:
    """The provider's model name, which the budget stage uses to find the context window."""
    for attribute in ("model_name", "model", "model_id"):
        value = getattr(model, attribute, None)
        if isinstance(value, str) and value:
            return value
    return getattr(model, "_llm_type", None) or "unknown"


def _session_key(value: Any) -> str | None:
    """A thread id as a session id; ids the engine would reject are hashed, not refused."""
    if value is None:
        return None
    text = str(value)
    if ID_PATTERN.match(text):
        return text
    return "lg-" + hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def _thread_of(config: RunnableConfig | None) -> str | None:
    configurable = (config or {}).get("configurable") or {}
    return _session_key(configurable.get("thread_id"))


def _reply_of(result: Any) -> AIMessage | None:
    """The model's reply inside whatever a wrap_model_call handler returned."""
    if isinstance(result, ExtendedModelResponse):
        result = result.model_response
    if isinstance(result, AIMessage):
        return result
    if isinstance(result, ModelResponse):
        return next((m for m in result.result if isinstance(m, AIMessage)), None)
    return None


def _reply_dict(reply: AIMessage | None) -> dict[str, Any] | None:
    """The reply as the engine stores it. It goes through the same conversion as the next
    request's history, so the stored turn hashes equal and the session prefix matches."""
    return convert_to_openai_messages(reply) if reply is not None else None


def _stamp(reply: AIMessage | None, call: Call | None) -> None:
    """Tell the caller what changed, where LangChain users look: ``response_metadata``."""
    if reply is None or call is None:
        return
    report = call.report
    reply.response_metadata = {**(reply.response_metadata or {}), "agentmem": {
        "session_id": call.handle.session_id, "report_id": report.id, "policy": report.policy,
        "tokens_before": report.tokens_before, "tokens_after": report.tokens_after,
        "messages_before": report.messages_before, "messages_after": report.messages_after,
        "tools_offered": report.tools_before, "tools_kept": report.tools_after,
        "warnings": list(report.warnings)}}


class _Engine:
    """What the middleware and the wrapper share: convert, prepare, map back, finish.

    ``call`` / ``call_sync`` own the lifecycle (as ``Hygiene.call`` does for OpenAI dicts):
    the block sets ``cleaned.reply``; leaving it stores the reply, raising fails the call
    (or, once a streamed reply has begun, stores it as ``partial``; see ``fail``).
    """

    def __init__(self, hygiene: Hygiene, *, tenant: str | None, policy: str | None,
                 strict: bool, on_report: ReportHook | None):
        self.hygiene = hygiene
        self.tenant = tenant
        self.policy = policy
        self.strict = strict
        self.on_report = on_report

    @contextlib.asynccontextmanager
    async def call(self, messages: Sequence[BaseMessage], tools: Sequence[Any], *, model: str,
                   tool_choice: Any, session_id: str | None) -> AsyncIterator[_Cleaned]:
        cleaned = await self.prepare(messages, tools, model=model, tool_choice=tool_choice,
                                     session_id=session_id)
        try:
            yield cleaned
        except BaseException as error:
            await self.fail(cleaned, error)
            raise
        await self.finish(cleaned, cleaned.reply)

    @contextlib.contextmanager
    def call_sync(self, messages: Sequence[BaseMessage], tools: Sequence[Any], *, model: str,
                  tool_choice: Any, session_id: str | None) -> Iterator[_Cleaned]:
        """``call`` for sync code: the engine's steps run on its private loop."""
        run = self.hygiene.run_sync
        cleaned = run(self.prepare(messages, tools, model=model, tool_choice=tool_choice,
                                   session_id=session_id))
        try:
            yield cleaned
        except BaseException as error:
            run(self.fail(cleaned, error))
            raise
        run(self.finish(cleaned, cleaned.reply))

    async def prepare(self, messages: Sequence[BaseMessage], tools: Sequence[Any], *,
                      model: str, tool_choice: Any, session_id: str | None) -> _Cleaned:
        """Run hygiene on a LangChain request; on input the engine refuses, pass it through
        (the provider is the judge of what LangChain sends) unless ``strict``."""
        messages, tools = list(messages), list(tools)
        try:
            incoming = convert_to_openai_messages(messages)
            names = [_tool_name(tool) for tool in tools]
            offered = [convert_to_openai_tool(t) for t, n in zip(tools, names) if n is not None]
        except (ValueError, TypeError, NotImplementedError) as error:  # not expressible as OpenAI
            return self._passthrough(messages, tools, error)
        body: dict[str, Any] = {"model": model, "messages": incoming}
        if offered:
            body["tools"] = offered
            choice = _openai_tool_choice(tool_choice, {n for n in names if n})
            if choice is not None:
                body["tool_choice"] = choice
        try:
            call = await self.hygiene.prepare(body, tenant=self.tenant, session_id=session_id,
                                              policy=self.policy)
        except InvalidRequest as error:
            return self._passthrough(messages, tools, error)
        try:
            return self._map_back(call, messages, incoming, tools, names)
        except BaseException as error:  # never leave the session locked
            await call.fail(error)
            raise

    @staticmethod
    def _map_back(call: Call, messages: list[BaseMessage],
                  incoming: list[dict[str, Any]], tools: list[Any],
                  names: list[str | None]) -> _Cleaned:
        """The cleaned request in the caller's objects: untouched messages are the originals,
        pruned ones are copies with the new content, kept tools are picked by name."""
        kept_messages = []
        for message, index in zip(call.outgoing["messages"], call.kept_indices):
            original = messages[index]
            if message is incoming[index] or message == incoming[index]:
                kept_messages.append(original)
            else:
                content = message.get("content")
                kept_messages.append(original.model_copy(
                    update={"content": content if content is not None else ""}))
        survivors = {t["function"]["name"] for t in call.outgoing.get("tools") or ()}
        kept_tools = [t for t, n in zip(tools, names) if n is None or n in survivors]
        return _Cleaned(call, kept_messages, kept_tools)

    def _passthrough(self, messages: list[BaseMessage], tools: list[Any],
                     error: Exception) -> _Cleaned:
        if self.strict:
            raise error
        log.warning("agentmem passed the request through unchanged: %s", error)
        return _Cleaned(None, messages, tools)

    async def finish(self, cleaned: _Cleaned, reply: AIMessage | None, *,
                     partial: str | None = None) -> None:
        """Store the reply; ``partial`` is the reason a streamed one is incomplete."""
        if cleaned.call is None:
            return
        try:
            stored = _reply_dict(reply)
        except (ValueError, TypeError, NotImplementedError) as error:
            log.warning("the reply could not be stored: %s", error)
            stored = None  # still store the request's turns and release the session
        await cleaned.call.finish(stored, partial=partial is not None, error=partial)
        _stamp(reply, cleaned.call)
        self._report(cleaned.call)

    async def fail(self, cleaned: _Cleaned, error: BaseException) -> None:
        """The block raised. A stream cut after its first chunk keeps what arrived, marked
        ``partial`` with the reason, as ``agentmem.streaming`` stores a cut stream (the caller
        leaving raises GeneratorExit or CancelledError, which are not ``Exception``)."""
        if cleaned.call is None:
            return
        if cleaned.reply is not None:
            reason = (stream_failure(error) if isinstance(error, Exception)
                      else CLIENT_DISCONNECTED)
            await self.finish(cleaned, cleaned.reply, partial=reason)
            return
        await cleaned.call.fail(error)
        self._report(cleaned.call)

    def _report(self, call: Call) -> None:
        if self.on_report is not None:
            try:
                self.on_report(call.report)
            except Exception:  # noqa: BLE001 - an observer must not fail the agent
                log.exception("on_report hook failed")



# -- LangChain v1 agents: middleware ------------------------------------------------------------


class AgentmemMiddleware(AgentMiddleware):
    """Context hygiene around every model call of a ``create_agent`` agent.

    ``policy`` defaults to ``agent`` (tool loadout, pruning, budget). The session is
    ``session_id`` if given, else the run's ``configurable.thread_id``, else derived by the
    engine from the opening messages. ``on_report`` receives each call's report once stored;
    the same summary is on the reply's ``response_metadata["agentmem"]``.
    """

    def __init__(self, hygiene: Hygiene | None = None, *, policy: str | None = None,
                 session_id: str | None = None, tenant: str | None = None, strict: bool = False,
                 on_report: ReportHook | None = None):
        super().__init__()
        if hygiene is None:
            hygiene, policy = Hygiene(policy or "agent"), None
        self.hygiene = hygiene
        self.session_id = session_id
        self._engine = _Engine(hygiene, tenant=tenant, policy=policy, strict=strict,
                               on_report=on_report)

    def _session_of(self, request: ModelRequest) -> str | None:
        if self.session_id is not None:
            return self.session_id
        info = getattr(request.runtime, "execution_info", None)
        if info is not None and info.thread_id is not None:
            return _session_key(info.thread_id)
        try:  # no checkpointer: the thread id is still in the run's config
            from langgraph.config import get_config

            return _thread_of(get_config())
        except RuntimeError:
            return None

    def _request_of(self, request: ModelRequest) -> dict[str, Any]:
        """The engine's arguments for a middleware request (its system message included)."""
        system = [request.system_message] if request.system_message is not None else []
        return {"messages": [*system, *request.messages], "tools": request.tools,
                "model": _model_name(request.model), "tool_choice": request.tool_choice,
                "session_id": self._session_of(request)}

    @staticmethod
    def _override(request: ModelRequest, cleaned: _Cleaned) -> ModelRequest:
        if cleaned.call is None:
            return request
        messages = cleaned.messages
        system: SystemMessage | None = None
        if request.system_message is not None and cleaned.call.kept_indices[:1] == [0]:
            system, messages = messages[0], messages[1:]
        return request.override(system_message=system, messages=messages, tools=cleaned.tools)

    def wrap_model_call(self, request: ModelRequest,
                        handler: Callable[[ModelRequest], ModelResponse]) -> Any:
        with self._engine.call_sync(**self._request_of(request)) as cleaned:
            result = handler(self._override(request, cleaned))
            cleaned.reply = _reply_of(result)
        return result

    async def awrap_model_call(self, request: ModelRequest,
                               handler: Callable[[ModelRequest], Awaitable[ModelResponse]]) -> Any:
        async with self._engine.call(**self._request_of(request)) as cleaned:
            result = await handler(self._override(request, cleaned))
            cleaned.reply = _reply_of(result)
        return result


# -- older code: a chat-model wrapper -----------------------------------------------------------

def _child_config(run_manager: CallbackManagerForLLMRun | AsyncCallbackManagerForLLMRun | None
                  ) -> RunnableConfig | None:
    """Callbacks that nest the wrapped model's run under ours, so traces show both what the
    caller sent and what the model received (LLM run managers have no ``get_child``)."""
    if run_manager is None:
        return None
    asynchronous = isinstance(run_manager, AsyncCallbackManagerForLLMRun)
    manager = (AsyncCallbackManager if asynchronous else CallbackManager)(
        handlers=[], parent_run_id=run_manager.run_id)
    manager.set_handlers(run_manager.inheritable_handlers)
    manager.add_tags(run_manager.inheritable_tags)
    manager.add_metadata(run_manager.inheritable_metadata)
    return {"callbacks": manager}


def _relay_config(run_manager: CallbackManagerForLLMRun | AsyncCallbackManagerForLLMRun | None
                  ) -> RunnableConfig:
    """The wrapped model's config when this run relays its tokens: nested under this run where
    LangChain passes the run manager, and tagged ``nostream`` so that LangGraph's messages mode,
    which gets each token from this run, does not get it again from the wrapped model's."""
    config = _child_config(run_manager) or ensure_config()
    return {**config, "tags": [*(config.get("tags") or ()), "nostream"]}


def _as_chunk(message: Any) -> AIMessageChunk:
    """A streamed piece as a chunk: a model that cannot stream yields its whole reply."""
    if isinstance(message, AIMessageChunk):
        return message
    return AIMessageChunk(**message.model_dump(exclude={"type"}))


def _closing_chunk(last: AIMessageChunk | None, reply: AIMessage | None) -> ChatGenerationChunk:
    """A stream's last chunk (the wrapped model's own, held back until the reply is stored)
    carrying what ``_stamp`` put on the reply, so the merged stream has it as ``invoke`` does."""
    if last is None:
        empty = "" if reply is None or isinstance(reply.content, str) else []
        last = AIMessageChunk(content=empty, chunk_position="last")
    stamp = reply.response_metadata.get("agentmem") if reply is not None else None
    if stamp is not None:
        last.response_metadata = {**last.response_metadata, "agentmem": stamp}
    return ChatGenerationChunk(message=last)


class _Relay:
    """One streamed reply as it passes (``_stream`` and ``_astream`` alike): every chunk is
    added to ``cleaned.reply``, so a stream the caller leaves or the provider breaks is stored
    as ``partial``, and passed on, except the wrapped model's last chunk, held back until the
    reply is stored so that it carries the ``agentmem`` metadata (``closing``)."""

    def __init__(self, cleaned: _Cleaned) -> None:
        self.cleaned = cleaned
        self.reply: AIMessageChunk | None = None
        self.last: AIMessageChunk | None = None

    def pass_on(self, piece: Any) -> ChatGenerationChunk | None:
        chunk = _as_chunk(piece)
        self.cleaned.reply = self.reply = chunk if self.reply is None else self.reply + chunk
        if chunk.chunk_position == "last":
            self.last = chunk
            return None
        return ChatGenerationChunk(message=chunk)

    def closing(self) -> ChatGenerationChunk:
        return _closing_chunk(self.last, self.cleaned.reply)


class AgentmemChatModel(BaseChatModel):
    """A chat model that cleans its input with agentmem, then calls ``model``.

    ``AgentmemChatModel(model=ChatOpenAI(...), hygiene=Hygiene("default"))`` works wherever
    the wrapped model did; ``bind_tools`` returns another wrapper, so the bound tools go
    through the tools stage too. The session is ``session_id`` if set, else the run config's
    ``configurable.thread_id``, else derived by the engine. Share one ``Hygiene`` per process
    (it owns the store connection and the loaded models); the default makes a new one.
    """

    model: BaseChatModel
    hygiene: Hygiene = Field(default_factory=lambda: Hygiene("default"), exclude=True)
    policy: str | None = None
    session_id: str | None = None
    tenant: str | None = None
    strict: bool = False
    on_report: ReportHook | None = Field(default=None, exclude=True)
    bound_tools: list[Any] = Field(default_factory=list)
    tool_kwargs: dict[str, Any] = Field(default_factory=dict)

    model_config = ConfigDict(arbitrary_types_allowed=True)

    @property
    def _llm_type(self) -> str:
        return f"agentmem-{self.model._llm_type}"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model": _model_name(self.model), "policy": self.policy or self.hygiene.policy.name}

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None,
                   **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        """Keep the tools on the wrapper; each call binds only the ones agentmem kept."""
        extra = {**kwargs, **({"tool_choice": tool_choice} if tool_choice is not None else {})}
        return self.model_copy(update={"bound_tools": list(tools), "tool_kwargs": extra})

    # The thread id lives in the config of invoke() / stream(), which _generate / _stream do
    # not see: a copy of the wrapper carries it as its session (a stream's body runs after
    # stream() has returned, so a context variable could not).
    def _for_run(self, config: RunnableConfig | None) -> AgentmemChatModel:
        thread = None if self.session_id else _thread_of(ensure_config(config))
        return self.model_copy(update={"session_id": thread}) if thread else self

    def invoke(self, input: LanguageModelInput, config: RunnableConfig | None = None,
               **kwargs: Any) -> AIMessage:
        return super(AgentmemChatModel, self._for_run(config)).invoke(input, config, **kwargs)

    async def ainvoke(self, input: LanguageModelInput, config: RunnableConfig | None = None,
                      **kwargs: Any) -> AIMessage:
        return await super(AgentmemChatModel, self._for_run(config)).ainvoke(input, config,
                                                                              **kwargs)

    def stream(self, input: LanguageModelInput, config: RunnableConfig | None = None,
               **kwargs: Any) -> Iterator[AIMessageChunk]:
        return super(AgentmemChatModel, self._for_run(config)).stream(input, config, **kwargs)

    def astream(self, input: LanguageModelInput, config: RunnableConfig | None = None,
                **kwargs: Any) -> AsyncIterator[AIMessageChunk]:
        return super(AgentmemChatModel, self._for_run(config)).astream(input, config, **kwargs)

    # invoke() keeps _generate even when a callback streams (LangGraph's messages mode): the
    # wrapped model, nested under this run, streams to that callback itself, and tokens relayed
    # from _stream as well would reach it twice. stream() / astream() pass stream=True.
    def _should_stream(self, *, async_api: bool, **kwargs: Any) -> bool:
        return bool(kwargs.get("stream")) and super()._should_stream(async_api=async_api,
                                                                     **kwargs)

    def _should_use_protocol_streaming(self, *, async_api: bool, **kwargs: Any) -> bool:
        return bool(kwargs.get("stream")) and super()._should_use_protocol_streaming(
            async_api=async_api, **kwargs)

    def _engine(self) -> _Engine:
        return _Engine(self.hygiene, tenant=self.tenant, policy=self.policy, strict=self.strict,
                       on_report=self.on_report)

    def _request_of(self, messages: list[BaseMessage]) -> dict[str, Any]:
        session = self.session_id or _thread_of(ensure_config())
        return {"messages": messages, "tools": self.bound_tools, "model": _model_name(self.model),
                "tool_choice": self.tool_kwargs.get("tool_choice"), "session_id": session}

    def _inner(self, cleaned: _Cleaned) -> Runnable[LanguageModelInput, Any]:
        """The wrapped model, bound to the tools agentmem kept (a forced tool is always kept)."""
        if not self.bound_tools:
            return self.model
        return self.model.bind_tools(cleaned.tools, **self.tool_kwargs)

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None,
                  **kwargs: Any) -> ChatResult:
        config = _child_config(run_manager)
        with self._engine().call_sync(**self._request_of(messages)) as cleaned:
            reply = self._inner(cleaned).invoke(cleaned.messages, config, stop=stop, **kwargs)
            cleaned.reply = reply
        return ChatResult(generations=[ChatGeneration(message=reply)])

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                         run_manager: AsyncCallbackManagerForLLMRun | None = None,
                         **kwargs: Any) -> ChatResult:
        config = _child_config(run_manager)
        async with self._engine().call(**self._request_of(messages)) as cleaned:
            reply = await self._inner(cleaned).ainvoke(cleaned.messages, config, stop=stop,
                                                       **kwargs)
            cleaned.reply = reply
        return ChatResult(generations=[ChatGeneration(message=reply)])

    # Streaming: the same hygiene as above, each chunk relayed as it arrives (``_Relay``).
    def _stream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                run_manager: CallbackManagerForLLMRun | None = None,
                **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        config = _relay_config(run_manager)
        with self._engine().call_sync(**self._request_of(messages)) as cleaned:
            relay = _Relay(cleaned)
            for piece in self._inner(cleaned).stream(cleaned.messages, config, stop=stop,
                                                     **kwargs):
                if (chunk := relay.pass_on(piece)) is not None:
                    yield chunk
        yield relay.closing()

    async def _astream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                       run_manager: AsyncCallbackManagerForLLMRun | None = None,
                       **kwargs: Any) -> AsyncIterator[ChatGenerationChunk]:
        config = _relay_config(run_manager)
        async with self._engine().call(**self._request_of(messages)) as cleaned:
            relay = _Relay(cleaned)
            async for piece in self._inner(cleaned).astream(cleaned.messages, config, stop=stop,
                                                            **kwargs):
                if (chunk := relay.pass_on(piece)) is not None:
                    yield chunk
        yield relay.closing()
