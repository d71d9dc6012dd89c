"""``POST /v1/responses`` with the real openai client and the OpenAI Agents SDK (its default
Responses mode) through the real proxy, against the echo upstream: what the client got and
what the provider received (the translated chat request, after hygiene)."""

from __future__ import annotations

import json
import uuid

import openai
import pytest
from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
from openai.types.responses import Response

from agentmem.identity import derive_session_id
from agentmem.responses_api import items_for, to_chat

set_tracing_disabled(True)  # nothing may try to export traces to the network

WEATHER = {"type": "function", "name": "get_weather", "description": "Weather for a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}
ASK = 'Weather in Oslo? [[tool:get_weather {"city": "Oslo"}]]'


def test_plain_response_and_what_the_provider_received(client, http, received, session_id):
    raw = client.responses.with_raw_response.create(
        model="echo", input="Hello there. How are you?", instructions="Be terse.",
        temperature=0.2, top_p=0.9, max_output_tokens=64, extra_headers={"X-Session-Id": session_id})
    response = raw.parse()
    Response.model_validate(raw.http_response.json())  # every field the client's model requires
    assert response.output_text == "echo: Hello there. How are you?"
    assert response.status == "completed" and response.instructions == "Be terse."
    assert response.usage is not None and response.usage.input_tokens > 0
    assert raw.headers["x-agentmem-session"] == session_id
    assert response.id == "resp_" + raw.headers["x-agentmem-report"]
    assert int(raw.headers["x-agentmem-tokens-before"]) > 0
    [sent] = received.requests()
    assert sent == {"model": "echo", "temperature": 0.2, "top_p": 0.9, "max_tokens": 64,
                    "messages": [{"role": "system", "content": "Be terse."},
                                 {"role": "user", "content": "Hello there. How are you?"}]}
    turns = http.get(f"/v1/sessions/{session_id}").json()["turns"]
    assert [t["role"] for t in turns] == ["system", "user", "assistant"]
    assert turns[-1]["message"]["content"] == response.output_text


def test_streamed_response_events(client, http, received, session_id):
    stream = client.responses.create(model="echo", input="one two three", stream=True,
                                     extra_headers={"X-Session-Id": session_id})
    events = list(stream)
    kinds = [event.type for event in events]
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert kinds[-3:] == ["response.content_part.done", "response.output_item.done",
                          "response.completed"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    completed = events[-1].response
    assert text == "echo: one two three" == completed.output_text
    assert completed.usage is not None and completed.usage.total_tokens > 0
    [sent] = received.requests()
    assert sent["stream"] is True and sent["messages"] == [{"role": "user", "content": "one two three"}]
    turns = http.get(f"/v1/sessions/{session_id}").json()["turns"]
    assert turns[-1]["message"]["content"] == text and turns[-1]["partial"] is False


def test_function_tools_and_a_function_call_output_follow_up(client, http, received, session_id):
    headers = {"X-Session-Id": session_id}
    first = client.responses.create(model="echo", input=ASK, tools=[WEATHER], tool_choice="auto",
                                    parallel_tool_calls=True, extra_headers=headers)
    [call] = first.output
    assert call.type == "function_call" and call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "Oslo"}

    streamed = list(client.responses.create(model="echo", input=ASK, tools=[WEATHER], stream=True,
                                            extra_headers={"X-Session-Id": session_id + "-s"}))
    deltas = "".join(e.delta for e in streamed if e.type == "response.function_call_arguments.delta")
    assert json.loads(deltas) == {"city": "Oslo"}
    [done] = [e for e in streamed if e.type == "response.function_call_arguments.done"]
    assert done.arguments == deltas

    items = [{"role": "user", "content": ASK}, call.model_dump(exclude_none=True),
             {"type": "function_call_output", "call_id": call.call_id, "output": "Oslo: 4 C, rain."}]
    follow = client.responses.create(model="echo", input=items, tools=[WEATHER], extra_headers=headers)
    assert follow.output_text.startswith("tool results: Oslo: 4 C, rain.")

    plain, _, sent = received.requests()
    assert plain["tools"] == [{"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city", "parameters": WEATHER["parameters"]}}]
    assert plain["tool_choice"] == "auto" and plain["parallel_tool_calls"] is True
    assert sent["messages"] == [
        {"role": "user", "content": ASK},
        {"role": "assistant", "tool_calls": [{
            "id": call.call_id, "type": "function",
            "function": {"name": "get_weather", "arguments": call.arguments}}]},
        {"role": "tool", "tool_call_id": call.call_id, "content": "Oslo: 4 C, rain."}]
    # Hygiene removed nothing: the received messages map back to the client's items exactly.
    assert items_for(sent["messages"], to_chat({"model": "echo", "input": items})) == items
    turns = http.get(f"/v1/sessions/{session_id}").json()["turns"]
    assert [t["role"] for t in turns] == ["user", "assistant", "tool", "assistant"]


def test_previous_response_id_continues_and_branches(client, http, received, session_id):
    first = client.responses.create(model="echo", input="My name is Ada.", instructions="Be terse.",
                                    extra_headers={"X-Session-Id": session_id})
    second = client.responses.create(model="echo", input="What is my name?", instructions="Be terse.",
                                     previous_response_id=first.id)
    assert second.previous_response_id == first.id
    opening = [{"role": "system", "content": "Be terse."},
               {"role": "user", "content": "My name is Ada."},
               {"role": "assistant", "content": "echo: My name is Ada."}]
    assert received.requests()[-1]["messages"] == [*opening, {"role": "user", "content": "What is my name?"}]
    session = http.get(f"/v1/sessions/{session_id}").json()
    assert session["turn_count"] == 5  # the same session: only the new turns were added

    # A branch from the first response (new instructions replace the old), then back to the second.
    client.responses.create(model="echo", input="Which day is it?", instructions="Be kind.",
                            previous_response_id=first.id)
    assert received.requests()[-1]["messages"] == [
        {"role": "system", "content": "Be kind."}, *opening[1:],
        {"role": "user", "content": "Which day is it?"}]
    client.responses.create(model="echo", input="And now?", instructions="Be terse.",
                            previous_response_id=second.id)
    assert received.requests()[-1]["messages"] == [
        *opening, {"role": "user", "content": "What is my name?"},
        {"role": "assistant", "content": "echo: What is my name?"}, {"role": "user", "content": "And now?"}]


def test_previous_response_id_is_per_tenant_and_must_exist(tenant_proxy, received):
    alpha = openai.OpenAI(base_url=f"{tenant_proxy.url}/v1", api_key="key-alpha", max_retries=0)
    beta = openai.OpenAI(base_url=f"{tenant_proxy.url}/v1", api_key="key-beta", max_retries=0)
    first = alpha.responses.create(model="echo", input=f"secret {uuid.uuid4().hex}")
    for client, response_id in ((beta, first.id), (alpha, "resp_unknown")):
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(model="echo", input="more", previous_response_id=response_id)
        assert caught.value.body["param"] == "previous_response_id"
        assert caught.value.body["code"] == "previous_response_not_found"
    assert len(received.requests()) == 1


@pytest.mark.parametrize(("body", "param"), [
    ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"input": [{"role": "user", "content": "hi"}, {"type": "reasoning", "summary": []}]}, "input[1].type"),
    ({"input": [{"role": "user", "content": [{"type": "input_audio"}]}]}, "input[0].content[0].type"),
    ({"input": [{"type": "function_call_output", "call_id": "call_9", "output": "x"}]},
     "input[0].call_id"),
    ({"input": [{"role": "user", "content": "hi"},
                {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
                {"role": "user", "content": "and?"}], "tools": [WEATHER]}, "input[1]"),
    ({"input": "hi", "max_output_tokens": "ten"}, "max_output_tokens"),
    ({"input": "hi", "tool_choice": {"type": "web_search_preview"}}, "tool_choice"),
    ({"input": "hi", "conversation": "conv_1"}, "conversation"),
    ({"input": []}, "input"),
])
def test_unsupported_input_is_a_400_and_nothing_is_stored(http, received, session_id, body, param):
    response = http.post("/v1/responses", json={"model": "echo", **body},
                         headers={"X-Session-Id": session_id})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert not any(word in error["message"] for word in ("max_tokens", "tool_call", "tool message"))
    assert received.requests() == []
    assert http.get(f"/v1/sessions/{session_id}").status_code == 404


def _tool_units_whole(messages: list[dict]) -> bool:
    """Each assistant tool_calls message is followed by exactly its tool replies, and every tool
    reply follows its call."""
    index = 0
    while index < len(messages):
        message = messages[index]
        if message["role"] == "tool":
            return False  # a reply whose call was dropped
        wanted = {c["id"] for c in message.get("tool_calls") or ()}
        replies = set()
        index += 1
        while index < len(messages) and messages[index]["role"] == "tool":
            replies.add(messages[index]["tool_call_id"])
            index += 1
        if replies != wanted:
            return False
    return True


def test_forty_turn_tool_session_keeps_tool_units_whole(client, http, received, session_id):
    """12 exchanges (48 turns) chained by previous_response_id, with long tool outputs: hygiene
    prunes the history, and every request the provider gets has whole tool-call units."""
    topics = ["harbour cranes", "rail freight", "river barges", "air cargo", "cold storage",
              "customs forms", "pallet sizes", "container seals", "port fees", "truck routes",
              "warehouse robots", "fuel surcharges"]
    previous, tokens = None, []
    for step, topic in enumerate(topics):
        ask = f'Tell me about {topic}. [[tool:lookup {{"topic": "{topic}"}}]]'
        tool = {"type": "function", "name": "lookup", "description": "Look up a logistics topic",
                "parameters": {"type": "object", "properties": {"topic": {"type": "string"}}}}
        first = client.responses.create(model="echo", input=ask, tools=[tool],
                                        previous_response_id=previous,
                                        extra_headers={} if previous else {"X-Session-Id": session_id})
        [call] = first.output
        report = " ".join(f"Fact {n} about {topic}: item {step}-{n} weighs {n * 7} kg and ships "
                          f"from dock {n % 5} on weekday {n % 7}." for n in range(30))
        raw = client.responses.with_raw_response.create(
            model="echo", tools=[tool], previous_response_id=first.id,
            input=[{"type": "function_call_output", "call_id": call.call_id, "output": report}])
        previous = raw.parse().id
        tokens.append((int(raw.headers["x-agentmem-tokens-before"]),
                       int(raw.headers["x-agentmem-tokens-after"])))
    requests = received.requests()
    assert len(requests) == 2 * len(topics)
    assert all(_tool_units_whole(r["messages"]) for r in requests)
    assert any(after < before for before, after in tokens)  # hygiene did prune
    assert requests[-1]["messages"][-1]["role"] == "tool"
    turns = http.get(f"/v1/sessions/{session_id}").json()["turns"]
    assert len(turns) == 4 * len(topics)
    reports = http.get(f"/v1/sessions/{session_id}/reports").json()["data"]
    assert len(reports) == 2 * len(topics) and all(r["status"] == "ok" for r in reports)
    actions = {d["action"] for r in reports for stage in r["stages"] for d in stage["decisions"]}
    assert actions & {"prune_spans", "drop_message"}  # the pruning is in the reports too
    assert [t["role"] for t in turns[:4]] == ["user", "assistant", "tool", "assistant"]


weather_calls: list[str] = []


@function_tool
def get_weather(city: str) -> str:
    """Get the current weather forecast for a city."""
    weather_calls.append(city)
    return f"{city}: sunny, 21 C, light wind"


async def test_agents_sdk_default_responses_mode(proxy, http, received):
    weather_calls.clear()
    client = openai.AsyncOpenAI(base_url=f"{proxy.url}/v1", api_key="unused", max_retries=0)
    tag = uuid.uuid4().hex[:8]
    agent = Agent(name="assistant", instructions=f"You are a helpful assistant ({tag}).",
                  tools=[get_weather], model=OpenAIResponsesModel(model="echo", openai_client=client))
    result = await Runner.run(agent, 'What is the weather in Paris? [[tool:get_weather {"city": "Paris"}]]')
    assert weather_calls == ["Paris"]
    assert result.final_output.startswith("tool results: Paris: sunny")
    first, second = received.requests()
    assert first["messages"][0] == {"role": "system", "content": f"You are a helpful assistant ({tag})."}
    assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "tool"]
    assert second["messages"][-1]["content"] == "Paris: sunny, 21 C, light wind"
    # The SDK sent no session id: both calls share the one derived from the opening.
    assert result.raw_responses[-1].response_id.startswith("resp_")
    turns = http.get(f"/v1/sessions/{derive_session_id(first['messages'])}").json()["turns"]
    assert [t["role"] for t in turns] == ["system", "user", "assistant", "tool", "assistant"]
    assert turns[-1]["message"]["content"] == result.final_output
    await client.close()


def test_store_false_leaves_no_previous_response(client, received):
    first = client.responses.create(model="echo", input="forget me", store=False)
    assert first.store is False
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="echo", input="more", previous_response_id=first.id)
    assert caught.value.body["code"] == "previous_response_not_found"


def test_a_stream_cut_midway_ends_with_response_failed(client, http, session_id):
    stream = client.responses.create(model="echo", input="a long story about the sea [[cut:4]]",
                                     stream=True, extra_headers={"X-Session-Id": session_id})
    events = list(stream)
    assert events[-1].type == "response.failed" and events[-1].response.status == "failed"
    assert any(e.type == "response.output_text.delta" for e in events)
    turns = http.get(f"/v1/sessions/{session_id}").json()["turns"]
    assert turns[-1]["partial"] is True  # what arrived is stored, marked partial


def test_items_map_back_byte_identically_and_converted_where_changed():
    """The Agents SDK resends output items with ids and statuses: unchanged messages give the
    very items back; a message hygiene shortened is converted."""
    items = [
        {"role": "user", "content": [{"type": "input_text", "text": "Plan a trip."}]},
        {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]},
        {"id": "fc_1", "type": "function_call", "status": "completed", "call_id": "c1",
         "name": "search", "arguments": "{}"},
        {"id": "fc_2", "type": "function_call", "status": "completed", "call_id": "c2",
         "name": "book", "arguments": "{\"x\": 1}"},
        {"type": "function_call_output", "call_id": "c1", "output": "Found three trains."},
        {"type": "function_call_output", "call_id": "c2", "output": "Booked."},
        {"type": "message", "role": "user", "content": "Thanks!"},
    ]
    translation = to_chat({"model": "echo", "input": items, "instructions": "Be brief."})
    messages = translation.conversation()
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "tool", "user"]
    assert messages[2]["content"] == [{"type": "text", "text": "Checking."}]
    assert [c["id"] for c in messages[2]["tool_calls"]] == ["c1", "c2"]
    assert items_for(messages, translation) == items
    shortened = [*messages[:3], {**messages[3], "content": "Found trains."}, *messages[4:]]
    back = items_for(shortened, translation)
    assert back[4] == {"type": "function_call_output", "call_id": "c1", "output": "Found trains."}
    assert back[:4] == items[:4] and back[5:] == items[5:]


def test_event_stream_matches_the_openai_event_types():
    """Text, a refusal and two tool calls (one provider without indices) in one stream: every
    event validates as the openai client's own event type, and the final response holds all."""
    from openai.types.responses import ResponseStreamEvent
    from pydantic import TypeAdapter

    from agentmem.responses_api import EventStream

    chunks = [
        {"model": "echo", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hi"}}]},
        {"choices": [{"index": 0, "delta": {"content": " there", "refusal": "No."}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "a", "arguments": "{\"x\""}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"function": {"arguments": ": 1}"}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [
            {"id": "c2", "type": "function", "function": {"name": "b", "arguments": "{}"}}]}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
         "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}},
    ]
    stream = EventStream({"model": "echo", "input": "hi"}, "resp_abc")
    events = [*stream.start(), *(e for c in chunks for e in stream.add(c)), *stream.finish()]
    adapter = TypeAdapter(ResponseStreamEvent)
    parsed = [adapter.validate_python(event) for event in events]
    assert [e.sequence_number for e in parsed] == list(range(len(parsed)))
    final = parsed[-1]
    assert final.type == "response.completed"
    message, first, second = final.response.output
    assert [p.type for p in message.content] == ["output_text", "refusal"]
    assert message.content[0].text == "Hi there" and message.content[1].refusal == "No."
    assert (first.call_id, first.arguments) == ("c1", '{"x": 1}')
    assert (second.call_id, second.arguments) == ("c2", "{}")
    assert final.response.usage.total_tokens == 7


@pytest.mark.parametrize("stream", [False, True])
def test_metadata_comes_back_as_sent(client, session_id, stream):
    """The response's ``metadata`` is the request's: litellm writes its timings (and, in a
    stream, the provider's URL and headers) into the dict it is given, which must not be ours."""
    sent = {"ticket": "42"}
    if stream:
        events = list(client.responses.create(model="echo", input="hi", metadata=sent, stream=True,
                                              extra_headers={"X-Session-Id": session_id}))
        response = events[-1].response
    else:
        response = client.responses.create(model="echo", input="hi", metadata=sent,
                                           extra_headers={"X-Session-Id": session_id})
    assert response.metadata == {"ticket": "42"}


@pytest.mark.parametrize("how", ["header", "metadata"])
def test_stateful_mode_is_refused_with_the_responses_way_named(http, received, session_id, how):
    """Taken silently, the header sent the provider the new input alone and marked the stored
    history superseded; the Responses API continues a conversation by previous_response_id."""
    first = http.post("/v1/responses", json={"model": "echo", "input": "My name is Ada."},
                      headers={"X-Session-Id": session_id})
    assert first.status_code == 200
    extra = ({"headers": {"X-Session-Id": session_id, "X-Agentmem-Stateful": "true"}} if how == "header"
             else {"headers": {"X-Session-Id": session_id}})
    body = {"model": "echo", "input": "What is my name?"}
    if how == "metadata":
        body["metadata"] = {"agentmem_stateful": True}
    refused = http.post("/v1/responses", json=body, **extra)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["param"] == "previous_response_id"
    assert "previous_response_id" in refused.json()["error"]["message"]
    assert len(received.requests()) == 1
    turns = http.get(f"/v1/sessions/{session_id}", params={"include_superseded": "true"}).json()["turns"]
    assert [t["role"] for t in turns] == ["user", "assistant"]
    assert all(t.get("active", True) for t in turns)
