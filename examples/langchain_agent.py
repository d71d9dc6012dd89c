"""A LangGraph agent with 24 tools, through agentmem's middleware, offline.

    python examples/langchain_agent.py

The echo upstream stands in for OpenAI: it calls the tool a user message names with
``[[tool:NAME {...}]]`` and otherwise echoes. agentmem (policy ``agent``) offers each model
call only the tools the turn needs and records the session under the LangGraph thread id.
"""

from __future__ import annotations

import asyncio
import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from langchain.agents import create_agent
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver

from agentmem import Hygiene
from agentmem.adapters.langchain import AgentmemMiddleware
from agentmem.echo import serve_in_thread
from agentmem.report import Report
from agentmem.store import SessionHandle

SKILLS = {  # 24 tools; a real agent's toolbox grows like this
    "get_weather": "weather forecast for a city", "get_stock_price": "share price of a company",
    "search_flights": "flights between airports", "book_hotel": "hotel rooms in a city",
    "convert_currency": "currency exchange rates", "translate": "translation of a sentence",
    "add_event": "calendar appointments", "send_email": "sending an email",
    "set_reminder": "reminders at a time", "get_news": "news headlines",
    "find_recipe": "cooking recipes", "book_table": "restaurant tables",
    "local_time": "the local time in a time zone", "convert_units": "unit conversion",
    "calculate": "arithmetic", "encyclopedia": "encyclopedia articles",
    "play_music": "playing music", "showtimes": "cinema showtimes",
    "traffic": "road traffic", "track_parcel": "parcel tracking", "define": "word definitions",
    "bank_balance": "the bank balance", "book_taxi": "taxi booking",
    "find_pharmacy": "open pharmacies",
}


def make_tool(name: str, skill: str):
    def run(query: str) -> str:
        return f"{name}({query}): 18C, light wind" if name == "get_weather" else f"{name}: done"

    return tool(name, description=f"Look up {skill}.")(run)


async def main() -> None:
    api_base, _ = serve_in_thread()
    hygiene = Hygiene("agent", data_dir=tempfile.mkdtemp(prefix="agentmem-langchain-"))
    reports: list[Report] = []
    tools = [make_tool(name, skill) for name, skill in SKILLS.items()]
    agent = create_agent(ChatOpenAI(base_url=api_base, api_key="sk-local", model="echo"), tools,
                         system_prompt="You are a travel assistant. Use tools when useful.",
                         middleware=[AgentmemMiddleware(hygiene, on_report=reports.append)],
                         checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "trip-42"}}
    for ask in ['How warm is it in Lisbon today? [[tool:get_weather {"query": "Lisbon"}]]',
                "Thanks! Should I pack an umbrella?"]:
        result = await agent.ainvoke({"messages": [{"role": "user", "content": ask}]}, config)
        print("user:     ", ask)
        print("assistant:", result["messages"][-1].content)
    for number, report in enumerate(reports, 1):
        print(f"model call {number}: tools offered {report.tools_before} -> kept "
              f"{report.tools_after}; tokens {report.tokens_before} -> {report.tokens_after}")
    turns = await hygiene.store().active_turns(SessionHandle(hygiene.tenant, "trip-42"))
    print(f"stored turns: {len(turns)} ({', '.join(turn.role for turn in turns)})")
    await hygiene.aclose()
    hygiene.connector.close()


if __name__ == "__main__":
    asyncio.run(main())
