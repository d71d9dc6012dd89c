"""The OpenAI Agents SDK adapter: real ``Runner`` runs against the echo upstream.

The agent has 30 tools; the echo upstream calls ``get_weather`` when the user message asks
for it, the SDK runs the tool, and the echo answers the tool result with text. What reached
the upstream and what agentmem stored are both asserted.
"""

from __future__ import annotations

import uuid

import openai
import pytest
from agents import Agent, FunctionTool, RunConfig, Runner, SQLiteSession, function_tool, set_tracing_disabled

from agentmem import Hygiene
from agentmem.adapters.openai_agents import AgentmemModelProvider, agentmem_client, session_scope
from agentmem.store import SessionHandle

set_tracing_disabled(True)  # nothing may try to export traces to the network

ASK = 'What is the weather in Paris today? [[tool:get_weather {"city": "Paris"}]]'

_OTHER_TOOLS = {
    "send_email": "Send an email message to a recipient with a subject and body.",
    "create_calendar_event": "Create a calendar event with a title, start time and attendees.",
    "search_flights": "Search airline flights between two airports on a date.",
    "book_hotel": "Book a hotel room in a city for a range of nights.",
    "convert_currency": "Convert an amount of money from one currency to another.",
    "get_stock_price": "Look up the latest stock market price of a ticker symbol.",
    "translate_text": "Translate text from one language into another language.",
    "create_invoice": "Create a customer invoice with line items and a due date.",
    "refund_order": "Refund a customer order by its order number.",
    "track_package": "Track a shipped parcel by its courier tracking number.",
    "list_github_issues": "List open issues of a GitHub repository.",
    "run_sql_query": "Run a read-only SQL query against the analytics database.",
    "resize_image": "Resize an image file to a given width and height.",
    "set_reminder": "Set a reminder that notifies the user at a given time.",
    "play_music": "Play a song, album or playlist on the user's speaker.",
    "order_pizza": "Order a pizza for delivery with toppings and an address.",
    "calculate_mortgage": "Calculate monthly mortgage payments for a loan amount and rate.",
    "find_restaurant": "Find restaurants near a location by cuisine and price.",
    "get_news_headlines": "Get the top news headlines for a topic or country.",
    "reset_password": "Send a password reset link to a user account.",
    "summarize_pdf": "Summarize the contents of a PDF document.",
    "schedule_meeting_room": "Reserve a meeting room in the office for a time slot.",
    "check_vacation_balance": "Check how many vacation days an employee has left.",
    "create_support_ticket": "Open a customer support ticket with a priority.",
    "compute_shipping_cost": "Compute the shipping cost of a parcel by weight and destination.",
    "lookup_dictionary": "Look up the definition of an English word.",
    "start_vm_instance": "Start a cloud virtual machine instance by id.",
    "get_exchange_holidays": "List the stock exchange holidays of a year.",
    "scan_qr_code": "Decode the contents of a QR code image.",
}
weather_calls: list[str] = []


@function_tool
def get_weather(city: str) -> str:
    """Get the current weather forecast (temperature, sky, wind) for a city."""
    weather_calls.append(city)
    return f"{city}: sunny, 21 C, light wind"


def _stub(name: str, description: str) -> FunctionTool:
    def tool(query: str) -> str:
        raise AssertionError(f"{name} should not be called")
    return function_tool(tool, name_override=name, description_override=description)


def _agent() -> Agent:
    tools = [get_weather, *(_stub(name, text) for name, text in _OTHER_TOOLS.items())]
    assert len(tools) == 30
    return Agent(name="assistant", instructions="You are a helpful assistant with many tools.",
                 model="echo", tools=tools)


@pytest.fixture(scope="module")
async def hygiene(tmp_path_factory):
    engine = Hygiene(policy="agent", data_dir=str(tmp_path_factory.mktemp("agents-sdk")))
    yield engine
    await engine.drain()
    await engine.aclose()
    engine.close()


@pytest.fixture
def provider(hygiene, upstream):
    return AgentmemModelProvider(hygiene, base_url=f"{upstream.url}/v1", api_key="sk-test")


def _tool_names(request: dict) -> list[str]:
    return [tool["function"]["name"] for tool in request.get("tools") or ()]


async def test_runner_tool_round_trip_through_agentmem(hygiene, provider, received):
    weather_calls.clear()
    session_id = f"sdk-{uuid.uuid4().hex[:10]}"
    with session_scope(session_id):
        result = await Runner.run(_agent(), ASK, run_config=RunConfig(model_provider=provider))

    assert weather_calls == ["Paris"]
    assert result.final_output.startswith("tool results:") and "sunny" in result.final_output
    first, second = received.requests()
    for request in (first, second):  # the agent offers 30; the turn needs few
        assert "get_weather" in _tool_names(request) and len(_tool_names(request)) < 30
    assert first["messages"][-1]["role"] == "user"
    assert second["messages"][-1]["role"] == "tool" and "sunny" in second["messages"][-1]["content"]

    handle = SessionHandle("default", session_id)
    turns = await hygiene.store().active_turns(handle)
    assert [t.role for t in turns] == ["system", "user", "assistant", "tool", "assistant"]
    assert turns[-1].message["content"] == result.final_output
    reports = await hygiene.store().reports(handle)
    assert len(reports) == 2 and all(r.status == "ok" for r in reports)
    assert all(r.tools_before == 30 and r.tools_after < 30 for r in reports)
    await provider.aclose()


async def test_streamed_run_stores_the_assembled_reply(hygiene, provider, received):
    weather_calls.clear()
    sdk_session = SQLiteSession(f"sdk-stream-{uuid.uuid4().hex[:10]}")  # agentmem uses its id
    with session_scope(sdk_session):
        result = Runner.run_streamed(_agent(), ASK, session=sdk_session,
                                     run_config=RunConfig(model_provider=provider))
        deltas = [event async for event in result.stream_events()
                  if event.type == "raw_response_event"]

    assert deltas and weather_calls == ["Paris"]
    assert result.final_output.startswith("tool results:")
    requests = received.requests()
    assert len(requests) == 2 and all(r["stream"] for r in requests)
    assert all(len(_tool_names(r)) < 30 for r in requests)

    handle = SessionHandle("default", sdk_session.session_id)
    turns = await hygiene.store().active_turns(handle)
    assert [t.role for t in turns] == ["system", "user", "assistant", "tool", "assistant"]
    call = turns[2].message["tool_calls"][0]  # assembled from the streamed deltas
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert turns[-1].message["content"] == result.final_output and not turns[-1].partial
    await provider.aclose()


async def test_client_headers_errors_and_passthrough(hygiene, upstream, received):
    """The wrapped AsyncOpenAI: headers on replies, agentmem's 400s, other paths untouched."""
    client = agentmem_client(hygiene, base_url=f"{upstream.url}/v1", api_key="sk-test",
                             session_id=f"raw-{uuid.uuid4().hex[:10]}")
    tools = [{"type": "function", "function": {"name": name, "description": text,
                                               "parameters": {"type": "object", "properties": {}}}}
             for name, text in _OTHER_TOOLS.items()]
    raw = await client.chat.completions.with_raw_response.create(
        model="echo", tools=tools, messages=[{"role": "user", "content": "Track my parcel please"}])
    assert raw.headers["x-agentmem-tools-offered"] == "29"
    assert int(raw.headers["x-agentmem-tools-kept"]) < 29
    assert raw.parse().choices[0].message.content.startswith("echo:")

    received.clear()
    with pytest.raises(openai.BadRequestError):  # a tool result no call asked for
        await client.chat.completions.create(model="echo", messages=[
            {"role": "user", "content": "hi"},
            {"role": "tool", "tool_call_id": "nope", "content": "orphan"}])
    assert received.requests() == []  # agentmem refused it before the provider saw it

    models = await client.models.list()
    assert [m.id for m in models.data] == ["echo"]
    await client.close()


async def test_cut_stream_is_stored_as_partial(hygiene, upstream):
    """A provider stream that breaks mid-way: the words so far are stored, marked partial."""
    session_id = f"cut-{uuid.uuid4().hex[:10]}"
    client = agentmem_client(hygiene, base_url=f"{upstream.url}/v1", api_key="sk-test",
                             session_id=session_id, policy="default")
    stream = await client.chat.completions.create(model="echo", stream=True, messages=[
        {"role": "user", "content": "one two three four five six [[cut:3]]"}])
    seen: list[str] = []
    with pytest.raises(Exception):  # noqa: B017 - whichever error the SDK raises for a cut stream
        async for chunk in stream:
            seen.append(chunk.choices[0].delta.content or "")
    turns = await hygiene.store().active_turns(SessionHandle("default", session_id))
    assert [t.role for t in turns] == ["user", "assistant"]
    assert turns[-1].partial and turns[-1].message["content"] == "".join(seen) == "echo: one"
    await client.close()


def test_run_sync_work_is_finished_when_the_engine_closes(tmp_path, upstream):
    """``Runner.run_sync`` stops its event loop when a run returns, with the run's after-reply
    work (embeddings) still on it; closing the engine runs that loop until the work is done."""
    engine = Hygiene(policy="agent", data_dir=str(tmp_path / "data"))
    provider = AgentmemModelProvider(engine, base_url=f"{upstream.url}/v1", api_key="sk-test")
    agent = Agent(name="a", instructions="You help.", model="echo")
    session = f"run-sync-{uuid.uuid4().hex[:8]}"
    with session_scope(session):
        for question in ["My router serial is RX-99812.", "What is my router serial?"]:
            result = Runner.run_sync(agent, question, run_config=RunConfig(model_provider=provider))
            assert result.final_output == f"echo: {question}"
    engine.close()

    reader = Hygiene(policy="off", data_dir=str(tmp_path / "data"))
    try:
        async def stored() -> tuple[int, int]:
            store, handle = reader.store(), SessionHandle("default", session)
            turns = await store.all_turns(handle)
            return len(turns), len(await store.embeddings(handle, [t.id for t in turns]))

        turns, embedded = reader.run_sync(stored())
        assert turns >= 4 and embedded == turns
    finally:
        reader.close()
