"""``agentmem serve --workers N``: several processes on one port, one session served by all
of them without a lost or doubled turn; a killed worker is replaced; SIGTERM ends them all;
``/metrics`` counts every worker's calls whichever worker answers the scrape, and each worker
writes its calls' log lines in the server's log format.

Real parts: the CLI as a user runs it, uvicorn's supervisor, the embedded Redis shared by
the workers (one data folder), the echo upstream on loopback, plain HTTP connections.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

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


@pytest.fixture(scope="module")
def json_workers(upstream, tmp_path_factory):
    """``serve --workers 2 --log-format json``; its output (stdout and stderr) in a file. Its
    temporary files go to a folder of the test's, to see the metrics directory come and go."""
    folder = tmp_path_factory.mktemp("json-workers")
    config = folder / "config.yaml"
    config.write_text("models:\n  - name: echo\n    litellm_params:\n      model: openai/echo\n"
                      f"      api_base: {upstream.url}/v1\n      api_key: sk-test\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    (folder / "tmp").mkdir()
    env = {**os.environ, "AGENTMEM_DATA_DIR": str(folder / "data"), "TMPDIR": str(folder / "tmp")}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    log = folder / "serve.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "agentmem", "serve", "--port", str(port), "--workers", "2",
             "--config", str(config), "--policy", "off", "--log-format", "json"],
            env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_healthy(url, process)
        _wait_workers(url, 2)
        yield url, process, log, folder / "tmp"
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def _calls_on_both_workers(url: str, prefix: str, minimum: int = 10) -> dict[str, int]:
    """Calls on new connections (one session each) until at least ``minimum`` were made and
    both workers served one; which worker served each (``/healthz`` on the same connection)."""
    served: dict[str, int] = {}
    while len(served) < minimum or (len(set(served.values())) < 2 and len(served) < 60):
        session = f"{prefix}-{len(served)}"
        with httpx.Client(base_url=url, timeout=60) as http:
            reply = http.post("/v1/chat/completions", headers={"X-Session-Id": session},
                              json={"model": "echo", "messages": [{"role": "user", "content": "hi"}]})
            assert reply.status_code == 200, reply.text
            served[session] = http.get("/healthz").json()["process"]
    assert len(set(served.values())) == 2, "one worker served every call"
    return served


def _scrape(url: str) -> tuple[float, int]:
    """calls_total (policy off, ok) from ``/metrics`` on a new connection, and which worker
    answered it."""
    with httpx.Client(base_url=url, timeout=30) as http:
        text = http.get("/metrics").text
        process = http.get("/healthz").json()["process"]
    calls = sum(sample.value for family in text_string_to_metric_families(text)
                for sample in family.samples if sample.name == "agentmem_calls_total"
                and sample.labels == {"policy": "off", "status": "ok"})
    return calls, process


def _wait_counted(url: str, calls: float, timeout: float = 10) -> None:
    """A call is counted when its report is finished, just after its reply."""
    deadline = time.time() + timeout
    while time.time() < deadline and _scrape(url)[0] != calls:
        time.sleep(0.1)


def test_metrics_count_every_workers_calls_on_every_scrape(json_workers):
    """Each worker used to answer ``/metrics`` from its own registry: scrapes alternated
    between per-worker counts, which Prometheus reads as counter resets."""
    url, _, _, _ = json_workers
    before, _ = _scrape(url)
    calls = len(_calls_on_both_workers(url, "metrics"))
    _wait_counted(url, before + calls)
    answered: dict[int, int] = {}
    for _ in range(60):  # new connections until each worker answered 3 scrapes
        count, process = _scrape(url)
        assert count == before + calls, f"worker {process} counted {count} of {before + calls}"
        answered[process] = answered.get(process, 0) + 1
        if len(answered) == 2 and min(answered.values()) >= 3:
            break
    assert len(answered) == 2, "one worker answered every scrape"
    with httpx.Client(base_url=url, timeout=30) as http:  # the names the README documents
        names = {family.name for family in text_string_to_metric_families(http.get("/metrics").text)}
    assert {"agentmem_calls", "agentmem_tokens_in", "agentmem_tokens_out",
            "agentmem_tools_offered", "agentmem_tools_kept",
            "agentmem_hygiene_latency_seconds", "agentmem_upstream_latency_seconds"} <= names


def test_each_worker_logs_its_calls_as_json_lines(json_workers):
    """The workers never configured agentmem's loggers: no per-call lines at all."""
    url, _, log, _ = json_workers
    sessions = _calls_on_both_workers(url, "logs")
    lines: list[dict] = []
    deadline = time.time() + 10
    while time.time() < deadline:
        lines = [json.loads(line) for line in log.read_text().splitlines()
                 if '"agentmem.calls"' in line]  # each one JSON (json.loads raises otherwise)
        if {line.get("session_id") for line in lines} >= set(sessions):
            break
        time.sleep(0.1)
    logged = [line["session_id"] for line in lines
              if line["logger"] == "agentmem.calls" and line.get("event") == "call"
              and line["session_id"] in sessions]
    assert sorted(logged) == sorted(sessions)  # one line per call, from both workers
    assert all(line["level"] == "info" and line["report_id"] for line in lines)


def test_a_replaced_worker_keeps_its_counts_and_the_directory_goes_at_exit(json_workers):
    """A worker that dies is marked dead; its calls stay counted (no counter reset). The
    metrics directory is this run's own (mode 0700) and is removed when the server stops."""
    url, process, _, tmp = json_workers
    shared = list(Path(tmp).glob("agentmem-metrics-*"))
    assert len(shared) == 1 and shared[0].stat().st_mode & 0o777 == 0o700
    before, _ = _scrape(url)
    served = _calls_on_both_workers(url, "replaced", minimum=2)
    total = before + len(served)
    _wait_counted(url, total)
    os.kill(next(iter(served.values())), signal.SIGKILL)
    _wait_workers(url, 2)  # the survivor and the replacement
    answered: set[int] = set()
    for _ in range(60):
        count, worker = _scrape(url)
        assert count == total
        answered.add(worker)
        if len(answered) == 2:
            break
    assert len(answered) == 2, "one worker answered every scrape"
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0
    assert not list(Path(tmp).glob("agentmem-metrics-*"))
