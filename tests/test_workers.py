"""``agentmem serve --workers N``: several processes on one port, one session served by all
of them without a lost or doubled turn; a killed worker is replaced; SIGTERM ends them all.

Real parts: the CLI as a user runs it, uvicorn's supervisor, the embedded Redis shared by
the workers (one data folder), the echo upstream on loopback, plain HTTP connections.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx

from tests.servers import free_port


def _wait_healthy(url: str, process: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert process.poll() is None, "agentmem serve exited"
        try:
            if httpx.get(f"{url}/healthz", timeout=2).json().get("status") == "ok":
                return
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.3)
    raise AssertionError("agentmem serve --workers did not start")


def _wait_workers(url: str, count: int, timeout: float = 180) -> set[int]:
    """Poll ``/healthz`` on fresh connections until ``count`` processes have answered: a
    worker still importing the engine accepts nothing, so the first one up would otherwise
    take every connection and the test would say nothing about sharing a session."""
    seen: set[int] = set()
    deadline = time.time() + timeout
    while time.time() < deadline and len(seen) < count:
        try:
            seen.add(httpx.get(f"{url}/healthz", timeout=2).json()["process"])
        except (httpx.HTTPError, ValueError, KeyError):
            time.sleep(0.3)
    assert len(seen) == count, f"only {len(seen)} of {count} workers came up"
    return seen


def test_two_workers_serve_one_session_and_stop_together(upstream, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("models:\n  - name: echo\n    litellm_params:\n      model: openai/echo\n"
                      f"      api_base: {upstream.url}/v1\n      api_key: sk-test\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "AGENTMEM_DATA_DIR": str(tmp_path / "data")}
    process = subprocess.Popen(
        [sys.executable, "-m", "agentmem", "serve", "--port", str(port), "--workers", "2",
         "--config", str(config), "--policy", "off", "--log-level", "warning"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_healthy(url, process)
        _wait_workers(url, 2)
        answered_by: set[int] = set()
        history: list[dict] = []
        turn = 0
        # A new connection each turn: the kernel spreads them. At least 24 turns, and on until
        # both workers have served one (which worker accepts is the kernel's choice).
        while turn < 24 or (len(answered_by) < 2 and turn < 120):
            history.append({"role": "user", "content": f"message {turn}"})
            with httpx.Client(base_url=url, timeout=60) as http:
                reply = http.post("/v1/chat/completions", headers={"X-Session-Id": "workers"},
                                  json={"model": "echo", "messages": history})
                assert reply.status_code == 200, reply.text
                history.append(reply.json()["choices"][0]["message"])
                answered_by.add(http.get("/healthz").json()["process"])
            turn += 1
        stored = httpx.get(f"{url}/v1/sessions/workers", timeout=30).json()["turns"]
        assert [t["message"]["content"] for t in stored] == [m["content"] for m in history]
        assert len(answered_by) == 2, "one worker answered everything"

        # A worker killed is replaced by the supervisor; the port keeps answering.
        worker = next(iter(answered_by))
        os.kill(worker, signal.SIGKILL)
        _wait_healthy(url, process)

        started = time.time()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) is not None
        assert time.time() - started < 15
        for pid in answered_by - {worker}:  # the workers are gone with their supervisor
            deadline = time.time() + 10
            while time.time() < deadline and _alive(pid):
                time.sleep(0.1)
            assert not _alive(pid)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
