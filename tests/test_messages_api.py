"""``POST /v1/messages`` end to end: the real ``anthropic`` client -> agentmem -> litellm -> the
echo upstream, both as an OpenAI chat upstream (``echo``) and as an Anthropic Messages upstream
(``claude-echo``: litellm's own Anthropic provider). Each test asserts what the upstream
received, not only what the client got back."""

from __future__ import annotations

import asyncio
import copy
import json
import uuid

import anthropic
import httpx
import pytest

from agentmem.config import Settings
from agentmem.proxy import create_app
from tests.anthropic_calls import message_of
from tests.conftest import echo_routes
from tests.servers import ThreadServer

CLAUDE = "claude-echo"
SONNET = "claude-sonnet-4-6"  # a name litellm knows supports thinking, served by the echo
PIXEL = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJ"
         "RU5ErkJggg==")  # a 1x1 PNG
PDF = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                      "data": "JVBERi0xLjQKJcfsj6IKJSVFT0YK"}}
WEATHER = {"name": "get_weather", "description": "Current weather in a city.",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                            "required": ["city"]}}


def routes(upstream_url: str) -> list[dict]:
    return [*echo_routes(upstream_url),
            *({"name": name, "litellm_params": {"model": f"anthropic/{name}",
                                                "api_base": upstream_url, "api_key": "sk-test"}}
              for name in (CLAUDE, SONNET))]


@pytest.fixture(scope="module")
def proxy_url(upstream, data_dir, policy_dir):
    settings = Settings(data_dir=data_dir, models=routes(upstream.url), policy_dirs=[policy_dir])
    server = ThreadServer(create_app(settings, warm_models=False)).start()
    yield server.url
    server.stop()


@pytest.fixture
def claude(proxy_url):
    return anthropic.Anthropic(base_url=proxy_url, api_key="unused", max_retries=0)


@pytest.fixture
def sessions(proxy_url):
    with httpx.Client(base_url=f"{proxy_url}/v1/sessions", timeout=60) as client:
        yield client


def as_blocks(messages: list[dict]) -> list[dict]:
    """litellm's Anthropic transform sends a string ``content`` as its one text block, which the
    Messages API documents as the same thing; everything else must arrive as written."""
    return [{**m, "content": [{"type": "text", "text": m["content"]}]} if isinstance(m["content"], str)
            else m for m in messages]


def new_session() -> dict[str, str]:
    return {"X-Session-Id": f"m-{uuid.uuid4().hex[:12]}"}


def test_plain_message_through_an_openai_upstream(claude, received):
    raw = claude.messages.with_raw_response.create(
        model="echo", max_tokens=64, system="Be brief.", extra_body={"temperature": 0.2},
        messages=[{"role": "user", "content": "hello there"}], extra_headers=new_session())
    message = raw.parse()
    assert message.type == "message" and message.role == "assistant"
    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].text == "echo: hello there"
    assert message.stop_reason == "end_turn" and message.id.startswith("msg_")
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0
    [sent] = received.requests()
    assert sent["messages"] == [{"role": "system", "content": "Be brief."},
                                {"role": "user", "content": "hello there"}]
    assert sent["max_tokens"] == 64 and sent["temperature"] == 0.2
    assert raw.headers["x-agentmem-policy"] == "default"
    assert raw.headers["x-agentmem-report"] and raw.headers["x-agentmem-session"]


def test_a_request_reaches_an_anthropic_upstream_as_written(claude, received):
    """Nothing to remove: the Messages body litellm sends upstream carries the client's
    system, blocks (cache_control, images) and parameters unchanged."""
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PIXEL}}
    system = [{"type": "text", "text": "You are a weather bot.", "cache_control": {"type": "ephemeral"}},
              {"type": "text", "text": "Answer in one line."}]
    messages = [
        {"role": "user", "content": [image, PDF, {"type": "text", "text": "What is this?",
                                             "cache_control": {"type": "ephemeral"}}]},
        {"role": "assistant", "content": [{"type": "text", "text": "A pixel."}]},
        {"role": "user", "content": "And the weather?"},
    ]
    tools = [{**WEATHER, "cache_control": {"type": "ephemeral"}}]
    message = claude.messages.create(
        model=CLAUDE, max_tokens=200, system=system, messages=messages, tools=tools,
        tool_choice={"type": "auto"}, extra_body={"temperature": 0.5, "top_k": 5}, stop_sequences=["END"],
        metadata={"user_id": "user-7"}, extra_headers=new_session())
    assert message.content[0].text == "echo: And the weather?"
    [sent] = received.requests()
    assert sent["model"] == CLAUDE
    assert sent["system"] == system
    assert sent["messages"] == as_blocks(messages)
    assert [{key: tool[key] for key in ("name", "description", "input_schema", "cache_control")}
            for tool in sent["tools"]] == tools
    assert sent["max_tokens"] == 200 and sent["temperature"] == 0.5 and sent["top_k"] == 5
    assert sent["stop_sequences"] == ["END"] and sent["metadata"] == {"user_id": "user-7"}
    assert sent["tool_choice"]["type"] == "auto"


def test_images_in_a_tool_result_reach_the_provider(claude, received):
    """What Claude Code sends after reading an image file or taking a screenshot."""
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PIXEL}}
    messages = [{"role": "user", "content": "Show me the chart."},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "toolu_shot", "name": "screenshot", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_shot",
                                              "content": [{"type": "text", "text": "chart.png"}, image]}]}]
    tool = {"name": "screenshot", "description": "Take a screenshot.",
            "input_schema": {"type": "object", "properties": {}}}
    message = claude.messages.create(model=CLAUDE, max_tokens=50, tools=[tool], messages=messages,
                                     extra_headers=new_session())
    assert message.content[0].text == "tool results: chart.png"
    [sent] = received.requests()
    assert sent["messages"] == as_blocks(messages)


def test_top_level_cache_control_marks_the_last_block(claude, received):
    claude.messages.create(model=CLAUDE, max_tokens=50, cache_control={"type": "ephemeral"},
                           extra_headers=new_session(), messages=[
                               {"role": "user", "content": "first"},
                               {"role": "assistant", "content": "ok"},
                               {"role": "user", "content": [{"type": "text", "text": "a"},
                                                            {"type": "text", "text": "b"}]}])
    [sent] = received.requests()
    assert sent["messages"][-1]["content"] == [
        {"type": "text", "text": "a"}, {"type": "text", "text": "b", "cache_control": {"type": "ephemeral"}}]
    assert "cache_control" not in json.dumps(sent["messages"][:-1])


@pytest.mark.parametrize("model", ["echo", CLAUDE])
def test_streamed_text_with_the_sdk_helper(claude, received, model):
    with claude.messages.stream(model=model, max_tokens=100, extra_headers=new_session(),
                                messages=[{"role": "user", "content": "stream these five words"}]
                                ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "echo: stream these five words"
    assert final.content[0].text == text and final.stop_reason == "end_turn"
    assert final.usage.output_tokens > 0
    [sent] = received.requests()
    assert sent["stream"] is True
    assert as_blocks(sent["messages"]) == as_blocks([{"role": "user", "content": "stream these five words"}])


def test_stream_true_yields_anthropic_events_in_order(claude, received):
    events = list(claude.messages.create(
        model=CLAUDE, max_tokens=100, stream=True, tools=[WEATHER], extra_headers=new_session(),
        messages=[{"role": "user", "content": 'Weather? [[tool:get_weather {"city": "Oslo"}]]'}]))
    kinds = [event.type for event in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    starts = [event.content_block for event in events if event.type == "content_block_start"]
    assert [block.type for block in starts] == ["tool_use"]
    assert starts[0].name == "get_weather" and starts[0].id.startswith("toolu_")
    partial = "".join(event.delta.partial_json for event in events
                      if event.type == "content_block_delta" and event.delta.type == "input_json_delta")
    assert json.loads(partial) == {"city": "Oslo"}
    assert kinds.count("content_block_start") == kinds.count("content_block_stop")
    assert events[-2].delta.stop_reason == "tool_use"
    assert events[-2].usage.input_tokens > 0 and events[-2].usage.output_tokens > 0
    assert received.requests()[0]["tools"][0]["name"] == "get_weather"


@pytest.mark.parametrize("model", ["echo", CLAUDE])
def test_tool_use_then_tool_result(claude, received, model):
    session = new_session()
    messages: list[dict] = [{"role": "user",
                             "content": 'Weather in Paris? [[tool:get_weather {"city": "Paris"}]]'}]
    first = claude.messages.create(model=model, max_tokens=100, tools=[WEATHER],
                                   messages=messages, extra_headers=session)
    assert first.stop_reason == "tool_use"
    [use] = [block for block in first.content if block.type == "tool_use"]
    assert use.name == "get_weather" and use.input == {"city": "Paris"}
    messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
                 {"role": "user", "content": [
                     {"type": "tool_result", "tool_use_id": use.id,
                      "content": [{"type": "text", "text": "sunny, 21 C",
                                   "cache_control": {"type": "ephemeral"}}]},
                     {"type": "text", "text": "Thanks!"}]}]
    second = claude.messages.create(model=model, max_tokens=100, tools=[WEATHER],
                                    messages=messages, extra_headers=session)
    assert second.stop_reason == "end_turn"
    # the chat echo answers the last message (the user's text); the Messages echo sees one
    # user turn holding the tool result and the text
    assert second.content[0].text == ("tool results: sunny, 21 C" if model == CLAUDE else "echo: Thanks!")
    sent = received.requests()[-1]["messages"]
    if model == CLAUDE:
        assert sent == as_blocks(messages)  # tool_use, tool_result, cache_control: as written
    else:
        assert [m["role"] for m in sent] == ["user", "assistant", "tool", "user"]
        assert sent[1]["tool_calls"][0]["id"] == use.id == sent[2]["tool_call_id"]
        assert sent[2]["content"][0]["text"] == "sunny, 21 C" and sent[3]["content"][0]["text"] == "Thanks!"


def test_streamed_tool_use_with_the_sdk_helper(claude, received):
    with claude.messages.stream(
            model="echo", max_tokens=100, tools=[WEATHER], extra_headers=new_session(),
            messages=[{"role": "user", "content": 'Rome? [[tool:get_weather {"city": "Rome"}]]'}]
    ) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    assert [(b.type, b.name, b.input) for b in final.content] == [
        ("tool_use", "get_weather", {"city": "Rome"})]


def test_max_tokens_maps_to_its_stop_reason(claude, received):
    message = claude.messages.create(model=CLAUDE, max_tokens=2, extra_headers=new_session(),
                                     messages=[{"role": "user", "content": "one two three four"}])
    assert message.stop_reason == "max_tokens" and message.content[0].text == "echo: one"


@pytest.mark.parametrize("body, words", [
    ({"model": CLAUDE, "messages": [{"role": "user", "content": "hi"}]}, "max_tokens"),
    ({"model": CLAUDE, "max_tokens": 10, "messages": []}, "messages"),
    ({"model": CLAUDE, "max_tokens": 10, "messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_x", "content": "orphan"}]}]}, "toolu_x"),
    ({"model": CLAUDE, "max_tokens": 10, "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}]},
        {"role": "user", "content": "no result"}]}, "toolu_1"),
    ({"model": CLAUDE, "max_tokens": 10, "temperature": 1.5,
      "messages": [{"role": "user", "content": "hi"}]}, "temperature"),
    ({"model": CLAUDE, "max_tokens": 10, "tool_choice": {"type": "tool", "name": "nope"},
      "tools": [WEATHER], "messages": [{"role": "user", "content": "hi"}]}, "nope"),
    ({"model": CLAUDE, "max_tokens": 10, "tools": [{"type": "web_search_20250305", "name": "web_search"}],
      "messages": [{"role": "user", "content": "hi"}]}, "server tools"),
    ({"model": CLAUDE, "max_tokens": 0, "messages": [{"role": "user", "content": "hi"}]}, "max_tokens"),
    ({"model": CLAUDE, "max_tokens": 10, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "  "}]}]}, "non-whitespace"),
    ({"model": CLAUDE, "max_tokens": 10, "messages": [{"role": "user", "content": ""}]},
     "non-empty content"),
    ({"model": CLAUDE, "max_tokens": 10, "system": [{"type": "text", "text": ""}],
      "messages": [{"role": "user", "content": "hi"}]}, "system[0]"),
])
def test_bad_requests_get_anthropic_errors_and_store_nothing(proxy_url, sessions, received, body, words):
    session = new_session()
    response = httpx.post(f"{proxy_url}/v1/messages", json=body, headers=session)
    assert response.status_code == 400, response.text
    error = response.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert words in error["error"]["message"]
    assert received.requests() == []
    assert sessions.get(f"/{session['X-Session-Id']}").status_code == 404


def test_the_sdk_raises_the_error_and_upstream_failures_keep_their_status(claude, received):
    with pytest.raises(anthropic.BadRequestError) as bad:
        claude.messages.create(model=CLAUDE, max_tokens=10, messages=[
            {"role": "user", "content": [{"type": "video", "url": "x"}]}])
    assert bad.value.body["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.InternalServerError) as failed:
        claude.messages.create(model=CLAUDE, max_tokens=10, extra_headers=new_session(),
                               messages=[{"role": "user", "content": "fail [[status:503]]"}])
    assert failed.value.status_code == 503
    assert failed.value.body["type"] == "error" and failed.value.body["error"]["type"] == "api_error"
    assert failed.value.response.headers["x-agentmem-report"]
    with pytest.raises(anthropic.APIStatusError) as overloaded:  # litellm files it as a 500
        claude.messages.create(model=CLAUDE, max_tokens=10, extra_headers=new_session(),
                               messages=[{"role": "user", "content": "busy [[status:529]]"}])
    assert overloaded.value.status_code == 529
    assert overloaded.value.body["error"]["type"] == "overloaded_error"


def test_count_tokens(claude, received):
    counted = claude.messages.count_tokens(model=CLAUDE, system="Be brief.", tools=[WEATHER],
                                           messages=[{"role": "user", "content": "hello " * 50}])
    short = claude.messages.count_tokens(model=CLAUDE, messages=[{"role": "user", "content": "hello"}])
    assert counted.input_tokens > short.input_tokens > 0
    assert received.requests() == []


def _tool_output(step: int) -> str:
    return " ".join(f"Log line {step}.{i}: the build step {i} of job {step} finished with warnings "
                    f"about module m{(step * 7 + i) % 13} and cache key k{i}." for i in range(12))


def test_forty_turn_tool_session_keeps_tool_units_whole(claude, received, sessions):
    """A 40-turn agent loop on an Anthropic upstream: once the session is long, pruning removes
    text and whole old exchanges, and every request that reached the provider still pairs each
    tool_use with its tool_result in the very next message."""
    session = new_session()
    tools = [WEATHER, {"name": "read_log", "description": "Read a build log.",
                       "input_schema": {"type": "object", "properties": {"job": {"type": "integer"}}}}]
    system = [{"type": "text", "text": "You are a build assistant.", "cache_control": {"type": "ephemeral"}}]
    messages: list[dict] = []
    sent_requests: list[list[dict]] = []
    headers: list[httpx.Headers] = []

    def call() -> anthropic.types.Message:
        sent_requests.append(copy.deepcopy(messages))
        raw = claude.messages.with_raw_response.create(model=CLAUDE, max_tokens=300, system=system,
                                                       tools=tools, messages=messages, extra_headers=session)
        headers.append(raw.headers)
        return raw.parse()

    step = 0
    while len(messages) < 40:
        step += 1
        messages.append({"role": "user", "content": f"Step {step}: check job {step}. "
                                                    f'[[tool:read_log {{"job": {step}}}]]'})
        reply = call()
        uses = [b for b in reply.content if b.type == "tool_use"]
        assert [u.input for u in uses] == [{"job": step}]
        messages.append({"role": "assistant",
                         "content": [b.model_dump(exclude_none=True) for b in reply.content]})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": u.id, "content": _tool_output(step)} for u in uses]})
        answer = call()
        assert answer.content[0].text.startswith("tool results:")
        messages.append({"role": "assistant", "content": answer.content[0].text})

    arrived = [request["messages"] for request in received.requests()]
    assert len(arrived) == len(sent_requests) == 2 * step
    for history in arrived:
        for index, message in enumerate(history):
            blocks = message["content"] if isinstance(message["content"], list) else []
            uses = [b["id"] for b in blocks if b["type"] == "tool_use"]
            if uses:
                answered = history[index + 1]["content"]
                assert [b["tool_use_id"] for b in answered if b["type"] == "tool_result"] == uses
            results = [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"]
            if results:
                asked = history[index - 1]["content"]
                assert [b["id"] for b in asked if b["type"] == "tool_use"] == results
    assert all(request["system"] == system for request in received.requests())
    # hygiene ran and removed something: fewer tokens and shorter bodies than the client sent,
    # the newest turn (the tool result) always as written
    shorter = [len(json.dumps(got)) < len(json.dumps(as_blocks(sent)))
               for got, sent in zip(arrived, sent_requests)]
    assert not shorter[0] and sum(shorter) >= 5
    assert all(got[-1] == as_blocks(sent[-1:])[0] for got, sent in zip(arrived, sent_requests))
    assert int(headers[-1]["x-agentmem-tokens-after"]) < int(headers[-1]["x-agentmem-tokens-before"])
    reports = sessions.get(f"/{session['X-Session-Id']}/reports", params={"limit": 1000}).json()["data"]
    assert len(reports) == 2 * step and all(r["status"] == "ok" for r in reports)
    # the client re-serialises each tool_use input; the session still matches what was stored
    assert all(r["ingest"]["diverged_at"] is None for r in reports)
    assert {d["action"] for r in reports for stage in r["stages"] for d in stage["decisions"]} & {
        "prune_spans", "drop_message"}


def _cc_tools(marked: bool) -> list[dict]:
    """Twelve tools of a coding agent; Claude Code marks the last one for the prompt cache."""
    names = ["read_log", "Read", "Edit", "Write", "Bash", "Grep", "Glob", "WebFetch", "WebSearch",
             "TodoWrite", "NotebookEdit", "Task"]
    tools = [{"name": name, "description": f"{name}: a tool of the coding agent for {name.lower()} work.",
              "input_schema": {"type": "object", "properties": {"job": {"type": "integer"}}}}
             for name in names]
    if marked:
        tools[-1] = {**tools[-1], "cache_control": {"type": "ephemeral"}}
    return tools


@pytest.mark.parametrize("marked", [True, False])
def test_a_client_that_marks_its_prompt_for_caching_gets_the_prefix_it_sent(claude, received,
                                                                            marked):
    """Claude Code marks the last tool, the system prompt and the newest user block with
    ``cache_control``: the provider caches the prompt up to the last mark. Pruning the older
    history anew for each query, choosing the tools anew, or withholding a log read again
    (superseded), would change that prefix on every call and have it billed again as a cache
    write. So everything up to the last mark goes out as sent. The same session without marks
    is cleaned (tools chosen, history pruned, repeats superseded)."""
    session = new_session()
    tools = _cc_tools(marked)
    system = [{"type": "text", "text": "You are a build assistant that reads logs."}]
    if marked:
        system[0]["cache_control"] = {"type": "ephemeral"}
    messages: list[dict] = []
    sent: list[tuple[list[dict], list[dict]]] = []

    def call() -> anthropic.types.Message:
        request = copy.deepcopy(messages)
        if marked:  # the mark moves to the newest user block on every call, as Claude Code does
            last = request[-1]
            blocks = last["content"] if isinstance(last["content"], list) else [
                {"type": "text", "text": last["content"]}]
            last["content"] = [*blocks[:-1], {**blocks[-1], "cache_control": {"type": "ephemeral"}}]
        sent.append((request, tools))
        return claude.messages.create(model=CLAUDE, max_tokens=300, system=system, tools=tools,
                                      messages=request, extra_headers=session)

    for step in range(1, 9):
        job = step % 3  # the agent reads the same logs again: a repeat would supersede the older
        messages.append({"role": "user", "content": f"Step {step}: check the build log of job {job}. "
                                                    f'[[tool:read_log {{"job": {job}}}]]'})
        uses = [b for b in call().content if b.type == "tool_use"]
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True)
                                                          for b in (*uses,)]})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": u.id, "content": _tool_output(job)} for u in uses]})
        messages.append({"role": "assistant", "content": call().content[0].text})

    arrived = received.requests()[-len(sent):]
    as_sent = [got["messages"] == as_blocks(request) and [t["name"] for t in got["tools"]]
               == [t["name"] for t in offered] for got, (request, offered) in zip(arrived, sent)]
    if marked:
        assert all(as_sent)
        assert all(got["tools"][-1].get("cache_control") for got in arrived)
    else:
        assert not all(as_sent)  # the default cleans a session that marks nothing
        assert any(len(got["tools"]) < len(tools) for got in arrived)


def test_a_failed_tool_result_says_so_to_the_model(claude, received):
    """``is_error: true`` has no field in the chat form (nor in litellm's Anthropic transform):
    the result reaches the provider saying that the tool failed, not as its plain answer."""
    use = {"type": "tool_use", "id": "toolu_e1", "name": "get_weather", "input": {"city": "Oslo"}}
    messages = [{"role": "user", "content": "Weather in Oslo?"},
                {"role": "assistant", "content": [use]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_e1",
                                              "is_error": True,
                                              "content": "ConnectionError: service unavailable"}]}]
    raw = claude.messages.with_raw_response.create(model=CLAUDE, max_tokens=50, tools=[WEATHER],
                                                   messages=messages, extra_headers=new_session())
    [result] = received.requests()[-1]["messages"][-1]["content"]
    text = result["content"] if isinstance(result["content"], str) else result["content"][0]["text"]
    assert text == "Tool error: ConnectionError: service unavailable"
    assert "is_error" not in raw.headers.get("x-agentmem-warning", "")


def test_anthropic_clients_authenticate_with_x_api_key(tenant_proxy):
    good = anthropic.Anthropic(base_url=tenant_proxy.url, api_key="key-alpha", max_retries=0)
    raw = good.messages.with_raw_response.create(model="echo", max_tokens=20, extra_headers=new_session(),
                                                 messages=[{"role": "user", "content": "who am I"}])
    assert raw.parse().content[0].text == "echo: who am I"
    bad = anthropic.Anthropic(base_url=tenant_proxy.url, api_key="key-wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as refused:
        bad.messages.create(model="echo", max_tokens=20, messages=[{"role": "user", "content": "hi"}])
    assert refused.value.body == {"type": "error", "error": {"type": "authentication_error",
                                                             "message": "Invalid proxy API key."}}


@pytest.mark.parametrize("stream", [False, True])
def test_thinking_blocks_round_trip_with_their_signature(claude, received, stream):
    """With thinking on, Anthropic refuses a tool loop whose assistant turn lost its signed
    thinking block: the block must reach the client (streamed too) and go back upstream."""
    session = new_session()
    thinking = {"type": "enabled", "budget_tokens": 1024}
    messages: list[dict] = [{"role": "user", "content": 'Oslo? [[tool:get_weather {"city": "Oslo"}]]'}]
    options = {"model": SONNET, "max_tokens": 2000, "tools": [WEATHER], "thinking": thinking,
               "extra_headers": session}
    first = message_of(claude, stream, messages=messages, **options)
    assert [b.type for b in first.content] == ["thinking", "tool_use"]
    assert first.content[0].signature.startswith("sig_echo")
    assert first.content[0].thinking.startswith("thinking about: Oslo?")
    messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": first.content[1].id,
                                               "content": "cold"}]}]
    second = claude.messages.create(messages=messages, **options)
    assert [b.type for b in second.content] == ["thinking", "text"]
    assert second.content[1].text == "tool results: cold"
    sent = received.requests()[-1]
    assert sent["thinking"] == thinking
    assert sent["messages"][1]["content"][0] == messages[1]["content"][0]  # the signed block


def test_a_stream_cut_by_the_provider_ends_with_an_error_event(claude, received, sessions):
    session = new_session()
    request = {"model": CLAUDE, "max_tokens": 100, "extra_headers": session,
               "messages": [{"role": "user", "content": "one two three four five six [[cut:5]]"}]}
    with pytest.raises(anthropic.APIStatusError) as cut, claude.messages.stream(**request) as stream:
        for _ in stream.text_stream:  # the error comes mid-stream
            pass
    assert cut.value.body["type"] == "error" and cut.value.body["error"]["type"] == "api_error"
    assert len(received.requests()) == 1
    stored = sessions.get(f"/{session['X-Session-Id']}").json()
    reply = stored["turns"][-1]
    assert reply["partial"] and reply["message"]["content"].startswith("echo: one")


async def test_async_client_streams_concurrent_sessions(proxy_url, received):
    client = anthropic.AsyncAnthropic(base_url=proxy_url, api_key="unused", max_retries=0)

    async def ask(city: str) -> anthropic.types.Message:
        question = f'{city}? [[tool:get_weather {{"city": "{city}"}}]]'
        async with client.messages.stream(model=CLAUDE, max_tokens=100, tools=[WEATHER],
                                          extra_headers=new_session(),
                                          messages=[{"role": "user", "content": question}]) as stream:
            return await stream.get_final_message()

    cities = ["Lima", "Pune", "Kyiv"]
    replies = await asyncio.gather(*(ask(city) for city in cities))
    assert [reply.content[0].input for reply in replies] == [{"city": city} for city in cities]
    asked = [r["messages"][0]["content"][0]["text"].split("?")[0] for r in received.requests()]
    assert sorted(asked) == sorted(cities)
    await client.close()


def test_stateful_client_sends_only_new_messages(claude, received):
    """X-Agentmem-Stateful: the client sends the tool_result alone; the provider gets the whole
    conversation, rebuilt from the session, with the tool_use it answers."""
    headers = {**new_session(), "X-Agentmem-Stateful": "true"}
    options = {"model": CLAUDE, "max_tokens": 100, "tools": [WEATHER], "extra_headers": headers}
    first = claude.messages.create(
        messages=[{"role": "user", "content": 'Bern? [[tool:get_weather {"city": "Bern"}]]'}], **options)
    [use] = first.content
    second = claude.messages.create(messages=[{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": use.id, "content": "foggy"}]}], **options)
    assert second.content[0].text == "tool results: foggy"
    sent = received.requests()[-1]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[1]["content"] == [
        {"type": "tool_use", "id": use.id, "name": "get_weather", "input": {"city": "Bern"}}]


@pytest.mark.parametrize("path, body", [
    ("/v1/messages", {"model": "echo", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}),
    ("/v1/chat/completions", {"model": "echo", "messages": [{"role": "user", "content": "hi"}]}),
])
def test_odd_unknown_field_names_make_a_legal_warning_header(proxy_url, received, path, body):
    """Found by the fuzzer: a dropped field named "" or "a\\nb" went into X-Agentmem-Warning as
    is, and the server died writing the header."""
    response = httpx.post(f"{proxy_url}{path}", headers=new_session(),
                          json={**body, "": 1, "a\nb": 2, "ünï": 3, " ": 4})
    assert response.status_code == 200, response.text
    warning = response.headers["x-agentmem-warning"]
    assert warning.startswith("fields not forwarded to the provider:") and "a?b" in warning
    assert received.requests()[0]["messages"][-1]["content"] == "hi"


def test_a_file_read_again_supersedes_the_older_tool_result(claude, received, sessions):
    """A tool_result's text blocks: the older of two answers to the same tool_use input is
    withheld whole (agentmem/quarantine/superseded.py), the newer reaches the model."""
    session = new_session()
    lines = [f"setting_{i}: {i}" for i in range(12)]
    old, new = "\n".join(lines), "\n".join(lines).replace("setting_3: 3", "setting_3: 30")
    read = {"name": "read_file", "description": "Read a file.",
            "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}

    def use(tool_id):
        return {"role": "assistant", "content": [
            {"type": "tool_use", "id": tool_id, "name": "read_file", "input": {"path": "app.cfg"}}]}

    def result(tool_id, text):
        return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_id,
                                             "content": [{"type": "text", "text": text}]}]}

    messages = [{"role": "user", "content": "Set setting_3 to 30 in app.cfg."},
                use("toolu_1"), result("toolu_1", old),
                {"role": "assistant", "content": "I will edit it."},
                {"role": "user", "content": "Done. Check it again."},
                use("toolu_2"), result("toolu_2", new)]
    claude.messages.create(model="echo", max_tokens=50, tools=[read], messages=messages,
                           extra_headers=session)
    sent = received.requests()[-1]["messages"]
    tools = [m for m in sent if m["role"] == "tool"]
    assert len(tools) == 2 and tools[1]["content"][0]["text"] == new
    assert tools[0]["content"].startswith("[agentmem withheld this older result")  # not `old`
    records = sessions.get(f"/{session['X-Session-Id']}/quarantine").json()["data"]
    assert [r["detector"] for r in records] == ["repeated_call"]


def test_a_prose_file_claude_code_read_reaches_the_model_whole_when_it_can_edit(claude, received):
    """Claude Code's shape: ``Read`` with a ``file_path``, the file as a tool_result string, and
    an ``Edit`` tool. The README goes to the provider exactly as read (agentmem/file_reads.py);
    the same request without ``Edit`` gets it pruned against the question."""
    paragraphs = [" ".join(f"The {topic} service keeps record {i} for {i + 3} days before it "
                           f"moves the record to cold storage." for i in range(12))
                  for topic in ("billing", "shipping", "support", "search")]
    readme = "# Operations notes\n\n" + "\n\n".join(paragraphs)
    read = {"name": "Read", "description": "Read a file from the local filesystem.",
            "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}}}
    edit = {"name": "Edit", "description": "Replace old_string with new_string in a file.",
            "input_schema": {"type": "object", "properties": {
                "file_path": {"type": "string"}, "old_string": {"type": "string"},
                "new_string": {"type": "string"}}}}
    messages = [{"role": "user", "content": "Read the operations notes."},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_r", "name": "Read",
                                                   "input": {"file_path": "/repo/NOTES.md"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_r",
                                              "content": readme}]},
                {"role": "assistant", "content": "I have read NOTES.md."},
                {"role": "user", "content": "How long does the shipping service keep record 7? "
                                            "Fix that sentence in NOTES.md to say 30 days."}]
    for tools, whole in (([read, edit], True), ([read], False)):
        claude.messages.create(model="echo", max_tokens=50, tools=tools, messages=messages,
                               extra_headers=new_session())
        [tool] = [m for m in received.requests()[-1]["messages"] if m["role"] == "tool"]
        assert (tool["content"] == readme) is whole
        assert whole or "shipping service keeps record 7 for 10 days" in tool["content"]


@pytest.mark.parametrize("model", ["echo", CLAUDE])
def test_a_tool_result_over_the_budget_is_cut_in_its_block(claude, received, policy_dir, model):
    """Claude Code's tool results are text blocks: a fetched page over the prompt budget is cut
    in its block (the sentences with the question's words stay), the other block as written."""
    (policy_dir / "overflow-messages.yaml").write_text(
        "name: overflow-messages\nextends: default\nbudget:\n  max_prompt_tokens: 1500\n")
    fact = "The lighthouse keeper Ada Lovelock painted the ferry green in 1921."
    words = "harbour kettle station meeting snapshot supplier pallet river garden ticket".split()
    lines = [f"Paragraph {i} is about the " + " ".join(words[(i + k) % 10] for k in range(16)) + "."
             for i in range(400)]
    lines[250] = fact
    page, head = " ".join(lines), "Fetched https://example.org/ferry (200 OK)."
    fetch = {"name": "web_fetch", "description": "Fetch a web page.",
             "input_schema": {"type": "object", "properties": {"url": {"type": "string"}}}}
    messages = [{"role": "user", "content": "Who painted the ferry green, and when?"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_page",
                                                   "name": "web_fetch",
                                                   "input": {"url": "https://example.org/ferry"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_page", "content": [
                    {"type": "text", "text": head}, {"type": "text", "text": page}]}]}]
    claude.messages.create(model=model, max_tokens=50, tools=[fetch], messages=messages,
                           extra_headers={**new_session(), "X-Agentmem-Policy": "overflow-messages"})
    sent = received.requests()[-1]["messages"]
    blocks = sent[2]["content"][0]["content"] if model == CLAUDE else sent[2]["content"]
    assert blocks[0]["text"] == head
    assert fact in blocks[1]["text"] and len(blocks[1]["text"]) < len(page) / 3


def test_a_model_outside_the_allow_list_is_refused_before_anything_is_sent(claude, received, sessions):
    """The configured ``models:`` are an allow-list on this route too: a tenant must not reach
    another provider with the server's keys through the Messages API."""
    session = new_session()
    with pytest.raises(anthropic.NotFoundError) as refused:
        claude.messages.create(model="openai/gpt-4o", max_tokens=16, extra_headers=session,
                               messages=[{"role": "user", "content": "hi"}])
    assert refused.value.body == {"type": "error", "error": {
        "type": "not_found_error",
        "message": "The model `openai/gpt-4o` does not exist or you do not have access to it."}}
    with pytest.raises(anthropic.NotFoundError):
        claude.messages.count_tokens(model="openai/gpt-4o",
                                     messages=[{"role": "user", "content": "hi"}])
    assert received.requests() == []
    assert sessions.get(f"/{session['X-Session-Id']}").status_code == 404


def test_a_user_id_that_is_not_text_is_a_400_naming_it(claude, received, sessions):
    """Anthropic wants ``metadata.user_id`` as text; a number used to reach litellm's transform
    and come back as a 502 carrying the server's traceback."""
    session = new_session()
    with pytest.raises(anthropic.BadRequestError) as refused:
        claude.messages.create(model=CLAUDE, max_tokens=16, metadata={"user_id": 5},  # type: ignore[typeddict-item]
                               messages=[{"role": "user", "content": "hi"}], extra_headers=session)
    assert "metadata.user_id" in refused.value.message
    assert received.requests() == []
    assert sessions.get(f"/{session['X-Session-Id']}").status_code == 404


def test_chat_to_an_anthropic_route_with_a_user_id_number_is_a_400(proxy_url, received):
    response = httpx.post(f"{proxy_url}/v1/chat/completions", timeout=60, json={
        "model": CLAUDE, "metadata": {"user_id": 5}, "messages": [{"role": "user", "content": "hi"}]})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "metadata"
    assert "metadata.user_id must be a string" in response.json()["error"]["message"]
    assert received.requests() == []
