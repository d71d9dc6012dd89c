"""A coding agent reads a file, edits it and reads it again (machine text, superseded answers), offline.

The agent's tool calls are scripted here (a real agent gets them from the model); each step
goes through agentmem with the ``default`` policy. The source file reaches the model exactly
as read (code is machine text: the prose pruner never cuts it), and once the agent reads the
file again after its edit, the older read is withheld whole, so the model never sees the stale
line beside the new one. The stored session keeps both reads verbatim, and the quarantine
record can be released.

    python examples/coding_agent.py
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import tempfile

import httpx

import agentmem
import agentmem.text
from agentmem.config import Settings
from agentmem.echo import serve_in_thread
from agentmem.quarantine.records import QuarantineStore
from agentmem.store import SessionHandle

SOURCE = inspect.getsource(agentmem.text)  # a real module, 6,000 characters
OLD_LINE = 'DEFAULT_TOKENIZER_MODEL = "gpt-4o"'
NEW_LINE = 'DEFAULT_TOKENIZER_MODEL = "gpt-4.1"'


def call(call_id: str, name: str, arguments: dict) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]}


def answer(call_id: str, content: str) -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


STEPS = [
    [{"role": "system", "content": "You are a coding agent. Use the tools to read and edit files."},
     {"role": "user", "content": "Make gpt-4.1 the default tokenizer model in agentmem/text.py."},
     call("c1", "read_file", {"path": "agentmem/text.py"}), answer("c1", SOURCE)],
    [call("c2", "edit_file", {"path": "agentmem/text.py", "old": OLD_LINE, "new": NEW_LINE}),
     answer("c2", "Edited agentmem/text.py: 1 replacement."),
     call("c3", "read_file", {"path": "agentmem/text.py"}), answer("c3", SOURCE.replace(OLD_LINE, NEW_LINE))],
]


async def main() -> None:
    api_base, _ = serve_in_thread()
    requests = api_base.removesuffix("/v1") + "/_echo/requests"
    data_dir = os.environ.get("AGENTMEM_DATA_DIR") or tempfile.mkdtemp()
    hygiene = agentmem.Hygiene("default", settings=Settings(data_dir=data_dir))
    session, history = SessionHandle("default", "coding-agent"), []
    for number, step in enumerate(STEPS, 1):
        history += step
        await hygiene.acompletion("openai/echo", history, session_id=session.session_id,
                                  api_base=api_base, api_key="sk-local")
        await hygiene.drain()
        sent = httpx.get(requests).json()[-1]["messages"]
        reads = [m["content"] for m in sent if m.get("role") == "tool" and m["tool_call_id"] in {"c1", "c3"}]
        print(f"step {number}: the model was sent {len(reads)} read(s) of the file:")
        for content in reads:
            verbatim = content in (SOURCE, SOURCE.replace(OLD_LINE, NEW_LINE))
            line = (", the stale line" if OLD_LINE in content
                    else ", the edited line" if NEW_LINE in content else "")
            print(f"  {len(content):,} characters, {'verbatim' if verbatim else repr(content)}{line}")
    for record in await QuarantineStore(hygiene.store()).all(session):
        print(f"quarantine record {record.id} ({record.kind}, {record.detector}): {record.reason}")
    turns = await hygiene.store().active_turns(session)
    kept = sum(t.message.get("content") == SOURCE for t in turns)
    print(f"stored turns: {len(turns)}; the older read is kept verbatim in the session: {kept == 1}")
    await hygiene.aclose()
    hygiene.connector.close()


if __name__ == "__main__":
    asyncio.run(main())
