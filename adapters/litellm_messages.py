"""The LiteLLM plugin on LiteLLM's ``/v1/messages`` (Anthropic's Messages API).

LiteLLM runs the plugin's hooks for that route too, with call type ``anthropic_messages`` and
``data`` holding the Messages body as the client sent it (``messages``, ``system``, ``tools``,
``tool_choice`` ... beside LiteLLM's own keys). The engine thinks in chat messages, so the
request goes through ``agentmem.anthropic_api`` both ways: ``to_chat`` for ``Hygiene.prepare``
and ``from_chat`` for the cleaned request LiteLLM sends on, in which every turn and block that
hygiene left alone is the client's own (signed thinking blocks, ``cache_control`` markers).

After the call nothing here is needed for a reply that arrives whole: LiteLLM's success
callback gets a chat ``ModelResponse`` for this route as for chat completions (assembled from
the stream for streams). What LiteLLM does not assemble is a stream that stops early: its
streaming iterator hook relays the provider's SSE bytes, which ``MessagesStreamAssembler``
folds into the reply the client received.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import HTTPException

from agentmem.anthropic_api import (
    FORWARDED,
    EventAssembler,
    chat_reply,
    chat_usage,
    error_json,
    from_chat,
    parse_request,
    to_chat,
)
from agentmem.errors import AgentmemError
from agentmem.streaming import ReplyAssembler

ANTHROPIC_MESSAGES = "anthropic_messages"  # LiteLLM's call type for its /v1/messages route
_WRITTEN = ("system", "messages", "tools", "tool_choice")
_BLOCKS = frozenset({"text", "image", "document", "tool_use", "tool_result", "thinking",
                     "redacted_thinking"})


def messages_body(data: dict[str, Any]) -> dict[str, Any]:
    """The Messages request inside LiteLLM's ``data`` (its own keys, the logging object among
    them, stay out of the engine's view)."""
    return {key: data[key] for key in FORWARDED if key in data}


def unmodelled(body: dict[str, Any]) -> str | None:
    """What in a request agentmem has no chat form for (server tools, block kinds it does not
    know), or ``None``.

    agentmem's own ``/v1/messages`` refuses these, since its provider call is a chat call. Here
    LiteLLM sends the request as Anthropic wrote it, and refusing would break requests that work
    without the plugin (a web search through Claude Code); so they pass through uncleaned.
    """
    for tool in body.get("tools") if isinstance(body.get("tools"), list) else ():
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind not in (None, "custom"):
            return f"server tools ({kind})"
    for turn in body.get("messages") if isinstance(body.get("messages"), list) else ():
        content = turn.get("content") if isinstance(turn, dict) else None
        for block in content if isinstance(content, list) else ():
            reason = _unmodelled_block(block)
            if reason is not None:
                return reason
    return None


def _unmodelled_block(block: Any) -> str | None:
    if not isinstance(block, dict):
        return None  # malformed: parse_request names it
    kind = block.get("type")
    if kind not in _BLOCKS:
        return f"{kind} blocks"
    source = block.get("source") if isinstance(block.get("source"), dict) else {}
    if kind == "image" and source.get("type") not in ("base64", "url"):
        return f"images with a {source.get('type')} source"
    if kind == "document" and (source.get("type"), source.get("media_type")) != (
            "base64", "application/pdf"):
        return "documents other than base64 PDFs"
    content = block.get("content")
    if kind == "tool_result" and isinstance(content, list):
        return next((reason for part in content
                     if (reason := _unmodelled_block(part)) is not None), None)
    return None


def chat_request(body: dict[str, Any]) -> dict[str, Any]:
    """The chat request the engine prepares; raises ``AgentmemError`` (nothing stored yet) for
    a request Anthropic would refuse too.

    ``to_chat``'s notes are not reported: they say what agentmem's own route cannot forward,
    and LiteLLM forwards every field of this request itself."""
    chat, _ = to_chat(parse_request(body), body)
    return chat


def refusal(error: AgentmemError) -> HTTPException:
    """An invalid request's answer. LiteLLM's ``/v1/messages`` turns an ``HTTPException`` from
    a pre-call hook into Anthropic's error shape (type from the status, message from the
    detail), so the client's SDK raises it as it would Anthropic's own."""
    return HTTPException(status_code=error.status_code, detail=error_json(error))


def write_back(data: dict[str, Any], outgoing: dict[str, Any], body: dict[str, Any]) -> None:
    """Put the cleaned request into ``data`` in Messages form, in place (LiteLLM routes it)."""
    fields = from_chat(outgoing, body)
    for key in _WRITTEN:
        if key in fields:
            data[key] = fields[key]
        else:
            data.pop(key, None)
    if "tools" not in data:  # no tool left: nothing to choose among
        data.pop("tool_choice", None)


class MessagesStreamAssembler(ReplyAssembler):
    """What a relayed ``/v1/messages`` stream delivered, as the chat reply the engine stores.

    LiteLLM hands the streaming iterator hook the provider's SSE bytes as they come, a frame
    possibly split across chunks (an event may also come as a dict from LiteLLM's own
    translation). ``chunks`` counts content events only: a stream that stopped before any
    content has nothing to store, like a chat stream left before its first token.
    """

    def __init__(self) -> None:
        super().__init__()
        self.events = EventAssembler()
        self._buffer = b""

    def add(self, chunk: Any) -> None:
        if isinstance(chunk, dict):
            self._feed(chunk)
            return
        if isinstance(chunk, str):
            chunk = chunk.encode()
        if not isinstance(chunk, (bytes, bytearray)):
            return
        self._buffer = (self._buffer + bytes(chunk)).replace(b"\r\n", b"\n")
        while b"\n\n" in self._buffer:
            frame, _, self._buffer = self._buffer.partition(b"\n\n")
            event = _event(frame)
            if event is not None:
                self._feed(event)

    def _feed(self, event: dict[str, Any]) -> None:
        self.events.feed(event)
        if str(event.get("type", "")).startswith("content_block"):
            self.chunks += 1
        if self.events.usage:
            self.usage = chat_usage(self.events.usage)

    def message(self) -> dict[str, Any]:
        return chat_reply(self.events.message())


def _event(frame: bytes) -> dict[str, Any] | None:
    data = b"\n".join(line[5:].strip() for line in frame.split(b"\n") if line.startswith(b"data:"))
    if not data:
        return None
    try:
        event = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return event if isinstance(event, dict) else None
