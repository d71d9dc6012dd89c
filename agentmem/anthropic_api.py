"""Anthropic's Messages API in terms of the engine's chat model, and back.

The engine thinks in OpenAI chat messages (sessions, tool-call units, stages). A Messages
request maps onto them one to one: ``system`` becomes the system message, an assistant turn's
``tool_use`` blocks become its ``tool_calls``, a user turn's ``tool_result`` blocks become
``tool`` messages (ahead of the turn's other blocks), images become ``image_url`` parts. Every
``cache_control`` marker stays where litellm's Anthropic transform looks for it (on the text
or image part, on the tool call, on the tool message, on the tool), so a request that hygiene
leaves alone reaches an Anthropic upstream as the client wrote it. Replies and streams map
back to Messages objects and SSE events.

Pure functions and one small state machine (``StreamTranslator``): no I/O, no engine.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agentmem.errors import AgentmemError, InvalidRequest
from agentmem.messages import TOOL_NAME_PATTERN, describe_validation_error

# -- the request schema -------------------------------------------------------------------


class _Block(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")


class TextBlock(_Block):
    type: Literal["text"]
    text: str


class Base64Source(_Block):
    type: Literal["base64"]
    media_type: str = Field(min_length=1)
    data: str = Field(min_length=1)


class UrlSource(_Block):
    type: Literal["url"]
    url: str = Field(min_length=1)


class ImageBlock(_Block):
    type: Literal["image"]
    source: Annotated[Base64Source | UrlSource, Field(discriminator="type")]


class DocumentBlock(_Block):
    type: Literal["document"]
    source: Base64Source


ToolResultPart = Annotated[TextBlock | ImageBlock | DocumentBlock, Field(discriminator="type")]


class ToolResultBlock(_Block):
    type: Literal["tool_result"]
    tool_use_id: str = Field(min_length=1)
    content: str | list[ToolResultPart] | None = None
    is_error: bool | None = None


class ToolUseBlock(_Block):
    type: Literal["tool_use"]
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: dict[str, Any]


class ThinkingBlock(_Block):
    type: Literal["thinking"]
    thinking: str
    signature: str | None = None


class RedactedThinkingBlock(_Block):
    type: Literal["redacted_thinking"]
    data: str


UserBlock = Annotated[TextBlock | ImageBlock | DocumentBlock | ToolResultBlock,
                      Field(discriminator="type")]
AssistantBlock = Annotated[TextBlock | ToolUseBlock | ThinkingBlock | RedactedThinkingBlock,
                           Field(discriminator="type")]


class UserTurn(_Block):
    role: Literal["user"]
    content: str | list[UserBlock]


class AssistantTurn(_Block):
    role: Literal["assistant"]
    content: str | list[AssistantBlock]


Turn = Annotated[UserTurn | AssistantTurn, Field(discriminator="role")]


class Tool(_Block):
    type: Literal["custom"] | None = None
    name: str = Field(pattern=TOOL_NAME_PATTERN)
    description: str | None = None
    input_schema: dict[str, Any]


class ToolChoice(_Block):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None

    @model_validator(mode="after")
    def _named(self) -> ToolChoice:
        if self.type == "tool" and not self.name:
            raise ValueError("tool_choice of type 'tool' needs a name")
        return self


class Metadata(BaseModel):
    """Anthropic's ``metadata``: ``user_id`` is text (litellm sends it on as the provider's
    own field); agentmem's ``session_id`` and ``agentmem_stateful`` may sit beside it."""

    model_config = ConfigDict(strict=True, extra="allow")

    user_id: str | None = None


class MessagesRequest(BaseModel):
    """The fields agentmem maps; others are reported and not forwarded (see ``FORWARDED``)."""

    model_config = ConfigDict(strict=True, extra="allow")

    model: str = Field(min_length=1)
    messages: list[Turn] = Field(min_length=1)
    max_tokens: int = Field(ge=1)
    system: str | list[TextBlock] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    temperature: float | int | None = Field(default=None, ge=0, le=1)
    top_p: float | int | None = Field(default=None, ge=0, le=1)
    top_k: int | None = Field(default=None, ge=0)
    stop_sequences: list[str] | None = None
    metadata: Metadata | None = None
    stream: bool | None = None
    thinking: dict[str, Any] | None = None
    cache_control: dict[str, Any] | None = None


class CountTokensRequest(MessagesRequest):
    max_tokens: int = Field(default=1, ge=1)  # count_tokens takes no max_tokens


FORWARDED = frozenset(MessagesRequest.model_fields)


# -- request: Messages -> chat --------------------------------------------------------------


def parse_request(body: Any, *, counting: bool = False, stateful: bool = False) -> MessagesRequest:
    """Validate a decoded body; raise ``InvalidRequest`` naming the field, before anything else
    happens (nothing is stored for a request that fails here). ``stateful``: the messages
    continue a stored history, so a tool_result may answer a tool_use only the store holds
    (the engine checks the pairs on the whole history)."""
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    _refuse_server_tools(body.get("tools"))
    try:
        request = (CountTokensRequest if counting else MessagesRequest).model_validate(body)
    except ValidationError as error:
        message, param = describe_validation_error(error)
        raise InvalidRequest(message, param=param) from None
    _check_text(request)
    if not stateful:
        _check_tool_pairs(request.messages)
    names = [tool.name for tool in request.tools or ()]
    if len(set(names)) != len(names):
        raise InvalidRequest("tools: two tools have the same name.", param="tools")
    choice = request.tool_choice
    if choice is not None and choice.type == "tool" and choice.name not in names:
        raise InvalidRequest(f"tool_choice names '{choice.name}', which is not in tools.",
                             param="tool_choice")
    return request


def _check_text(request: MessagesRequest) -> None:
    """Anthropic's rules for text: a text block holds non-whitespace text, and every message
    has content but a final assistant one (a prefill may be empty). Refused here, named, rather
    than sent on, where litellm would fill the gap with text of its own."""
    blocks: list[tuple[str, Any]] = [
        (f"system[{position}]", block) for position, block in
        enumerate(request.system if isinstance(request.system, list) else ())]
    last = len(request.messages) - 1
    for index, turn in enumerate(request.messages):
        if not turn.content and not (index == last and isinstance(turn, AssistantTurn)):
            raise InvalidRequest(f"messages[{index}]: a message must have non-empty content "
                                 "(only a final assistant message may be empty).",
                                 param=f"messages[{index}].content")
        if isinstance(turn.content, list):
            blocks += [(f"messages[{index}].content[{position}]", block)
                       for position, block in enumerate(turn.content)]
    for where, block in blocks:
        if isinstance(block, TextBlock) and not block.text.strip():
            raise InvalidRequest(f"{where}: text content blocks must contain non-whitespace text.",
                                 param=f"{where}.text")


def _refuse_server_tools(tools: Any) -> None:
    """Anthropic's server tools (web search, code execution, ...) run at Anthropic and have no
    chat-completions form; say so instead of a schema error about ``type``."""
    for index, tool in enumerate(tools if isinstance(tools, list) else ()):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind not in (None, "custom"):
            raise InvalidRequest(f"tools[{index}]: server tools (type {kind!r}) are not supported "
                                 "through agentmem; only client tools (name, description, "
                                 "input_schema) are.", param=f"tools[{index}].type")


def _check_tool_pairs(turns: list[UserTurn | AssistantTurn]) -> None:
    """Anthropic's rule: each ``tool_use`` is answered by a ``tool_result`` in the next user
    turn, and each ``tool_result`` answers a ``tool_use`` of the turn just before it."""
    offered: set[str] = set()
    for index, turn in enumerate(turns):
        blocks = turn.content if isinstance(turn.content, list) else []
        if isinstance(turn, AssistantTurn):
            if offered:
                raise _unanswered(index - 1, offered)
            offered = {block.id for block in blocks if isinstance(block, ToolUseBlock)}
            continue
        for position, block in enumerate(blocks):
            if isinstance(block, ToolResultBlock):
                if block.tool_use_id not in offered:
                    raise InvalidRequest(
                        f"messages[{index}].content[{position}]: tool_result for '{block.tool_use_id}' "
                        "does not answer a tool_use block of the assistant message just before it.",
                        param=f"messages[{index}].content[{position}].tool_use_id")
                offered.discard(block.tool_use_id)
        if offered:
            raise _unanswered(index - 1, offered)
    # a final assistant turn with tool_use blocks is a prefill the provider judges


def _unanswered(index: int, ids: set[str]) -> InvalidRequest:
    return InvalidRequest(
        f"messages[{index}]: tool_use ids {sorted(ids)} have no tool_result blocks in the next "
        "user message.", param=f"messages[{index}].content")


def to_chat(request: MessagesRequest, body: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The chat request the engine runs, and notes on what could not be carried over.

    ``body`` is the raw JSON the request was parsed from: blocks travel as the client's own
    dicts (every key they carry, ``cache_control`` included), never re-serialised.
    """
    notes: list[str] = []
    messages: list[dict[str, Any]] = []
    system = body.get("system")
    if system:
        messages.append({"role": "system", "content": system})
    for index, turn in enumerate(body["messages"]):
        if turn["role"] == "user":
            messages += _user_messages(turn["content"], index, notes)
        else:
            messages.append(_assistant_message(turn["content"]))
    if request.cache_control is not None:
        messages[-1] = _marked(messages[-1], body["cache_control"])
    chat: dict[str, Any] = {"model": request.model, "messages": messages,
                            "max_tokens": request.max_tokens}
    if body.get("tools") is not None:
        chat["tools"] = [_chat_tool(tool) for tool in body["tools"]]
    if request.tool_choice is not None:
        chat.update(_tool_choice(request.tool_choice))
    for name in ("temperature", "top_p", "top_k", "thinking", "metadata"):
        if body.get(name) is not None:
            chat[name] = body[name]
    if request.stop_sequences:
        chat["stop"] = request.stop_sequences
    user = request.metadata.user_id if request.metadata is not None else None
    if user:
        chat["user"] = user  # litellm sends it to Anthropic as metadata.user_id
    if request.stream:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    dropped = sorted(set(body) - FORWARDED)
    if dropped:
        notes.append(f"fields not forwarded to the provider: {', '.join(dropped)}")
    return chat, notes


def _user_messages(content: Any, index: int, notes: list[str]) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    results = [block for block in content if block["type"] == "tool_result"]
    others = [_user_part(block, index) for block in content if block["type"] != "tool_result"]
    out = [_tool_message(block, index, notes) for block in results]
    if others or not results:
        out.append({"role": "user", "content": others})
    return out


def _marked(message: dict[str, Any], marker: dict[str, Any]) -> dict[str, Any]:
    """Top-level ``cache_control`` as Anthropic applies it: on the last cacheable block, here
    the last message's last part (a copy; a string content becomes one text part)."""
    if message["role"] == "tool":
        return {**message, "cache_control": marker}
    content = message.get("content")
    parts: list[dict[str, Any]]
    if isinstance(content, str):
        parts = [{"type": "text", "text": content}]
    elif content:
        parts = list(content)
    else:  # an assistant turn of tool calls only: mark its last call
        calls = [dict(call) for call in message.get("tool_calls") or ()]
        if calls:
            calls[-1]["cache_control"] = marker
        return {**message, "tool_calls": calls}
    parts[-1] = {**parts[-1], "cache_control": marker}
    return {**message, "content": parts}


def _user_part(block: dict[str, Any], index: int) -> dict[str, Any]:
    kind = block["type"]
    if kind == "text":
        return block
    source = block["source"]
    url = source["url"] if source["type"] == "url" else (
        f"data:{source['media_type']};base64,{source['data']}")
    if kind == "image":
        part: dict[str, Any] = {"type": "image_url", "image_url": {"url": url}}
    elif source["type"] == "base64" and source["media_type"] == "application/pdf":
        part = {"type": "file", "file": {"file_data": url}}
    else:
        raise InvalidRequest(f"messages[{index}]: only base64 PDF documents are supported.",
                             param=f"messages[{index}].content")
    if block.get("cache_control") is not None:
        part["cache_control"] = block["cache_control"]
    return part


def _tool_message(block: dict[str, Any], index: int, notes: list[str]) -> dict[str, Any]:
    content = block.get("content")
    if isinstance(content, list):
        content = [_user_part(part, index) for part in content]  # images, PDFs: parts too
    message: dict[str, Any] = {"role": "tool", "tool_call_id": block["tool_use_id"],
                               "content": "" if content is None else content}
    if block.get("cache_control") is not None:
        message["cache_control"] = block["cache_control"]  # litellm reads it here
    if block.get("is_error"):
        notes.append(f"messages[{index}]: tool_result is_error is not forwarded "
                     "(the chat format has no field for it)")
    return message


def _assistant_message(content: Any) -> dict[str, Any]:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    texts = [block for block in content if block["type"] == "text"]
    message: dict[str, Any] = {"role": "assistant", "content": texts or None}
    calls = []
    for block in content:
        if block["type"] != "tool_use":
            continue
        call: dict[str, Any] = {"id": block["id"], "type": "function",
                                "function": {"name": block["name"],
                                             "arguments": orjson.dumps(block["input"]).decode()}}
        if block.get("cache_control") is not None:
            call["cache_control"] = block["cache_control"]
        calls.append(call)
    if calls:
        message["tool_calls"] = calls
    thinking = [block for block in content if block["type"] in {"thinking", "redacted_thinking"}]
    if thinking:
        message["thinking_blocks"] = thinking  # litellm's field; sent back to Anthropic first
    return message


def _chat_tool(tool: dict[str, Any]) -> dict[str, Any]:
    function = {"name": tool["name"], "parameters": tool["input_schema"]}
    if tool.get("description") is not None:
        function["description"] = tool["description"]
    out: dict[str, Any] = {"type": "function", "function": function}
    if tool.get("cache_control") is not None:
        out["cache_control"] = tool["cache_control"]
    return out


def _tool_choice(choice: ToolChoice) -> dict[str, Any]:
    out: dict[str, Any] = {"tool_choice": {
        "auto": "auto", "any": "required", "none": "none"}.get(choice.type) or
        {"type": "function", "function": {"name": choice.name}}}
    if choice.disable_parallel_tool_use is not None:
        out["parallel_tool_calls"] = not choice.disable_parallel_tool_use
    return out


# -- reply: chat -> Messages ---------------------------------------------------------------

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
                "function_call": "tool_use", "content_filter": "refusal"}


def message_id(upstream_id: str | None) -> str:
    """Anthropic's ids start with ``msg_``; an Anthropic upstream's own id is kept."""
    upstream_id = upstream_id or "agentmem"
    return upstream_id if upstream_id.startswith("msg_") else f"msg_{upstream_id}"


def tool_input(arguments: str | None) -> dict[str, Any]:
    """A tool call's JSON arguments as the ``input`` object (a model's malformed JSON is kept
    under ``_raw`` rather than lost)."""
    if not arguments:
        return {}
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return {"_raw": arguments}
    return value if isinstance(value, dict) else {"_raw": arguments}


def usage_json(usage: Any) -> dict[str, int]:
    """litellm's usage as Anthropic's: ``input_tokens`` excludes the cached ones."""
    data = _plain(usage) or {}
    details = data.get("prompt_tokens_details") or {}
    read = int(data.get("cache_read_input_tokens") or details.get("cached_tokens") or 0)
    created = int(data.get("cache_creation_input_tokens") or 0)
    prompt = int(data.get("prompt_tokens") or 0)
    return {"input_tokens": max(prompt - read - created, 0),
            "output_tokens": int(data.get("completion_tokens") or 0),
            "cache_creation_input_tokens": created, "cache_read_input_tokens": read}


def message_json(response: Any, model: str) -> dict[str, Any]:
    """A litellm ModelResponse as a Messages response object."""
    choice = response.choices[0] if response.choices else None
    message = _plain(choice.message) if choice is not None else {}
    content: list[dict[str, Any]] = [dict(block) for block in message.get("thinking_blocks") or ()]
    if message.get("content"):
        content.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        content.append({"type": "tool_use", "id": call.get("id"), "name": function.get("name"),
                        "input": tool_input(function.get("arguments"))})
    finish = choice.finish_reason if choice is not None else None
    return {"id": message_id(getattr(response, "id", None)), "type": "message",
            "role": "assistant", "model": model, "content": content,
            "stop_reason": STOP_REASONS.get(finish or "stop", "end_turn"), "stop_sequence": None,
            "usage": usage_json(getattr(response, "usage", None))}


def _plain(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if hasattr(value, "model_dump"):
        return value.model_dump()
    return dict(value)


# -- streams: chat chunks -> Messages events ------------------------------------------------


class StreamTranslator:
    """Folds litellm's chunks into Anthropic's event sequence: ``message_start``; for each
    content block ``content_block_start``, its deltas, ``content_block_stop``; then
    ``message_delta`` (stop reason, usage) and ``message_stop``. A block closes when the next
    kind of content (text, a new tool call, thinking) begins."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.started = False
        self.index = -1
        self.open: tuple[str, Any] | None = None  # (kind, tool call index) of the open block
        self.finish: str | None = None
        self.usage: Any = None

    def feed(self, chunk: Any) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if getattr(chunk, "usage", None):
            self.usage = chunk.usage
        if not self.started:  # input tokens here only if the provider said (Anthropic does)
            self.started = True
            events.append({"type": "message_start", "message": {
                "id": message_id(getattr(chunk, "id", None)), "type": "message",
                "role": "assistant", "model": self.model, "content": [], "stop_reason": None,
                "stop_sequence": None, "usage": {**usage_json(self.usage), "output_tokens": 0}}})
        for choice in getattr(chunk, "choices", None) or ():
            if getattr(choice, "index", 0) != 0:
                continue
            self.finish = getattr(choice, "finish_reason", None) or self.finish
            delta = getattr(choice, "delta", None)
            if delta is not None:
                events += self._delta(delta)
        return events

    def _delta(self, delta: Any) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        for block in getattr(delta, "thinking_blocks", None) or ():
            events += self._thinking(_plain(block))
        if getattr(delta, "content", None):
            events += self._ensure(("text", None), {"type": "text", "text": ""})
            events.append(self._event({"type": "text_delta", "text": delta.content}))
        for call in getattr(delta, "tool_calls", None) or ():
            key = getattr(call, "index", None)
            function = getattr(call, "function", None)
            if getattr(call, "id", None) or self.open != ("tool", key):
                events += self._close()
                events += self._ensure(("tool", key), {
                    "type": "tool_use", "id": getattr(call, "id", None),
                    "name": getattr(function, "name", None), "input": {}})
            arguments = getattr(function, "arguments", None)
            if arguments:
                events.append(self._event({"type": "input_json_delta", "partial_json": arguments}))
        return events

    def _thinking(self, block: dict[str, Any]) -> list[dict[str, Any]]:
        if block.get("type") == "redacted_thinking":
            events = self._close()
            events += self._ensure(("redacted", None), {"type": "redacted_thinking",
                                                        "data": block.get("data", "")})
            return events + self._close()
        events = self._ensure(("thinking", None), {"type": "thinking", "thinking": "",
                                                   "signature": ""})
        if block.get("thinking"):
            events.append(self._event({"type": "thinking_delta", "thinking": block["thinking"]}))
        if block.get("signature"):
            events.append(self._event({"type": "signature_delta", "signature": block["signature"]}))
        return events

    def _ensure(self, kind: tuple[str, Any], start: dict[str, Any]) -> list[dict[str, Any]]:
        if self.open == kind:
            return []
        events = self._close()
        self.index += 1
        self.open = kind
        return events + [{"type": "content_block_start", "index": self.index, "content_block": start}]

    def _close(self) -> list[dict[str, Any]]:
        if self.open is None:
            return []
        self.open = None
        return [{"type": "content_block_stop", "index": self.index}]

    def _event(self, delta: dict[str, Any]) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": self.index, "delta": delta}

    def end(self) -> list[dict[str, Any]]:
        """The closing events, once the provider's stream has ended."""
        events = ([] if self.started else self.feed(None)) + self._close()
        events.append({"type": "message_delta",
                       "delta": {"stop_reason": STOP_REASONS.get(self.finish or "stop", "end_turn"),
                                 "stop_sequence": None},
                       "usage": usage_json(self.usage)})
        events.append({"type": "message_stop"})
        return events


# -- errors -----------------------------------------------------------------------------------

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
               529: "overloaded_error"}


def error_json(error: AgentmemError) -> dict[str, Any]:
    """Anthropic's error shape for any agentmem error: the type follows the status."""
    status = error.status_code
    kind = ERROR_TYPES.get(status) or ("api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": error.message}}
