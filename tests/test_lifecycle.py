"""A server's life as an operator sees it: starting on a busy port, shutting down with work
pending, two servers on one data folder, the embedded Redis killed under a running server.

Everything is real: `agentmem serve` subprocesses, the embedded redis-server they share,
the echo upstream on loopback, and the test reading Redis through the same connector.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from agentmem.pending import SERVERS_KEY, AfterReplyJob, Ledger, stream_key
from agentmem.store.connection import REGISTRY_FILE, RedisConnector, _embedded_running
from agentmem.store.keys import SessionKeys
from tests.servers import free_port

# The paste whose embeddings are still being computed when the server is told to stop: at
# hundreds of sentences a second on one CPU thread, seconds of work, where the test sends
# SIGTERM within milliseconds of the reply.
PASTE_SENTENCES = 1500
POLICY = "name: lifecycle\nstages: []\nembed: true\n"  # after-reply work = embeddings only


class Served:
    """One `agentmem serve` subprocess, its output in a file (a pipe could fill and stall it)."""

    def __init__(self, port: int, env: dict[str, str], log: Path, policy: Path):
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log = log
        with open(log, "ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "agentmem", "serve", "--port", str(port),
                 "--policy", str(policy)], env=env, stdout=out, stderr=subprocess.STDOUT)

    def wait_healthy(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"agentmem serve exited:\n{self.output()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).json().get("status") == "ok":
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"agentmem serve did not become healthy:\n{self.output()}")

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key="unused", max_retries=0,
                             timeout=120)

    def ask(self, session: str, text: str) -> dict[str, Any]:
        """One call; its headers (the warning, if the store was unavailable)."""
        raw = self.client().chat.completions.with_raw_response.create(
            model="openai/echo", messages=[{"role": "user", "content": text}],
            extra_headers={"X-Session-Id": session})
        assert raw.parse().choices[0].message.content.startswith("echo: ")
        return dict(raw.headers)

    def stored(self, session: str) -> list[str]:
        response = httpx.get(f"{self.url}/v1/sessions/{session}", timeout=30)
        if response.status_code != 200:
            return []
        return [turn["message"]["content"] for turn in response.json()["turns"]]

    def stop(self) -> float:
        """SIGTERM; seconds until the process is gone."""
        started = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"agentmem serve ignored SIGTERM:\n{self.output()}") from None
        return time.monotonic() - started

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-6000:]


class Fleet:
    """`agentmem serve` processes on one data folder, and the environment they run in."""

    def __init__(self, upstream_url: str, folder: Path):
        self.folder = folder
        self.data = folder / "data"
        self.policy = folder / "lifecycle.yaml"
        self.policy.write_text(POLICY)
        self.env = {**os.environ, "AGENTMEM_DATA_DIR": str(self.data),
                    "OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": f"{upstream_url}/v1"}
        self.env.pop("AGENTMEM_CONFIG", None)
        self.env.pop("AGENTMEM_REDIS_URL", None)
        self.started: list[Served] = []

    def start(self) -> Served:
        server = Served(free_port(), self.env, self.folder / f"serve-{len(self.started)}.log",
                        self.policy)
        self.started.append(server)
        server.wait_healthy()
        return server

    def cleanup(self) -> None:
        for server in self.started:
            if server.process.poll() is None:
                server.process.kill()
                server.process.wait()
        _stop_embedded(self.data)


@pytest.fixture
def fleet(upstream, tmp_path) -> Iterator[Fleet]:
    """Servers on one data folder; whatever a test leaves running is stopped after it."""
    servers = Fleet(upstream.url, tmp_path)
    yield servers
    servers.cleanup()


def _stop_embedded(data: Path) -> None:
    """Attach and detach: the last user stops the folder's Redis, so none outlives the test."""
    if _embedded_running(data / REGISTRY_FILE):
        connector = RedisConnector(directory=data)
        connector.embedded_socket()
        connector.close()


async def _read(data: Path, work: Any) -> Any:
    """Run ``work(redis)`` against the folder's Redis, as the CLI does: attached, then gone."""
    connector = RedisConnector(directory=data)
    client = connector.client()
    try:
        return await work(client)
    finally:
        await client.aclose()
        connector.close()


def read(data: Path, work: Any) -> Any:
    return asyncio.run(_read(data, work))


def _redis_pid(data: Path) -> int:
    record = json.loads((data / REGISTRY_FILE).read_text())
    return int(Path(record["pidfile"]).read_text())


# -- a busy port --------------------------------------------------------------------------------


def test_busy_port_is_one_line_and_exit_status_2(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "agentmem", "serve", "--port", str(port)],
                              env={**os.environ, "AGENTMEM_DATA_DIR": str(tmp_path / "data")},
                              capture_output=True, text=True, timeout=60)
        elapsed = time.monotonic() - started
    print(f"busy port: exit {done.returncode} in {elapsed:.2f}s")
    assert done.returncode == 2
    assert done.stderr == f"agentmem: port {port} on 127.0.0.1 is already in use\n"
    assert done.stdout == ""
    assert elapsed < 5  # no models, no Redis: the interpreter's start and the CLI's imports
    assert not (tmp_path / "data").exists()  # nothing heavy ran: not even the data folder


# -- shutdown with work pending -----------------------------------------------------------------


def test_shutdown_leaves_pending_work_to_the_next_start(fleet):
    data = fleet.data
    server = fleet.start()
    paste = " ".join(f"Line {i} of the pasted report says that item {i} weighs {i % 89} grams."
                     for i in range(PASTE_SENTENCES))
    server.ask("paste", paste)
    seconds = server.stop()  # at once: the paste's embeddings have barely started
    print(f"shutdown with work pending: {seconds:.2f}s")
    assert seconds <= 10

    async def left(redis):
        servers = [s.decode() for s in await redis.smembers(SERVERS_KEY)]
        entries = [e for s in servers for e in await redis.xrange(stream_key(s))]
        return entries, await redis.hkeys(SessionKeys("default", "paste").embeddings)

    entries, embedded = read(data, left)
    assert [fields[b"session"] for _, fields in entries] == [b"paste"]
    assert entries[0][1][b"turns"] == b"0,1"  # the paste and its reply
    assert embedded == []  # the work was pending, not done: the next start must do it

    server = fleet.start()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        entries, embedded = read(data, left)
        if not entries and sorted(embedded) == [b"0", b"1"]:
            break
        time.sleep(1)
    assert sorted(embedded) == [b"0", b"1"], server.output()
    assert entries == []  # done, and acknowledged
    assert server.stored("paste") == [paste, "echo: " + paste[:500]]
    print(f"shutdown when idle: {server.stop():.2f}s")


def test_a_crashed_servers_work_is_redone_by_another_after_its_lease(fleet):
    data = fleet.data
    doomed, heir = fleet.start(), fleet.start()
    paste = " ".join(f"Row {i} of the crash log: sensor {i % 53} read {i} units."
                     for i in range(PASTE_SENTENCES))
    doomed.ask("crash", paste)
    doomed.process.kill()  # no shutdown at all: its lease has to run out
    doomed.process.wait()
    killed = time.monotonic()

    async def embedded(redis):
        return sorted(await redis.hkeys(SessionKeys("default", "crash").embeddings))

    assert read(data, embedded) == []  # pending when the server died
    while time.monotonic() - killed < 300 and read(data, embedded) != [b"0", b"1"]:
        time.sleep(1)
    print(f"a killed server's work redone by another {time.monotonic() - killed:.1f}s later")
    assert read(data, embedded) == [b"0", b"1"], heir.output()


async def test_ledger_adopts_only_what_servers_that_are_gone_left(tmp_path):
    connector = RedisConnector(directory=tmp_path / "data")
    redis = connector.client()
    try:
        live, stopped, heir = (Ledger(redis, name, lease_s=60) for name in ("live", "stopped", "heir"))
        crashed = Ledger(redis, "crashed", lease_s=1)
        jobs = [AfterReplyJob("t", f"s{i}", (2 * i, 2 * i + 1), "default", 600) for i in range(3)]
        await live.record(jobs[0])
        await stopped.record(jobs[1])
        await crashed.record(jobs[2])
        await stopped.release()  # a shutdown lets go at once
        assert [job for _, job in await heir.adopt()] == [jobs[1]]
        await asyncio.sleep(1.2)  # a crash: its lease runs out
        adopted = await heir.adopt()
        assert [job for _, job in adopted] == [jobs[2]]
        assert await heir.adopt() == []
        assert (await live.pending(), await heir.pending()) == (1, 2)
        assert sorted(await redis.smembers(SERVERS_KEY)) == [b"heir", b"live"]
        await heir.done(adopted[0][0])
        assert await heir.pending() == 1
        await live.done((await redis.xrange(stream_key("live")))[0][0].decode())
        await live.release()  # nothing left: its stream and name go too
        assert sorted(await redis.smembers(SERVERS_KEY)) == [b"heir"]
        assert not await redis.exists(stream_key("live"))
    finally:
        await redis.aclose()
        connector.close()


async def test_adopted_jobs_waiting_their_turn_count_as_background_work(tmp_path):
    """A stopped server's jobs are redone one at a time; those still waiting are counted in
    ``background_pending`` (``/healthz``'s ``background``, ``/metrics``), not only the one
    running, so an operator sees the adopted backlog shrink."""
    from agentmem.api import Hygiene
    from agentmem.config import Settings

    engine = Hygiene(settings=Settings(data_dir=tmp_path / "data"))
    stopped = Ledger(engine.store().redis, "stopped", lease_s=60)
    seen: list[int] = []

    real = engine.redo_after_reply

    async def redo(store, job):  # the real redo, watched
        seen.append(engine.background_pending)
        await real(store, job)

    engine.redo_after_reply = redo
    try:
        for i in range(3):
            await stopped.record(AfterReplyJob("t", f"gone-{i}", (0, 1), "default", 600))
        await stopped.release()
        assert engine.background_pending == 0
        await engine.after_reply_jobs()._adopt_once()
        assert seen == [3, 2, 1]  # the running one and those still waiting
        assert engine.background_pending == 0
        assert await engine.after_reply_jobs().ledger(engine.store()).pending() == 0
    finally:
        await engine.aclose()
        engine.connector.close()


# -- two servers on one data folder ---------------------------------------------------------------


def test_two_servers_share_the_folder_and_the_first_leaving_stops_nothing(fleet):
    data = fleet.data
    first, second = fleet.start(), fleet.start()
    assert "x-agentmem-warning" not in first.ask("one", "stored by the first")
    assert "x-agentmem-warning" not in second.ask("two", "stored by the second")
    assert second.stored("one") == ["stored by the first", "echo: stored by the first"]

    assert first.stop() <= 10
    headers = second.ask("three", "still stored after the first left")
    assert "x-agentmem-warning" not in headers, headers
    assert second.stored("three") == ["still stored after the first left",
                                      "echo: still stored after the first left"]

    # The CLI reads sessions while a server runs, and leaving does not stop the server's Redis.
    listed = subprocess.run([sys.executable, "-m", "agentmem", "sessions", "list"],
                            env=fleet.env,
                            capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert all(name in listed.stdout for name in ("one", "two", "three"))
    assert "x-agentmem-warning" not in second.ask("four", "stored after the CLI left")
    assert second.stored("four")

    assert second.stop() <= 10
    assert not _embedded_running(data / REGISTRY_FILE)  # the last one out stopped it


# -- the embedded Redis killed under a running server ----------------------------------------------


def test_killed_embedded_redis_comes_back_without_restarting_the_server(fleet):
    data = fleet.data
    server = fleet.start()
    server.ask("before", "written before the kill")
    time.sleep(1.5)  # the append-only file is synced every second
    old = _redis_pid(data)
    os.kill(old, signal.SIGKILL)
    killed = time.monotonic()
    stored_again = None
    for attempt in range(200):
        session = f"after-{attempt}"
        headers = server.ask(session, f"call {attempt} after the kill")
        if "x-agentmem-warning" not in headers and server.stored(session):
            stored_again = time.monotonic() - killed
            break
        assert "session store unavailable" in headers.get("x-agentmem-warning", ""), headers
        time.sleep(0.2)
    print(f"calls stored again {stored_again}s after kill -9 of the embedded redis")
    assert stored_again is not None and stored_again < 10, server.output()
    assert _redis_pid(data) != old
    assert server.process.poll() is None  # the same server process throughout
    assert server.stored("before") == ["written before the kill", "echo: written before the kill"]


def test_a_stream_still_running_at_shutdown_ends_with_an_error_event_and_is_stored(fleet):
    """SIGTERM while a stream waits on its provider: a second before uvicorn's grace runs out,
    the client gets an error event it can read (not a cut connection), and the reply so far is
    stored partial as cut by the shutdown (not as the client leaving)."""
    from agentmem.streaming import SERVER_SHUTDOWN

    server = fleet.start()
    session = "shutdown-stream"
    events: list[str] = []
    with httpx.Client(timeout=30) as http, http.stream(
            "POST", f"{server.url}/v1/chat/completions", headers={"X-Session-Id": session},
            json={"model": "openai/echo", "stream": True, "messages": [{"role": "user", "content":
                  "Tell me the harbour's whole history. [[stall:3,30000]]"}]}) as response:
        for line in response.iter_lines():
            if line.startswith("data:"):
                events.append(line)
                if len(events) == 1:
                    server.process.send_signal(signal.SIGTERM)
    assert len(events) >= 2, events
    error = json.loads(events[-1].removeprefix("data:"))["error"]
    assert error["type"] == "server_shutting_down"
    server.process.wait(timeout=30)

    again = fleet.start()
    turns = httpx.get(f"{again.url}/v1/sessions/{session}", timeout=30).json()["turns"]
    assert [t["role"] for t in turns] == ["user", "assistant"]
    assert turns[-1]["partial"] and turns[-1]["error"] == SERVER_SHUTDOWN
