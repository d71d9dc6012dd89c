"""`agentmem serve` as a user runs it: no config, embedded Redis, env-configured provider, restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import openai

from tests.servers import free_port


def _serve(port: int, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "agentmem", "serve", "--port", str(port)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _wait_healthy(url: str, process: subprocess.Popen) -> None:
    deadline = time.time() + 90
    while time.time() < deadline:
        if process.poll() is not None:
            raise AssertionError(process.stdout.read().decode())
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise AssertionError("agentmem serve did not become healthy")


def test_serve_without_config_survives_restart(upstream, tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "AGENTMEM_DATA_DIR": str(tmp_path / "data"),
           "OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": f"{upstream.url}/v1"}
    env.pop("AGENTMEM_CONFIG", None)
    process = _serve(port, env)
    try:
        _wait_healthy(url, process)
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="anything", max_retries=0)
        reply = client.chat.completions.create(model="openai/echo", messages=[
            {"role": "user", "content": "persist me"}], extra_headers={"X-Session-Id": "restart-1"})
        assert reply.choices[0].message.content == "echo: persist me"
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
    process = _serve(port, env)
    try:
        _wait_healthy(url, process)
        sessions = httpx.get(f"{url}/v1/sessions").json()["data"]
        assert [s["id"] for s in sessions] == ["restart-1"]
        turns = httpx.get(f"{url}/v1/sessions/restart-1").json()["turns"]
        assert [t["message"]["content"] for t in turns] == ["persist me", "echo: persist me"]
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
