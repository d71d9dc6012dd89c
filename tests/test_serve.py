"""`agentmem serve` as a user runs it: no config, embedded Redis, env-configured provider, restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import openai
import pytest

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



@pytest.mark.parametrize(("args", "env_extra", "named"), [
    (["--log-level", "verbose"], {}, "--log-level"),
    ([], {"AGENTMEM_SWITCH_INTERVAL_MS": "abc"}, "AGENTMEM_SWITCH_INTERVAL_MS"),
    ([], {"AGENTMEM_SWITCH_INTERVAL_MS": "0"}, "AGENTMEM_SWITCH_INTERVAL_MS"),
    ([], {"AGENTMEM_MODEL_RUNTIME": "gpu"}, "model runtime 'gpu'"),
    ([], {"AGENTMEM_REDIS_URL": "redis//127.0.0.1:6379"}, "redis_url"),
])
def test_an_operators_mistake_is_named_in_a_few_lines_before_anything_starts(tmp_path, args, env_extra,
                                                                               named):
    env = {**os.environ, "AGENTMEM_DATA_DIR": str(tmp_path / "data"), **env_extra}
    env.pop("AGENTMEM_CONFIG", None)
    done = subprocess.run([sys.executable, "-m", "agentmem", "serve", "--port", str(free_port()), *args],
                          env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert named in done.stderr and "Traceback" not in done.stderr + done.stdout
    assert len(done.stderr.strip().splitlines()) <= 8  # click's usage block at most


def test_the_banner_never_shows_the_redis_password(tmp_path, redis_server):
    port = free_port()
    secret_url = redis_server.url.replace("redis://", "redis://:s3cretPW@")
    env = {**os.environ, "AGENTMEM_DATA_DIR": str(tmp_path / "data"), "AGENTMEM_REDIS_URL": secret_url}
    env.pop("AGENTMEM_CONFIG", None)
    process = _serve(port, env)
    try:
        banner = process.stdout.readline().decode()
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
    assert banner.startswith("agentmem on ") and "store=redis://***@127.0.0.1:" in banner
    assert "s3cretPW" not in banner
