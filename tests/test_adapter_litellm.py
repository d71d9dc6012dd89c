"""The LiteLLM proxy plugin, for real: ``litellm --config`` with the agentmem callback.

LiteLLM's proxy runs as its users run it (a subprocess, started once for the module) against
the echo upstream, with agentmem's embedded Redis in a temporary folder. The tests assert what
reached the upstream and what the session stored, read back from that Redis.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import openai
import pytest
import yaml

from agentmem import Hygiene, Policy
from agentmem.adapters.litellm_proxy import AgentmemCallback, session_of, tenant_of
from agentmem.config import Settings
from agentmem.store import RedisConnector, SessionHandle, SessionStore
from agentmem.store.connection import _embedded_running
from agentmem.store.keys import tenant_index
from agentmem.streaming import CLIENT_DISCONNECTED
from tests.servers import free_port

TOOL_NAMES = ["get_weather", "send_email", "create_invoice", "search_flights", "book_hotel",
              "translate_text", "convert_currency", "get_stock_price", "schedule_meeting",
              "create_ticket", "resize_image", "run_sql_query", "order_pizza", "track_package",
              "set_reminder", "play_music", "read_calendar", "post_tweet", "summarize_pdf",
              "lookup_recipe", "find_restaurant", "call_taxi", "check_traffic", "compute_route",
              "get_news", "pay_bill", "open_door", "measure_air_quality", "buy_stock",
              "rename_file", "delete_backup", "start_vm"]
TOOLS = [{"type": "function", "function": {
    "name": name, "description": f"{name.replace('_', ' ').capitalize()} for the user.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}}
    for name in TOOL_NAMES]
WEATHER = 'What is the weather in Paris right now? [[tool:get_weather {"query": "Paris"}]]'


@dataclass
class LiteLLMProxy:
    url: str
    key: str
    data_dir: Path

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=self.key, max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def litellm_proxy(upstream, tmp_path_factory):
    folder = tmp_path_factory.mktemp("litellm-proxy")
    config = {
        "model_list": [{"model_name": "echo", "litellm_params": {
            "model": "openai/echo", "api_base": f"{upstream.url}/v1", "api_key": "sk-echo"}},
            {"model_name": "claude-echo", "litellm_params": {
                "model": "anthropic/claude-echo", "api_base": upstream.url, "api_key": "sk-echo"}}],
        "litellm_settings": {"callbacks": ["agentmem.adapters.litellm_proxy.handler"]},
        "router_settings": {"num_retries": 0},  # a failing upstream fails at once
        "general_settings": {"master_key": "os.environ/LITELLM_MASTER_KEY"},
    }
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    key, port, data_dir = f"sk-test-{secrets.token_hex(16)}", free_port(), folder / "agentmem"
    env = {**os.environ, "LITELLM_MASTER_KEY": key, "AGENTMEM_POLICY": "agent",
           "AGENTMEM_DATA_DIR": str(data_dir), "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "LITELLM_TELEMETRY": "False", "DISABLE_SCHEMA_UPDATE": "True", "HF_HUB_OFFLINE": "1"}
    for name in ("DATABASE_URL", "AGENTMEM_REDIS_URL", "AGENTMEM_CONFIG", "AGENTMEM_API_KEYS"):
        env.pop(name, None)
    log = folder / "litellm.log"
    process = subprocess.Popen(
        [str(Path(sys.executable).with_name("litellm")), "--config", str(folder / "config.yaml"),
         "--port", str(port), "--host", "127.0.0.1"],
        env=env, cwd=folder, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 180
    while True:
        if process.poll() is not None or time.time() > deadline:
            process.kill()
            pytest.fail(f"litellm did not start:\n{log.read_text(errors='replace')[-4000:]}")
        try:
            if httpx.get(f"{url}/health/liveliness", timeout=2).is_success:
                break
        except httpx.HTTPError:
            time.sleep(0.3)
    yield LiteLLMProxy(url, key, data_dir)
    # SIGINT: on SIGTERM uvicorn re-raises the signal and the process dies without its atexit
    # handlers, where the plugin stops the embedded Redis it started.
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
    assert not _embedded_running(data_dir / "agentmem.rdb.settings"), \
        "the plugin left its embedded Redis running"


async def read_session(data_dir: Path, session_id: str, read) -> tuple[str | None, Any]:
    """(tenant, what ``read(store, handle)`` gives) for the first tenant of the proxy's embedded
    Redis where it gives something (the tenant is a hash of the LiteLLM key); (None, None)."""
    connector = RedisConnector(directory=data_dir)
    store = SessionStore(connector.client())
    try:
        async for key in store.redis.scan_iter(match=tenant_index("*")):
            tenant = key.decode().split("{", 1)[1].split("}", 1)[0]
            found = await read(store, SessionHandle(tenant, session_id))
            if found:
                return tenant, found
        return None, None
    finally:
        await store.close()
        connector.close()


async def stored(data_dir: Path, session_id: str) -> tuple[str | None, list, list]:
    """(tenant, active turns, reports) of a session that stored turns; (None, [], [])."""
    async def turns_and_reports(store, handle):
        turns = await store.active_turns(handle)
        return (turns, await store.reports(handle)) if turns else None

    tenant, found = await read_session(data_dir, session_id, turns_and_reports)
    return (tenant, *found) if found else (None, [], [])


async def wait_for_turns(data_dir: Path, session_id: str, count: int) -> tuple[str | None, list, list]:
    """LiteLLM runs its success callbacks after the reply is out, so the write lands shortly after."""
    deadline = time.time() + 30
    while True:
        tenant, turns, reports = await stored(data_dir, session_id)
        if len(turns) >= count or time.time() > deadline:
            return tenant, turns, reports
        await asyncio.sleep(0.2)


def session() -> str:
    return f"lt-{secrets.token_hex(6)}"


async def test_tools_are_filtered_and_history_is_stored(litellm_proxy, received):
    client, sid = litellm_proxy.client(), session()
    messages = [{"role": "system", "content": "You are an operations assistant with tools."},
                {"role": "user", "content": WEATHER}]
    raw = client.chat.completions.with_raw_response.create(
        model="echo", messages=messages, tools=TOOLS, extra_headers={"X-Session-Id": sid})
    reply = raw.parse().choices[0].message
    [sent] = received.requests()
    names = [t["function"]["name"] for t in sent["tools"]]
    assert "get_weather" in names and len(names) < len(TOOLS)
    assert raw.headers["x-agentmem-session"] == sid
    assert raw.headers["x-agentmem-policy"] == "agent"
    assert raw.headers["x-agentmem-tools-offered"] == str(len(TOOLS))
    assert raw.headers["x-agentmem-tools-kept"] == str(len(names))
    assert reply.tool_calls[0].function.name == "get_weather"

    tenant, turns, _ = await wait_for_turns(litellm_proxy.data_dir, sid, 3)
    assert tenant.startswith("key-") and litellm_proxy.key not in tenant  # a hash, not the key
    assert [t.role for t in turns] == ["system", "user", "assistant"]

    messages += [reply.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": reply.tool_calls[0].id, "content": "21 C, sunny"}]
    second = client.chat.completions.create(model="echo", messages=messages, tools=TOOLS,
                                            extra_headers={"X-Session-Id": sid})
    assert second.choices[0].message.content == "tool results: 21 C, sunny"
    _, turns, reports = await wait_for_turns(litellm_proxy.data_dir, sid, 5)
    assert [t.role for t in turns] == ["system", "user", "assistant", "tool", "assistant"]
    assert reports[-1].ingest.stored_turns == 3  # the first call's turns were matched, not re-sent
    assert reports[-1].ingest.new_turns == 1
    assert received.requests()[-1]["messages"][-1]["role"] == "tool"


async def test_streamed_reply_is_stored_as_a_turn(litellm_proxy, received):
    client, sid = litellm_proxy.client(), session()
    messages = [{"role": "user", "content": "Please summarise the plan for the office move."}]
    stream = client.chat.completions.create(model="echo", messages=messages, tools=TOOLS,
                                            stream=True, metadata={"session_id": sid})
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text.startswith("echo: Please summarise")
    [sent] = received.requests()
    assert sent["stream"] is True and len(sent["tools"]) < len(TOOLS)

    _, turns, reports = await wait_for_turns(litellm_proxy.data_dir, sid, 2)
    assert [t.role for t in turns] == ["user", "assistant"]
    assert turns[-1].message["content"] == text and not turns[-1].partial
    assert reports[-1].status == "ok"


async def test_abandoned_stream_is_stored_as_partial(litellm_proxy, received):
    """A client that hangs up mid-stream: LiteLLM bills what it streamed through the success
    callback, with a finish_reason of its own making; the turn must be stored as partial."""
    sid = session()
    messages = [{"role": "user", "content": "Walk me through the harbour lantern schedule, "
                 "hour by hour, for the whole week ahead. [[stall:2,20000]]"}]
    async with httpx.AsyncClient(timeout=60) as http, http.stream(
            "POST", f"{litellm_proxy.url}/v1/chat/completions",
            headers={"Authorization": f"Bearer {litellm_proxy.key}", "X-Session-Id": sid},
            json={"model": "echo", "messages": messages, "stream": True}) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                break  # the first event, then close the connection while the upstream stalls
    started = time.time()
    _, turns, reports = await wait_for_turns(litellm_proxy.data_dir, sid, 2)
    assert time.time() - started < 15  # stored at the disconnect, not when the stall ends
    assert [t.role for t in turns] == ["user", "assistant"]
    reply = turns[-1]
    assert reply.partial and reply.error == "the client disconnected before the stream ended"
    assert "Walk me through the harbour lantern schedule".startswith(
        reply.message["content"].removeprefix("echo:").strip())
    assert [r.status for r in reports] == ["partial"]
    assert reports[-1].error == reply.error

    # the session is free again: the next call on it goes through at once
    client = litellm_proxy.client()
    started = time.time()
    client.chat.completions.create(model="echo", extra_headers={"X-Session-Id": sid},
                                   messages=[{"role": "user", "content": "still there?"}])
    assert time.time() - started < 10


async def test_invalid_request_is_rejected_before_the_upstream(litellm_proxy, received):
    orphan = [{"role": "user", "content": "hi"},
              {"role": "tool", "tool_call_id": "call_missing", "content": "result"}]
    with pytest.raises(openai.BadRequestError, match="does not answer a tool call"):
        litellm_proxy.client().chat.completions.create(model="echo", messages=orphan)
    assert received.requests() == []


async def test_upstream_failure_releases_the_session(litellm_proxy, received):
    client, sid = litellm_proxy.client(), session()
    with pytest.raises(openai.APIStatusError):
        client.chat.completions.create(model="echo", extra_headers={"X-Session-Id": sid},
                                       messages=[{"role": "user", "content": "fail [[status:503]]"}])
    started = time.time()
    client.chat.completions.create(model="echo", extra_headers={"X-Session-Id": sid},
                                   messages=[{"role": "user", "content": "and now?"}])
    assert time.time() - started < 20  # no wait on a lock left behind by the failed call
    _, turns, reports = await wait_for_turns(litellm_proxy.data_dir, sid, 2)
    assert [t.role for t in turns] == ["user", "assistant"]  # the failed call stored no turns
    assert [r.status for r in reports] == ["error", "ok"]


async def test_a_call_without_callback_is_released_after_the_timeout(tmp_path):
    policy = Policy(name="plain", stages=[], embed=False, lock_wait_s=2)
    hygiene = Hygiene(policy, settings=Settings(data_dir=tmp_path))
    plugin = AgentmemCallback(hygiene, call_timeout_s=0.3)
    auth = SimpleNamespace(team_id="team-a", token=None)

    def data(call_id: str) -> dict:
        return {"model": "echo", "litellm_call_id": call_id,
                "messages": [{"role": "user", "content": "hello"}],
                "metadata": {"requester_metadata": {"session_id": "stuck"}}}

    try:
        await plugin.async_pre_call_hook(auth, None, data("c1"), "acompletion")
        assert plugin.pending() == 1
        await asyncio.sleep(1.0)
        assert plugin.pending() == 0
        started = time.time()
        await plugin.async_pre_call_hook(auth, None, data("c2"), "acompletion")  # lock is free
        assert time.time() - started < 1.5
        await plugin.async_log_failure_event({"litellm_call_id": "c2",
                                              "exception": RuntimeError("done")}, None, None, None)
        reports = await hygiene.store().reports(SessionHandle("team-a", "stuck"))
        assert [r.status for r in reports] == ["error", "error"]
        assert "no LiteLLM callback" in reports[0].error
    finally:
        await hygiene.aclose()
        hygiene.connector.close()


def test_tenant_and_session_come_from_litellm():
    assert tenant_of(SimpleNamespace(team_id="team-1", token="hashed")) == "team-1"
    assert tenant_of(SimpleNamespace(team_id="a team/with slash", token=None)).startswith("team-")
    keyed = tenant_of(SimpleNamespace(team_id=None, token="sk-secret"))
    assert keyed.startswith("key-") and "secret" not in keyed
    assert tenant_of(SimpleNamespace(team_id=None, token=None)) == "default"
    headers = {"proxy_server_request": {"headers": {"X-Session-Id": "from-header"}}}
    assert session_of(headers) == "from-header"
    assert session_of({**headers, "metadata": {"requester_metadata": {"session_id": "mine"}}}) == "mine"
    assert session_of({"metadata": {"session_id": "x", "litellm_session_id_generated": True}}) is None
    assert session_of({"messages": []}) is None


async def test_guarded_policy_withholds_the_repeated_claim(litellm_proxy, received):
    """Quarantine through LiteLLM's proxy: a preset picked per request, the claim never sent."""
    from tests.test_quarantine import SESSION

    client, sid = litellm_proxy.client(), session()
    for end in [i + 1 for i, m in enumerate(SESSION) if m["role"] == "user"]:
        client.chat.completions.create(model="echo", messages=SESSION[:end], extra_headers={
            "X-Session-Id": sid, "X-Agentmem-Policy": "guarded"})
        await wait_for_turns(litellm_proxy.data_dir, sid, end + 1)  # stored before the next call
    sent = json.dumps(received.requests()[-1]["messages"])
    assert "Maple Street" not in sent and "shipped with UPS" in sent


async def test_a_stream_left_before_its_first_chunk_frees_the_session_at_once(litellm_proxy, received):
    """A client that gives up while the provider has not sent a token yet: LiteLLM fires no
    logging callback for it, so the session must be released by the stream's own end, not by
    the 600 s timeout."""
    sid = session()
    messages = [{"role": "user", "content": "Describe the lighthouse keeper's week. [[stall:0,20000]]"}]
    with pytest.raises(httpx.ReadTimeout):
        async with httpx.AsyncClient(timeout=httpx.Timeout(60, read=3)) as http, http.stream(
                "POST", f"{litellm_proxy.url}/v1/chat/completions",
                headers={"Authorization": f"Bearer {litellm_proxy.key}", "X-Session-Id": sid},
                json={"model": "echo", "messages": messages, "stream": True}) as response:
            async for _ in response.aiter_lines():
                pass
    client = litellm_proxy.client()
    started = time.time()
    client.chat.completions.create(model="echo", extra_headers={"X-Session-Id": sid},
                                   messages=[{"role": "user", "content": "are you there?"}])
    assert time.time() - started < 10  # not held by the abandoned call's lock
    _, turns, reports = await wait_for_turns(litellm_proxy.data_dir, sid, 2)
    assert [t.role for t in turns] == ["user", "assistant"]  # the abandoned call stored none
    assert reports[0].status == "error" and reports[0].error.endswith(CLIENT_DISCONNECTED)
    assert reports[-1].status == "ok"


async def test_a_provider_stream_cut_midway_is_stored_as_partial(litellm_proxy, received):
    """The provider drops the connection after a few tokens: the client has them, so the turn
    is stored with what was streamed, marked partial with the reason, as agentmem's proxy does."""
    sid = session()
    messages = [{"role": "user", "content": "List the tide tables for the harbour, one by one. "
                 "[[cut:4]]"}]
    client = litellm_proxy.client()
    streamed = []
    with pytest.raises(Exception):  # noqa: B017 - how LiteLLM reports the cut is its own
        for chunk in client.chat.completions.create(model="echo", messages=messages, stream=True,
                                                    extra_headers={"X-Session-Id": sid}):
            if chunk.choices and chunk.choices[0].delta.content:
                streamed.append(chunk.choices[0].delta.content)
    assert streamed  # the cut came after some text reached the client
    _, turns, reports = await wait_for_turns(litellm_proxy.data_dir, sid, 2)
    assert [t.role for t in turns] == ["user", "assistant"]
    reply = turns[-1]
    assert reply.partial and reply.error.startswith("the provider stream failed")
    assert reply.message["content"] == "".join(streamed)
    assert [r.status for r in reports] == ["partial"]


async def test_messages_are_cleaned_and_only_the_responses_route_is_said_to_pass_through(
        litellm_proxy, received):
    """LiteLLM's /v1/messages is cleaned and stored like a chat completion (more in
    tests/test_adapter_litellm_messages.py); /v1/responses is not: the request goes on
    unchanged, and the operator's log says so once, not on every call."""
    import anthropic

    client = anthropic.Anthropic(base_url=litellm_proxy.url, api_key=litellm_proxy.key,
                                 max_retries=0, timeout=120)
    sid = session()
    history: list[dict] = []
    for text in ("Where is the harbour office?", "And when does it open?"):
        history.append({"role": "user", "content": text})
        reply = client.messages.create(model="claude-echo", max_tokens=64, messages=history,
                                       extra_headers={"X-Session-Id": sid})
        history.append({"role": "assistant", "content": reply.content[0].text})
    assert received.requests()[-1]["messages"][-1]["content"] in (
        "And when does it open?", [{"type": "text", "text": "And when does it open?"}])
    _, turns, _ = await wait_for_turns(litellm_proxy.data_dir, sid, 4)
    assert [t.role for t in turns] == ["user", "assistant", "user", "assistant"]
    for _ in range(2):  # the echo upstream has no Responses API: only the hook's log matters
        httpx.post(f"{litellm_proxy.url}/v1/responses", timeout=60,
                   headers={"Authorization": f"Bearer {litellm_proxy.key}"},
                   json={"model": "echo", "input": "Where is the harbour office?"})
    log = (litellm_proxy.data_dir.parent / "litellm.log").read_text(errors="replace")
    assert log.count("/v1/responses requests pass through unchanged") == 1
    assert "/v1/messages requests pass through" not in log
