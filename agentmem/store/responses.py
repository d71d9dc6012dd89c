"""Responses API ids in the store: which session and turn a ``previous_response_id`` names.

A response id maps to its session, the position of its reply turn and the report that wrote
it. The conversation up to that reply is rebuilt from the session's turns, which are never
modified: normally it is the head of the active history; if the session has since branched
(a client resent an edited history), the turns active when the reply was written are found
again, because turn ids only grow: at each position, the newest turn not newer than the reply.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from redis.exceptions import RedisError

from agentmem.store.keys import response_ref
from agentmem.store.sessions import SessionHandle, SessionStore, StoreUnavailable


class ResponseRef(BaseModel):
    """What a response id stands for."""

    session_id: str
    position: int  # the reply turn's position in the session
    report_id: str  # the report of the call that wrote the reply (also on the reply turn)
    instructions: bool  # the conversation starts with a system message made of instructions


async def remember_response(store: SessionStore, tenant: str, response_id: str, ref: ResponseRef,
                            *, ttl: int | None) -> None:
    try:
        await store.redis.set(response_ref(tenant, response_id), ref.model_dump_json(),
                              ex=ttl or None)
    except (RedisError, OSError) as error:
        raise StoreUnavailable(f"{type(error).__name__}: {error}") from error


async def conversation_until(store: SessionStore, tenant: str, response_id: str
                             ) -> tuple[ResponseRef, list[dict[str, Any]]] | None:
    """The chat history up to and including the response's reply, or None if the id is unknown
    to this tenant (or its session was deleted or expired)."""
    try:
        raw = await store.redis.get(response_ref(tenant, response_id))
    except (RedisError, OSError) as error:
        raise StoreUnavailable(f"{type(error).__name__}: {error}") from error
    if raw is None:
        return None
    ref = ResponseRef.model_validate_json(raw)
    handle = SessionHandle(tenant, ref.session_id)
    active = await store.active_turns(handle)
    if len(active) > ref.position and active[ref.position].report_id == ref.report_id:
        return ref, [turn.message for turn in active[: ref.position + 1]]
    turns = await store.all_turns(handle)
    reply = next((t for t in turns if t.report_id == ref.report_id and t.position == ref.position),
                 None)
    if reply is None:
        return None
    at: dict[int, Any] = {}
    for turn in turns:  # sorted by id: the last one seen at a position wins
        if turn.id <= reply.id and turn.position <= ref.position:
            at[turn.position] = turn
    if sorted(at) != list(range(ref.position + 1)):
        return None
    return ref, [at[position].message for position in range(ref.position + 1)]
