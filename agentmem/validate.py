"""The one check every outgoing request passes, whatever the stages did.

It compares the draft with the incoming history and refuses anything a provider would
reject or a user would not expect: reordered messages, a tool call split from its replies,
an edited system message or last user message, a conversation that opened with the user's
turn opening with the assistant's, an empty request.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from agentmem.conversation import last_user_index, opening_role
from agentmem.messages import canonical, check_conversation
from agentmem.stages.base import Draft


class OutgoingInvalid(Exception):
    """The pipeline produced a request that must not be sent; the reason says which rule."""


def validate_outgoing(history: list[dict[str, Any]], draft: Draft) -> None:
    kept = draft.messages
    if not kept:
        raise OutgoingInvalid("the request would have no messages")
    indices = [m.index for m in kept]
    if any(b <= a for a, b in pairwise(indices)):
        raise OutgoingInvalid(f"kept messages are out of their original order: {indices}")
    if indices[-1] >= len(history) or indices[0] < 0:
        raise OutgoingInvalid("a kept message does not come from the incoming history")

    kept_by_index = {m.index: m.message for m in kept}
    last_user = last_user_index(history)
    for index, original in enumerate(history):
        role = original.get("role")
        must_stay = index == last_user or role in {"system", "developer"}
        if not must_stay:
            continue
        if index not in kept_by_index:
            raise OutgoingInvalid(f"messages[{index}] ({role}) must be kept")
        if kept_by_index[index] is not original and canonical(kept_by_index[index]) != canonical(original):
            raise OutgoingInvalid(f"messages[{index}] ({role}) must be kept unchanged")

    for outgoing in kept:
        original = history[outgoing.index]
        if outgoing.message is original:
            continue
        for key in ("role", "tool_call_id", "tool_calls", "name"):
            if outgoing.message.get(key) != original.get(key):
                raise OutgoingInvalid(
                    f"messages[{outgoing.index}]: stages may change only content, not {key!r}")

    if opening_role(history) == "user" and opening_role([m.message for m in kept]) != "user":
        raise OutgoingInvalid("the request would open with the assistant's turn, which "
                              "Anthropic, Bedrock and Gemini refuse")

    _check_units(history, kept_by_index)
    try:
        check_conversation(draft.plain_messages())
    except Exception as error:  # the same rules the client's request had to pass
        raise OutgoingInvalid(f"not a valid request: {error}") from None

    if draft.tools is not None:
        names = [t.get("function", {}).get("name") for t in draft.tools]
        if len(set(names)) != len(names):
            raise OutgoingInvalid("a tool is offered twice")


def _check_units(history: list[dict[str, Any]], kept: dict[int, dict[str, Any]]) -> None:
    """An assistant message with tool_calls and all of its replies: all kept or none."""
    call_owner: dict[str, int] = {}
    members: dict[int, list[int]] = {}
    for index, message in enumerate(history):
        if message.get("role") == "assistant":
            for call in message.get("tool_calls") or ():
                call_owner[call["id"]] = index
                members.setdefault(index, [index])
        elif message.get("role") == "tool" and message.get("tool_call_id") in call_owner:
            members[call_owner[message["tool_call_id"]]].append(index)
    for owner, unit in members.items():
        present = [i in kept for i in unit]
        if any(present) and not all(present):
            missing = [i for i, p in zip(unit, present) if not p]
            raise OutgoingInvalid(
                f"the tool-call unit of messages[{owner}] is split: messages {missing} were dropped "
                "but the rest of the unit was kept")
