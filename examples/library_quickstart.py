"""The library in one page, offline: a session through agentmem against the echo upstream.

    python examples/library_quickstart.py
"""

from __future__ import annotations

import asyncio
import tempfile
import threading
import time

import uvicorn

import agentmem
from agentmem.config import Settings
from agentmem.echo import create_echo_app


def start_echo_upstream(port: int = 8799) -> str:
    server = uvicorn.Server(uvicorn.Config(create_echo_app(), port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}/v1"


async def main() -> None:
    api_base = start_echo_upstream()
    hygiene = agentmem.Hygiene("default", settings=Settings(data_dir=tempfile.mkdtemp()))
    history = [{"role": "system", "content": "You are a support assistant."},
               {"role": "user", "content": "My order 1142 has not arrived. It was due Monday."}]
    for follow_up in ["Can you check the courier?", "Thanks. Please also update my address."]:
        reply = await hygiene.acompletion("openai/echo", history, session_id="example-1",
                                          api_base=api_base, api_key="sk-local")
        print("assistant:", reply.choices[0].message.content)
        print("   agentmem:", reply._hidden_params["agentmem"]["X-Agentmem-Tokens-Before"], "tokens,",
              "report", reply._hidden_params["agentmem"]["X-Agentmem-Report"])
        history += [reply.choices[0].message.model_dump(exclude_none=True),
                    {"role": "user", "content": follow_up}]
    turns = await hygiene.store().active_turns(agentmem.api.SessionHandle("default", "example-1"))
    print(f"stored turns: {len(turns)} ({', '.join(t.role for t in turns)})")
    await hygiene.aclose()
    hygiene.connector.close()


if __name__ == "__main__":
    asyncio.run(main())
