"""``POST /v1/messages``: Anthropic's Messages API on the same call path as chat.

What Claude Code and the Anthropic SDKs send when ``ANTHROPIC_BASE_URL`` points here. The
request is translated to the engine's chat call (``agentmem.anthropic_api``), so sessions,
pruning, quarantine and tool loadout apply exactly as on ``/v1/chat/completions``, with the
same ``X-Agentmem-*`` headers; the provider is reached through litellm (an ``anthropic/...``
model goes out as a Messages request again). The answer goes back as a Messages object or as
Anthropic's SSE events, and every error has Anthropic's shape
(``{"type": "error", "error": {"type", "message"}}``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Mapping
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from agentmem.anthropic_api import (
    StreamTranslator,
    error_json,
    message_json,
    parse_request,
    to_chat,
)
from agentmem.errors import AgentmemError
from agentmem.identity import derive_session_id
from agentmem.ingest import messages_tokens, tools_tokens
from agentmem.proxy.auth import tenant_of
from agentmem.proxy.body import read_json
from agentmem.proxy.chat import _TRUE, RelayResponse, header_policy

log = logging.getLogger("agentmem.proxy")
router = APIRouter()


@router.post("/v1/messages")
async def create_message(request: Request) -> Response:
    try:
        return await _create(request)
    except AgentmemError as error:
        return error_response(error)
    except Exception as error:  # a bug of ours: logged, and still in Anthropic's shape
        log.exception("unhandled error on %s", request.url.path)
        return error_response(AgentmemError(f"agentmem internal error: {type(error).__name__}"))


@router.post("/v1/messages/count_tokens")
async def count_tokens(request: Request) -> Response:
    """The request's input tokens as the client wrote it (before hygiene), counted with the
    tokenizer the reports use (litellm's)."""
    try:
        await tenant_of(request)
        settings = request.app.state.settings
        body = await read_json(request, settings.max_body_bytes)
        if isinstance(body, dict):
            settings.check_model(body.get("model"))
        chat, _ = to_chat(parse_request(body, counting=True), body)
    except AgentmemError as error:
        return error_response(error)
    return JSONResponse({"input_tokens": messages_tokens(chat["messages"])
                         + tools_tokens(chat.get("tools"))})


async def _create(request: Request) -> Response:
    state = request.app.state
    tenant = await tenant_of(request)
    body = await read_json(request, state.settings.max_body_bytes)
    if isinstance(body, dict):  # the allow-list, as on every route: before anything is stored or sent
        state.settings.check_model(body.get("model"))
    headers = request.headers
    metadata = body.get("metadata") if isinstance(body, dict) else None
    stateful = (headers.get("x-agentmem-stateful", "").lower() in _TRUE
                or (isinstance(metadata, dict) and metadata.get("agentmem_stateful") is True))
    parsed = parse_request(body, stateful=stateful)
    chat, notes = to_chat(parsed, body)
    policy = header_policy(headers.get("x-agentmem-policy"), state.settings)
    async with state.hygiene.call(chat, tenant=tenant, session_id=_session_id(headers, chat, stateful),
                                  stateful=stateful, policy=policy) as call:
        call.report.warnings.extend(notes)
        try:
            response = await call.send()
        except AgentmemError as error:
            error.headers = call.headers()
            raise
        if call.outgoing.get("stream"):
            return RelayResponse(_events(call.relay(response), parsed.model), headers=call.headers(),
                                 media_type="text/event-stream", spawn=state.hygiene.spawn)
        await call.finish_with_response(response)
    return Response(orjson.dumps(message_json(response, parsed.model)), headers=call.headers(),
                    media_type="application/json")


def _session_id(headers: Mapping[str, str], chat: dict[str, Any], stateful: bool) -> str | None:
    """``X-Session-Id``, else ``metadata.session_id`` (the engine reads it), else the id derived
    from the conversation's opening. Not ``metadata.user_id``: it is forwarded as ``user``,
    and Claude Code sends one user_id for all its conversations at once (main loop, sub-agents,
    title calls), which would make them one session."""
    explicit = headers.get("x-session-id")
    if explicit is not None or stateful or (chat.get("metadata") or {}).get("session_id") is not None:
        return explicit
    return derive_session_id(chat["messages"])


def error_response(error: AgentmemError) -> Response:
    return JSONResponse(error_json(error), status_code=error.status_code,
                        headers=getattr(error, "headers", None))


async def _events(chunks: AsyncGenerator[Any, None], model: str) -> AsyncGenerator[bytes, None]:
    """Anthropic's SSE framing (``event: TYPE`` + ``data: JSON``) of the translated stream.

    A provider failure mid-stream ends with an ``error`` event, as Anthropic's API does; the
    SDKs raise it.
    """
    translator = StreamTranslator(model)
    try:
        async for chunk in chunks:
            for event in translator.feed(chunk):
                yield _frame(event)
        for event in translator.end():
            yield _frame(event)
    except AgentmemError as error:
        yield _frame(error_json(error))
    finally:
        await chunks.aclose()


def _frame(event: dict[str, Any]) -> bytes:
    return b"event: " + event["type"].encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"
