"""Where things are in an OpenAI conversation: one home for the questions every stage asks.

Which message is the newest user turn, what the current query is, where the verbatim recent
window begins, which messages form one tool-call unit. Each stage and the validator used to
answer these on its own, with three different defaults for "no user message"; here each
question has one answer, and the default is in the name.
"""

from __future__ import annotations

from typing import Any

from agentmem.messages import text_of, tool_call_units

__all__ = ["agent_step_start", "last_user_index", "query_of", "recent_start", "tool_call_units",
           "user_indices"]

Message = dict[str, Any]

TOOL_RESULT_CHARACTERS = 1000  # how much of a pending tool result joins the query


def user_indices(history: list[Message]) -> list[int]:
    """Positions of the user messages, oldest first."""
    return [i for i, m in enumerate(history) if m.get("role") == "user"]


def last_user_index(history: list[Message]) -> int | None:
    """Position of the newest user message; None when there is none."""
    for index in range(len(history) - 1, -1, -1):
        if history[index].get("role") == "user":
            return index
    return None


def opening_index(messages: list[Message]) -> int | None:
    """Position of the first message that is not a system or developer message."""
    return next((i for i, m in enumerate(messages) if m.get("role") not in {"system", "developer"}),
                None)


def opening_role(messages: list[Message]) -> str | None:
    """What a conversation opens with (Anthropic, Bedrock and Gemini refuse one that opens with
    the assistant's turn): the role of its first message past the system prompt."""
    index = opening_index(messages)
    return None if index is None else messages[index].get("role")


def agent_step_start(history: list[Message]) -> int:
    """Where the current agent step begins: the newest user message (its position), or the end
    of the history when there is none. Messages from here on are never pruned."""
    last = last_user_index(history)
    return len(history) if last is None else last


def continues_step(history: list[Message]) -> bool:
    """Whether this is a later call of an agent step: the assistant already answered the
    newest user message with a tool call (whose results follow)."""
    last = last_user_index(history)
    return last is not None and any(
        m.get("role") == "assistant" and (m.get("tool_calls") or m.get("function_call"))
        for m in history[last + 1:])


def query_of(history: list[Message],
             withheld: dict[int, set[tuple[int, int]]] | None = None) -> str:
    """The text a turn is about: the newest user message, plus the pending tool calls and
    results of the current agent step (an agent's step is about what it just asked for).
    ``withheld``: spans of a message's text an earlier stage withheld, by history position
    (quarantine's, e.g. a poisoned claim in the step's latest result), left out of the query,
    so what the model will not see does not choose what it sees."""
    withheld = withheld or {}
    last = last_user_index(history)
    first = last if last is not None else 0
    parts = []
    for index in range(first, len(history)):
        message = history[index]
        for call in message.get("tool_calls") or ():
            function = call.get("function", {})
            parts.append(f"{function.get('name', '')} {function.get('arguments', '')}")
        if index == last or message.get("role") == "tool":
            text = without_spans(text_of(message), withheld.get(index))
            parts.append(text if index == last else text[:TOOL_RESULT_CHARACTERS])
    return " ".join(p for p in parts if p).strip()


def without_spans(text: str, spans: set[tuple[int, int]] | None) -> str:
    """``text`` less ``spans`` (each piece left joined by a space)."""
    if not spans:
        return text
    pieces, cursor = [], 0
    for start, end in sorted(spans):
        pieces.append(text[cursor:start])
        cursor = max(cursor, end)
    pieces.append(text[cursor:])
    return " ".join(piece.strip() for piece in pieces if piece.strip())


def recent_start(history: list[Message], keep_exchanges: int) -> int:
    """Where the verbatim recent window begins: the ``keep_exchanges``-th last user message
    (the newest one when 0); the end of the history when there is no user message."""
    users = user_indices(history)
    if not users:
        return len(history)
    return users[-min(keep_exchanges, len(users))] if keep_exchanges > 0 else users[-1]
