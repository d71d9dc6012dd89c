"""The tools stage through the real proxy and openai client, its Redis cache, and `bench tools`."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

from agentmem import Hygiene
from agentmem.config import Settings
from agentmem.policy import policy_from_dict
from agentmem.state.toolcat import split_name
from tests.conversations import WEATHER_CALLED, WEATHER_THEN_CAR

DOMAINS = [
    ("weather_forecast", "the weather forecast, temperature and chance of rain for a city", ["city", "days"]),
    ("flight", "airline flights between two airports", ["origin", "destination", "date"]),
    ("hotel_room", "hotel rooms and reservations in a city", ["city", "check_in", "nights"]),
    ("calendar_event", "meetings and events in the user's calendar", ["title", "start_time"]),
    ("email", "email messages in the user's mailbox", ["recipient", "subject"]),
    ("stock_quote", "stock prices and market quotes for a ticker symbol", ["ticker"]),
    ("recipe", "cooking recipes and their ingredients", ["dish", "diet"]),
    ("translation", "translations of text between languages", ["text", "target_language"]),
    ("invoice", "customer invoices and billing records", ["customer_id", "amount"]),
    ("github_issue", "issues in a GitHub repository", ["repository", "title"]),
    ("music_playlist", "songs and playlists on a music streaming service", ["playlist", "song"]),
    ("restaurant_table", "restaurant tables and dinner bookings", ["restaurant", "party_size"]),
    ("parcel", "parcel shipping and delivery tracking", ["tracking_number"]),
    ("bank_transfer", "bank account balances and money transfers", ["account", "amount"]),
    ("movie_ticket", "movie showtimes and cinema tickets", ["movie", "cinema"]),
    ("news_article", "news headlines and articles", ["topic"]),
    ("workout", "workouts, exercise sessions and fitness goals", ["exercise", "minutes"]),
    ("exchange_rate", "currency exchange rates", ["base_currency", "quote_currency"]),
    ("support_ticket", "customer support tickets", ["ticket_id", "priority"]),
    ("smart_light", "smart home lights and their brightness", ["room", "brightness"]),
    ("contact", "people in the user's address book", ["name", "phone"]),
    ("document", "files and documents in cloud storage", ["path"]),
    ("rental_car", "rental cars and pick-up locations", ["location", "pickup_date"]),
    ("medication", "medications, doses and reminders", ["drug", "dose"]),
    ("podcast_episode", "podcast episodes and subscriptions", ["show"]),
]
ACTIONS = [("get", "Get"), ("search", "Search for"), ("create", "Create"), ("delete", "Delete")]


def _tools(count: int = 100) -> list[dict]:
    tools = []
    for domain, what, parameters in DOMAINS:
        for verb, phrase in ACTIONS:
            tools.append({"type": "function", "function": {
                "name": f"{verb}_{domain}", "description": f"{phrase} {what}.",
                "parameters": {"type": "object", "properties": {
                    p: {"type": "string", "description": f"The {p.replace('_', ' ')}."} for p in parameters},
                    "required": parameters[:1]}}})
    return tools[:count]


TOOLS = _tools()
WEATHER = {"role": "user", "content": "Will it rain in Oslo tomorrow? I need the weather forecast."}


@pytest.fixture(scope="module")
def tools_policy(policy_dir):
    (policy_dir / "tools-test.yaml").write_text(
        "name: tools-test\nstages: [tools]\nembed: false\n"
        "tools: {max_tools: 8, min_tools: 3, min_offered: 6, recent_calls_window: 1}\n")
    return "tools-test"


def _call(client, session_id, policy, **params):
    raw = client.chat.completions.with_raw_response.create(
        model="echo", extra_headers={"X-Session-Id": session_id, "X-Agentmem-Policy": policy}, **params)
    return raw.headers, raw.parse()


def _sent_names(received, key="tools") -> list[str]:
    [body] = received.requests()
    return [(t.get("function") or t)["name"] for t in body.get(key) or ()]


def _assert_subsequence_and_identical(sent: list[dict], offered: list[dict]) -> None:
    """Kept schemas are the client's, byte for byte, in the client's order."""
    by_name = {(t.get("function") or t)["name"]: t for t in offered}
    order = [(t.get("function") or t)["name"] for t in offered]
    for tool in sent:
        name = (tool.get("function") or tool)["name"]
        assert json.dumps(tool) == json.dumps(by_name[name])
    names = [(t.get("function") or t)["name"] for t in sent]
    assert names == sorted(names, key=order.index)


def test_many_tools_are_cut_to_the_relevant_ones(client, http, received, session_id, tools_policy):
    headers, _ = _call(client, session_id, tools_policy, messages=[WEATHER], tools=TOOLS)
    [body] = received.requests()
    kept = _sent_names(received)
    assert "get_weather_forecast" in kept and 3 <= len(kept) <= 8
    assert sum("weather" in name for name in kept) >= 2  # the neighbours of the gold rank high
    _assert_subsequence_and_identical(body["tools"], TOOLS)
    assert headers["x-agentmem-tools-offered"] == "100"
    assert headers["x-agentmem-tools-kept"] == str(len(kept))
    assert int(headers["x-agentmem-tokens-after"]) < int(headers["x-agentmem-tokens-before"]) / 4
    report = http.get(f"/v1/sessions/{session_id}/reports/{headers['x-agentmem-report']}").json()
    decisions = report["stages"][0]["decisions"]
    drops = [d for d in decisions if d["action"] == "drop_tool"]
    [summary] = [d for d in decisions if d["action"] == "keep_tools"]
    assert len(drops) == 100 - len(kept) and all(d["tool"] and d["reason"] for d in drops)
    assert summary["detail"]["kept"] == kept and len(summary["detail"]["scores"]) == 100
    best_dropped = max(d["score"] for d in drops)
    assert summary["detail"]["scores"]["get_weather_forecast"] > best_dropped


def test_tool_choice_and_the_current_step_keep_their_tools(client, received, session_id, tools_policy):
    named = {"type": "function", "function": {"name": "delete_podcast_episode"}}
    _call(client, session_id, tools_policy, messages=[WEATHER], tools=TOOLS, tool_choice=named)
    kept = _sent_names(received)
    assert "delete_podcast_episode" in kept and "get_weather_forecast" in kept and len(kept) <= 9

    received.clear()  # an agent step: the model called an unrelated tool after the question
    step = [WEATHER, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_stock_quote", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ACME 12.5 USD"}]
    _call(client, session_id + "-step", tools_policy, messages=step, tools=TOOLS)
    assert "get_stock_quote" in _sent_names(received)

    received.clear()  # tools called in the last `recent_calls_window` user turns stay too
    later = [*step, {"role": "assistant", "content": "ACME trades at 12.5 USD."},
             {"role": "user", "content": "Thanks. Book a table for four at Luigi's tonight."}]
    _call(client, session_id + "-later", tools_policy, messages=later, tools=TOOLS)
    kept = _sent_names(received)
    assert "get_stock_quote" not in kept  # one user turn back is outside a window of 1
    assert any("restaurant_table" in name for name in kept)


def test_a_step_never_takes_back_a_tool_it_offered(client, received, session_id, policy_dir):
    """The step's second call holds the weather tool's result, which speaks of the weather
    only: decided anew, the selection narrows to it; with the step's memory (the default) the
    tools the first call offered stay offered, so the list reaching the provider is the same."""
    # The whole request only (parts: 0): without the step's memory, the request's parts,
    # scored again on each call, would hold their tools too (tests/test_tool_parts.py).
    for name, stable in (("tools-step", "true"), ("tools-unstable", "false")):  # the default's rule
        (policy_dir / f"{name}.yaml").write_text(
            f"extends: default\nname: {name}\nstages: [tools]\n"
            f"tools: {{memory: {{enabled: false}}, step_stable: {stable}, parts: 0}}\n")
    question, answer = WEATHER_THEN_CAR, WEATHER_CALLED
    offered = {}
    for policy in ("tools-step", "tools-unstable"):
        session = f"{session_id}-{policy}"
        received.clear()
        _call(client, session, policy, messages=[question], tools=TOOLS)
        first = _sent_names(received)
        received.clear()
        _call(client, session, policy, messages=[question, *answer], tools=TOOLS)
        offered[policy] = first, _sent_names(received)
    first, second = offered["tools-step"]
    assert "get_weather_forecast" in first and set(first) <= set(second)
    assert second == first or len(second) > len(first)  # only ever added to
    first, second = offered["tools-unstable"]
    assert set(first) - set(second)  # decided anew: tools the first call offered are gone


def test_the_tools_bench_measures_a_steps_second_call(tmp_path):
    """``agentmem bench tools --follow-up``: each record's step gets the call that follows the
    model's tool call, and the bench tells whether it offered the first call's tools."""
    from agentmem.bench.formats import ToolsRecord
    from agentmem.bench.tools import run_tools

    record = ToolsRecord(id="oslo", query=WEATHER_THEN_CAR["content"], tools=TOOLS,
                         gold=["get_weather_forecast"])
    unstable = tmp_path / "unstable.yaml"
    unstable.write_text(  # decided anew by the whole request (its parts would hold tools too)
        "extends: default\nname: unstable\ntools: {step_stable: false, parts: 0}\n")
    step = run_tools([record], policy="default", follow_up=True)["follow_up"]
    anew = run_tools([record], policy=str(unstable), follow_up=True)["follow_up"]
    assert step["n"] == anew["n"] == 1 and step["gold_recall"] == 1.0
    assert step["dropped_a_tool"] == 0.0 and anew["dropped_a_tool"] == 1.0


def test_none_choice_and_small_lists_are_left_alone(client, received, session_id, tools_policy):
    _call(client, session_id, tools_policy, messages=[WEATHER], tools=TOOLS, tool_choice="none")
    assert len(_sent_names(received)) == 100
    received.clear()
    headers, _ = _call(client, session_id + "-few", tools_policy, messages=[WEATHER], tools=TOOLS[:5])
    assert _sent_names(received) == [t["function"]["name"] for t in TOOLS[:5]]
    assert headers["x-agentmem-tools-offered"] == headers["x-agentmem-tools-kept"] == "5"


def test_legacy_functions(client, received, session_id, tools_policy):
    functions = [t["function"] for t in TOOLS[:60]]
    headers, _ = _call(client, session_id, tools_policy, messages=[WEATHER], functions=functions,
                       function_call={"name": "create_email"})
    [body] = received.requests()
    kept = _sent_names(received, "functions")
    assert "get_weather_forecast" in kept and "create_email" in kept and len(kept) <= 9
    _assert_subsequence_and_identical(body["functions"], functions)
    assert "tools" not in body
    assert headers["x-agentmem-tools-offered"] == "60"
    assert headers["x-agentmem-tools-kept"] == str(len(kept))


async def test_always_include_and_the_redis_cache(data_dir):
    from agentmem.state import ToolCatalogues

    hygiene = Hygiene("off", settings=Settings(data_dir=data_dir))
    policy = policy_from_dict({"name": "tools-always", "stages": ["tools"], "embed": False,
                               "tools": {"max_tools": 4, "min_tools": 2, "always_include": ["get_invoice"]}})
    tools = _tools(40)
    try:
        result = await hygiene.apply([WEATHER], tools=tools, session_id=f"tc-{uuid.uuid4().hex}",
                                     policy=policy)
        kept = [t["function"]["name"] for t in result.tools]
        # max_tools of the request's own, the pinned one on top
        assert "get_invoice" in kept and "get_weather_forecast" in kept and len(kept) == 4 + 1
        assert all(any(t is original for original in tools) for t in result.tools)  # same dicts
        redis = hygiene.store().redis
        assert len(await redis.keys("agentmem:toolemb:*")) >= 80  # text and name of each tool
        # A fresh engine's catalogues (as in a new process): vectors come back from Redis.
        hygiene.state.catalogues = ToolCatalogues(hygiene.embedder)
        again = await hygiene.apply([WEATHER], tools=tools, session_id=f"tc-{uuid.uuid4().hex}",
                                    policy=policy)
        assert [t["function"]["name"] for t in again.tools] == kept
        run = again.report.stages[0]
        summary = next(d for d in run.decisions if d.action == "keep_tools")
        assert summary.detail["pinned"] == {"get_invoice": "always included by the policy"}
    finally:
        await hygiene.aclose()
        hygiene.connector.close()


def test_split_name():
    assert split_name("getWeatherForecast") == "get Weather Forecast"
    assert split_name("PDF_URLTool") == "PDF URL Tool"
    assert split_name("ChaDri_change-drink.v2") == "Cha Dri change drink v2"


def test_bench_tools_runs_on_a_tools_file(tmp_path):
    rows = [{"id": "w", "query": WEATHER["content"], "messages": None, "tools": TOOLS[:40],
             "gold": ["get_weather_forecast"]},
            {"id": "none", "query": "Tell me a joke.", "messages": None, "tools": TOOLS[:8], "gold": []}]
    data = tmp_path / "tools.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = tmp_path / "result.json"
    run = subprocess.run([sys.executable, "-m", "agentmem", "bench", "tools", "--data", str(data),
                          "--policy", "agent", "--json", str(out)], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    result = json.loads(out.read_text())
    assert {"n", "gold_recall", "tool_recall", "tool_fraction", "token_fraction", "latency_ms_p50",
            "latency_ms_p95", "baselines"} <= set(result)
    assert result["n"] == 2 and result["gold_recall"] == 1.0 and result["tool_fraction"] < 0.6
    assert {"keep_all", "embedding_only", "bm25_only"} <= set(result["baselines"])
    assert result["baselines"]["keep_all"]["tool_fraction"] == 1.0
