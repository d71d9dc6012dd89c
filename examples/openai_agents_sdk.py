"""An OpenAI Agents SDK agent with 24 tools, run through agentmem in-process, offline.

    python examples/openai_agents_sdk.py

The echo upstream stands in for the provider: it calls ``get_weather`` because the user
message asks it to, the SDK runs the tool, and the echo answers with the tool's result.
agentmem offers the model only the tools the turn needs and stores every turn.
"""

from __future__ import annotations

import asyncio
import tempfile

from agents import Agent, RunConfig, Runner, function_tool, set_tracing_disabled

from agentmem import Hygiene
from agentmem.adapters.openai_agents import AgentmemModelProvider, session_scope
from agentmem.echo import serve_in_thread
from agentmem.store import SessionHandle

TOOLS = ["send_email", "create_calendar_event", "search_flights", "book_hotel", "convert_currency",
         "get_stock_price", "translate_text", "create_invoice", "refund_order", "track_package",
         "run_sql_query", "resize_image", "set_reminder", "play_music", "order_pizza",
         "find_restaurant", "get_news_headlines", "reset_password", "summarize_pdf",
         "create_support_ticket", "lookup_dictionary", "start_vm_instance", "scan_qr_code"]


@function_tool
def get_weather(city: str) -> str:
    """Get the current weather forecast (temperature, sky, wind) for a city."""
    return f"{city}: sunny, 21 C, light wind"


def stub(name: str):
    def tool(query: str) -> str:
        return f"{name} is not wired up in this example"
    return function_tool(tool, name_override=name,
                         description_override=name.replace("_", " ").capitalize() + ".")


async def main(data_dir: str) -> None:
    set_tracing_disabled(True)  # offline: no trace export
    api_base, _ = serve_in_thread()
    hygiene = Hygiene(policy="agent", data_dir=data_dir)
    provider = AgentmemModelProvider(hygiene, base_url=api_base, api_key="sk-local")
    agent = Agent(name="assistant", instructions="You are a helpful assistant.", model="echo",
                  tools=[get_weather, *map(stub, TOOLS)])

    with session_scope("weather-demo"):  # one agentmem session for the run
        result = await Runner.run(
            agent, 'Weather in Paris today? [[tool:get_weather {"city": "Paris"}]]',
            run_config=RunConfig(model_provider=provider))
    print("final output:", result.final_output)

    handle = SessionHandle(hygiene.tenant, "weather-demo")
    for report in await hygiene.store().reports(handle):  # oldest first
        print(f"model call: tools offered {report.tools_before} -> kept {report.tools_after}; "
              f"tokens {report.tokens_before} -> {report.tokens_after}")
    turns = await hygiene.store().active_turns(handle)
    print(f"stored turns: {len(turns)} ({', '.join(t.role for t in turns)})")

    await provider.aclose()
    await hygiene.drain()
    await hygiene.aclose()
    hygiene.close()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as folder:
        asyncio.run(main(folder))
