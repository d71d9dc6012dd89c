"""Conversations several test files send through the proxy."""

from __future__ import annotations

from typing import Any


def backup_log_conversation() -> tuple[str, list[dict[str, Any]]]:
    """A question answered by a long tool output (twelve log lines, one of them relevant):
    the shape a highlighter backend prunes through the prune stage. Returns (output, messages)."""
    output = " ".join(f"Line {i} of the nightly log says backup {i} finished." for i in range(12))
    messages = [{"role": "user", "content": "Did backup 7 finish?"},
                {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                                                      "function": {"name": "logs", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": output}]
    return output, messages
