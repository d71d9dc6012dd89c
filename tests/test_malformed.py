"""Malformed requests: an OpenAI-shaped 4xx naming the problem, and the session untouched."""

from __future__ import annotations

import json

import httpx
import pytest

GOOD_HISTORY = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Look it up [[tool:lookup {\"q\": \"x\"}]]"},
]
TOOL = {"type": "function",
        "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}


def _messages(*extra):
    return [{"role": "user", "content": "hi"}, *extra]


CASES = [
    ("invalid json", b'{"model": "echo", "messages": [', 400, None),
    ("empty body", b"", 400, None),
    ("body is a list", json.dumps([1, 2]).encode(), 400, None),
    ("missing model", {"messages": _messages()}, 400, "model"),
    ("model not a string", {"model": 7, "messages": _messages()}, 400, "model"),
    ("missing messages", {"model": "echo"}, 400, "messages"),
    ("messages not a list", {"model": "echo", "messages": "hi"}, 400, "messages"),
    ("empty messages", {"model": "echo", "messages": []}, 400, "messages"),
    ("message not an object", {"model": "echo", "messages": ["hi"]}, 400, "messages[0]"),
    ("unknown role", {"model": "echo", "messages": [{"role": "robot", "content": "x"}]}, 400, "messages[0]"),
    ("missing role", {"model": "echo", "messages": [{"content": "x"}]}, 400, "messages[0]"),
    ("user without content", {"model": "echo", "messages": [{"role": "user"}]}, 400, "messages[0].content"),
    ("content a number", {"model": "echo", "messages": [{"role": "user", "content": 5}]},
     400, "messages[0].content"),
    ("unknown content part",
     {"model": "echo", "messages": [{"role": "user", "content": [{"type": "video", "x": 1}]}]},
     400, "messages[0].content[0]"),
    ("tool without tool_call_id", {"model": "echo", "messages": _messages({"role": "tool", "content": "r"})},
     400, "messages[1].tool_call_id"),
    ("tool answering no call", {"model": "echo", "messages": _messages(
        {"role": "tool", "tool_call_id": "call_nope", "content": "r"})}, 400, "messages[1].tool_call_id"),
    ("tool call without its reply", {"model": "echo", "messages": _messages(
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]},
        {"role": "user", "content": "next"})}, 400, "messages[1].tool_calls"),
    ("tool call without a name", {"model": "echo", "messages": _messages(
        {"role": "assistant",
         "tool_calls": [{"id": "c1", "type": "function", "function": {"arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "r"})},
     400, "messages[1].tool_calls[0].function.name"),
    ("arguments not a string", {"model": "echo", "messages": _messages(
        {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                                              "function": {"name": "lookup", "arguments": {"q": 1}}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "r"})},
     400, "messages[1].tool_calls[0].function.arguments"),
    ("duplicate tool call ids", {"model": "echo", "messages": _messages(
        {"role": "assistant", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}},
            {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "r"})}, 400, "messages[1].tool_calls"),
    ("tools not a list", {"model": "echo", "messages": _messages(), "tools": {"a": 1}}, 400, "tools"),
    ("tool without a function name", {"model": "echo", "messages": _messages(),
                                      "tools": [{"type": "function", "function": {"description": "d"}}]},
     400, "tools[0].function.name"),
    ("tool name with spaces", {"model": "echo", "messages": _messages(),
                               "tools": [{"type": "function", "function": {"name": "look up"}}]},
     400, "tools[0].function.name"),
    ("tool_choice names a missing tool", {"model": "echo", "messages": _messages(), "tools": [TOOL],
                                          "tool_choice": {"type": "function", "function": {"name": "other"}}},
     400, "tool_choice"),
    ("stream not a boolean", {"model": "echo", "messages": _messages(), "stream": "yes"}, 400, "stream"),
    ("stream_options without stream", {"model": "echo", "messages": _messages(),
                                       "stream_options": {"include_usage": True}}, 400, "stream_options"),
    ("temperature out of range", {"model": "echo", "messages": _messages(), "temperature": 3},
     400, "temperature"),
    ("n zero", {"model": "echo", "messages": _messages(), "n": 0}, 400, "n"),
    ("metadata.session_id a number",
     {"model": "echo", "messages": _messages(), "metadata": {"session_id": 5}},
     400, "metadata"),
    ("tool parameters not an object schema", {"model": "echo", "messages": _messages(),
                                              "tools": [{"type": "function", "function": {
                                                  "name": "f", "parameters": {"type": "objectz"}}}]},
     400, "tools[0].function.parameters"),
    ("tool parameters.properties not an object",
     {"model": "echo", "messages": _messages(), "tools": [{"type": "function", "function": {
         "name": "f", "parameters": {"type": "object", "properties": 5}}}]},
     400, "tools[0].function.parameters"),
    ("response_format of an unknown type",
     {"model": "echo", "messages": _messages(), "response_format": {"type": "xml"}},
     400, "response_format.type"),
    ("json_schema response_format without its schema",
     {"model": "echo", "messages": _messages(), "response_format": {"type": "json_schema"}},
     400, "response_format"),
    ("stop a number", {"model": "echo", "messages": _messages(), "stop": 5}, 400, "stop"),
    ("assistant message with nothing in it",
     {"model": "echo", "messages": _messages({"role": "assistant"}, {"role": "user", "content": "?"})},
     400, "messages[1]"),
]


def _send(proxy_url: str, payload, headers: dict | None = None, content_type="application/json"):
    raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return httpx.post(f"{proxy_url}/v1/chat/completions", content=raw, timeout=30,
                      headers={"content-type": content_type, **(headers or {})})


@pytest.fixture
def stored_session(client, http, session_id):
    """A session with a tool-call exchange, and its stored state to compare against."""
    first = client.chat.completions.create(model="echo", messages=GOOD_HISTORY, tools=[TOOL],
                                           extra_headers={"X-Session-Id": session_id})
    assert first.choices[0].message.tool_calls
    before = http.get(f"/v1/sessions/{session_id}", params={"include_superseded": True}).json()
    return session_id, before


def _state(http, session_id):
    data = http.get(f"/v1/sessions/{session_id}", params={"include_superseded": True}).json()
    data.pop("updated_at", None)
    return data


@pytest.mark.parametrize("name,payload,status,param", CASES, ids=[c[0] for c in CASES])
def test_malformed_request_is_rejected_and_stores_nothing(proxy, http, stored_session, name, payload,
                                                          status, param):
    session_id, before = stored_session
    before.pop("updated_at", None)
    response = _send(proxy.url, payload, {"X-Session-Id": session_id})
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"]
    if param is not None:
        assert error["param"] == param, error
    assert _state(http, session_id) == before


def test_other_bad_inputs(proxy, http, stored_session):
    session_id, before = stored_session
    before.pop("updated_at", None)
    checks = [
        (_send(proxy.url, {"model": "echo", "messages": _messages()}, {"X-Session-Id": session_id},
               content_type="text/plain"), 415),
        (_send(proxy.url, b"{" + b" " * (17 * 1024 * 1024) + b"}", {"X-Session-Id": session_id}), 413),
        (_send(proxy.url, {"model": "echo", "messages": _messages()}, {"X-Session-Id": "bad id{}"}), 400),
        (httpx.get(f"{proxy.url}/v1/chat/completions"), 405),
        (httpx.get(f"{proxy.url}/v1/nothing-here"), 404),
        (httpx.get(f"{proxy.url}/v1/sessions", params={"limit": "many"}), 400),
        (httpx.get(f"{proxy.url}/v1/sessions/no-such-session"), 404),
    ]
    for response, status in checks:
        assert response.status_code == status, response.text
        assert set(response.json()["error"]) == {"message", "type", "param", "code"}
    assert _state(http, session_id) == before
