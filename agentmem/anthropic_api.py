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
            messages += _user_messages(turn["content"], index)
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


def _user_messages(content: Any, index: int) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    results = [block for block in content if block["type"] == "tool_result"]
    others = [_user_part(block, index) for block in content if block["type"] != "tool_result"]
    out = [_tool_message(block, index) for block in results]
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


def _tool_message(block: dict[str, Any], index: int) -> dict[str, Any]:
    content = block.get("content")
    if isinstance(content, list):
        content = [_user_part(part, index) for part in content]  # images, PDFs: parts too
    if block.get("is_error"):
        # The chat format has no field for it (nor has litellm's Anthropic transform): said in
        # the text, so the model still reads that the tool failed, not that it answered this.
        if isinstance(content, list):
            content = [{"type": "text", "text": TOOL_ERROR.strip()}, *content]
        else:
            content = TOOL_ERROR + (content or "")
    message: dict[str, Any] = {"role": "tool", "tool_call_id": block["tool_use_id"],
                               "content": "" if content is None else content}
    if block.get("cache_control") is not None:
        message["cache_control"] = block["cache_control"]  # litellm reads it here
    return message


TOOL_ERROR = "Tool error: "  # what a tool_result marked is_error says first in chat form


def _assistant_message(content: Any) -> dict[str, Any]:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    texts = [block for block in content if block["type"] == "text"]
    message: dict[str, Any] = {"role": "assistant", "content": texts or None}
    calls = [_tool_call(block) for block in content if block["type"] == "tool_use"]
    if calls:
        message["tool_calls"] = calls
    thinking = [block for block in content if block["type"] in {"thinking", "redacted_thinking"}]
    if thinking:
        message["thinking_blocks"] = thinking  # litellm's field; sent back to Anthropic first
    return message


def _tool_call(block: dict[str, Any]) -> dict[str, Any]:
    call: dict[str, Any] = {"id": block["id"], "type": "function",
                            "function": {"name": block["name"],
                                         "arguments": orjson.dumps(block["input"]).decode()}}
    if block.get("cache_control") is not None:
        call["cache_control"] = block["cache_control"]
    return call


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


# -- request: chat -> Messages (the engine's rewrite, back in the client's terms) ------------

_KEY_OPTIONS = orjson.OPT_SORT_KEYS


def _key(value: Any) -> bytes:
    return orjson.dumps(value, option=_KEY_OPTIONS)


class _Originals:
    """The client's own turns, blocks, tools and tool choice, found by their chat form.

    ``from_chat`` looks each chat item up here before building it anew: whatever hygiene left
    as it was goes back exactly as the client wrote it, with what the chat form cannot say
    (block order inside a turn, string or block content, ``is_error``, a tool's ``type``)."""

    def __init__(self, body: dict[str, Any] | None) -> None:
        self.turns: dict[bytes, dict[str, Any]] = {}
        self.items: dict[bytes, dict[str, Any]] = {}  # blocks and tools
        self.results: dict[str, dict[str, Any]] = {}  # tool_result blocks by tool_use_id
        self.tool_choice: dict[bytes, dict[str, Any]] = {}
        self.marker: Any = None
        if body is None:
            return
        self.marker = body.get("cache_control")
        turns = body["messages"]
        for index, turn in enumerate(turns):
            group = (_user_messages(turn["content"], index) if turn["role"] == "user"
                     else [_assistant_message(turn["content"])])
            if index == len(turns) - 1 and self.marker is not None:
                group[-1] = _marked(group[-1], self.marker)  # as to_chat marks it
            self.turns[_key(group)] = turn
            self._blocks(turn["content"], index)
        for tool in body.get("tools") or ():
            self.items[_key(_chat_tool(tool))] = tool
        if body.get("tool_choice") is not None:
            choice = body["tool_choice"]
            self.tool_choice[_key(_tool_choice(ToolChoice.model_validate(choice)))] = choice

    def _blocks(self, content: Any, index: int) -> None:
        for block in content if isinstance(content, list) else ():
            kind = block["type"]
            if kind == "tool_use":
                self.items[_key(_tool_call(block))] = block
            elif kind == "tool_result":
                self.items[_key(_tool_message(block, index))] = block
                self.results[block["tool_use_id"]] = block
            elif kind in {"image", "document"}:
                self.items[_key(_user_part(block, index))] = block


def from_chat(chat: dict[str, Any], original: dict[str, Any] | None = None) -> dict[str, Any]:
    """The Messages fields (``system``, ``messages``, ``tools``, ``tool_choice``) of a chat
    request: the reverse of ``to_chat``, for a caller that must send on an Anthropic request
    after hygiene rewrote its chat form (the LiteLLM plugin's ``/v1/messages``).

    ``original``: the Messages body the chat request came from. Each turn, block, tool and
    tool choice whose chat form is unchanged goes back as the client wrote it; only what
    hygiene changed is rebuilt (a rebuilt ``tool_result`` keeps the client's ``is_error``).
    Without it the result is the canonical Messages form of the chat request. A field absent
    from the result has no value (no system message, no tools left).
    """
    known = _Originals(original)
    out: dict[str, Any] = {}
    system = _system(chat["messages"])
    if system is not None:
        out["system"] = system
    turns = _turns([m for m in chat["messages"] if m["role"] != "system"], known)
    if known.marker is not None and turns:
        _unmark_last(turns, known)
    out["messages"] = turns
    if chat.get("tools"):
        out["tools"] = [known.items.get(_key(tool)) or _anthropic_tool(tool)
                        for tool in chat["tools"]]
    choice = _anthropic_tool_choice(chat, known)
    if choice is not None:
        out["tool_choice"] = choice
    return out


def _system(messages: list[dict[str, Any]]) -> str | list[dict[str, Any]] | None:
    """Every system message's content as ``system`` (to_chat makes one, at the head): one kept
    as it was; several joined as text blocks, in order."""
    contents = [m.get("content") for m in messages if m["role"] == "system" and m.get("content")]
    if not contents:
        return None
    if len(contents) == 1:
        return contents[0]
    return [block for content in contents for block in _text_blocks(content)]


def _text_blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return list(content or ())


def _turns(messages: list[dict[str, Any]], known: _Originals) -> list[dict[str, Any]]:
    """Chat messages as alternating Messages turns: ``tool`` messages open the user turn that
    follows them (as ``tool_result`` blocks, first, as Anthropic requires), and two turns of
    one role in a row (hygiene dropped what stood between them) become one."""
    turns: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for message in messages:
        if message["role"] == "tool":
            results.append(message)
            continue
        if message["role"] == "user":
            _append(turns, _user_turn([*results, message], known))
        else:
            if results:
                _append(turns, _user_turn(results, known))
            _append(turns, _assistant_turn(message, known))
        results = []
    if results:
        _append(turns, _user_turn(results, known))
    return turns


def _append(turns: list[dict[str, Any]], turn: dict[str, Any]) -> None:
    if not turns or turns[-1]["role"] != turn["role"]:
        turns.append(turn)
        return
    blocks = _content_blocks(turns[-1]["content"]) + _content_blocks(turn["content"])
    blocks.sort(key=lambda block: block.get("type") != "tool_result")  # stable: results first
    turns[-1] = {"role": turn["role"], "content": blocks}


def _content_blocks(content: Any) -> list[dict[str, Any]]:
    return _text_blocks(content) if isinstance(content, str) else list(content)


def _user_turn(group: list[dict[str, Any]], known: _Originals) -> dict[str, Any]:
    found = known.turns.get(_key(group))
    if found is not None:
        return found
    blocks = [_tool_result(message, known) for message in group if message["role"] == "tool"]
    user = group[-1] if group[-1]["role"] == "user" else None
    if user is not None and isinstance(user.get("content"), str) and not blocks:
        return {"role": "user", "content": user["content"]}
    if user is not None:
        blocks += [_anthropic_part(part, known) for part in _content_blocks(user.get("content") or [])]
    return {"role": "user", "content": blocks}


def _tool_result(message: dict[str, Any], known: _Originals) -> dict[str, Any]:
    found = known.items.get(_key(message))
    if found is not None:
        return found
    content = message.get("content")
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": message["tool_call_id"],
                             "content": [_anthropic_part(part, known) for part in content]
                             if isinstance(content, list) else content}
    if message.get("cache_control") is not None:
        block["cache_control"] = message["cache_control"]
    client = known.results.get(message["tool_call_id"])
    if client is not None and client.get("is_error") is not None:
        block["is_error"] = client["is_error"]  # the chat form cannot carry it
    return block


def _anthropic_part(part: dict[str, Any], known: _Originals) -> dict[str, Any]:
    """A chat content part as a Messages block: text parts are the client's blocks already;
    images and PDFs come back from their data URLs."""
    found = known.items.get(_key(part))
    if found is not None:
        return found
    kind = part.get("type")
    if kind == "image_url":
        block: dict[str, Any] = {"type": "image", "source": _source(part["image_url"]["url"])}
    elif kind == "file":
        block = {"type": "document", "source": _source(part["file"]["file_data"])}
    else:
        return part
    if part.get("cache_control") is not None:
        block["cache_control"] = part["cache_control"]
    return block


def _source(url: str) -> dict[str, Any]:
    head, comma, data = url.partition(",")
    if url.startswith("data:") and comma and head.endswith(";base64"):
        return {"type": "base64", "media_type": head[len("data:"):-len(";base64")], "data": data}
    return {"type": "url", "url": url}


def _assistant_turn(message: dict[str, Any], known: _Originals) -> dict[str, Any]:
    found = known.turns.get(_key([message]))
    if found is not None:
        return found
    content = message.get("content")
    calls = message.get("tool_calls") or []
    thinking = message.get("thinking_blocks") or []
    if isinstance(content, str) and not calls and not thinking:
        return {"role": "assistant", "content": content}
    blocks = [dict(block) for block in thinking]  # signed: sent back exactly as received
    blocks += _text_blocks(content)
    blocks += [known.items.get(_key(call)) or _tool_use(call) for call in calls]
    return {"role": "assistant", "content": blocks}


def _tool_use(call: dict[str, Any]) -> dict[str, Any]:
    function = call.get("function") or {}
    block: dict[str, Any] = {"type": "tool_use", "id": call["id"], "name": function.get("name"),
                             "input": tool_input(function.get("arguments"))}
    if call.get("cache_control") is not None:
        block["cache_control"] = call["cache_control"]
    return block


def _unmark_last(turns: list[dict[str, Any]], known: _Originals) -> None:
    """A request-level ``cache_control`` stays at the request's top level: to_chat put a copy
    on the last block, which a rebuilt last turn must not carry as a second breakpoint."""
    last = turns[-1]
    if any(last is turn for turn in known.turns.values()) or not isinstance(last["content"], list):
        return
    blocks = list(last["content"])
    if blocks and blocks[-1].get("cache_control") == known.marker:
        blocks[-1] = {k: v for k, v in blocks[-1].items() if k != "cache_control"}
        turns[-1] = {**last, "content": blocks}


def _anthropic_tool(tool: dict[str, Any]) -> dict[str, Any]:
    function = tool.get("function") or {}
    out: dict[str, Any] = {"name": function.get("name")}
    if function.get("description") is not None:
        out["description"] = function["description"]
    out["input_schema"] = function.get("parameters") or {"type": "object"}
    if tool.get("cache_control") is not None:
        out["cache_control"] = tool["cache_control"]
    return out


def _anthropic_tool_choice(chat: dict[str, Any], known: _Originals) -> dict[str, Any] | None:
    if chat.get("tool_choice") is None:
        return None
    form = {key: chat[key] for key in ("tool_choice", "parallel_tool_calls") if key in chat}
    found = known.tool_choice.get(_key(form))
    if found is not None:
        return found
    choice = chat["tool_choice"]
    out: dict[str, Any] = ({"type": "tool", "name": (choice.get("function") or {}).get("name")}
                           if isinstance(choice, dict) else
                           {"type": {"required": "any"}.get(choice, choice)})
    if chat.get("parallel_tool_calls") is not None:
        out["disable_parallel_tool_use"] = not chat["parallel_tool_calls"]
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


# -- replies and streams: Messages -> the chat reply the engine stores ------------------------


def chat_reply(message: dict[str, Any]) -> dict[str, Any]:
    """A Messages response object as the chat assistant message the engine stores: text blocks
    joined, ``tool_use`` blocks as ``tool_calls``. Thinking blocks are not stored (the client
    sends them back with the turn, which is what reaches the provider next time)."""
    blocks = [block for block in message.get("content") or () if isinstance(block, dict)]
    texts = [block.get("text") or "" for block in blocks if block.get("type") == "text"]
    reply: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    calls = [{"id": block.get("id"), "type": "function",
              "function": {"name": block.get("name"),
                           "arguments": orjson.dumps(block.get("input") or {}).decode()}}
             for block in blocks if block.get("type") == "tool_use"]
    if calls:
        reply["tool_calls"] = calls
    return reply


def chat_usage(usage: dict[str, Any]) -> dict[str, int]:
    """Anthropic's usage in the chat terms reports keep (``prompt_tokens`` counts the cached
    input too, as litellm's does)."""
    read = int(usage.get("cache_read_input_tokens") or 0)
    created = int(usage.get("cache_creation_input_tokens") or 0)
    prompt = int(usage.get("input_tokens") or 0) + read + created
    completion = int(usage.get("output_tokens") or 0)
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion, "cache_read_input_tokens": read,
            "cache_creation_input_tokens": created}


class EventAssembler:
    """Folds Anthropic's stream events back into the Messages object they describe: the
    reverse of ``StreamTranslator``, for a relay that sees a Messages stream it did not make
    (the LiteLLM plugin, when a stream stops early and only what was relayed can be stored)."""

    def __init__(self) -> None:
        self.blocks: dict[int, dict[str, Any]] = {}
        self.json: dict[int, list[str]] = {}  # a tool_use block's input, as it streams
        self.stop_reason: str | None = None
        self.usage: dict[str, Any] = {}
        self.events = 0

    def feed(self, event: dict[str, Any]) -> None:
        self.events += 1
        kind = event.get("type")
        if kind == "message_start":
            self.usage.update((event.get("message") or {}).get("usage") or {})
        elif kind == "content_block_start":
            self.blocks[event.get("index", len(self.blocks))] = dict(event.get("content_block") or {})
        elif kind == "content_block_delta":
            self._delta(event.get("index", -1), event.get("delta") or {})
        elif kind == "message_delta":
            self.stop_reason = (event.get("delta") or {}).get("stop_reason") or self.stop_reason
            self.usage.update({k: v for k, v in (event.get("usage") or {}).items() if v is not None})

    def _delta(self, index: int, delta: dict[str, Any]) -> None:
        block = self.blocks.get(index)
        if block is None:
            return
        kind = delta.get("type")
        if kind == "text_delta":
            block["text"] = block.get("text", "") + delta.get("text", "")
        elif kind == "input_json_delta":
            self.json.setdefault(index, []).append(delta.get("partial_json", ""))
        elif kind == "thinking_delta":
            block["thinking"] = block.get("thinking", "") + delta.get("thinking", "")
        elif kind == "signature_delta":
            block["signature"] = delta.get("signature", "")

    def message(self) -> dict[str, Any]:
        """The Messages object so far (a tool_use input cut mid-JSON is kept under ``_raw``)."""
        content = []
        for index in sorted(self.blocks):
            block = dict(self.blocks[index])
            if block.get("type") == "tool_use" and index in self.json:
                block["input"] = tool_input("".join(self.json[index]))
            content.append(block)
        return {"type": "message", "role": "assistant", "content": content,
                "stop_reason": self.stop_reason, "usage": dict(self.usage)}


# -- errors -----------------------------------------------------------------------------------

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
               529: "overloaded_error"}


def error_json(error: AgentmemError) -> dict[str, Any]:
    """Anthropic's error shape for any agentmem error: the type follows the status."""
    status = error.status_code
    kind = ERROR_TYPES.get(status) or ("api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": error.message}}
