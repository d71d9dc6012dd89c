"""The OpenAI chat request at the boundary: schema, semantic checks, hashing, tool-call units.

Requests are validated with pydantic (strict, so ``"true"`` is not a boolean) and then
checked for what a provider would reject later (a tool reply without its call, a call without
its replies). The raw dicts are what travels on: agentmem never re-serialises a message it
does not change, so kept messages reach the provider exactly as the client sent them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agentmem.errors import InvalidRequest

TOOL_NAME_PATTERN = r"^[a-zA-Z0-9_-]{1,64}$"


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")


class TextPart(_Strict):
    type: Literal["text"]
    text: str


class ImagePart(_Strict):
    type: Literal["image_url"]
    image_url: dict[str, Any]


class AudioPart(_Strict):
    type: Literal["input_audio"]
    input_audio: dict[str, Any]


class FilePart(_Strict):
    type: Literal["file"]
    file: dict[str, Any]


class RefusalPart(_Strict):
    type: Literal["refusal"]
    refusal: str


UserPart = Annotated[TextPart | ImagePart | AudioPart | FilePart, Field(discriminator="type")]
AssistantPart = Annotated[TextPart | RefusalPart, Field(discriminator="type")]


class FunctionCall(_Strict):
    name: str = Field(min_length=1)
    arguments: str


class ToolCall(_Strict):
    id: str = Field(min_length=1)
    type: Literal["function"] = "function"
    function: FunctionCall


class SystemMessage(_Strict):
    role: Literal["system", "developer"]
    content: str | list[TextPart]
    name: str | None = None


class UserMessage(_Strict):
    role: Literal["user"]
    content: str | list[UserPart]
    name: str | None = None


class AssistantMessage(_Strict):
    role: Literal["assistant"]
    content: str | list[AssistantPart] | None = None
    tool_calls: list[ToolCall] | None = None
    function_call: FunctionCall | None = None
    name: str | None = None
    refusal: str | None = None

    @model_validator(mode="after")
    def _says_something(self) -> AssistantMessage:
        """OpenAI refuses an assistant turn with nothing in it; storing one would replay it."""
        if self.content is None and not self.tool_calls and self.function_call is None \
                and self.refusal is None and not (self.model_extra or {}).get("audio"):
            raise ValueError("an assistant message needs content, tool_calls or function_call")
        return self


ToolPart = Annotated[TextPart | ImagePart | FilePart, Field(discriminator="type")]


class ToolMessage(_Strict):
    """Images and files in a tool's reply pass: litellm hands them to providers that take
    them (Anthropic's ``tool_result``); a provider that does not answers with its own 400."""

    role: Literal["tool"]
    content: str | list[ToolPart]
    tool_call_id: str = Field(min_length=1)


class FunctionMessage(_Strict):
    role: Literal["function"]
    name: str = Field(min_length=1)
    content: str | None


Message = Annotated[
    SystemMessage | UserMessage | AssistantMessage | ToolMessage | FunctionMessage,
    Field(discriminator="role"),
]


class FunctionDefinition(_Strict):
    name: str = Field(pattern=TOOL_NAME_PATTERN)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None

    @field_validator("parameters")
    @classmethod
    def _an_object_schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        """What every provider requires of a function's parameters: a JSON Schema of an
        object. Not a full metaschema check: lenient providers take schemas it would refuse."""
        if value is None:
            return value
        if "type" in value and value["type"] != "object":
            raise ValueError(f"parameters must be a JSON Schema of type 'object', got "
                             f"type {value['type']!r}")
        if "properties" in value and not isinstance(value["properties"], dict):
            raise ValueError("parameters.properties must be an object")
        return value


class ToolDefinition(_Strict):
    type: Literal["function"]
    function: FunctionDefinition


class NamedToolChoice(_Strict):
    type: Literal["function"]
    function: dict[str, str]


class StreamOptions(_Strict):
    include_usage: bool | None = None


class JsonSchemaFormat(_Strict):
    name: str = Field(min_length=1)


class ResponseFormat(_Strict):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_with_its_type(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("response_format of type 'json_schema' needs a json_schema object")
        return self


class ChatRequestSchema(_Strict):
    """The fields agentmem reads or that providers reject when malformed; others pass through."""

    model: str = Field(min_length=1)
    messages: list[Message] = Field(min_length=1)
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    tools: list[ToolDefinition] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    functions: list[FunctionDefinition] | None = None
    parallel_tool_calls: bool | None = None
    n: int | None = Field(default=None, ge=1, le=128)
    temperature: float | int | None = Field(default=None, ge=0, le=2)
    top_p: float | int | None = Field(default=None, ge=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    user: str | None = None
    metadata: dict[str, Any] | None = None
    stop: str | list[str] | None = None
    response_format: ResponseFormat | None = None

    @field_validator("metadata")
    @classmethod
    def _session_id_is_text(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        for key in ("session_id", "user_id"):  # user_id: litellm sends it to Anthropic, which wants text
            if value and key in value and not isinstance(value[key], str):
                raise ValueError(f"metadata.{key} must be a string")
        return value


_MARKERS = ("list[", "nullable[", "union[", "literal[", "function-", "json-or-python[")
_TAGGED_LISTS = {"messages", "content"}  # lists whose items are discriminated unions


_SCALAR_MARKERS = frozenset({"str", "int", "float", "bool", "NamedToolChoice"})


def _location(loc: tuple[Any, ...]) -> str:
    """``('messages', 1, 'assistant', 'tool_calls', 0, ...)`` -> ``messages[1].tool_calls[0]...``.

    pydantic puts union markers and discriminator tags into the path; they are dropped.
    """
    parts = [p for p in loc if not (isinstance(p, str) and (p.startswith(_MARKERS) or p in _SCALAR_MARKERS))]
    out = ""
    for i, part in enumerate(parts):
        if isinstance(part, int):
            out += f"[{part}]"
        elif i >= 2 and isinstance(parts[i - 1], int) and parts[i - 2] in _TAGGED_LISTS:
            continue  # the discriminator tag (role or part type)
        else:
            out += ("." if out else "") + str(part)
    return out


def describe_validation_error(error: ValidationError) -> tuple[str, str | None]:
    """One readable sentence for the first schema violation, and the parameter it names."""
    errors = error.errors(include_url=False)
    # With unions (content: str | list[part]) the deepest error is the one that explains.
    first = max(errors, key=lambda e: len(_location(e["loc"])))
    param = _location(first["loc"]) or None
    message = first["msg"]
    if first["type"] == "union_tag_invalid":
        ctx = first["ctx"]
        message = (f"unknown {ctx.get('discriminator', 'tag')}: {ctx.get('tag')!r}; "
                   f"expected one of {ctx.get('expected_tags')}")
    elif first["type"] == "union_tag_not_found":
        message = f"missing {first['ctx'].get('discriminator', 'tag')}"
    return (f"Invalid value for '{param}': {message}" if param else message), param


def parse_chat_request(body: Any, *, check_structure: bool = True) -> ChatRequestSchema:
    """Validate a decoded JSON body; raise :class:`InvalidRequest` naming what is wrong.

    ``check_structure=False`` skips the tool-call pairing rules, for stateful clients whose
    new messages answer calls that only the stored history holds.
    """
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    try:
        request = ChatRequestSchema.model_validate(body)
    except ValidationError as error:
        message, param = describe_validation_error(error)
        raise InvalidRequest(message, param=param) from None
    if check_structure:
        check_conversation(body["messages"])
    _check_request_options(request)
    return request


def _check_request_options(request: ChatRequestSchema) -> None:
    if request.stream_options is not None and not request.stream:
        raise InvalidRequest("stream_options is only allowed when stream is true.",
                             param="stream_options")
    names = [tool.function.name for tool in request.tools or []]
    duplicates = {name for name in names if names.count(name) > 1}
    if duplicates:
        raise InvalidRequest(f"Duplicate tool names: {sorted(duplicates)}.", param="tools")
    if isinstance(request.tool_choice, NamedToolChoice):
        wanted = request.tool_choice.function.get("name")
        if not wanted:
            raise InvalidRequest("tool_choice.function.name is required.", param="tool_choice")
        if wanted not in names:
            raise InvalidRequest(f"tool_choice names '{wanted}', which is not in tools.",
                                 param="tool_choice")
    elif request.tool_choice in {"required"} and not names:
        raise InvalidRequest("tool_choice is 'required' but no tools were given.", param="tool_choice")


def check_conversation(messages: list[dict[str, Any]]) -> None:
    """The structural rules providers enforce: every tool call answered, right after it, once."""
    seen_ids: set[str] = set()
    pending: dict[str, int] = {}  # call id -> index of the assistant message that made it
    for index, message in enumerate(messages):
        role = message["role"]
        if role == "tool":
            call_id = message["tool_call_id"]
            if call_id not in pending:
                if call_id in seen_ids:
                    raise InvalidRequest(
                        f"messages[{index}] answers tool call '{call_id}' a second time.",
                        param=f"messages[{index}].tool_call_id")
                raise InvalidRequest(
                    f"messages[{index}] is a tool message whose tool_call_id '{call_id}' does not "
                    "answer a tool call of the assistant message before it.",
                    param=f"messages[{index}].tool_call_id")
            del pending[call_id]
            continue
        if pending:
            raise _unanswered(pending, index)
        for call in message.get("tool_calls") or () if role == "assistant" else ():
            if call["id"] in seen_ids:
                raise InvalidRequest(f"Duplicate tool call id '{call['id']}' in messages[{index}].",
                                     param=f"messages[{index}].tool_calls")
            seen_ids.add(call["id"])
            pending[call["id"]] = index
    if pending:
        raise _unanswered(pending, len(messages))


def _unanswered(pending: dict[str, int], before: int) -> InvalidRequest:
    where = next(iter(pending.values()))
    return InvalidRequest(
        f"The assistant message messages[{where}] has tool_calls that are not answered by tool "
        f"messages before messages[{before}]: {sorted(pending)}.",
        param=f"messages[{where}].tool_calls")


def text_of(message: dict[str, Any]) -> str:
    """The message's text as the model reads it (text parts joined, other parts skipped)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if part.get("type") == "text")
    return ""


def canonical(message: dict[str, Any]) -> dict[str, Any]:
    """The fields that make a message what it is; null fields and client decorations drop out.

    Clients echo an assistant reply back with extra nulls (``refusal``, ``audio``) or as text
    parts; those must hash the same as what we stored, or every call would fork the session.
    """
    content = message.get("content")
    if len(message) == 2 and type(content) is str and content and "role" in message:
        return message  # the common case, already canonical (chain hashes run on every turn)
    out: dict[str, Any] = {"role": message.get("role")}
    if isinstance(content, list) and all(p.get("type") == "text" for p in content):
        content = text_of(message)
    if content not in (None, ""):
        out["content"] = content
    for key in ("name", "tool_call_id"):
        if message.get(key) is not None:
            out[key] = message[key]
    if message.get("tool_calls"):
        out["tool_calls"] = [
            {"id": c.get("id"), "name": c.get("function", {}).get("name"),
             "arguments": call_arguments(c.get("function", {}).get("arguments"))}
            for c in message["tool_calls"]
        ]
    if message.get("function_call"):
        out["function_call"] = message["function_call"]
    return out


def call_arguments(arguments: Any) -> Any:
    """A call's arguments as JSON values, not text: clients that hand calls back as objects
    (Anthropic's ``tool_use.input``, LangChain's ``args``) re-serialise them with other spacing,
    and that must not fork the session at every tool call."""
    if isinstance(arguments, str):
        try:
            return orjson.loads(arguments)
        except orjson.JSONDecodeError:
            return arguments
    return arguments


def message_hash(message: dict[str, Any]) -> str:
    return hashlib.blake2b(orjson.dumps(canonical(message), option=orjson.OPT_SORT_KEYS),
                           digest_size=12).hexdigest()


def chain_hash(previous: str, content_hash: str) -> str:
    """Hash of the whole history up to a position: equal chains mean equal prefixes."""
    return hashlib.blake2b(f"{previous}:{content_hash}".encode(), digest_size=12).hexdigest()


_NONE: frozenset[str] = frozenset()


def tool_call_units(messages: list[dict[str, Any]]) -> list[list[int]]:
    """Indices grouped into units: an assistant message with tool calls plus all its replies.

    Every other message is a unit of its own. Stages keep or drop whole units only.
    """
    units: list[list[int]] = []
    open_calls: set[str] | frozenset[str] = _NONE
    for index, message in enumerate(messages):
        if message.get("role") == "tool" and message.get("tool_call_id") in open_calls and units:
            units[-1].append(index)
            open_calls = open_calls - {message["tool_call_id"]}
            continue
        units.append([index])
        calls = message.get("tool_calls")
        open_calls = {c.get("id") for c in calls} if calls and message.get("role") == "assistant" else _NONE
    return units


def answered_tool_calls(history: Sequence[dict[str, Any]]
                        ) -> Iterator[tuple[int, int, dict[str, Any]]]:
    """Each answered tool call in order: its assistant message's position, its answer's
    position, and the call's ``function`` (name and arguments)."""
    asked: dict[str, tuple[int, dict[str, Any]]] = {}
    for position, message in enumerate(history):
        for call in message.get("tool_calls") or ():
            asked[str(call.get("id", ""))] = (position, call.get("function") or {})
        if message.get("role") == "tool" and message.get("tool_call_id") in asked:
            unit, function = asked[message["tool_call_id"]]
            yield unit, position, function
