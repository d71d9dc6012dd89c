"""OpenAI Agents SDK adapter: run an ``agents.Agent`` through agentmem in-process.

    from agentmem import Hygiene
    from agentmem.adapters.openai_agents import AgentmemModelProvider

    provider = AgentmemModelProvider(Hygiene(policy="agent"), base_url=..., api_key=...)
    result = await Runner.run(agent, "...", run_config=RunConfig(model_provider=provider))

Why the hook sits in the HTTP transport rather than in a ``Model`` subclass: the SDK's
``OpenAIChatCompletionsModel`` already turns Responses-style items, tools, handoffs and model
settings into a chat-completions body, and parses JSON and SSE replies back. Intercepting the
finished ``POST .../chat/completions`` body keeps all of that SDK code in charge, so agentmem
sees exactly what the provider would have seen (the same body the proxy gets) and the SDK
sees an ordinary provider response. The transport works for any ``AsyncOpenAI`` client, not
only for agents.

Sessions: the SDK does not hand its ``Session`` to the model, so the session id comes from,
in order, an ``X-Session-Id`` request header (``ModelSettings(extra_headers=...)``), the
innermost ``session_scope(...)`` around the run (a string, or the SDK ``Session`` whose
``session_id`` is used), the provider's ``session_id`` argument, else the id the engine
derives from the conversation's opening (stable across one run's calls).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import AsyncIterator, Iterator
from typing import Protocol

import httpx
import orjson
from agents.models.interface import Model, ModelProvider
from agents.models.openai_chatcompletions import OpenAIChatCompletionsModel
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionChunk

from agentmem.api import Call, Hygiene, reply_message
from agentmem.errors import AgentmemError, UpstreamError
from agentmem.policy import Policy
from agentmem.streaming import ReplyAssembler, stream_failure

__all__ = ["AgentmemModelProvider", "AgentmemTransport", "agentmem_client", "session_scope"]

_SESSION: contextvars.ContextVar[str | None] = contextvars.ContextVar("agentmem_session",
                                                                     default=None)
# Request headers that steer agentmem; they are removed before the body goes upstream.
_SESSION_HEADER = "x-session-id"
_POLICY_HEADER = "x-agentmem-policy"
# Headers describing the upstream body, no longer true once agentmem has rewritten it.
_STALE_HEADERS = ("content-length", "content-encoding", "transfer-encoding")


class _HasSessionId(Protocol):
    session_id: str


@contextlib.contextmanager
def session_scope(session: str | _HasSessionId | None) -> Iterator[None]:
    """Put the calls made inside (one ``Runner.run``, say) in one agentmem session.

    Accepts an id or the SDK ``Session`` passed to the same run, so agentmem's session and the
    SDK's history share a name. For ``Runner.run_streamed`` enter the scope before the call:
    the run's background task copies the context when it is created.
    """
    value = getattr(session, "session_id", session)
    token = _SESSION.set(str(value) if value is not None else None)
    try:
        yield
    finally:
        _SESSION.reset(token)


class AgentmemTransport(httpx.AsyncBaseTransport):
    """An httpx transport that cleans each chat-completions request and stores its reply.

    Every other request (models, embeddings, files...) passes through untouched. Errors of
    agentmem's own (a malformed conversation, a busy session) come back as HTTP responses with
    OpenAI's error body, so the ``openai`` client raises its usual ``APIStatusError``s.
    """

    def __init__(self, hygiene: Hygiene, *, inner: httpx.AsyncBaseTransport | None = None,
                 session_id: str | None = None, tenant: str | None = None,
                 policy: Policy | str | None = None):
        self.hygiene = hygiene
        self.inner = inner or httpx.AsyncHTTPTransport()
        self.session_id = session_id
        self.tenant = tenant
        self.policy = policy

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method != "POST" or not request.url.path.endswith("/chat/completions"):
            return await self.inner.handle_async_request(request)
        try:
            body = orjson.loads(await request.aread())
        except orjson.JSONDecodeError:
            return await self.inner.handle_async_request(request)  # the provider's 400, not ours
        headers = httpx.Headers(request.headers)
        session_id = headers.pop(_SESSION_HEADER, None) or _SESSION.get() or self.session_id
        policy = headers.pop(_POLICY_HEADER, None) or self.policy
        try:
            async with self.hygiene.call(body, tenant=self.tenant, session_id=session_id,
                                         policy=policy) as call:
                for name in _STALE_HEADERS:
                    headers.pop(name, None)
                outgoing = httpx.Request(request.method, request.url, headers=headers,
                                         content=orjson.dumps(call.outgoing),
                                         extensions=request.extensions)
                response = await self.inner.handle_async_request(outgoing)
                if response.status_code >= 400:
                    return await _relay_error(response, call, request)
                if call.outgoing.get("stream"):
                    call.hand_off()
                    return _response(response, call, request,
                                     stream=_RecordingStream(response, call))
                return await _relay_json(response, call, request)
        except AgentmemError as error:  # refused before the provider saw it (or the store)
            return _error_response(error, request)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def _relay_json(response: httpx.Response, call: Call,
                      request: httpx.Request) -> httpx.Response:
    """Read the whole completion, store its first choice as the reply, hand it on (a read
    that fails raises, and the ``call`` block fails the call)."""
    try:
        content = await response.aread()
        data = orjson.loads(content)
        choices = data.get("choices") or []
        message = choices[0].get("message") if choices else None
        call.report.usage = data.get("usage")
    finally:
        await response.aclose()
    await call.finish(reply_message(message) if isinstance(message, dict) else None)
    return _response(response, call, request, content=content)


async def _relay_error(response: httpx.Response, call: Call,
                       request: httpx.Request) -> httpx.Response:
    """The provider refused: record why, store none of the request's turns, pass it on."""
    try:
        content = await response.aread()
    finally:
        await response.aclose()
    try:
        message = (orjson.loads(content).get("error") or {}).get("message")
    except (orjson.JSONDecodeError, AttributeError):
        message = None
    await call.fail(UpstreamError(f"upstream: {message or content[:500].decode(errors='replace')}",
                                  status_code=response.status_code))
    return _response(response, call, request, content=content)


def _response(response: httpx.Response, call: Call, request: httpx.Request, *,
              content: bytes | None = None, stream: httpx.AsyncByteStream | None = None
              ) -> httpx.Response:
    """The provider's response with agentmem's X-Agentmem-* headers added.

    The body handed on is already decoded, so the encoding and length headers are dropped
    (httpx sets the length again for ``content``).
    """
    headers = httpx.Headers(response.headers)
    for name in _STALE_HEADERS:
        headers.pop(name, None)
    headers.update(call.headers())
    return httpx.Response(response.status_code, headers=headers, content=content, stream=stream,
                          request=request, extensions=response.extensions)


def _error_response(error: AgentmemError, request: httpx.Request) -> httpx.Response:
    return httpx.Response(error.status_code, json=error.to_body(), request=request)


class _RecordingStream(httpx.AsyncByteStream):
    """Relays the provider's SSE bytes unchanged while folding the chunks into the reply.

    The reply is stored when ``data: [DONE]`` arrives, before that event is passed on: the
    ``openai`` client closes the response as soon as it reads [DONE], and the session lock
    must be free before the agent's next call. A stream that breaks or is closed early is
    stored as a partial reply with the reason.
    """

    def __init__(self, response: httpx.Response, call: Call):
        self.response = response
        self.call = call
        self.assembler = ReplyAssembler()
        self.buffer = b""
        self.data: list[bytes] = []
        self.error: str | None = None
        self.finished = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for piece in self.response.aiter_bytes():
                await self._feed(piece)
                yield piece
        except Exception as error:
            await self._finish(partial=stream_failure(error))
            raise
        await self._feed(b"\n\n")  # a last event without its blank line
        complete = self.error is None and self.assembler.finish_reason is not None
        await self._finish(partial=None if complete else
                           self.error or "the provider stream ended without [DONE]")

    async def aclose(self) -> None:
        try:
            if not self.finished:  # the reader stopped early; the task may be cancelled
                self.finished = True
                self.call.hygiene.spawn(self._store("the client closed the stream before it ended"))
        finally:
            await self.response.aclose()

    async def _feed(self, piece: bytes) -> None:
        """Split the bytes into SSE events (``data:`` lines up to a blank line)."""
        self.buffer += piece
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            line = line.rstrip(b"\r")
            if line.startswith(b"data:"):
                self.data.append(line[5:].strip())
            elif not line and self.data:
                event, self.data = b"\n".join(self.data), []
                await self._event(event)

    async def _event(self, event: bytes) -> None:
        if event == b"[DONE]":
            await self._finish(partial=self.error)
            return
        try:
            data = orjson.loads(event)
        except orjson.JSONDecodeError:
            return
        if isinstance(data, dict) and data.get("error"):
            self.error = f"the provider stream failed: {data['error']}"[:2000]
        elif isinstance(data, dict):
            self.assembler.add(ChatCompletionChunk.construct(**data))

    async def _finish(self, *, partial: str | None) -> None:
        if self.finished:
            return
        self.finished = True
        await self._store(partial)

    async def _store(self, partial: str | None) -> None:
        call, assembler = self.call, self.assembler
        call.report.usage = assembler.usage
        if partial is None:
            await call.finish(assembler.message())
        elif assembler.chunks == 0:
            await call.fail(RuntimeError(partial))
        else:
            await call.finish(assembler.message(), partial=True, error=partial)


def agentmem_client(hygiene: Hygiene, *, client: AsyncOpenAI | None = None,
                    base_url: str | None = None, api_key: str | None = None,
                    session_id: str | None = None, tenant: str | None = None,
                    policy: Policy | str | None = None,
                    inner: httpx.AsyncBaseTransport | None = None) -> AsyncOpenAI:
    """An ``AsyncOpenAI`` whose chat-completions calls go through agentmem.

    Given ``client``, a copy of it (same key, URL, headers, timeout, retries) on an agentmem
    transport; the copy does not keep the original's own httpx client settings (proxies,
    limits) - pass ``inner`` for those.
    """
    transport = AgentmemTransport(hygiene, inner=inner, session_id=session_id, tenant=tenant,
                                  policy=policy)
    if client is not None:
        http = httpx.AsyncClient(transport=transport, timeout=client.timeout)
        return client.copy(http_client=http)
    http = httpx.AsyncClient(transport=transport, timeout=httpx.Timeout(600, connect=5))
    return AsyncOpenAI(base_url=base_url, api_key=api_key, http_client=http)


class AgentmemModelProvider(ModelProvider):
    """``RunConfig(model_provider=...)``: every agent in the run talks chat completions
    through agentmem. agentmem cleans chat-completions bodies, so the Responses API models
    are not used here."""

    def __init__(self, hygiene: Hygiene, *, client: AsyncOpenAI | None = None,
                 base_url: str | None = None, api_key: str | None = None,
                 session_id: str | None = None, tenant: str | None = None,
                 policy: Policy | str | None = None, default_model: str = "gpt-4o-mini"):
        self.hygiene = hygiene
        self.client = agentmem_client(hygiene, client=client, base_url=base_url, api_key=api_key,
                                      session_id=session_id, tenant=tenant, policy=policy)
        self.default_model = default_model
        self._models: dict[str, Model] = {}

    def get_model(self, model_name: str | None) -> Model:
        name = model_name or self.default_model
        if name not in self._models:
            self._models[name] = OpenAIChatCompletionsModel(name, self.client)
        return self._models[name]

    async def aclose(self) -> None:
        await self.client.close()
