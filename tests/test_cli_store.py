"""The store commands (``agentmem sessions ...``, ``agentmem inspect``) read the deployment's
settings as ``serve`` does, as a real process: ./agentmem.yaml, --config, --redis-url; a
store they cannot reach is one line, not a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from agentmem import Hygiene
from tests.servers import free_port


def _agentmem(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "AGENTMEM_DATA_DIR": str(cwd / "embedded")}
    env.pop("AGENTMEM_CONFIG", None)
    env.pop("AGENTMEM_REDIS_URL", None)
    return subprocess.run([sys.executable, "-m", "agentmem", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_store_commands_read_the_deployments_redis(redis_server, tmp_path):
    engine = Hygiene("off", redis_url=redis_server.url)
    try:
        engine.run_sync(engine.apply([{"role": "user", "content": "stored in the deployment"}],
                                     session_id="cfg-1"))
    finally:
        engine.close()
    folder = tmp_path / "deploy"
    folder.mkdir()
    (folder / "agentmem.yaml").write_text(f"redis_url: {redis_server.url}\n")
    listed = _agentmem("sessions", "list", cwd=folder)
    assert listed.returncode == 0, listed.stderr
    assert "cfg-1" in listed.stdout and "using ./agentmem.yaml" in listed.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shown = _agentmem("sessions", "show", "cfg-1", "--redis-url", redis_server.url, cwd=elsewhere)
    assert shown.returncode == 0 and "stored in the deployment" in shown.stdout
    shown = _agentmem("inspect", "cfg-1", "--config", str(folder / "agentmem.yaml"), cwd=elsewhere)
    assert shown.returncode == 0 and "stored in the deployment" in shown.stdout


def test_a_store_the_cli_cannot_reach_is_one_line(tmp_path):
    down = f"redis://:pw@127.0.0.1:{free_port()}/0"
    listed = _agentmem("sessions", "list", "--redis-url", down, cwd=tmp_path)
    assert listed.returncode == 2
    assert listed.stderr.startswith("agentmem: session store redis://***@127.0.0.1:")
    assert "Traceback" not in listed.stderr and len(listed.stderr.splitlines()) == 1
