"""``POST /v1/chat/completions``: the proxy's call path.

Read and validate the body, open the engine's call (session, ingest, stages), send the clean
request through the engine's upstream (litellm), and relay the answer: JSON, or SSE chunk by
chunk. The call stores the reply when the answer is complete (or marks it partial).
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, Callable, Coroutine
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from agentmem.config import Settings
from agentmem.errors import AgentmemError, PolicyError
from agentmem.policy import preset_names
from agentmem.proxy.auth import tenant_of
from agentmem.proxy.body import read_json
from agentmem.upstream import CLIENT_PARAMS, client_params, unsent_metadata_note

router = APIRouter()

_TRUE = {"1", "true", "yes", "on"}


@router.post("/v1/chat/completions")
@router.post("/chat/completions")
async def chat_completions(request: Request):
    # The tenant is resolved here, not as a FastAPI dependency: solving a sub-dependency (cache
    # key, scopes, query and cookie parsing) cost this hot path ~0.1 ms of CPU a call.
    tenant = await tenant_of(request)
    state = request.app.state
    body = await read_json(request, state.settings.max_body_bytes)
    headers = request.headers
    metadata = body.get("metadata") if isinstance(body, dict) else None
    stateful = (headers.get("x-agentmem-stateful", "").lower() in _TRUE
                or (isinstance(metadata, dict) and metadata.get("agentmem_stateful") is True))
    policy = header_policy(headers.get("x-agentmem-policy"), state.settings)
    if isinstance(body, dict):
        state.settings.check_model(body.get("model"))
        body, dropped = client_params(body, CLIENT_PARAMS | frozenset(state.settings.forward_params))
    else:
        dropped = []

    async with state.hygiene.call(body, tenant=tenant, session_id=headers.get("x-session-id"),
                                  stateful=stateful, policy=policy) as call:
        if dropped:
            call.report.warnings.append(f"fields not forwarded to the provider: {', '.join(dropped)}")
        if isinstance(body, dict) and (note := unsent_metadata_note(body)):
            call.report.warnings.append(note)
        try:
            response = await call.send()
        except AgentmemError as error:
            error.headers = {**call.headers(), **(error.headers or {})}  # the provider's Retry-After
            raise
        if call.outgoing.get("stream"):
            return RelayResponse(_sse(call.relay(response)), headers=call.headers(),
                                 media_type="text/event-stream", spawn=state.hygiene.spawn)
        await call.finish_with_response(response)
    return Response(orjson.dumps(completion_json(response)), headers=call.headers(),
                    media_type="application/json")


_POLICY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def header_policy(value: str | None, settings: Settings) -> str | None:
    """The policy a client asked for with X-Agentmem-Policy. Only names are accepted: the
    presets, the server's own policy, and files in the operator's ``policy_dirs`` (by name,
    so a client never reaches any other file; the error says nothing about the server's files).
    """
    if value is None or not settings.allow_policy_header:
        return None
    if value in preset_names() or value == settings.policy:
        return value
    if _POLICY_NAME.fullmatch(value) and ".." not in value:
        for folder in settings.policy_dirs:
            path = folder / f"{value}.yaml"
            if path.is_file():
                return str(path)
    raise PolicyError(f"X-Agentmem-Policy must name a preset ({', '.join(preset_names())}) or a "
                      "policy in the server's policy_dirs", param="X-Agentmem-Policy")


def completion_json(response: Any) -> dict[str, Any]:
    """A litellm ModelResponse as the OpenAI JSON object (litellm-internal fields removed)."""
    data = response.model_dump()
    for choice in data.get("choices") or ():
        message = choice.get("message") or {}
        for key in ("provider_specific_fields", "reasoning_content", "thinking_blocks"):
            message.pop(key, None)
        if not message.get("tool_calls"):
            message.pop("tool_calls", None)
        if message.get("function_call") is None:
            message.pop("function_call", None)
    data.pop("provider_specific_fields", None)
    return data


def chunk_json(chunk: Any) -> bytes:
    data = chunk.model_dump(exclude_none=True)
    data.pop("provider_specific_fields", None)
    if data.get("usage") and all(not c.get("delta") and not c.get("finish_reason")
                                 for c in data.get("choices") or ()):
        data["choices"] = []  # OpenAI's usage chunk (stream_options.include_usage) has no choices
    for choice in data.get("choices") or ():
        choice.setdefault("finish_reason", None)
        delta = choice.get("delta") or {}
        for key in ("provider_specific_fields", "reasoning_content", "thinking_blocks"):
            delta.pop(key, None)
    return orjson.dumps(data)


class RelayResponse(StreamingResponse):
    """A StreamingResponse that closes its iterator when the client hangs up.

    Starlette abandons the body iterator on a disconnect; closing it is what lets the relay
    store the partial reply and release the session lock. The close runs as its own task
    because the request's task is being cancelled.
    """

    def __init__(self, content: AsyncGenerator[bytes, None], *args: Any,
                 spawn: Callable[[Coroutine[Any, Any, None]], Any], **kwargs: Any):
        super().__init__(content, *args, **kwargs)
        self._body = content  # Starlette keeps it as body_iterator, typed only as an iterable
        self._spawn = spawn

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._spawn(self._body.aclose())


async def _sse(chunks: AsyncGenerator[Any, None]) -> AsyncGenerator[bytes, None]:
    """OpenAI's framing: ``data: {json}\\n\\n`` per chunk, then ``data: [DONE]``.

    A provider failure mid-stream ends with an ``error`` event (no [DONE]); OpenAI's clients
    raise it as an APIError.
    """
    try:
        async for chunk in chunks:
            yield b"data: " + chunk_json(chunk) + b"\n\n"
    except AgentmemError as error:
        yield b"data: " + orjson.dumps(error.to_body()) + b"\n\n"
        return
    finally:
        await chunks.aclose()
    yield b"data: [DONE]\n\n"
