"""An agent that keeps repeating its own hallucination (context poisoning), offline.

The assistant invents a pickup locker that no order record mentions and repeats it turn after
turn. With the ``guarded`` policy agentmem notices the claim recurring without support from
the user, the system prompt or a trusted tool, withholds every repetition from the model, and
keeps a record you can release or confirm. The assistant's turns are scripted (the echo
upstream stands in for the model), so the run is deterministic.

    python examples/poisoning_agent.py
"""

from __future__ import annotations

import asyncio
import os
import tempfile

import agentmem
from agentmem.config import Settings
from agentmem.echo import serve_in_thread
from agentmem.messages import text_of
from agentmem.quarantine import QuarantineStore
from agentmem.store import SessionHandle

CONVERSATION = [
    {"role": "system", "content": "You are the support assistant of Larkspur Home. "
                                  "Look orders up with the tools."},
    {"role": "user", "content": "Where is my order LH-1? It has not arrived."},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
        "name": "get_order", "arguments": "{\"order_id\": \"LH-1\"}"}}]},
    {"role": "tool", "tool_call_id": "c1",
     "content": "{\"order_id\": \"LH-1\", \"status\": \"shipped\", \"carrier\": \"UPS\"}"},
    {"role": "assistant", "content": "Your order LH-1 shipped with UPS. The driver left it in the "
                                     "Maple Street parcel locker because nobody was home."},
    {"role": "user", "content": "Which locker exactly?"},
    {"role": "assistant", "content": "It is the Maple Street parcel locker next to the bakery. "
                                     "Bring your ID."},
    {"role": "user", "content": "And how long will they keep it?"},
    {"role": "assistant", "content": "The Maple Street parcel locker holds parcels for five days. "
                                     "UPS shipped it on time."},
    {"role": "user", "content": "Thanks, I will go today."},
]


async def main() -> None:
    api_base, _ = serve_in_thread()
    data_dir = os.environ.get("AGENTMEM_DATA_DIR") or tempfile.mkdtemp(prefix="agentmem-poison-")
    hygiene = agentmem.Hygiene("guarded", settings=Settings(data_dir=data_dir))
    session = SessionHandle("default", f"poison-demo-{os.getpid()}")
    for end in [i + 1 for i, m in enumerate(CONVERSATION) if m["role"] == "user"]:
        reply = await hygiene.acompletion("openai/echo", CONVERSATION[:end], session_id=session.session_id,
                                          api_base=api_base, api_key="sk-local")
        await hygiene.drain()  # background work (embeddings) of this turn, before the next one
    report = await hygiene.store().report(session, reply._hidden_params["agentmem"]["X-Agentmem-Report"])
    print("withheld from the model on the last call:")
    for run in report.stages:
        for decision in run.decisions:
            if decision.action == "quarantine":
                text = text_of(CONVERSATION[decision.message_index])
                print(f"  turn {decision.position}: {text[slice(*decision.span)]!r}\n"
                      f"    why: {decision.reason}")
    records = await QuarantineStore(hygiene.store()).all(session)
    print(f"quarantine records: {len(records)} ({', '.join(r.kind + '/' + r.status for r in records)})")
    print(f"release it with: AGENTMEM_DATA_DIR={data_dir} agentmem sessions quarantine "
          f"{session.session_id} --release {records[0].id}")
    turns = await hygiene.store().active_turns(session)
    print(f"stored turns: {len(turns)} (verbatim; nothing was deleted)")
    await hygiene.aclose()
    hygiene.connector.close()


if __name__ == "__main__":
    asyncio.run(main())
