"""A script that uses the library and simply ends (no ``close()``), run as a real process:
its last turns still get their after-reply work, and the embedded Redis it started stops."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from agentmem.api import Hygiene
from agentmem.store import SessionHandle

SCRIPT = textwrap.dedent("""
    import agentmem
    reply = agentmem.completion(
        model="openai/echo", api_base={api_base!r}, api_key="sk-test", session_id="exit-1",
        messages=[{{"role": "user", "content": "My router serial is RX-99812. It keeps dropping."}}])
    print(reply.choices[0].message.content)
""")


def _redis_processes(folder: Path) -> list[str]:
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if "redis-server" in line and str(folder) in line]


def test_a_script_that_never_closes_gets_its_work_done_and_its_redis_stopped(upstream, tmp_path):
    folder = tmp_path / "data"
    env = {**os.environ, "AGENTMEM_DATA_DIR": str(folder), "HF_HUB_OFFLINE": "1",
           "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    script = SCRIPT.format(api_base=f"{upstream.url}/v1")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "echo: My router serial is RX-99812. It keeps dropping."
    assert "Traceback" not in done.stderr and "failed" not in done.stderr
    deadline = time.monotonic() + 10
    while _redis_processes(folder) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _redis_processes(folder) == []

    reader = Hygiene("off", data_dir=str(folder))
    try:
        async def stored() -> tuple[int, int]:
            store, handle = reader.store(), SessionHandle("default", "exit-1")
            turns = await store.all_turns(handle)
            return len(turns), len(await store.embeddings(handle, [t.id for t in turns]))

        assert reader.run_sync(stored()) == (2, 2)  # the question and the reply, both embedded
    finally:
        reader.close()
