"""The client's prompt-cache breakpoints (``cache_control`` marks), which the stages respect.

A client that marks a block with ``cache_control`` (Anthropic's Messages API, or a chat request
litellm sends on to Anthropic, Bedrock or Vertex) asks the provider to cache the prompt up to
that block, in the provider's order: tools, then the system prompt, then the messages. A stage
that rewrites anything before the mark for the newest query (older history pruned anew, the
tool list chosen anew) changes that prefix on every call: the provider's cache misses from the
first changed block, and the whole prompt is billed again, as a cache write (1.25 times the
input price) instead of a cache read (0.1 times). Audit 9 (stop 71) modelled a Claude-Code-shaped
session through ``/v1/messages`` at 3.3-4 times the cost of sending it unchanged, although
agentmem sent 37-59% fewer tokens.

So by default (``prune.respect_cache_marks``, ``tools.respect_cache_marks``) what lies before
the request's last mark goes out as the client sent it: the tools whenever anything is marked
(they come first), and the messages up to the last marked one. What comes after the last mark
is cleaned as usual; quarantine still withholds (a record is rare and then stays, so the prefix
changes once), and the budget stage still cuts a request the model's window cannot hold.
Clients that mark nothing (OpenAI's automatic prefix cache) are cleaned as before.
"""

from __future__ import annotations

from typing import Any

MARK = "cache_control"


def _marked(block: Any) -> bool:
    return isinstance(block, dict) and block.get(MARK) is not None


def message_marked(message: dict[str, Any]) -> bool:
    """The message, or one of its content parts, carries a cache mark."""
    content = message.get("content")
    return _marked(message) or (isinstance(content, list) and any(_marked(p) for p in content))


def last_marked_message(messages: list[dict[str, Any]]) -> int | None:
    """Index of the last message with a cache mark (on itself or a content part), if any."""
    return next((i for i in range(len(messages) - 1, -1, -1) if message_marked(messages[i])), None)


def tools_marked(tools: list[dict[str, Any]] | None) -> bool:
    """Whether a tool carries a cache mark."""
    return any(_marked(tool) for tool in tools or ())


def marks_cache(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> bool:
    """Whether the request marks anything for the provider's prompt cache."""
    return tools_marked(tools) or last_marked_message(messages) is not None
