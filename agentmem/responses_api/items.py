"""Chat messages back to Responses input items: the client's own items, byte for byte, for
every message of the request that reached the provider unchanged."""

from __future__ import annotations

from typing import Any

from agentmem.responses_api.request import ChatTranslation


def items_for(messages: list[dict[str, Any]], translation: ChatTranslation) -> list[dict[str, Any]]:
    """The input items that the chat ``messages`` (what the provider received) stand for: the
    client's own items, byte for byte, for every message of this request that arrived
    unchanged; a converted item for anything else (stored history, a shortened message).

    The request's messages are the tail of the conversation, so the walk goes backwards: a
    stored message that happens to equal one of the request's is not taken for it.
    """
    out: list[list[dict[str, Any]]] = []
    candidates = list(zip(translation.messages, translation.sources))
    for message in reversed(messages):
        match = next((i for i in range(len(candidates) - 1, -1, -1)
                      if candidates[i][0] == message), None)
        if match is not None:
            out.append([translation.items[i] for i in candidates[match][1]])
            del candidates[match:]
        elif message != translation.instructions:
            out.append(items_of_message(message))
    return [item for group in reversed(out) for item in group]


def items_of_message(message: dict[str, Any]) -> list[dict[str, Any]]:
    """One chat message as Responses input items (the inverse of the input translation)."""
    role = message.get("role")
    if role == "tool":
        return [{"type": "function_call_output", "call_id": message.get("tool_call_id"),
                 "output": _item_content(message.get("content"), "input_text")}]
    out: list[dict[str, Any]] = []
    content = message.get("content")
    if content is not None and content != []:
        kind = "output_text" if role == "assistant" else "input_text"
        out.append({"type": "message", "role": role, "content": _item_content(content, kind)})
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        out.append({"type": "function_call", "call_id": call.get("id"),
                    "name": function.get("name"), "arguments": function.get("arguments", "")})
    return out


def _item_content(content: Any, text_kind: str) -> Any:
    if not isinstance(content, list):
        return content
    parts = []
    for part in content:
        kind = part.get("type")
        if kind == "text":
            parts.append({"type": text_kind, "text": part.get("text", "")})
        elif kind == "image_url":
            image = part.get("image_url") or {}
            parts.append({"type": "input_image", "image_url": image.get("url"),
                          **({"detail": image["detail"]} if "detail" in image else {})})
        elif kind == "file":
            parts.append({"type": "input_file", **(part.get("file") or {})})
        else:
            parts.append(part)
    return parts
