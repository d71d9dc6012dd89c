"""Query-independent work on new turns: hashes, sentences, token counts, embeddings.

This runs once per turn, when the turn is first seen; the stored results are what later
calls and stages read instead of recomputing.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import orjson

from agentmem.messages import chain_hash, message_hash, text_of
from agentmem.store.sessions import TurnRecord
from agentmem.structured import message_units
from agentmem.text import MESSAGE_OVERHEAD_TOKENS, count_tokens


def chain_hashes(messages: list[dict[str, Any]]) -> list[str]:
    chains, previous = [], ""
    for message in messages:
        previous = chain_hash(previous, message_hash(message))
        chains.append(previous)
    return chains


def source_of(message: dict[str, Any], history: list[dict[str, Any]]) -> str:
    """user | system | assistant | tool:NAME (the tool's name comes from the call it answers)."""
    role = message.get("role", "")
    if role == "developer":
        return "system"
    if role == "function":
        return f"tool:{message.get('name', '')}"
    if role == "tool":
        wanted = message.get("tool_call_id")
        for earlier in reversed(history):
            for call in earlier.get("tool_calls") or ():
                if call.get("id") == wanted:
                    return f"tool:{call.get('function', {}).get('name', '')}"
        return "tool:"
    return role


def message_tokens(message: dict[str, Any]) -> int:
    tokens = MESSAGE_OVERHEAD_TOKENS + count_tokens(text_of(message))
    for call in message.get("tool_calls") or ():
        function = call.get("function", {})
        tokens += count_tokens(function.get("name", "")) + count_tokens(function.get("arguments", ""))
    return tokens


def messages_tokens(messages: list[dict[str, Any]]) -> int:
    return sum(message_tokens(m) for m in messages)


def tools_tokens(tools: list[dict[str, Any]] | None) -> int:
    return sum(_tool_tokens(orjson.dumps(tool, option=orjson.OPT_SORT_KEYS)) for tool in tools or ())


@lru_cache(maxsize=4096)
def _tool_tokens(serialised: bytes) -> int:
    return count_tokens(serialised.decode())


def build_turns(history: list[dict[str, Any]], chains: list[str], start: int, first_id: int
                ) -> list[TurnRecord]:
    """Turn records for history[start:], with ids from ``first_id`` on."""
    turns = []
    for offset, message in enumerate(history[start:]):
        position = start + offset
        text = text_of(message)
        turns.append(TurnRecord(
            id=first_id + offset, position=position, role=message.get("role", ""),
            message=message, hash=message_hash(message), chain=chains[position],
            tokens=message_tokens(message),
            sentences=[(s.start, s.end) for s in message_units(text, message.get("role", ""))],
            source=source_of(message, history[:position]),
        ))
    return turns

