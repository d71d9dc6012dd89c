"""The LangChain / LangGraph adapter, driven for real: a ``create_agent`` loop with tools and a
wrapped ``ChatOpenAI``, both against the echo upstream, asserting what reached the provider
and what the session stored."""

from __future__ import annotations

import json
import uuid

import pytest
from langchain.agents import create_agent
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.tools import BaseTool, tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph

from agentmem import Hygiene
from agentmem.adapters.langchain import (
    AgentmemChatModel,
    AgentmemMiddleware,
    _openai_tool_choice,
    _session_key,
)
from agentmem.report import Report
from agentmem.store import SessionHandle

TOPICS = {
    "get_weather": "Current weather and forecast for a city.",
    "get_stock_price": "Latest share price of a listed company by ticker symbol.",
    "search_flights": "Find flights between two airports on a date.",
    "book_hotel": "Reserve a hotel room in a city for given nights.",
    "convert_currency": "Convert an amount of money between two currencies.",
    "translate_text": "Translate a sentence into another language.",
    "create_calendar_event": "Add a meeting or appointment to the user's calendar.",
    "send_email": "Send an email message to a recipient.",
    "set_reminder": "Set a reminder notification at a time.",
    "get_news": "Top news headlines on a topic.",
    "find_recipe": "Find a cooking recipe for a dish.",
    "book_restaurant": "Reserve a table at a restaurant.",
    "get_time_zone": "Current local time in a time zone.",
    "convert_units": "Convert a quantity between measurement units.",
    "calculate": "Evaluate an arithmetic expression.",
    "search_wikipedia": "Look up an encyclopedia article.",
    "play_music": "Play a song or playlist on the speaker.",
    "movie_showtimes": "Cinema showtimes for a film near the user.",
    "traffic_report": "Road traffic conditions on a route.",
    "track_package": "Delivery status of a parcel by tracking number.",
    "define_word": "Dictionary definition of a word.",
    "bank_balance": "Balance of the user's bank account.",
    "search_files": "Search the user's documents by keyword.",
    "run_python": "Execute a Python snippet and return its output.",
    "generate_image": "Draw an image from a text prompt.",
    "sports_scores": "Latest results of a sports team.",
    "daily_horoscope": "Horoscope for a zodiac sign.",
    "book_taxi": "Order a taxi to an address.",
    "find_pharmacy": "Nearest open pharmacy.",
    "find_parking": "Free parking spaces near an address.",
}


def _make_tool(name: str, description: str) -> BaseTool:
    def run(query: str) -> str:
        return f"{name} result for {query}: 18C and sunny" if name == "get_weather" else f"{name}: ok"

    return tool(name, description=description)(run)


TOOLS = [_make_tool(name, description) for name, description in TOPICS.items()]


def _chat(upstream) -> ChatOpenAI:
    return ChatOpenAI(base_url=f"{upstream.url}/v1", api_key="x", model="echo", max_retries=0)


@pytest.fixture(scope="module")
def hygiene(tmp_path_factory):
    engine = Hygiene("agent", data_dir=str(tmp_path_factory.mktemp("langchain-adapter")))
    yield engine
    engine.close()


def _stored_turns(hygiene: Hygiene, session: str) -> list:
    """Read the session back on the engine's private loop (its store is per event loop)."""
    async def turns() -> list:
        return await hygiene.store().active_turns(SessionHandle(hygiene.tenant, session))

    return hygiene.run_sync(turns())


def _stored_roles(hygiene: Hygiene, session: str) -> list[str]:
    return [turn.role for turn in _stored_turns(hygiene, session)]


ASK = 'What is the weather in Paris? [[tool:get_weather {"query": "Paris"}]]'


def _check_agent_run(result: dict, reports: list[Report], sent: list[dict]) -> None:
    """One tool round-trip: call the tool, read its result, answer; fewer tools each time."""
    final = result["messages"][-1]
    assert isinstance(final, AIMessage) and "18C and sunny" in final.content
    assert any(isinstance(m, ToolMessage) and m.name == "get_weather" for m in result["messages"])
    assert len(sent) == 2
    for body in sent:
        names = [t["function"]["name"] for t in body["tools"]]
        assert "get_weather" in names and len(names) <= 10 < len(TOOLS)
    assert sent[0]["messages"][0] == {"role": "system", "content": "You are a concise assistant."}
    assert sent[1]["messages"][-1]["role"] == "tool"
    assert [(r.tools_before, r.status) for r in reports] == [(len(TOOLS), "ok")] * 2
    assert all(r.tools_after == len(sent[0]["tools"]) for r in reports[:1])
    # the reply written back after call 1 is what the agent sent in call 2: the prefix matched
    assert reports[1].ingest.stored_turns == 3 and reports[1].ingest.new_turns == 1
    assert reports[1].ingest.diverged_at is None
    stamped = final.response_metadata["agentmem"]
    assert stamped["report_id"] == reports[1].id and stamped["tools_offered"] == len(TOOLS)


async def test_agent_loop_through_the_middleware(upstream, received, hygiene):
    reports: list[Report] = []
    thread = f"lg-{uuid.uuid4().hex[:10]}"
    agent = create_agent(_chat(upstream), TOOLS, system_prompt="You are a concise assistant.",
                         middleware=[AgentmemMiddleware(hygiene, on_report=reports.append)],
                         checkpointer=InMemorySaver())
    result = await agent.ainvoke({"messages": [{"role": "user", "content": ASK}]},
                                 {"configurable": {"thread_id": thread}})
    _check_agent_run(result, reports, received.requests())
    assert {r.session_id for r in reports} == {thread}  # thread_id is the session key
    assert _stored_roles(hygiene, thread) == ["system", "user", "assistant", "tool", "assistant"]


def test_sync_agent_loop_uses_the_thread_id_without_a_checkpointer(upstream, received, hygiene):
    reports: list[Report] = []
    thread = f"lg-{uuid.uuid4().hex[:10]}"
    agent = create_agent(_chat(upstream), TOOLS, system_prompt="You are a concise assistant.",
                         middleware=[AgentmemMiddleware(hygiene, on_report=reports.append)])
    result = agent.invoke({"messages": [{"role": "user", "content": ASK}]},
                          {"configurable": {"thread_id": thread}})
    _check_agent_run(result, reports, received.requests())
    assert {r.session_id for r in reports} == {thread}
    assert _stored_roles(hygiene, thread) == ["system", "user", "assistant", "tool", "assistant"]


FACT = "My locker code is 4471 and the locker is at the Gare du Nord station in Paris."
FILLER = ("The quarterly gardening newsletter covered tomato blight, compost ratios, mulching, "
          "pruning roses in late winter, watering schedules for clay soil and the best time to "
          "plant garlic. Readers also shared photos of pumpkins and asked about slug traps. ")


def _long_history() -> list:
    history: list = [SystemMessage("You are a helpful assistant."), HumanMessage(FACT),
                     AIMessage("Noted: locker 4471 at Gare du Nord.")]
    for turn in range(24):
        history += [HumanMessage(f"Newsletter part {turn}: {FILLER * 3}"),
                    AIMessage(f"Thanks for part {turn}. {FILLER * 2}")]
    history.append(HumanMessage("What is my locker code at Gare du Nord?"))
    return history


def test_wrapped_chat_model_prunes_a_long_history(upstream, received, hygiene):
    reports: list[Report] = []
    session = f"wrap-{uuid.uuid4().hex[:10]}"
    model = AgentmemChatModel(model=_chat(upstream), hygiene=hygiene, policy="default",
                              session_id=session, on_report=reports.append)
    history = _long_history()
    reply = model.invoke(history)
    [body] = received.requests()
    sent_text = " ".join(str(m.get("content") or "") for m in body["messages"])
    assert "4471" in sent_text and "Gare du Nord" in sent_text  # the relevant fact survived
    [report] = reports
    assert report.tokens_after < report.tokens_before and report.tokens_before > 2048
    assert len(sent_text) < 0.6 * sum(len(str(m.content)) for m in history)
    assert report.messages_after == len(body["messages"]) <= len(history)
    assert body["messages"][-1]["content"] == history[-1].content  # recent turns verbatim
    assert reply.content.startswith("echo: What is my locker code")
    assert reply.response_metadata["agentmem"]["tokens_after"] == report.tokens_after
    assert _stored_roles(hygiene, session)[-2:] == ["user", "assistant"]
    assert len(_stored_roles(hygiene, session)) == len(history) + 1


async def test_wrapped_chat_model_binds_only_kept_tools(upstream, received, hygiene):
    reports: list[Report] = []
    thread = f"wrap-{uuid.uuid4().hex[:10]}"
    model = AgentmemChatModel(model=_chat(upstream), hygiene=hygiene, on_report=reports.append)
    bound = model.bind_tools(TOOLS)
    reply = await bound.ainvoke([HumanMessage(ASK)], {"configurable": {"thread_id": thread}})
    assert reply.tool_calls and reply.tool_calls[0]["name"] == "get_weather"
    [body] = received.requests()
    assert len(body["tools"]) <= 10 < len(TOOLS)
    assert reports[0].session_id == thread and reports[0].tools_after == len(body["tools"])
    forced = model.bind_tools(TOOLS, tool_choice="book_taxi")  # a forced tool is always kept
    received.clear()
    await forced.ainvoke([HumanMessage("Hello there")])
    assert "book_taxi" in [t["function"]["name"] for t in received.requests()[0]["tools"]]


def test_helpers():
    assert _openai_tool_choice("any", {"a"}) == "required"
    assert _openai_tool_choice("a", {"a"}) == {"type": "function", "function": {"name": "a"}}
    assert _openai_tool_choice("zzz", {"a"}) is None
    assert _session_key("thread-1") == "thread-1"
    assert _session_key("a thread/with spaces").startswith("lg-") and _session_key(None) is None


def test_wrapped_chat_model_withholds_a_recurring_unsupported_claim(upstream, received, hygiene):
    """The ``guarded`` policy through LangChain: the agent's repeated invention never reaches
    the model, everything around it does."""
    from langchain_core.messages import convert_to_messages

    from tests.test_quarantine import SESSION

    model = AgentmemChatModel(model=_chat(upstream), hygiene=hygiene, policy="guarded",
                              session_id=f"wrap-q-{uuid.uuid4().hex[:10]}")
    users = [i for i, m in enumerate(SESSION) if m["role"] == "user"]
    for end in users:  # the conversation as it grew, one call per user turn
        model.invoke(convert_to_messages(SESSION[: end + 1]))
    sent = json.dumps(received.requests()[-1]["messages"])
    assert "Maple Street" not in sent  # every repetition withheld
    assert "shipped with UPS" in sent and "Bring your ID." in sent


STORY = "Tell me about the tides of the North Sea"
CUT = "the client disconnected before the stream ended"


def _check_stream(chunks: list[AIMessageChunk], reports: list[Report], hygiene: Hygiene,
                  session: str) -> None:
    """Tokens came as they arrived, the closing chunk carries the call's summary, and the
    session stored the reply the caller put together."""
    assert len([c for c in chunks if c.content]) > 1
    text = "".join(str(c.content) for c in chunks)
    assert text == f"echo: {STORY}"
    [report] = reports
    assert report.status == "ok" and report.session_id == session
    assert [c.chunk_position for c in chunks] == [None] * (len(chunks) - 1) + ["last"]
    merged = sum(chunks[1:], chunks[0])
    assert merged.response_metadata["agentmem"]["report_id"] == report.id
    turns = _stored_turns(hygiene, session)
    assert [(t.role, t.message["content"], t.partial) for t in turns] == [
        ("user", STORY, False), ("assistant", text, False)]


def test_wrapped_chat_model_streams_and_stores_the_reply(upstream, received, hygiene):
    reports: list[Report] = []
    thread = f"wrap-s-{uuid.uuid4().hex[:10]}"
    model = AgentmemChatModel(model=_chat(upstream), hygiene=hygiene, policy="default",
                              on_report=reports.append)
    chunks: list[AIMessageChunk] = []
    for chunk in model.stream([HumanMessage(STORY)], {"configurable": {"thread_id": thread}}):
        assert chunks or not reports  # the first chunk comes before the call is stored
        chunks.append(chunk)
    _check_stream(chunks, reports, hygiene, thread)


async def test_wrapped_chat_model_astreams_and_stores_the_reply(upstream, received, hygiene):
    reports: list[Report] = []
    thread = f"wrap-a-{uuid.uuid4().hex[:10]}"
    model = AgentmemChatModel(model=_chat(upstream), hygiene=hygiene, policy="default",
                              on_report=reports.append)
    history: list = [HumanMessage(STORY)]
    chunks: list[AIMessageChunk] = []
    async for chunk in model.astream(history, {"configurable": {"thread_id": thread}}):
        assert chunks or not reports
        chunks.append(chunk)
    _check_stream(chunks, reports, hygiene, thread)
    # the reply the caller assembled is the one stored: the next call's prefix matches
    history += [sum(chunks[1:], chunks[0]), HumanMessage("And the Baltic?")]
    await model.ainvoke(history, {"configurable": {"thread_id": thread}})
    assert reports[1].ingest.stored_turns == 2 and reports[1].ingest.diverged_at is None


def test_wrapped_chat_model_stores_a_stream_left_early_as_partial(upstream, received, hygiene):
    """As agentmem.streaming stores a cut stream: what arrived, ``partial``, with the reason;
    and the session is free for the next call."""
    reports: list[Report] = []
    session = f"wrap-p-{uuid.uuid4().hex[:10]}"
    model = AgentmemChatModel(model=_chat(upstream), hygiene=hygiene, policy="default",
                              session_id=session, on_report=reports.append)
    seen = ""
    for chunk in model.stream([HumanMessage(STORY)]):
        seen += str(chunk.content)
        if seen:
            break
    assert seen == "echo:" and reports[0].status == "partial" and reports[0].error == CUT
    last = _stored_turns(hygiene, session)[-1]
    assert (last.role, last.message["content"], last.partial, last.error) == ("assistant", seen, True, CUT)
    # the provider breaking off mid-stream: the same, with the provider's reason
    with pytest.raises(Exception, match="incomplete"):
        for _ in model.stream([HumanMessage(f"{STORY} [[cut:3]]")]):
            pass
    last = _stored_turns(hygiene, session)[-1]
    assert last.partial and last.message["content"] == "echo: Tell"
    assert reports[1].status == "partial" and reports[1].error.startswith("the provider stream failed")


async def test_wrapped_chat_model_stores_an_astream_left_early_as_partial(upstream, received,
                                                                            hygiene):
    reports: list[Report] = []
    session = f"wrap-ap-{uuid.uuid4().hex[:10]}"
    model = AgentmemChatModel(model=_chat(upstream), hygiene=hygiene, policy="default",
                              session_id=session, on_report=reports.append)
    stream = model.astream([HumanMessage(STORY)])
    async for chunk in stream:
        if chunk.content:
            break
    await stream.aclose()
    # the next call waits for the session's lock, then goes on from what the caller saw
    await model.ainvoke([HumanMessage(STORY), AIMessage(chunk.content), HumanMessage("Go on")])
    assert [(r.status, r.error) for r in reports] == [("partial", CUT), ("ok", None)]
    turns = _stored_turns(hygiene, session)
    assert [(t.role, t.message["content"], t.partial) for t in turns][:2] == [
        ("user", STORY, False), ("assistant", "echo:", True)]


class _ChatRuns(BaseCallbackHandler):
    """(run id, parent run id) of each chat-model run, in start order."""

    def __init__(self) -> None:
        self.runs: list[tuple] = []

    def on_chat_model_start(self, serialized, messages, *, run_id, parent_run_id=None, **kwargs):
        self.runs.append((run_id, parent_run_id))


def test_wrapped_chat_model_in_a_graph_streams_each_token_once(upstream, received, hygiene):
    """LangGraph's messages mode gets each token once, not from both the wrapper and the model
    it wraps: in an agent (which invokes the model) and in a node that streams it. The agent's
    call stays an invoke: the wrapped model's run is nested under the wrapper's in traces."""
    model = AgentmemChatModel(model=_chat(upstream), hygiene=hygiene, policy="default")

    def node(state: MessagesState) -> dict:
        return {"messages": [sum(model.stream(state["messages"]), AIMessageChunk(content=""))]}

    graphs = [create_agent(model, []),
              StateGraph(MessagesState).add_node("n", node).add_edge(START, "n").compile()]
    runs = [_ChatRuns() for _ in graphs]
    for graph, recorder in zip(graphs, runs):
        config = {"configurable": {"thread_id": f"wrap-g-{uuid.uuid4().hex[:10]}"},
                  "callbacks": [recorder]}
        tokens = [chunk.content for chunk, _ in graph.stream(
            {"messages": [HumanMessage(STORY)]}, config, stream_mode="messages")]
        assert len([t for t in tokens if t]) > 1 and "".join(tokens) == f"echo: {STORY}"
    [(wrapper, _), (_, parent)] = runs[0].runs
    assert parent == wrapper
