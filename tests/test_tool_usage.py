"""Tool usage memory: learning from replies, scoring with it, the feedback API, bounds, tenants."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid

import httpx
import pytest

from agentmem import Hygiene
from agentmem.config import Settings
from agentmem.policy import policy_from_dict
from agentmem.state.tool_usage import MemorySettings, memory_scope
from agentmem.store.keys import tool_usage_index
from agentmem.tools_memory import ToolExample, add_tool_examples, forget_tool, tool_memory
from tests.test_tools_stage import _tools


def _tool(name: str, description: str, parameters: list[str]) -> dict:
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": {p: {"type": "string"} for p in parameters}}}}


TOOLS = [
    _tool("get_weather_forecast", "Get the weather forecast and chance of rain for a city.", ["city"]),
    _tool("book_flight", "Book airline flights between two airports.", ["origin", "destination"]),
    _tool("find_hotel", "Find hotel rooms in a city.", ["city", "nights"]),
    _tool("send_email", "Send an email message.", ["recipient", "subject"]),
    _tool("stock_quote", "Stock prices for a ticker symbol.", ["ticker"]),
    _tool("search_recipes", "Cooking recipes and their ingredients.", ["dish"]),
    _tool("translate_text", "Translate text between languages.", ["text", "target_language"]),
    _tool("create_invoice", "Create a customer invoice.", ["customer_id", "amount"]),
    _tool("play_music", "Play songs and playlists.", ["song"]),
    _tool("track_parcel", "Track a parcel delivery.", ["tracking_number"]),
    _tool("exchange_rate", "Currency exchange rates.", ["base", "quote"]),
    _tool("zeta_lookup", "Internal lookup service.", ["ref"]),
]
TEACH = ["When will my espresso maker be fixed?",
         "Is the repair of my coffee grinder finished yet?",
         "Has the technician repaired my broken coffee machine?"]
PROBE = "What is the status of my coffee machine repair?"
LEARNING = "zeta_lookup"


def _policy(**memory) -> object:
    return policy_from_dict({"name": f"usage-{uuid.uuid4().hex[:6]}", "stages": ["tools"],
                             "embed": False, "tools": {"min_offered": 6, "min_tools": 1,
                                                       "max_tools": 4, "memory": memory}})


def _kept(result) -> list[str]:
    return [t["function"]["name"] for t in result.tools]


def _summary(result) -> dict:
    run = next(r for r in result.report.stages if r.stage == "tools")
    return next(d for d in run.decisions if d.action == "keep_tools").detail


@pytest.fixture
async def engine(data_dir):
    hygiene = Hygiene("off", settings=Settings(data_dir=data_dir),
                      tenant=f"lib-{uuid.uuid4().hex[:8]}")
    yield hygiene
    await hygiene.aclose()
    hygiene.connector.close()


async def _probe(hygiene, policy, tools=TOOLS, query=PROBE):
    return await hygiene.apply([{"role": "user", "content": query}], tools=tools,
                               session_id=f"p-{uuid.uuid4().hex}", policy=policy)


async def test_learned_examples_lift_the_tool_they_name(engine):
    policy = _policy()
    before = await _probe(engine, policy)
    assert LEARNING not in _kept(before)
    assert "memory" not in _summary(before)  # nothing learned: today's scores exactly

    added = await add_tool_examples(engine, [ToolExample(query=q, tool=LEARNING) for q in TEACH],
                                    policy=policy)
    assert added == {"added": 3, "tools": 1}
    after = await _probe(engine, policy)
    detail = _summary(after)
    assert LEARNING in _kept(after)
    assert max(detail["scores"], key=detail["scores"].get) == LEARNING
    assert detail["memory"][LEARNING]["examples"] == 3
    assert detail["memory"][LEARNING]["added"] > 0
    # A query unlike the examples is not pulled towards the tool they name.
    weather = await _probe(engine, policy, query="Will it rain in Oslo tomorrow?")
    assert "get_weather_forecast" in _kept(weather) and LEARNING not in _kept(weather)
    # Memory switched off: the text score alone, as before learning.
    off = await _probe(engine, _policy(enabled=False))
    assert _kept(off) == _kept(before)


async def test_a_changed_schema_starts_fresh_and_a_name_label_holds_for_every_schema(engine):
    policy = _policy()
    zeta = TOOLS[-1]["function"]
    await add_tool_examples(engine, [ToolExample(query=q, tool=LEARNING, parameters=zeta["parameters"])
                                     for q in TEACH], policy=policy)
    assert LEARNING in _kept(await _probe(engine, policy))
    changed = [*TOOLS[:-1], _tool(LEARNING, "Internal lookup service.", ["ref", "region"])]
    fresh = await _probe(engine, policy, tools=changed)
    assert LEARNING not in _kept(fresh) and "memory" not in _summary(fresh)

    # Labelled by name alone, an example holds for the changed tool too.
    await add_tool_examples(engine, [ToolExample(query=TEACH[0], tool=LEARNING)], policy=policy)
    named = await _probe(engine, policy, tools=changed)
    assert _summary(named)["memory"][LEARNING]["examples"] == 1

    listed = await tool_memory(engine, tool=LEARNING, policy=policy)
    assert sorted((row["schema"] is None, row["examples"]) for row in listed) == [(False, 3), (True, 1)]
    assert await forget_tool(engine, LEARNING, policy=policy) == 2
    assert await tool_memory(engine, tool=LEARNING, policy=policy) == []
    assert LEARNING not in _kept(await _probe(engine, policy))


async def test_bounds_and_ttl(engine):
    policy = _policy(examples=3, tools_per_scope=2, ttl_days=2 / 86400)
    queries = [f"coffee machine repair question number {i}" for i in range(5)]
    await add_tool_examples(engine, [ToolExample(query=q, tool=LEARNING) for q in queries]
                            + [ToolExample(query=queries[-1], tool=LEARNING)], policy=policy)
    [row] = await tool_memory(engine, policy=policy)
    assert row["queries"] == queries[::-1][:3]  # the newest three, each once

    result = await add_tool_examples(engine, [ToolExample(query="a", tool="stock_quote"),
                                              ToolExample(query="b", tool="play_music")],
                                     policy=policy)
    assert result["tools"] == 1  # room for one more tool identity in this scope
    assert sorted(r["tool"] for r in await tool_memory(engine, policy=policy)) == [
        "stock_quote", LEARNING]

    redis = engine.store().redis
    scope = memory_scope(engine.tenant, policy.tools.memory)
    assert 0 < await redis.ttl(tool_usage_index(scope)) <= 2
    await asyncio.sleep(2.5)
    assert await tool_memory(engine, policy=policy) == []
    assert await redis.exists(tool_usage_index(scope)) == 0


def test_sharing_is_an_operator_setting():
    alone = MemorySettings()
    shared = MemorySettings(share_as="support-tools", share_tenants=["alpha", "beta"])
    assert memory_scope("alpha", alone) != memory_scope("beta", alone)
    assert memory_scope("alpha", shared) == memory_scope("beta", shared) == "shared:support-tools"
    assert memory_scope("gamma", shared) == "tenant:gamma"
    assert memory_scope("gamma", MemorySettings(share_as="all", share_tenants=["*"])) == "shared:all"
    with pytest.raises(ValueError):
        MemorySettings(share_as="no spaces allowed")


# -- through the real proxy ----------------------------------------------------------------------


def _memory_of(http: httpx.Client, tool: str, want: int, timeout: float = 60.0) -> list[dict]:
    """The tenant's memory of ``tool`` once it holds ``want`` examples (after-reply work runs in
    the background)."""
    deadline = time.monotonic() + timeout
    while True:
        rows = http.get("/v1/tools/memory", params={"tool": tool}).json()["data"]
        if sum(r["examples"] for r in rows) >= want or time.monotonic() > deadline:
            return rows
        time.sleep(0.2)


def _chat(http: httpx.Client, content: str, *, pin: str | None = None, policy: str = "default",
          tools: list[dict] = TOOLS):
    body = {"model": "echo", "messages": [{"role": "user", "content": content}], "tools": tools}
    if pin:
        body["tool_choice"] = {"type": "function", "function": {"name": pin}}
    response = http.post("/v1/chat/completions", json=body,
                         headers={"X-Session-Id": f"u-{uuid.uuid4().hex}", "X-Agentmem-Policy": policy})
    assert response.status_code == 200, response.text
    return response.json()


def _offered(received) -> list[str]:
    return [t["function"]["name"] for t in received.requests()[-1]["tools"]]


def test_a_reply_that_calls_a_tool_teaches_the_query_that_led_to_it(http, received):
    tool = "track_parcel"
    query = f"Where is my package {uuid.uuid4().hex[:6]}? [[tool:{tool} {{}}]]"
    reply = _chat(http, query, pin=tool)
    assert reply["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == tool
    rows = _memory_of(http, tool, 1)
    assert any(query in row["queries"] for row in rows)
    assert all(row["schema"] is not None for row in rows)  # traffic knows the tool's schema

    # A reply without a tool call teaches nothing.
    quiet = f"Just chatting about parcels {uuid.uuid4().hex[:6]}."
    _chat(http, quiet)
    _chat(http, "one more call, so the previous call's background work is surely done")
    time.sleep(1.0)
    rows = http.get("/v1/tools/memory", params={"tool": tool}).json()["data"]
    assert not any(quiet in q for row in rows for q in row["queries"])


def test_usage_memory_is_per_tenant(tenant_proxy, received):
    """The default preset keeps up to 10 tools: 40 more make the learnt tool one of many."""
    tools = _tools(40) + TOOLS[-1:]
    alpha = httpx.Client(base_url=tenant_proxy.url, timeout=60,
                         headers={"Authorization": "Bearer key-alpha"})
    beta = httpx.Client(base_url=tenant_proxy.url, timeout=60,
                        headers={"Authorization": "Bearer key-beta"})
    with alpha, beta:
        _chat(beta, PROBE, tools=tools)
        beta_before = _offered(received)
        _chat(alpha, PROBE, tools=tools)
        assert _offered(received) == beta_before and LEARNING not in beta_before

        for question in TEACH:  # alpha's model calls the tool (pinned, so it is offered)
            _chat(alpha, f"{question} [[tool:{LEARNING} {{}}]]", pin=LEARNING, tools=tools)
        assert sum(r["examples"] for r in _memory_of(alpha, LEARNING, 3)) == 3
        alpha.post("/v1/tools/feedback", json={"query": "Is my coffee machine repaired?",
                                               "tool": LEARNING}).raise_for_status()

        _chat(alpha, PROBE, tools=tools)
        assert LEARNING in _offered(received)
        _chat(beta, PROBE, tools=tools)
        assert _offered(received) == beta_before
        assert beta.get("/v1/tools/memory").json()["data"] == []
        assert beta.delete("/v1/tools/memory", params={"tool": LEARNING}).status_code == 404


def test_feedback_api_valid_and_invalid_input(http):
    tool = f"tool_{uuid.uuid4().hex[:8]}"
    good = {"query": "Is my coffee machine fixed?", "tool": tool}
    bad_bodies = [
        ({"query": "Is my coffee machine fixed?"}, None),
        ({"query": "   ", "tool": tool}, "query"),
        ({"query": "x", "tool": tool, "parameters": "not an object"}, "parameters"),
        ({"examples": []}, "examples"),
        ({"examples": [good], "query": "also this", "tool": tool}, None),
        ({"examples": [good, {"query": "missing the tool"}]}, "examples.1.tool"),
        ({"examples": [good, {"query": "x" * 9000, "tool": tool}]}, "examples.1.query"),
        ({"query": "x", "tool": tool, "source": "unknown key"}, "source"),
        ([good], None),
    ]
    for body, param in bad_bodies:
        response = http.post("/v1/tools/feedback", json=body)
        assert response.status_code == 400, (body, response.text)
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error" and error["message"]
        if param is not None:
            assert error["param"] == param, (body, error)
    not_json = http.post("/v1/tools/feedback", content=b"{nope", headers={"content-type": "application/json"})
    assert not_json.status_code == 400 and not_json.json()["error"]["type"] == "invalid_request_error"
    assert http.get("/v1/tools/memory", params={"tool": tool}).json()["data"] == []  # nothing stored

    added = http.post("/v1/tools/feedback", json=good)
    assert added.status_code == 200 and added.json() == {"object": "tools.feedback", "added": 1, "tools": 1}
    batch = http.post("/v1/tools/feedback", json={"examples": [
        {"query": "Has my grinder been repaired?", "tool": tool,
         "parameters": {"type": "object", "properties": {"ref": {"type": "string"}}}},
        {"query": "When is the espresso maker ready?", "tool": tool}]})
    assert batch.json()["added"] == 2 and batch.json()["tools"] == 2
    rows = http.get("/v1/tools/feedback", params={"tool": tool}).json()["data"]
    by_schema = {row["schema"] is None: row for row in rows}
    assert by_schema[True]["queries"] == ["When is the espresso maker ready?", good["query"]]
    assert by_schema[False]["queries"] == ["Has my grinder been repaired?"]
    assert http.get("/v1/tools/memory", params={"limit": 5000}).status_code == 400
    assert http.delete("/v1/tools/memory", params={"tool": tool}).json()["deleted"] == 2
    assert http.get("/v1/tools/memory", params={"tool": tool}).json()["data"] == []


def test_bench_tools_warm_replays_traffic_but_never_the_evaluation_queries(tmp_path):
    gold_of = {q: LEARNING for q in TEACH}
    rows = [{"id": "probe", "query": PROBE, "messages": None, "tools": TOOLS, "gold": [LEARNING]},
            {"id": "rain", "query": "Will it rain in Oslo tomorrow?", "messages": None, "tools": TOOLS,
             "gold": ["get_weather_forecast"]}]
    traffic = [{"id": f"t{i}", "query": q, "gold": [g]} for i, (q, g) in enumerate(gold_of.items())]
    traffic.append({"id": "leak", "query": PROBE, "gold": [LEARNING], "in_metatool_dev_jsonl": True})
    data, warm, out = tmp_path / "tools.jsonl", tmp_path / "traffic.jsonl", tmp_path / "result.json"
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    warm.write_text("\n".join(json.dumps(r) for r in traffic) + "\n")
    run = subprocess.run([sys.executable, "-m", "agentmem", "bench", "tools", "--data", str(data),
                          "--policy", "agent", "--warm", str(warm), "--json", str(out)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["warm_up"] == {"records": 4, "used": 3, "skipped_evaluation_queries": 1,
                                 "examples": 3, "tools": 1, "unknown_tool_names": 0,
                                 "tool_lists_primed": 1}  # its model (if enough queries) trained first
    assert set(result["recall_at"]) == {"5", "10", "adaptive"}
    assert result["settings"]["memory"]["learn"] is False  # frozen while measuring
    assert result["without_warm_up"]["recall_at"]["adaptive"] <= result["recall_at"]["adaptive"] == 1.0
