"""A chat reply as a Responses object: output items, status and usage under Responses' names."""

from __future__ import annotations

from typing import Any


def output_items(message: dict[str, Any], response_id: str) -> list[dict[str, Any]]:
    """A chat reply message as Responses output items: a message item for its text or refusal,
    then one function_call item per tool call."""
    suffix = response_id.removeprefix("resp_")
    out: list[dict[str, Any]] = []
    parts = []
    if message.get("content"):
        text = message["content"] if isinstance(message["content"], str) else "".join(
            p.get("text", "") for p in message["content"] if isinstance(p, dict))
        parts.append({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
    if message.get("refusal"):
        parts.append({"type": "refusal", "refusal": message["refusal"]})
    if parts:
        out.append({"id": f"msg_{suffix}_0", "type": "message", "status": "completed",
                    "role": "assistant", "content": parts})
    for index, call in enumerate(message.get("tool_calls") or ()):
        function = call.get("function") or {}
        out.append({"id": f"fc_{suffix}_{index}", "type": "function_call",
                    "status": "completed", "call_id": call.get("id"), "name": function.get("name"),
                    "arguments": function.get("arguments") or ""})
    return out


def usage_of(usage: dict[str, Any] | None) -> dict[str, Any] | None:
    """Chat usage counts under Responses' names."""
    if not usage:
        return None
    prompt = usage.get("prompt_tokens") or 0
    completion = usage.get("completion_tokens") or 0
    details = usage.get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens") or 0
    written = details.get("cache_creation_tokens") or usage.get("cache_creation_input_tokens") or 0
    reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
    return {"input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": written},
            "output_tokens": completion, "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": usage.get("total_tokens") or prompt + completion}


_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def response_object(request: dict[str, Any], response_id: str, *, created_at: float,
                    output: list[dict[str, Any]], status: str = "completed",
                    finish_reason: str | None = None, usage: dict[str, Any] | None = None,
                    model: str | None = None) -> dict[str, Any]:
    """The Responses object: the request's settings echoed, the output items and the usage."""
    incomplete = _INCOMPLETE.get(finish_reason or "")
    if status == "completed" and incomplete:
        status = "incomplete"
    text = request.get("text") or {"format": {"type": "text"}}
    return {
        "id": response_id, "object": "response", "created_at": int(created_at), "status": status,
        "background": False, "error": None,
        "incomplete_details": {"reason": incomplete} if status == "incomplete" else None,
        "instructions": request.get("instructions"),
        "max_output_tokens": request.get("max_output_tokens"),
        "model": model or request.get("model"), "output": output,
        "parallel_tool_calls": request.get("parallel_tool_calls", True),
        "previous_response_id": request.get("previous_response_id"),
        "reasoning": request.get("reasoning") or {"effort": None, "summary": None},
        "store": request.get("store", True), "temperature": request.get("temperature"),
        "text": text, "tool_choice": request.get("tool_choice", "auto"),
        "tools": request.get("tools") or [], "top_p": request.get("top_p"),
        "truncation": request.get("truncation", "disabled"), "usage": usage_of(usage),
        "user": request.get("user"), "metadata": request.get("metadata") or {},
    }
