"""Which session a request belongs to.

Order: an explicit id (``X-Session-Id`` header or the ``session_id`` argument), then
``metadata.session_id`` in the body, then the OpenAI ``user`` field, else an id derived from
the conversation's opening (every message up to and including the first user message). The
derived id is stable while a client resends the same history; two conversations that open
identically share a session, where divergence handling keeps both histories' turns. Send an
explicit id when that matters.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from agentmem.errors import InvalidRequest
from agentmem.messages import canonical
from agentmem.store.keys import ID_PATTERN


def session_id_for(body: dict[str, Any], explicit: str | None = None) -> str:
    if explicit is not None:
        return checked_id(explicit, "X-Session-Id")
    metadata = body.get("metadata") or {}
    if isinstance(metadata, dict) and metadata.get("session_id") is not None:
        return checked_id(metadata["session_id"], "metadata.session_id")
    if isinstance(body.get("user"), str) and body["user"]:
        return user_session_id(body["user"])
    return derive_session_id(body["messages"])


def user_session_id(user: str) -> str:
    """OpenAI's ``user`` is any end-user identifier ("John Smith", "tenant/alice"); one that is
    not a session id as it stands is hashed into one, so each end user still keeps one
    session and no valid request is refused for it."""
    if ID_PATTERN.match(user):
        return user
    return "user-" + hashlib.blake2b(user.encode(), digest_size=10).hexdigest()


def derive_session_id(messages: list[dict[str, Any]]) -> str:
    opening = []
    for message in messages:
        opening.append(canonical(message))
        if message.get("role") == "user":
            break
    digest = hashlib.blake2b(orjson.dumps(opening, option=orjson.OPT_SORT_KEYS), digest_size=10)
    return "auto-" + digest.hexdigest()


def checked_id(value: Any, where: str) -> str:
    if not isinstance(value, str) or not ID_PATTERN.match(value):
        raise InvalidRequest(
            f"{where} must be 1-200 characters of letters, digits and . _ : @ + = -",
            param=where)
    return value
