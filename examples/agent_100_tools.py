"""A tool-using agent with 100 tools (tool loadout / context confusion), offline.

Agents that offer every tool on every call pay for thousands of schema tokens and pick the
wrong tool more often. With the ``agent`` policy agentmem offers only the tools the turn needs
(MiniLM + BM25 relevance to the conversation; tools named by ``tool_choice`` or called
recently always stay) and records why each other tool was left out.

    python examples/agent_100_tools.py
"""

from __future__ import annotations

import asyncio
import os
import tempfile

import agentmem
from agentmem.config import Settings
from agentmem.echo import serve_in_thread
from agentmem.store import SessionHandle

DOMAINS = ["calendar", "email", "invoice", "weather", "flight", "hotel", "crm", "github", "slack", "sql"]
VERBS = [("get", "Read"), ("list", "List"), ("create", "Create"), ("update", "Change"),
         ("delete", "Remove"), ("search", "Search"), ("export", "Export"), ("share", "Share"),
         ("archive", "Archive"), ("count", "Count")]


def tool(domain: str, verb: str, does: str) -> dict:
    return {"type": "function", "function": {
        "name": f"{verb}_{domain}", "description": f"{does} {domain} records for the current user.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}


async def main() -> None:
    api_base, _ = serve_in_thread()
    tools = [tool(d, v, does) for d in DOMAINS for v, does in VERBS]  # 100 tools
    hygiene = agentmem.Hygiene("agent", settings=Settings(
        data_dir=os.environ.get("AGENTMEM_DATA_DIR") or tempfile.mkdtemp()))
    session = SessionHandle("default", "tools-demo")
    messages = [{"role": "system", "content": "You are an operations assistant."},
                {"role": "user", "content": "What will the weather be in Lyon tomorrow? "
                                            '[[tool:get_weather {"query": "Lyon tomorrow"}]]'}]
    reply = await hygiene.acompletion("openai/echo", messages, tools=tools, session_id=session.session_id,
                                      api_base=api_base, api_key="sk-local")
    headers = reply._hidden_params["agentmem"]
    call = reply.choices[0].message.tool_calls[0].function
    print(f"tools offered {headers['X-Agentmem-Tools-Offered']}, sent {headers['X-Agentmem-Tools-Kept']}; "
          f"tokens {headers['X-Agentmem-Tokens-Before']} -> {headers['X-Agentmem-Tokens-After']}")
    report = await hygiene.store().report(session, headers["X-Agentmem-Report"])
    decisions = [d for run in report.stages for d in run.decisions]
    kept = next(d.detail["kept"] for d in decisions if d.action == "keep_tools")
    print("sent to the model:", ", ".join(kept))
    print("the model called:", call.name, call.arguments)
    for d in [d for d in decisions if d.action == "drop_tool"][:3]:
        print(f"  left out {d.tool}: {d.reason}")
    turns = await hygiene.store().active_turns(session)
    print(f"stored turns: {len(turns)}")
    await hygiene.aclose()
    hygiene.connector.close()


if __name__ == "__main__":
    asyncio.run(main())
