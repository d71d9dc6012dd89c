"""The echo upstream's Anthropic Messages endpoint (``POST /v1/messages``).

With it, an ``anthropic/...`` model whose ``api_base`` is the echo server goes through
litellm's real Anthropic provider (its request and response transforms, its SSE parser), so a
test sees the Messages-shaped body a real Anthropic upstream would get: ``system`` as a
top-level field, ``tool_use`` / ``tool_result`` blocks, ``cache_control`` markers.

It answers like the chat endpoint and obeys the same directives (``[[tool:NAME {...}]]``,
``[[status:N]]``, ``[[cut:N]]``, ``[[slow:MS]]``) and scripts; errors and streams have
Anthropic's shapes. A reply longer than ``max_tokens`` words is cut there with
``stop_reason: max_tokens``. With ``thinking`` on, a reply starts with a signed thinking block,
and a tool loop whose last assistant turn lost its thinking block is refused (as Anthropic does).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncGenerator
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse

from agentmem.echo import _DIRECTIVE, CUT_AFTER_S


def add_messages_api(app: FastAPI, received: Any, ids: itertools.count,
                     scripts: list[tuple[str, str]]) -> None:
    """Register ``POST /v1/messages`` on the echo app, sharing its record and scripts."""

    @app.post("/v1/messages")
    async def messages(request: Request):
        body = orjson.loads(await request.body())
        received.append(body)
        history = body.get("messages") or []
        last = history[-1] if history else {}
        text = block_text(last.get("content"))
        directives = _DIRECTIVE.findall(text)
        for kind, value, _ in directives:
            if kind == "slow":
                await asyncio.sleep(int(value) / 1000)
            if kind == "status":
                code = int(value)
                return _error(code, f"echo upstream failing with {code} as asked")
        unsigned = _missing_thinking(body, history)
        if unsigned is not None:
            return _error(400, unsigned)
        answered = [block for block in _blocks(last.get("content")) if block.get("type") == "tool_result"]
        tool_names = {tool.get("name") for tool in body.get("tools") or ()}
        calls = [{"type": "tool_use", "id": f"toolu_echo{next(ids)}", "name": name,
                  "input": orjson.loads(args) if args else {}}
                 for kind, name, args in directives
                 if kind == "tool" and not answered and name in tool_names]
        content = _reply_text(body, history, text, answered, calls, scripts)
        stop = "tool_use" if calls else "end_turn"
        limit = body.get("max_tokens")
        if content and isinstance(limit, int) and len(content.split(" ")) > limit:
            content, stop = " ".join(content.split(" ")[:limit]), "max_tokens"
        blocks = ([{"type": "text", "text": content}] if content else []) + calls
        if (body.get("thinking") or {}).get("type") in {"enabled", "adaptive"}:
            blocks.insert(0, {"type": "thinking", "thinking": f"thinking about: {text[:200]}",
                              "signature": f"sig_echo{next(ids)}"})
        usage = {"input_tokens": sum(len(block_text(m.get("content")).split()) + 3 for m in history),
                 "output_tokens": len((content or "").split()) + 5 * len(calls)}
        message = {"id": f"msg_echo{next(ids)}", "type": "message", "role": "assistant",
                   "model": body.get("model", "echo"), "content": blocks, "stop_reason": stop,
                   "stop_sequence": None, "usage": usage}
        if not body.get("stream"):
            return Response(orjson.dumps(message), media_type="application/json")
        cut = next((int(v) for k, v, _ in directives if k == "cut"), None)
        return StreamingResponse(_events(message, cut), media_type="text/event-stream")


def _missing_thinking(body: dict[str, Any], history: list[dict[str, Any]]) -> str | None:
    """Anthropic's rule with thinking on: the assistant turn of a tool loop in progress must
    still start with its (signed) thinking block, so a proxy that drops it fails here."""
    if (body.get("thinking") or {}).get("type") not in {"enabled", "adaptive"}:
        return None
    turns = [m for m in history if m.get("role") == "assistant"]
    blocks = _blocks(turns[-1].get("content")) if turns else []
    if any(b.get("type") == "tool_use" for b in blocks) and not (
            blocks[0].get("type") in {"thinking", "redacted_thinking"} and
            (blocks[0].get("signature") or blocks[0].get("data"))):
        return ("When thinking is enabled, the last assistant message must start with its "
                "signed thinking block.")
    return None


def block_text(content: Any) -> str:
    """The text of a Messages content (a string or blocks; tool results' text included)."""
    if isinstance(content, str):
        return content
    parts = []
    for block in _blocks(content):
        if block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        elif block.get("type") == "tool_result":
            parts.append(block_text(block.get("content")))
    return "".join(parts)


def _blocks(content: Any) -> list[dict[str, Any]]:
    return [block for block in content if isinstance(block, dict)] if isinstance(content, list) else []


def _reply_text(body: dict[str, Any], history: list[dict[str, Any]], text: str,
                answered: list[dict[str, Any]], calls: list[dict[str, Any]],
                scripts: list[tuple[str, str]]) -> str | None:
    system = body.get("system")
    everything = "\n".join([block_text(system), *(block_text(m.get("content")) for m in history)])
    scripted = next((reply for match, reply in scripts if match in everything), None)
    if scripted is not None:
        return scripted
    if answered:
        results = [block_text(block.get("content")) for message in history
                   for block in _blocks(message.get("content")) if block.get("type") == "tool_result"]
        return "tool results: " + " | ".join(r[:200] for r in results[-3:])
    return None if calls else "echo: " + _DIRECTIVE.sub("", text).strip()[:500]


def _error(status: int, message: str) -> Response:
    kind = "api_error" if status >= 500 else "invalid_request_error"
    return Response(orjson.dumps({"type": "error", "error": {"type": kind, "message": message}}),
                    status_code=status, media_type="application/json")


def _event(data: dict[str, Any]) -> bytes:
    return b"event: " + data["type"].encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


async def _events(message: dict[str, Any], cut: int | None) -> AsyncGenerator[bytes, None]:
    """Anthropic's stream: message_start, ping, each block's start/deltas/stop, message_delta,
    message_stop. ``cut`` drops the connection after that many events."""
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None,
             "usage": {"input_tokens": usage["input_tokens"], "output_tokens": 1}}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}, {"type": "ping"}]
    for index, block in enumerate(message["content"]):
        if block["type"] == "thinking":
            events.append({"type": "content_block_start", "index": index,
                           "content_block": {"type": "thinking", "thinking": "", "signature": ""}})
            events += [{"type": "content_block_delta", "index": index, "delta": delta} for delta in (
                {"type": "thinking_delta", "thinking": block["thinking"]},
                {"type": "signature_delta", "signature": block["signature"]})]
        elif block["type"] == "text":
            events.append({"type": "content_block_start", "index": index,
                           "content_block": {"type": "text", "text": ""}})
            events += [{"type": "content_block_delta", "index": index,
                        "delta": {"type": "text_delta", "text": (" " if i else "") + word}}
                       for i, word in enumerate(block["text"].split(" "))]
        else:
            events.append({"type": "content_block_start", "index": index,
                           "content_block": {**block, "input": {}}})
            arguments = orjson.dumps(block["input"]).decode()
            half = len(arguments) // 2
            events += [{"type": "content_block_delta", "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": piece}}
                       for piece in (arguments[:half], arguments[half:])]
        events.append({"type": "content_block_stop", "index": index})
    events.append({"type": "message_delta",
                   "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                   "usage": {"output_tokens": usage["output_tokens"]}})
    events.append({"type": "message_stop"})
    for sent, event in enumerate(events):
        if cut is not None and sent >= cut:
            await asyncio.sleep(CUT_AFTER_S)  # what was sent is read first (agentmem.echo)
            raise ConnectionAbortedError("echo upstream cutting the stream as asked")
        yield _event(event)
        await asyncio.sleep(0)
