"""The proxy with the real openai client against the echo upstream."""

from __future__ import annotations

import json

import litellm

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                      "parameters": {"type": "object",
                                                     "properties": {"city": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "get_time", "description": "Current time",
                                      "parameters": {"type": "object", "properties": {}}}},
]


def test_completion_with_headers(client, session_id):
    raw = client.chat.completions.with_raw_response.create(
        model="echo", messages=[{"role": "user", "content": "Hello there. How are you?"}],
        extra_headers={"X-Session-Id": session_id})
    completion = raw.parse()
    assert completion.choices[0].message.content == "echo: Hello there. How are you?"
    assert raw.headers["x-agentmem-session"] == session_id
    assert len(raw.headers["x-agentmem-report"]) == 32
    assert int(raw.headers["x-agentmem-tokens-before"]) > 0
    assert raw.headers["x-agentmem-tokens-after"] == raw.headers["x-agentmem-tokens-before"]


def test_streaming_matches_openai_framing(client, proxy, session_id):
    import httpx

    body = {"model": "echo", "stream": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": "one two three"}]}
    with httpx.stream("POST", f"{proxy.url}/v1/chat/completions", json=body,
                      headers={"X-Session-Id": session_id}, timeout=30) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-agentmem-session"] == session_id
        events = [line for line in response.iter_lines() if line]
    assert all(e.startswith("data: ") for e in events)
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "echo: one two three"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"


def test_streamed_reply_is_stored(client, http, session_id):
    stream = client.chat.completions.create(
        model="echo", messages=[{"role": "user", "content": "stream me please"}], stream=True,
        extra_headers={"X-Session-Id": session_id})
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    turns = http.get(f"/v1/sessions/{session_id}").json()["turns"]
    assert [t["role"] for t in turns] == ["user", "assistant"]
    assert turns[1]["message"]["content"] == text and turns[1]["partial"] is False


def test_parallel_tool_calls_stream_and_plain(client, http, session_id):
    ask = {"role": "user", "content": 'Check [[tool:get_weather {"city": "Oslo"}]] [[tool:get_time {}]]'}
    completion = client.chat.completions.create(model="echo", messages=[ask], tools=TOOLS,
                                                extra_headers={"X-Session-Id": session_id})
    calls = completion.choices[0].message.tool_calls
    assert [c.function.name for c in calls] == ["get_weather", "get_time"]
    assert json.loads(calls[0].function.arguments) == {"city": "Oslo"}

    stream = client.chat.completions.create(model="echo", messages=[ask], tools=TOOLS, stream=True,
                                            extra_headers={"X-Session-Id": session_id + "-s"})
    assembled: dict[int, dict] = {}
    for chunk in stream:
        for delta in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            slot = assembled.setdefault(delta.index, {"name": "", "arguments": ""})
            slot["name"] += delta.function.name or ""
            slot["arguments"] += delta.function.arguments or ""
    assert [assembled[i]["name"] for i in sorted(assembled)] == ["get_weather", "get_time"]
    stored = http.get(f"/v1/sessions/{session_id}-s").json()["turns"][-1]["message"]
    assert [c["function"]["name"] for c in stored["tool_calls"]] == ["get_weather", "get_time"]
    assert json.loads(stored["tool_calls"][0]["function"]["arguments"]) == {"city": "Oslo"}

    # The agent answers both calls; the follow-up goes through and is stored as one unit.
    history = [ask, completion.choices[0].message.model_dump(exclude_none=True),
               {"role": "tool", "tool_call_id": calls[0].id, "content": "Oslo: 4 C, rain."},
               {"role": "tool", "tool_call_id": calls[1].id, "content": "12:00"}]
    follow = client.chat.completions.create(model="echo", messages=history, tools=TOOLS,
                                            extra_headers={"X-Session-Id": session_id})
    assert follow.choices[0].message.content.startswith("tool results: Oslo: 4 C, rain.")
    turns = http.get(f"/v1/sessions/{session_id}").json()["turns"]
    assert [t["role"] for t in turns] == ["user", "assistant", "tool", "tool", "assistant"]
    assert [t["source"] for t in turns[2:4]] == ["tool:get_weather", "tool:get_time"]


def test_policy_off_is_exact_passthrough(client, received, upstream, session_id):
    """Through the proxy under `off`, the provider gets what a direct litellm call sends."""
    messages = [{"role": "system", "content": "Be terse."},
                {"role": "user", "content": "Weather? [[tool:get_weather {\"city\": \"Rome\"}]]",
                 "name": "ana"}]
    params = {"temperature": 0.3, "max_tokens": 50, "tools": TOOLS, "tool_choice": "auto",
              "parallel_tool_calls": True, "top_p": 0.9, "seed": 7}
    litellm.completion(model="openai/echo", api_base=f"{upstream.url}/v1", api_key="sk-test",
                       messages=messages, **params)
    client.chat.completions.create(model="echo", messages=messages, extra_headers={
        "X-Session-Id": session_id, "X-Agentmem-Policy": "off"}, **params)
    direct, proxied = received.requests()
    assert proxied == direct
    assert proxied["messages"] == messages


def test_models_and_health(client, http):
    assert [m.id for m in client.models.list()] == ["echo"]
    health = http.get("/healthz").json()
    assert health["status"] == "ok" and health["redis"] == "ok"
    assert isinstance(health["background"], int) and health["background"] >= 0


def test_session_id_sources(client, http):
    """metadata.session_id, then user, then an id derived from the opening messages."""
    import uuid

    tag = uuid.uuid4().hex[:8]
    client.chat.completions.create(model="echo", messages=[{"role": "user", "content": "a"}],
                                   metadata={"session_id": f"meta-{tag}"})
    client.chat.completions.create(model="echo", messages=[{"role": "user", "content": "b"}],
                                   user=f"user-{tag}")
    opening = [{"role": "system", "content": f"sys {tag}"}, {"role": "user", "content": "hi"}]
    first = client.chat.completions.with_raw_response.create(model="echo", messages=opening)
    derived = first.headers["x-agentmem-session"]
    assert derived.startswith("auto-")
    again = client.chat.completions.with_raw_response.create(
        model="echo", messages=opening + [first.parse().choices[0].message.model_dump(exclude_none=True),
                                          {"role": "user", "content": "more"}])
    assert again.headers["x-agentmem-session"] == derived
    assert http.get(f"/v1/sessions/meta-{tag}").status_code == 200
    assert http.get(f"/v1/sessions/user-{tag}").status_code == 200
    assert http.get(f"/v1/sessions/{derived}").json()["turn_count"] == 5  # system, user, reply, user, reply


def test_policy_header_names_presets_only(http, session_id, tmp_path):
    """A client picks a preset by name; a path never reaches the filesystem, and the answer is
    the same whether the file exists or not (nothing about the server's files leaks)."""
    existing = tmp_path / "secret.yaml"
    existing.write_text("name: secret\nstages: []\napi_key: do-not-show\n")
    body = {"model": "echo", "messages": [{"role": "user", "content": "hi"}]}
    answers = []
    for value in (str(existing), str(tmp_path / "missing.yaml"), "/etc/passwd", "../default"):
        response = http.post("/v1/chat/completions", json=body,
                             headers={"X-Session-Id": session_id, "X-Agentmem-Policy": value})
        assert response.status_code == 400, value
        error = response.json()["error"]
        assert error["param"] == "X-Agentmem-Policy"
        assert "do-not-show" not in response.text and "api_key" not in response.text
        answers.append(error["message"])
    assert len(set(answers)) == 1 and "default" in answers[0]
    assert str(tmp_path) not in answers[0]
    assert http.get(f"/v1/sessions/{session_id}").status_code == 404  # nothing was stored
    ok = http.post("/v1/chat/completions", json=body,
                   headers={"X-Session-Id": session_id, "X-Agentmem-Policy": "chat"})
    assert ok.status_code == 200 and ok.headers["x-agentmem-policy"] == "chat"


def test_any_openai_user_value_keeps_one_session(client, http):
    """``user`` is a free-form end-user id in OpenAI's API: one that is not a session id as it
    stands ("John Smith", "tenant/alice") is hashed into one, the same each time, rather than
    refused."""
    import uuid

    user = f"Jöhn Smith/{uuid.uuid4().hex[:6]} #42"
    sessions = []
    for text in ("first", "second"):
        raw = client.chat.completions.with_raw_response.create(
            model="echo", messages=[{"role": "user", "content": text}], user=user)
        assert raw.status_code == 200
        sessions.append(raw.headers["x-agentmem-session"])
    assert sessions[0] == sessions[1] and sessions[0].startswith("user-")
    assert http.get(f"/v1/sessions/{sessions[0]}").status_code == 200


def test_metadata_the_provider_will_not_get_is_reported(client, received, session_id):
    """litellm takes ``metadata`` as its own logging metadata: the client is told it was not
    sent, and agentmem's own keys alone raise no warning."""
    raw = client.chat.completions.with_raw_response.create(
        model="echo", messages=[{"role": "user", "content": "hi"}], metadata={"ticket": "42"},
        extra_headers={"X-Session-Id": session_id})
    assert "metadata is not sent to the provider" in raw.headers["x-agentmem-warning"]
    assert "metadata" not in received.requests()[-1]
    own = client.chat.completions.with_raw_response.create(
        model="echo", messages=[{"role": "user", "content": "hi"}],
        metadata={"session_id": session_id})
    assert "metadata" not in (own.headers.get("x-agentmem-warning") or "")
