"""The LiteLLM plugin on LiteLLM's ``/v1/messages``, for real: the ``anthropic`` client ->
``litellm --config`` with the agentmem callback -> the echo upstream's Anthropic endpoint
(``claude-echo``: LiteLLM's own Anthropic provider). The tests assert what reached the
upstream and what the session stored; the last ones test the reverse translation
(``agentmem.anthropic_api.from_chat``) on its own.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import time

import anthropic
import httpx
import pytest

from agentmem.adapters.litellm_messages import MessagesStreamAssembler, unmodelled
from agentmem.anthropic_api import from_chat, parse_request, to_chat
from tests import test_adapter_litellm as chat_route
from tests.anthropic_calls import message_of
from tests.test_adapter_litellm import TOOLS, WEATHER, read_session, session, stored, wait_for_turns

litellm_proxy = chat_route.litellm_proxy  # the same fixture: a LiteLLM proxy for this module

CLAUDE = "claude-echo"
ANTHROPIC_TOOLS = [{"name": t["function"]["name"], "description": t["function"]["description"],
                    "input_schema": t["function"]["parameters"]} for t in TOOLS]
WEATHER_TOOL = {"name": "get_weather", "description": "Current weather in a city.",
                "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}
PIXEL = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJ"
         "RU5ErkJggg==")


@pytest.fixture
def claude(litellm_proxy):
    return anthropic.Anthropic(base_url=litellm_proxy.url, api_key=litellm_proxy.key,
                               max_retries=0, timeout=120)


def check_messages_request(request: dict) -> None:
    """What Anthropic requires of a request: roles alternate from a user turn, each tool_use
    is answered first thing in the next user turn, and each tool_result answers the turn just
    before it."""
    turns = request["messages"]
    assert turns[0]["role"] == "user"
    assert all(a["role"] != b["role"] for a, b in itertools.pairwise(turns))
    for index, turn in enumerate(turns):
        blocks = turn["content"] if isinstance(turn["content"], list) else []
        uses = [b["id"] for b in blocks if b["type"] == "tool_use"]
        if uses and index + 1 < len(turns):
            answer = turns[index + 1]["content"]
            assert [b["tool_use_id"] for b in answer[:len(uses)]] == uses
        results = [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"]
        if results:
            asked = turns[index - 1]["content"]
            assert results == [b["id"] for b in asked if b["type"] == "tool_use"]


def text_of(content: str | list) -> str:
    return content if isinstance(content, str) else "".join(b.get("text", "") for b in content)


async def test_a_two_turn_conversation_is_cleaned_and_stored(litellm_proxy, claude, received):
    sid = session()
    system = "You answer questions about the harbour."
    messages: list[dict] = [{"role": "user", "content": "Where is the harbour office?"}]
    raw = claude.messages.with_raw_response.create(
        model=CLAUDE, max_tokens=64, system=system, messages=messages,
        extra_headers={"X-Session-Id": sid})
    first = raw.parse()
    assert raw.headers["x-agentmem-session"] == sid  # the plugin prepared this call
    assert first.content[0].text == "echo: Where is the harbour office?"
    messages += [{"role": "assistant", "content": first.content[0].text},
                 {"role": "user", "content": "And when does it open?"}]
    claude.messages.create(model=CLAUDE, max_tokens=64, system=system, messages=messages,
                           extra_headers={"X-Session-Id": sid})

    tenant, turns, reports = await wait_for_turns(litellm_proxy.data_dir, sid, 5)
    assert tenant.startswith("key-")
    assert [t.role for t in turns] == ["system", "user", "assistant", "user", "assistant"]
    assert turns[-1].message["content"] == "echo: And when does it open?"
    assert [r.status for r in reports] == ["ok", "ok"]
    assert reports[-1].ingest.stored_turns == 3 and reports[-1].ingest.new_turns == 1
    sent = received.requests()
    assert len(sent) == 2 and all(request["system"] == system for request in sent)
    assert [text_of(m["content"]) for m in sent[-1]["messages"]] == [
        m["content"] for m in messages]


async def test_tools_are_filtered_as_on_the_chat_route(litellm_proxy, claude, received):
    """The chat route's tool loadout (test_tools_are_filtered_and_history_is_stored), in
    Messages form: fewer tools reach the upstream, as Anthropic tools, and the reply's tool_use
    is stored as the assistant's tool call."""
    sid = session()
    raw = claude.messages.with_raw_response.create(
        model=CLAUDE, max_tokens=200, system="You are an operations assistant with tools.",
        tools=ANTHROPIC_TOOLS, tool_choice={"type": "auto"},
        messages=[{"role": "user", "content": WEATHER}], extra_headers={"X-Session-Id": sid})
    reply = raw.parse()
    [sent] = received.requests()
    names = [tool["name"] for tool in sent["tools"]]
    assert "get_weather" in names and len(names) < len(ANTHROPIC_TOOLS)
    assert sent["tools"][names.index("get_weather")] == ANTHROPIC_TOOLS[0]  # as the client wrote it
    assert sent["tool_choice"] == {"type": "auto"}
    assert raw.headers["x-agentmem-tools-offered"] == str(len(ANTHROPIC_TOOLS))
    assert raw.headers["x-agentmem-tools-kept"] == str(len(names))
    assert [b.type for b in reply.content] == ["tool_use"] and reply.content[0].name == "get_weather"
    _, turns, _ = await wait_for_turns(litellm_proxy.data_dir, sid, 3)
    assert [t.role for t in turns] == ["system", "user", "assistant"]
    assert turns[-1].message["tool_calls"][0]["function"]["name"] == "get_weather"


async def test_an_older_tool_result_is_withheld_and_the_request_stays_valid(
        litellm_proxy, claude, received):
    """Hygiene rewrites the middle of the conversation (the older of two reads of one file is
    withheld, agentmem/quarantine/superseded.py): the request LiteLLM sends on is still a valid
    Messages request, with the system prompt, every other block as written."""
    sid = session()
    lines = [f"setting_{i}: {i}" for i in range(12)]
    old, new = "\n".join(lines), "\n".join(lines).replace("setting_3: 3", "setting_3: 30")
    read = {"name": "read_file", "description": "Read a file.",
            "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}

    def use(tool_id: str) -> dict:
        return {"role": "assistant", "content": [
            {"type": "tool_use", "id": tool_id, "name": "read_file", "input": {"path": "app.cfg"}}]}

    def result(tool_id: str, text: str) -> dict:
        return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_id,
                                             "content": [{"type": "text", "text": text}]}]}

    system = [{"type": "text", "text": "You edit config files.", "cache_control": {"type": "ephemeral"}}]
    messages = [{"role": "user", "content": "Set setting_3 to 30 in app.cfg."},
                use("toolu_1"), result("toolu_1", old),
                {"role": "assistant", "content": "I will edit it."},
                {"role": "user", "content": "Done. Check it again."},
                use("toolu_2"), result("toolu_2", new)]
    claude.messages.create(model=CLAUDE, max_tokens=50, system=system, tools=[read],
                           messages=copy.deepcopy(messages), extra_headers={"X-Session-Id": sid})
    sent = received.requests()[-1]
    check_messages_request(sent)
    assert sent["system"] == system
    turns = sent["messages"]
    assert len(turns) == len(messages)
    withheld = turns[2]["content"][0]
    assert withheld["tool_use_id"] == "toolu_1" and old not in json.dumps(withheld)
    assert "withheld" in text_of(withheld["content"])
    assert turns[6] == messages[6]  # the newer read, as written
    assert [turns[i] for i in (1, 5)] == [messages[i] for i in (1, 5)]
    _, stored_turns, reports = await wait_for_turns(litellm_proxy.data_dir, sid, len(messages) + 2)
    assert [t.role for t in stored_turns][-3:] == ["assistant", "tool", "assistant"]
    assert [r.status for r in reports] == ["ok"]


async def test_a_streamed_reply_is_stored_whole(litellm_proxy, claude, received):
    sid = session()
    with claude.messages.stream(model=CLAUDE, max_tokens=100, extra_headers={"X-Session-Id": sid},
                                messages=[{"role": "user", "content": "Please summarise the plan "
                                           "for the office move."}]) as stream:
        text = "".join(stream.text_stream)
    assert text.startswith("echo: Please summarise")
    assert received.requests()[-1]["stream"] is True
    _, turns, reports = await wait_for_turns(litellm_proxy.data_dir, sid, 2)
    assert [t.role for t in turns] == ["user", "assistant"]
    assert turns[-1].message["content"] == text and not turns[-1].partial
    assert [r.status for r in reports] == ["ok"]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_tool_use_round_trip_keeps_its_signed_thinking(litellm_proxy, claude, received, stream):
    """tool_use then tool_result with thinking on: the echo upstream refuses the second call if
    the assistant turn lost its signed thinking block (as Anthropic does)."""
    sid = session()
    options = {"model": CLAUDE, "max_tokens": 2000, "tools": [WEATHER_TOOL],
               "thinking": {"type": "enabled", "budget_tokens": 1024},
               "extra_headers": {"X-Session-Id": sid}}
    messages: list[dict] = [{"role": "user", "content": 'Oslo? [[tool:get_weather {"city": "Oslo"}]]'}]
    first = message_of(claude, stream, messages=messages, **options)
    assert [b.type for b in first.content] == ["thinking", "tool_use"]
    await wait_for_turns(litellm_proxy.data_dir, sid, 2)
    messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": first.content[1].id,
                                               "content": "cold", "is_error": False}]}]
    second = claude.messages.create(messages=messages, **options)
    assert second.content[-1].text == "tool results: cold"
    sent = received.requests()[-1]
    assert sent["messages"][1:] == messages[1:]  # the signed turn and the result, as written
    _, turns, reports = await wait_for_turns(litellm_proxy.data_dir, sid, 4)
    assert [t.role for t in turns] == ["user", "assistant", "tool", "assistant"]
    assert turns[1].message["tool_calls"][0]["id"] == first.content[1].id
    assert turns[2].message["tool_call_id"] == first.content[1].id
    assert turns[3].message["content"] == "tool results: cold"
    assert [r.status for r in reports] == ["ok", "ok"]


async def test_an_invalid_request_gets_an_anthropic_error_and_stores_nothing(
        litellm_proxy, claude, received):
    sid = session()
    orphan = [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_missing",
                                            "content": "result"}]}]
    with pytest.raises(anthropic.BadRequestError) as refused:
        claude.messages.create(model=CLAUDE, max_tokens=20, messages=orphan,
                               extra_headers={"X-Session-Id": sid})
    body = refused.value.body
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert "does not answer a tool_use block" in body["error"]["message"]
    assert received.requests() == []
    await _settled()
    assert await stored(litellm_proxy.data_dir, sid) == (None, [], [])
    assert await stored_reports(litellm_proxy.data_dir, sid) == []


async def test_server_tools_pass_through_unchanged_and_unstored(litellm_proxy, claude, received):
    """agentmem has no chat form for Anthropic's server tools; LiteLLM can send them, so the
    request goes on as written (not refused) and the log says so once."""
    sid = session()
    search = {"type": "web_search_20250305", "name": "web_search", "max_uses": 1}
    for _ in range(2):
        claude.messages.create(model=CLAUDE, max_tokens=20, tools=[search, WEATHER_TOOL],
                               extra_headers={"X-Session-Id": sid},
                               messages=[{"role": "user", "content": "Search the tide tables."}])
    assert received.requests()[-1]["tools"] == [search, WEATHER_TOOL]
    await _settled()
    assert await stored(litellm_proxy.data_dir, sid) == (None, [], [])
    assert await stored_reports(litellm_proxy.data_dir, sid) == []
    log = (litellm_proxy.data_dir.parent / "litellm.log").read_text(errors="replace")
    assert log.count("agentmem has no chat form for server tools (web_search_20250305)") == 1


async def test_a_provider_stream_cut_midway_is_stored_as_partial(litellm_proxy, claude, received):
    """The provider drops the connection mid-stream: what the client received is stored, marked
    partial with the reason."""
    sid = session()
    request = {"model": CLAUDE, "max_tokens": 100, "extra_headers": {"X-Session-Id": sid},
               "messages": [{"role": "user", "content": "one two three four five six [[cut:5]]"}]}
    streamed: list[str] = []
    with pytest.raises(anthropic.APIError), claude.messages.stream(**request) as stream:
        for text in stream.text_stream:
            streamed.append(text)
    deadline = time.time() + 30
    while not (reports := (await stored_reports(litellm_proxy.data_dir, sid))) and time.time() < deadline:
        await asyncio.sleep(0.2)
    _, turns, _ = await stored(litellm_proxy.data_dir, sid)
    assert streamed  # the cut came after some text reached the client
    assert [t.role for t in turns] == ["user", "assistant"]
    assert turns[-1].partial and turns[-1].error.startswith("the provider stream failed")
    assert turns[-1].message["content"] == "".join(streamed)
    assert [r.status for r in reports] == ["partial"]


async def test_failures_and_a_client_that_leaves_free_the_session(litellm_proxy, claude, received):
    sid = session()
    headers = {"Authorization": f"Bearer {litellm_proxy.key}", "X-Session-Id": sid}
    with pytest.raises(anthropic.APIStatusError):
        claude.messages.create(model=CLAUDE, max_tokens=20, extra_headers={"X-Session-Id": sid},
                               messages=[{"role": "user", "content": "fail [[status:503]]"}])
    slow = {"model": CLAUDE, "max_tokens": 50, "stream": True,
            "messages": [{"role": "user", "content": "Describe the week. [[slow:3000]]"}]}
    with pytest.raises(httpx.ReadTimeout):  # the client gives up before the provider answers
        async with httpx.AsyncClient(timeout=httpx.Timeout(60, read=1)) as http, http.stream(
                "POST", f"{litellm_proxy.url}/v1/messages", headers=headers, json=slow) as response:
            async for _ in response.aiter_lines():
                pass
    started = time.time()
    claude.messages.create(model=CLAUDE, max_tokens=20, extra_headers={"X-Session-Id": sid},
                           messages=[{"role": "user", "content": "are you there?"}])
    assert time.time() - started < 15  # no lock left behind by either call
    _, turns, reports = await wait_for_turns(litellm_proxy.data_dir, sid, 2)
    statuses = [r.status for r in reports]
    assert statuses[0] == "error" and statuses[1] in ("error", "partial") and statuses[-1] == "ok"
    assert turns[-1].message["content"] == "echo: are you there?"


async def stored_reports(data_dir, sid: str) -> list:
    """A session's reports, also when it stored no turns (``stored`` finds sessions by theirs)."""
    _, reports = await read_session(data_dir, sid, lambda store, handle: store.reports(handle))
    return reports or []


async def _settled() -> None:
    """Time for a success callback that should not store anything to have done so anyway."""
    await asyncio.sleep(1.5)


# -- the reverse translation ----------------------------------------------------------------

IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PIXEL}}
PDF = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                      "data": "JVBERi0xLjQKJcfsj6IKJSVFT0YK"}}
EPHEMERAL = {"type": "ephemeral"}
THINKING = {"type": "thinking", "thinking": "The user wants Oslo.", "signature": "sig_1"}
REDACTED = {"type": "redacted_thinking", "data": "opaque"}


def _request(messages: list[dict], **fields) -> dict:
    return {"model": CLAUDE, "max_tokens": 100, "messages": messages, **fields}


CANONICAL = {
    "text": _request([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                      {"role": "user", "content": [{"type": "text", "text": "and you?"}]}]),
    "system as text": _request([{"role": "user", "content": "hi"}], system="Be brief."),
    "system as blocks": _request([{"role": "user", "content": "hi"}], system=[
        {"type": "text", "text": "Be brief.", "cache_control": EPHEMERAL},
        {"type": "text", "text": "Be kind."}]),
    "images and a PDF": _request([{"role": "user", "content": [
        {"type": "text", "text": "What is in these?"}, {**IMAGE, "cache_control": EPHEMERAL},
        {"type": "image", "source": {"type": "url", "url": "https://example.org/a.png"}}, PDF]}]),
    "tool use and results": _request([
        {"role": "user", "content": "Weather in Oslo and Bergen?"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_a", "name": "get_weather", "input": {"city": "Oslo"}},
            {"type": "tool_use", "id": "toolu_b", "name": "get_weather", "input": {"city": "Bergen"},
             "cache_control": EPHEMERAL}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_a", "content": "cold"},
            {"type": "tool_result", "tool_use_id": "toolu_b", "cache_control": EPHEMERAL,
             "content": [{"type": "text", "text": "rain"}, IMAGE]},
            {"type": "text", "text": "Thanks."}]}],
        tools=[{**WEATHER_TOOL, "cache_control": EPHEMERAL}],
        tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True}),
    "thinking": _request([
        {"role": "user", "content": "Oslo?"},
        {"role": "assistant", "content": [THINKING, REDACTED, {
            "type": "tool_use", "id": "toolu_t", "name": "get_weather", "input": {"city": "Oslo"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_t",
                                      "content": "cold"}]}],
        tools=[WEATHER_TOOL], thinking={"type": "enabled", "budget_tokens": 1024}),
    "tool choices": _request([{"role": "user", "content": "hi"}], tools=[WEATHER_TOOL],
                             tool_choice={"type": "any"}),
}

# Requests whose chat form loses how they were written: the original brings it back.
WRITTEN_THEIR_WAY = {
    "text after a tool_use": _request([
        {"role": "user", "content": "Oslo?"},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_x", "name": "get_weather", "input": {"city": "Oslo"}},
            {"type": "text", "text": "One moment."}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x",
                                      "is_error": True}]}],
        tools=[{"type": "custom", **WEATHER_TOOL}]),
    "top-level cache_control": _request(
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
         {"role": "user", "content": "again"}], cache_control=EPHEMERAL, system="Be brief."),
    "a document with a title": _request([{"role": "user", "content": [
        {**PDF, "title": "Manual", "citations": {"enabled": True}}, {"type": "text", "text": "Sum up."}]}]),
}


def _fields(request: dict) -> dict:
    return {key: request[key] for key in ("system", "messages", "tools", "tool_choice") if key in request}


@pytest.mark.parametrize("name", sorted(CANONICAL))
def test_from_chat_reverses_to_chat(name):
    request = copy.deepcopy(CANONICAL[name])
    chat, _ = to_chat(parse_request(request), request)
    assert from_chat(chat) == _fields(CANONICAL[name])
    assert from_chat(chat, request) == _fields(CANONICAL[name])


@pytest.mark.parametrize("name", sorted(WRITTEN_THEIR_WAY))
def test_from_chat_gives_back_what_the_client_wrote(name):
    request = copy.deepcopy(WRITTEN_THEIR_WAY[name])
    chat, _ = to_chat(parse_request(request), request)
    assert from_chat(chat, request) == _fields(WRITTEN_THEIR_WAY[name])
    assert from_chat(chat) != _fields(WRITTEN_THEIR_WAY[name])  # the chat form alone cannot


def test_from_chat_rebuilds_what_hygiene_changed_and_keeps_the_rest():
    request = copy.deepcopy(CANONICAL["tool use and results"])
    request["messages"][2]["content"][0]["is_error"] = True
    chat, _ = to_chat(parse_request(request), request)
    [tool] = [m for m in chat["messages"] if m.get("tool_call_id") == "toolu_a"]
    tool["content"] = "[withheld]"
    chat["messages"] = [m for m in chat["messages"] if m["role"] != "system"]
    chat["tools"], chat["tool_choice"] = [], None  # no tool kept
    back = from_chat(chat, request)
    assert "system" not in back and "tools" not in back and "tool_choice" not in back
    results = back["messages"][2]["content"]
    assert results[0] == {"type": "tool_result", "tool_use_id": "toolu_a", "content": "[withheld]",
                          "is_error": True}
    assert results[1:] == request["messages"][2]["content"][1:]
    assert back["messages"][:2] == request["messages"][:2]


def test_from_chat_merges_turns_hygiene_left_side_by_side():
    chat = {"messages": [{"role": "user", "content": "first"}, {"role": "user", "content": "second"},
                         {"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}]}
    assert from_chat(chat)["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]


def test_a_relayed_stream_is_folded_into_the_chat_reply():
    """LiteLLM relays Anthropic's SSE bytes to the iterator hook, frames split anywhere."""
    events = [
        {"type": "message_start", "message": {"usage": {"input_tokens": 7, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": THINKING | {"thinking": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hm"}},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Let me "}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "check."}},
        {"type": "content_block_start", "index": 2, "content_block": {
            "type": "tool_use", "id": "toolu_s", "name": "get_weather", "input": {}}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta",
                                                                "partial_json": '{"city": '}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta",
                                                                "partial_json": '"Oslo"}'}},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}}]
    wire = b"".join(b"event: " + e["type"].encode() + b"\r\ndata: " + json.dumps(e).encode() + b"\r\n\r\n"
                    for e in events)
    assembler = MessagesStreamAssembler()
    for start in range(0, len(wire), 37):
        assembler.add(wire[start:start + 37])
    assert assembler.message() == {"role": "assistant", "content": "Let me check.", "tool_calls": [
        {"id": "toolu_s", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'}}]}
    assert assembler.usage == {"prompt_tokens": 7, "completion_tokens": 9, "total_tokens": 16,
                               "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}
    assert assembler.chunks == 8
    empty = MessagesStreamAssembler()
    empty.add(wire[:wire.index(b"content_block_start")])
    assert empty.chunks == 0  # nothing but message_start: nothing to store


def test_unmodelled_requests_are_named():
    assert unmodelled(CANONICAL["tool use and results"]) is None
    assert unmodelled(_request([{"role": "user", "content": [
        {"type": "search_result", "source": "x", "title": "t", "content": []}]}])) == "search_result blocks"
    assert unmodelled(_request([{"role": "user", "content": [{
        "type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}}]}])) \
        == "documents other than base64 PDFs"
