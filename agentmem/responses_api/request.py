"""A Responses request as a chat request: input items, instructions, tools and options.

Where chat has no place for something (hosted tools, reasoning items, item references...) the
request is refused with a 400 naming the field, before anything is stored.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from agentmem.errors import InvalidRequest

# Request fields: passed as they are, or translated below (``background`` only when false).
# Any other field (``include``, ``truncation``, ...) has no chat equivalent: it is not
# forwarded and a warning header says so. Refused: requests that translation cannot serve.
_PASSED = ("temperature", "top_p", "parallel_tool_calls", "metadata", "user", "service_tier",
           "prompt_cache_key", "safety_identifier", "stream", "timeout")
_HANDLED = frozenset({"model", "input", "instructions", "tools", "tool_choice", "max_output_tokens",
                      "reasoning", "text", "store", "previous_response_id", "background", *_PASSED})
_REFUSED = {
    "conversation": "conversations are not supported; use previous_response_id or send the input",
    "prompt": "stored prompt templates are not supported; send instructions and input",
}
_ROLES = frozenset({"user", "system", "developer", "assistant"})
_TOOL_CHOICES = frozenset({"auto", "none", "required"})


@dataclass
class ChatTranslation:
    """A Responses request as a chat request, and where each chat message came from."""

    body: dict[str, Any]  # the chat request, without ``messages``
    instructions: dict[str, Any] | None  # the system message made of ``instructions``
    messages: list[dict[str, Any]]  # the request's input as chat messages
    sources: list[tuple[int, ...]]  # for each of ``messages``, the indices of its input items
    items: list[dict[str, Any]]  # the input items as the client sent them
    not_forwarded: list[str] = field(default_factory=list)

    def conversation(self, stored: list[dict[str, Any]] | None = None,
                     stored_instructions: bool = False) -> list[dict[str, Any]]:
        """The whole chat history of the call: the stored conversation a
        ``previous_response_id`` names (if any), then this request's input.

        As in OpenAI's API, the previous response's instructions are not carried over: the
        stored conversation's leading system message, when it was made of instructions, is
        replaced by this request's (kept as is when they are equal, so the stored turns still
        match and nothing is re-ingested).
        """
        head = [self.instructions] if self.instructions is not None else []
        if stored is None:
            return [*head, *self.messages]
        rest = stored[1:] if stored_instructions and stored else stored
        if stored_instructions and stored and head and stored[0] == head[0]:
            head = [stored[0]]
        return [*head, *rest, *self.messages]


def to_chat(request: Any, *, forward: Iterable[str] = ()) -> ChatTranslation:
    """Translate a Responses request body; raise InvalidRequest naming the field it cannot take."""
    if not isinstance(request, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    model = request.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequest("'model' is required and must be a non-empty string.", param="model")
    for name, why in _REFUSED.items():
        if request.get(name) is not None:
            raise InvalidRequest(f"'{name}' is not supported by agentmem's Responses API: {why}.",
                                 param=name)
    if request.get("background") is True:
        raise InvalidRequest("'background' responses are not supported by agentmem's Responses "
                             "API; send the request without it.", param="background")
    items = _input_items(request.get("input"))
    messages, sources = _messages_of(items)
    instructions = request.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise InvalidRequest("'instructions' must be a string.", param="instructions")
    body: dict[str, Any] = {"model": model}
    for name in _PASSED:
        if name in request:
            body[name] = request[name]
    if "max_output_tokens" in request:
        body["max_tokens"] = request["max_output_tokens"]
    if request.get("tools"):
        body["tools"] = chat_tools(request["tools"])
    if request.get("tool_choice") is not None:
        body["tool_choice"] = chat_tool_choice(request["tool_choice"])
    not_forwarded = _reasoning(request.get("reasoning"), body)
    _text(request.get("text"), body)
    if body.get("stream"):
        body["stream_options"] = {"include_usage": True}  # for the usage of response.completed
    extra = set(forward)
    for name in request:
        if name in extra and name not in _HANDLED:
            body[name] = request[name]
        elif name not in _HANDLED and request[name] is not None:
            not_forwarded.append(name)
    return ChatTranslation(body, {"role": "system", "content": instructions} if instructions else None,
                           messages, sources, items, sorted(not_forwarded))


# -- input ---------------------------------------------------------------------------------------

def _input_items(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise InvalidRequest("'input' must be a string or a non-empty list of input items.",
                             param="input")
    for index, item in enumerate(value):
        if not isinstance(item, dict):
            raise InvalidRequest(f"input[{index}] must be an object.", param=f"input[{index}]")
    return value


def _messages_of(items: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[tuple[int, ...]]]:
    messages: list[dict[str, Any]] = []
    sources: list[tuple[int, ...]] = []
    calls_open = False  # the last message is an assistant turn that function_call items join
    for index, item in enumerate(items):
        where = f"input[{index}]"
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            message = _message(item, where)
            messages.append(message)
            sources.append((index,))
            calls_open = message["role"] == "assistant"
        elif kind == "function_call":
            call = _function_call(item, where)
            if calls_open:
                messages[-1].setdefault("tool_calls", []).append(call)
                sources[-1] = (*sources[-1], index)
            else:
                messages.append({"role": "assistant", "tool_calls": [call]})
                sources.append((index,))
                calls_open = True
        elif kind == "function_call_output":
            messages.append(_function_output(item, where))
            sources.append((index,))
            calls_open = False
        else:
            raise InvalidRequest(
                f"{where}.type {kind!r} is not supported: agentmem's Responses API takes message, "
                "function_call and function_call_output items.", param=f"{where}.type")
    return messages, sources


def _message(item: dict[str, Any], where: str) -> dict[str, Any]:
    role = item.get("role")
    if role not in _ROLES:
        raise InvalidRequest(f"{where}.role must be one of {', '.join(sorted(_ROLES))}.",
                             param=f"{where}.role")
    content = item.get("content")
    if isinstance(content, str):
        return {"role": role, "content": content}
    if not isinstance(content, list):
        raise InvalidRequest(f"{where}.content must be a string or a list of content parts.",
                             param=f"{where}.content")
    return {"role": role, "content": [_part(part, role, f"{where}.content[{i}]")
                                      for i, part in enumerate(content)]}


def _part(part: Any, role: str, where: str) -> dict[str, Any]:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind in ("input_text", "output_text") and isinstance(part.get("text"), str):
        return {"type": "text", "text": part["text"]}
    if kind == "refusal" and role == "assistant" and isinstance(part.get("refusal"), str):
        return {"type": "refusal", "refusal": part["refusal"]}
    if kind == "input_image" and role == "user" and isinstance(part.get("image_url"), str):
        image = {"url": part["image_url"]}
        if part.get("detail") is not None:
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    if kind == "input_file" and role == "user" and (part.get("file_id") or part.get("file_data")):
        return {"type": "file", "file": {k: part[k] for k in ("file_id", "file_data", "filename")
                                         if part.get(k) is not None}}
    raise InvalidRequest(
        f"{where} is not supported for role {role!r}: use input_text or output_text parts (with "
        "text), input_image with an image_url or input_file (user messages), refusal (assistant).",
        param=f"{where}.type" if kind else where)


def _function_call(item: dict[str, Any], where: str) -> dict[str, Any]:
    for name in ("call_id", "name", "arguments"):
        if not isinstance(item.get(name), str) or (name != "arguments" and not item[name]):
            raise InvalidRequest(f"{where}.{name} is required and must be a string.",
                                 param=f"{where}.{name}")
    return {"id": item["call_id"], "type": "function",
            "function": {"name": item["name"], "arguments": item["arguments"]}}


def _function_output(item: dict[str, Any], where: str) -> dict[str, Any]:
    call_id, output = item.get("call_id"), item.get("output")
    if not isinstance(call_id, str) or not call_id:
        raise InvalidRequest(f"{where}.call_id is required and must be a string.",
                             param=f"{where}.call_id")
    if isinstance(output, list):
        output = [_part(part, "tool", f"{where}.output[{i}]") for i, part in enumerate(output)]
    elif not isinstance(output, str):
        raise InvalidRequest(f"{where}.output must be a string or a list of input_text parts.",
                             param=f"{where}.output")
    return {"role": "tool", "tool_call_id": call_id, "content": output}


# -- tools and options -----------------------------------------------------------------------------

def chat_tools(tools: Any) -> list[dict[str, Any]]:
    """Responses' flat function tools as chat's nested ones; any other tool type is refused."""
    if not isinstance(tools, list):
        raise InvalidRequest("'tools' must be a list.", param="tools")
    out = []
    for index, tool in enumerate(tools):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind != "function":
            raise InvalidRequest(
                f"tools[{index}].type {kind!r} is not supported: agentmem's Responses API serves "
                "function tools only (built-in tools need OpenAI's own Responses endpoint).",
                param=f"tools[{index}].type")
        if not isinstance(tool.get("name"), str) or not tool["name"]:
            raise InvalidRequest(f"tools[{index}].name is required.", param=f"tools[{index}].name")
        function = {key: tool[key] for key in ("name", "description", "parameters", "strict")
                    if tool.get(key) is not None}
        out.append({"type": "function", "function": function})
    return out


def chat_tool_choice(choice: Any) -> Any:
    if isinstance(choice, str) and choice in _TOOL_CHOICES:
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" \
            and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise InvalidRequest("'tool_choice' must be auto, none, required or {\"type\": \"function\", "
                         "\"name\": ...}; hosted-tool choices are not supported.",
                         param="tool_choice")


def _reasoning(reasoning: Any, body: dict[str, Any]) -> list[str]:
    if reasoning is None:
        return []
    if not isinstance(reasoning, dict):
        raise InvalidRequest("'reasoning' must be an object.", param="reasoning")
    if reasoning.get("effort") is not None:
        body["reasoning_effort"] = reasoning["effort"]
    return [f"reasoning.{key}" for key in reasoning if key != "effort" and reasoning[key] is not None]


def _text(text: Any, body: dict[str, Any]) -> None:
    if text is None:
        return
    if not isinstance(text, dict):
        raise InvalidRequest("'text' must be an object.", param="text")
    if text.get("verbosity") is not None:
        body["verbosity"] = text["verbosity"]
    fmt = text.get("format")
    if fmt is None or (isinstance(fmt, dict) and fmt.get("type") == "text"):
        return
    if isinstance(fmt, dict) and fmt.get("type") == "json_object":
        body["response_format"] = {"type": "json_object"}
    elif isinstance(fmt, dict) and fmt.get("type") == "json_schema" and "schema" in fmt:
        body["response_format"] = {"type": "json_schema", "json_schema": {
            key: fmt[key] for key in ("name", "schema", "strict", "description") if key in fmt}}
    else:
        raise InvalidRequest("text.format must be text, json_object or json_schema with a schema.",
                             param="text.format")
