"""``POST /v1/responses`` (and ``/responses``): the OpenAI Responses API over the chat path.

The request is translated into a chat request (``agentmem.responses_api``), cleaned and sent
by the engine exactly as ``/v1/chat/completions`` does (same session, stages, reports and
X-Agentmem headers), and the chat reply or stream is translated back. A response id is
``resp_`` + the call's report id; it is recorded with its session and reply turn, so a
follow-up that sends only ``previous_response_id`` and its new input gets the whole stored
conversation, with hygiene applied to it like any other.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from typing import Any

import orjson
from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from agentmem.api import Call, Hygiene
from agentmem.errors import AgentmemError, HygieneUnavailable, InvalidRequest
from agentmem.proxy.auth import tenant_of
from agentmem.proxy.body import read_json
from agentmem.proxy.chat import _TRUE, RelayResponse, completion_json, header_policy
from agentmem.responses_api import (
    ChatTranslation,
    EventStream,
    output_items,
    response_object,
    to_chat,
)
from agentmem.store import StoreUnavailable
from agentmem.store.responses import ResponseRef, conversation_until, remember_response
from agentmem.upstream import unsent_metadata_note

log = logging.getLogger("agentmem.proxy")
router = APIRouter()


@router.post("/v1/responses")
@router.post("/responses")
async def create_response(request: Request, tenant: str = Depends(tenant_of)):
    state = request.app.state
    settings, hygiene = state.settings, state.hygiene
    raw = await read_json(request, settings.max_body_bytes)
    translation = to_chat(raw, forward=settings.forward_params)
    settings.check_model(raw["model"])
    _refuse_stateful(request.headers, raw)
    policy = header_policy(request.headers.get("x-agentmem-policy"), settings)
    session_id = request.headers.get("x-session-id")
    stored: list[dict[str, Any]] | None = None
    stored_instructions = False
    if raw.get("previous_response_id") is not None:
        ref, stored = await _previous(hygiene, tenant, raw["previous_response_id"], session_id)
        session_id, stored_instructions = ref.session_id, ref.instructions
    messages = translation.conversation(stored, stored_instructions)
    body = {**translation.body, "messages": messages}
    offset = len(messages) - len(translation.messages)
    try:
        async with hygiene.call(body, tenant=tenant, session_id=session_id, policy=policy) as call:
            if translation.not_forwarded:
                call.report.warnings.append(
                    f"fields not forwarded to the provider: {', '.join(translation.not_forwarded)}")
            if note := unsent_metadata_note(translation.body):
                call.report.warnings.append(note)
            response_id = f"resp_{call.report.id}"
            try:
                reply = await call.send()
            except AgentmemError as error:
                error.headers = call.headers()
                raise
            if call.outgoing.get("stream"):
                async def remember() -> None:
                    await _remember(call, tenant, response_id, raw, translation)

                events = _events(EventStream(raw, response_id), call.relay(reply), remember)
                return RelayResponse(events, headers=call.headers(), media_type="text/event-stream",
                                     spawn=hygiene.spawn)
            await call.finish_with_response(reply)
    except InvalidRequest as error:
        raise _in_input_terms(error, translation, offset) from None
    await _remember(call, tenant, response_id, raw, translation)
    data = completion_json(reply)
    choice = (data.get("choices") or [{}])[0]
    body_out = response_object(
        raw, response_id, created_at=data.get("created") or 0,
        output=output_items(choice.get("message") or {}, response_id),
        finish_reason=choice.get("finish_reason"), usage=data.get("usage"))
    return Response(orjson.dumps(body_out), headers=call.headers(), media_type="application/json")


def _refuse_stateful(headers: Mapping[str, str], raw: dict[str, Any]) -> None:
    """agentmem's stateful mode (the client sends only new messages) is chat's and Messages';
    the Responses API has its own, ``previous_response_id``. Taking the header silently would
    send the provider the new input alone and mark the stored history superseded."""
    metadata = raw.get("metadata")
    if headers.get("x-agentmem-stateful", "").lower() in _TRUE or (
            isinstance(metadata, dict) and metadata.get("agentmem_stateful") is True):
        raise InvalidRequest("X-Agentmem-Stateful is not supported on /v1/responses: send "
                             "previous_response_id with the new input instead (the Responses "
                             "API's own way to continue a stored conversation).",
                             param="previous_response_id")


async def _previous(hygiene: Hygiene, tenant: str, response_id: Any, session_id: str | None
                    ) -> tuple[ResponseRef, list[dict[str, Any]]]:
    """The stored conversation a ``previous_response_id`` names (this tenant's only)."""
    if not isinstance(response_id, str) or not response_id:
        raise InvalidRequest("'previous_response_id' must be a response id string.",
                             param="previous_response_id")
    try:
        found = await conversation_until(hygiene.store(), tenant, response_id)
    except StoreUnavailable as error:
        raise HygieneUnavailable(f"previous_response_id needs the session store: {error}") from None
    if found is None:
        raise InvalidRequest(f"Previous response with id '{response_id}' not found.",
                             param="previous_response_id", code="previous_response_not_found")
    ref, conversation = found
    if session_id is not None and session_id != ref.session_id:
        raise InvalidRequest(f"X-Session-Id {session_id!r} is not the session of "
                             f"previous_response_id '{response_id}'; send one or the other.",
                             param="previous_response_id")
    return ref, conversation


async def _remember(call: Call, tenant: str, response_id: str, raw: dict[str, Any],
                    translation: ChatTranslation) -> None:
    """Record the response id for ``previous_response_id`` (unless ``store`` is false)."""
    position = call.report.reply_position
    if raw.get("store") is False or call.store is None or position is None:
        return
    ref = ResponseRef(session_id=call.handle.session_id, position=position,
                      report_id=call.report.id, instructions=translation.instructions is not None)
    try:
        await remember_response(call.store, tenant, response_id, ref, ttl=call.policy.ttl_seconds)
    except StoreUnavailable as error:
        message = f"the response id could not be recorded for previous_response_id ({error})"
        log.warning("session %s: %s", call.handle.session_id, message)
        call.report.warnings.append(message)


async def _events(events: EventStream, chunks: AsyncGenerator[Any, None],
                  remember: Callable[[], Awaitable[None]]) -> AsyncGenerator[bytes, None]:
    """Responses SSE framing (``event: TYPE`` + ``data: JSON``). The response id is recorded
    before ``response.completed``, so a client may follow up as soon as it sees it."""
    try:
        for event in events.start():
            yield _sse(event)
        async for chunk in chunks:
            for event in events.add(chunk.model_dump(exclude_none=True)):
                yield _sse(event)
    except AgentmemError as error:
        yield _sse(events.failed(error.to_body()["error"]))
        return
    finally:
        await chunks.aclose()
    await remember()
    for event in events.finish():
        yield _sse(event)


def _sse(event: dict[str, Any]) -> bytes:
    return b"event: " + event["type"].encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


_MESSAGE_INDEX = re.compile(r"messages\[(\d+)\]")


def _in_input_terms(error: InvalidRequest, translation: ChatTranslation, offset: int
                    ) -> InvalidRequest:
    """A chat validation error about ``messages[k]`` renamed for the input item it came from
    (or the stored conversation of ``previous_response_id``)."""
    def rename(match: re.Match[str]) -> str:
        index = int(match.group(1)) - offset
        if 0 <= index < len(translation.sources):
            return f"input[{translation.sources[index][0]}]"
        if index == -1 and translation.instructions is not None:
            return "instructions"
        return "previous_response_id"

    if error.param is None:
        return error
    message, param = _MESSAGE_INDEX.sub(rename, error.message), _MESSAGE_INDEX.sub(rename, error.param)
    for chat_words, responses_words in _CHAT_WORDS:
        message = message.replace(chat_words, responses_words)
    param = _CHAT_PARAMS.get(param) or re.sub(r"\.tool_call_id$", ".call_id",
                                              re.sub(r"\.tool_calls$", "", param))
    if (message, param) == (error.message, error.param):
        return error
    renamed = InvalidRequest(message, param=param, code=error.code)
    renamed.headers = error.headers
    return renamed


# The chat validator's words for what a Responses client wrote in its own terms.
_CHAT_PARAMS = {"max_tokens": "max_output_tokens"}
_CHAT_WORDS = (
    ("'max_tokens'", "'max_output_tokens'"),
    ("is a tool message whose tool_call_id", "is a function_call_output whose call_id"),
    ("answer a tool call of the assistant message before it", "answer a function_call before it"),
    ("The assistant message ", ""),
    ("has tool_calls that are not answered by tool messages",
     "has function calls that are not answered by function_call_output items"),
    ("answers tool call", "answers function call"),
)
