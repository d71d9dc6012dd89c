"""A chat assistant whose user changes their mind (context clash), offline.

The user first says they are vegetarian, later that they eat meat every day. With the
``guarded`` policy agentmem checks the newest user message against what the same speaker said
before (MiniLM finds the candidates, the shipped NLI cross-encoder scores contradiction) and,
newer wins, withholds the older sentence so the model plans for the person as they are now.

    python examples/chat_changes_mind.py
"""

from __future__ import annotations

import asyncio
import os
import tempfile

import httpx

import agentmem
from agentmem.config import Settings
from agentmem.echo import serve_in_thread
from agentmem.store import SessionHandle

TURNS = [
    "I am vegetarian, so please no meat. Plan three dinners for me.",
    "Can you add a dessert to the second one?",
    "I eat meat every day. Change the plan.",
]


async def main() -> None:
    api_base, _ = serve_in_thread()
    data_dir = os.environ.get("AGENTMEM_DATA_DIR") or tempfile.mkdtemp()
    hygiene = agentmem.Hygiene("guarded", settings=Settings(data_dir=data_dir))
    session, history = SessionHandle("default", "dinner-plans"), []
    for text in TURNS:
        history.append({"role": "user", "content": text})
        reply = await hygiene.acompletion("openai/echo", history, session_id=session.session_id,
                                          api_base=api_base, api_key="sk-local")
        history.append(reply.choices[0].message.model_dump(exclude_none=True))
        await hygiene.drain()
    report = await hygiene.store().report(session, reply._hidden_params["agentmem"]["X-Agentmem-Report"])
    for run in report.stages:
        for decision in (d for d in run.decisions if d.action == "quarantine"):
            print(f"withheld ({decision.detail['kind']}, score {decision.score:.2f}):",
                  repr(history[decision.message_index]["content"][slice(*decision.span)]))
            print("  why:", decision.reason)
    sent = httpx.get(api_base.removesuffix("/v1") + "/_echo/requests").json()[-1]["messages"]
    print("the model was sent as the first user turn:", repr(sent[0]["content"]))
    turns = await hygiene.store().active_turns(session)
    print(f"stored turns: {len(turns)}; the original first turn is kept verbatim:",
          repr(turns[0].message["content"]))
    await hygiene.aclose()
    hygiene.connector.close()


if __name__ == "__main__":
    asyncio.run(main())
