"""The OpenAI Responses API as the engine's chat conversation, and back. Pure: no I/O.

The engine works on OpenAI chat messages (its store, stages and upstream all do), so a
Responses request is translated into a chat request, cleaned and sent like any other, and the
chat reply (or stream) is translated back into a Responses object (or Responses events).

Input items map to chat messages one way only where chat has a place for them: a message item
becomes a chat message (``input_text``/``output_text`` parts become ``text`` parts), a run of
``function_call`` items becomes one assistant message's ``tool_calls``, and each
``function_call_output`` becomes a ``tool`` message. The translation remembers which items
each message came from, so ``items_for`` maps the messages the provider received back to the
client's own items, byte for byte, for every message hygiene left unchanged. Anything chat has
no place for (hosted tools, reasoning items, item references...) is refused with a 400 that
names the field, before anything is stored.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
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


# -- back to items -------------------------------------------------------------------------------

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


# -- the reply -----------------------------------------------------------------------------------

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


class EventStream:
    """Chat completion chunks in, Responses stream events out (as dicts, in order).

    One message item (opened at the first text) and one function_call item per tool call (in
    the order the provider started them); each is closed when the stream ends, then
    ``response.completed`` carries the whole response.
    """

    def __init__(self, request: dict[str, Any], response_id: str) -> None:
        self.request = request
        self.response_id = response_id
        self.suffix = response_id.removeprefix("resp_")  # of the item ids
        self.created_at = time.time()
        self.sequence = 0
        self.output: list[dict[str, Any]] = []
        self.text: dict[str, Any] | None = None  # the open message item
        self.calls: dict[int, dict[str, Any]] = {}  # chat tool-call index -> its item
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.model: str | None = None

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return event

    def _response(self, status: str) -> dict[str, Any]:
        return response_object(self.request, self.response_id, created_at=self.created_at,
                               output=self.output, status=status, finish_reason=self.finish_reason,
                               usage=self.usage, model=self.model)

    def start(self) -> Iterator[dict[str, Any]]:
        snapshot = self._response("in_progress")
        yield self._event("response.created", response=snapshot)
        yield self._event("response.in_progress", response=snapshot)

    def add(self, chunk: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """The events one chat chunk (``model_dump(exclude_none=True)``) stands for."""
        self.usage = chunk.get("usage") or self.usage
        self.model = self.model or chunk.get("model")
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            self.finish_reason = choice.get("finish_reason") or self.finish_reason
            delta = choice.get("delta") or {}
            if delta.get("content"):
                yield from self._text_delta(delta["content"])
            if delta.get("refusal"):
                yield from self._text_delta(delta["refusal"], "refusal")
            for call in delta.get("tool_calls") or ():
                yield from self._call_delta(call)

    def _text_delta(self, text: str, kind: str = "output_text") -> Iterator[dict[str, Any]]:
        """Text (or, with ``kind="refusal"``, a refusal) into the message item, opening the
        item and its content part as needed."""
        if self.text is None:
            self.text = {"id": f"msg_{self.suffix}_0", "type": "message",
                         "status": "in_progress", "role": "assistant", "content": []}
            self.output.append(self.text)
            yield self._event("response.output_item.added", output_index=len(self.output) - 1,
                              item={**self.text, "content": []})
        output_index, parts = self.output.index(self.text), self.text["content"]
        field = "refusal" if kind == "refusal" else "text"
        index = next((i for i, part in enumerate(parts) if part["type"] == kind), None)
        if index is None:
            part: dict[str, Any] = {"type": kind, field: ""}
            if kind == "output_text":
                part.update(annotations=[], logprobs=[])
            parts.append(part)
            index = len(parts) - 1
            yield self._event("response.content_part.added", item_id=self.text["id"],
                              output_index=output_index, content_index=index, part=dict(part))
        parts[index][field] += text
        extra: dict[str, Any] = {"logprobs": []} if kind == "output_text" else {}
        yield self._event(f"response.{kind}.delta", item_id=self.text["id"],
                          output_index=output_index, content_index=index, delta=text, **extra)

    def _call_delta(self, call: dict[str, Any]) -> Iterator[dict[str, Any]]:
        index = call.get("index")
        if index is None:  # providers without indices: a new id starts a new call
            index = max(self.calls, default=-1) + (1 if call.get("id") else 0)
        function = call.get("function") or {}
        item = self.calls.get(index)
        if item is None:
            item = {"id": f"fc_{self.suffix}_{len(self.calls)}", "type": "function_call",
                    "status": "in_progress", "call_id": call.get("id"),
                    "name": function.get("name") or "", "arguments": ""}
            self.calls[index] = item
            self.output.append(item)
            yield self._event("response.output_item.added", output_index=len(self.output) - 1,
                              item=dict(item))
        arguments = function.get("arguments") or ""
        if arguments:
            item["arguments"] += arguments
            yield self._event("response.function_call_arguments.delta", item_id=item["id"],
                              output_index=self.output.index(item), delta=arguments)

    def finish(self) -> Iterator[dict[str, Any]]:
        """Close every open item, then ``response.completed`` (or ``incomplete``)."""
        for index, item in enumerate(self.output):
            if item["type"] == "message":
                for content_index, part in enumerate(item["content"]):
                    if part["type"] == "output_text":
                        yield self._event("response.output_text.done", item_id=item["id"],
                                          output_index=index, content_index=content_index,
                                          text=part["text"], logprobs=[])
                    else:
                        yield self._event("response.refusal.done", item_id=item["id"],
                                          output_index=index, content_index=content_index,
                                          refusal=part["refusal"])
                    yield self._event("response.content_part.done", item_id=item["id"],
                                      output_index=index, content_index=content_index,
                                      part=dict(part))
            else:
                yield self._event("response.function_call_arguments.done", item_id=item["id"],
                                  output_index=index, name=item["name"],
                                  arguments=item["arguments"])
            item["status"] = "completed"
            yield self._event("response.output_item.done", output_index=index, item=dict(item))
        response = self._response("completed")
        kind = "response.completed" if response["status"] == "completed" else "response.incomplete"
        yield self._event(kind, response=response)

    def failed(self, error: dict[str, Any]) -> dict[str, Any]:
        """``response.failed``: the provider's stream broke; the error says how."""
        response = self._response("failed")
        response["error"] = {"code": error.get("code") or error.get("type") or "upstream_error",
                             "message": error.get("message") or "the provider stream failed"}
        return self._event("response.failed", response=response)
