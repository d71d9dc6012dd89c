"""`agentmem bench reliability`: the proxy under load, faults and noisy neighbours, measured.

Everything is real and on loopback: Debian's ``redis-server`` (append-only file on), the
echo upstream (``agentmem echo-upstream``), ``agentmem serve`` as a subprocess (a second,
standby replica on the same Redis for the crash scenario) and the ``openai`` client.

What the numbers mean:

- *acknowledged*: the client got a 2xx (for a stream: the stream ended with ``[DONE]``).
  An acknowledgement that carries ``X-Agentmem-Warning`` saying the call could not be stored
  (Redis down: passthrough) is counted apart, as ``acknowledged_unstored``: not storing it is
  the documented behaviour, so it is not a loss.
- *lost*: an acknowledged reply whose turn is not in the store (looked up by the report id
  the proxy returned, across all stored turns), or, at the end of a scenario, a message of the
  client's acknowledged history missing from the session's active history.
- *duplicated*: an acknowledged reply stored more than once, or a message present more than
  once in the active history although the client sent it once.
- *stray*: active turns the client never had acknowledged (a reply stored just before a
  crash, say). Reported, not counted as loss.

The active history is checked against what the client believes. A stateless client (the
OpenAI way: it sends the whole history) must find its own history in the store, exactly, in
order; every scenario ends with one checkpoint call per session so the last call of a fault
is covered too. Stateful clients send only new messages; their acknowledged (user, reply)
pairs must each be active exactly once, the reply right after its message. Clients that
share one session statelessly overwrite each other's branch by design; there the active
history must be exactly the history of the acknowledged call whose reply is the newest
active turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from agentmem.bench.overhead import _free_port, _stop, _text, _wait, _wait_embedder
from agentmem.bench.results import percentile

CLIENT_TIMEOUT_S = 300.0
STORE_WARNING = "could not be stored"  # the call's own commit failed
PASSTHROUGH_WARNING = "session store unavailable"  # the call never reached the store


@dataclass(frozen=True)
class Scale:
    """How big each scenario is; ``small`` is what CI runs, ``full`` issue 13's sizes."""

    sessions: int  # (a) concurrent sessions
    turns: int  # (a) turns per session
    shared_clients: int  # (b) clients on one session
    shared_calls: int  # (b) calls per client
    proxy_kills: int  # (c) kill -9 rounds
    crash_sessions: int  # (c) sessions in flight at each kill
    redis_kills: int  # (d) kills per appendfsync mode
    fault_rounds: int  # (e) rounds of each upstream fault
    soak_calls: int  # (f)
    paste_bytes: int  # (g)
    quiet_sessions: int  # (g)


SCALES = {
    "small": Scale(sessions=8, turns=3, shared_clients=10, shared_calls=2, proxy_kills=1,
                   crash_sessions=4, redis_kills=1, fault_rounds=1, soak_calls=80,
                   paste_bytes=10_000, quiet_sessions=3),
    "full": Scale(sessions=200, turns=20, shared_clients=10, shared_calls=10, proxy_kills=10,
                  crash_sessions=6, redis_kills=5, fault_rounds=10, soak_calls=2000,
                  paste_bytes=1_000_000, quiet_sessions=4),
}

SCENARIOS = {
    "a": "concurrent_sessions", "b": "one_session_many_clients", "c": "proxy_kill",
    "d": "redis_kill", "e": "upstream_faults", "f": "soak", "g": "noisy_neighbour",
}
LOSS_SCENARIOS = ("concurrent_sessions", "one_session_many_clients", "proxy_kill", "redis_kill",
                  "upstream_faults")


# -- processes ---------------------------------------------------------------------------------


def _serve_env(workdir: Path) -> dict[str, str]:
    return {**os.environ, "AGENTMEM_DATA_DIR": str(workdir / "data"),
            "LITELLM_LOCAL_MODEL_COST_MAP": "True", "HF_HUB_OFFLINE": "1"}


class ChildProcess:
    """A server this bench started: ``kill()`` is the crash under test, ``stop()`` the clean end."""

    process: subprocess.Popen | None = None

    def kill(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            _stop([self.process])


class RedisProcess(ChildProcess):
    """Debian's redis-server with an append-only file, restartable on its port and folder, so
    a ``kill -9`` and restart is what an operator's supervisor would do."""

    def __init__(self, folder: Path, fsync: str = "everysec") -> None:
        self.folder = folder
        self.port = _free_port()
        self.fsync = fsync
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> float:
        """Start and wait for PING; returns the seconds it took (AOF replay included)."""
        import redis

        started = time.perf_counter()
        self.folder.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir",
             str(self.folder), "--appendonly", "yes", "--appendfsync", self.fsync, "--save", "",
             "--daemonize", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(port=self.port, socket_timeout=1)
        deadline = time.time() + 30
        while time.time() < deadline:
            with contextlib.suppress(redis.RedisError):
                if client.ping():
                    client.close()
                    return time.perf_counter() - started
            time.sleep(0.02)
        raise RuntimeError(f"redis-server on port {self.port} did not start")


class ProxyProcess(ChildProcess):
    """``agentmem serve`` on the bench's Redis, its output kept in a log file for post-mortems."""

    def __init__(self, workdir: Path, name: str, config: Path, redis_url: str | None) -> None:
        """``redis_url`` None: the proxy's own embedded Redis, in ``workdir``/data."""
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / f"{name}.log"
        self.args = [sys.executable, "-m", "agentmem", "serve", "--port", str(self.port),
                     "--config", str(config), "--log-level", "warning"]
        if redis_url is not None:
            self.args += ["--redis-url", redis_url]
        self.env = _serve_env(workdir)
        self.data_dir = Path(self.env["AGENTMEM_DATA_DIR"])
        self.process: subprocess.Popen | None = None

    def launch(self) -> None:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(self.args, env=self.env, stdout=log,
                                            stderr=subprocess.STDOUT)

    def ready(self, embedder: bool = True) -> None:
        """Wait for /healthz, then for the embedder: calls measured while MiniLM loads are noise."""
        assert self.process is not None
        _wait(f"{self.url}/healthz", self.process, timeout=180)
        if embedder:
            _wait_embedder(f"{self.url}/healthz", timeout=180)

    def start(self, embedder: bool = True) -> float:
        """Launch; seconds until /healthz answers (and, with ``embedder``, MiniLM is loaded)."""
        started = time.perf_counter()
        self.launch()
        self.ready(embedder)
        return time.perf_counter() - started

    def rss_mb(self) -> float:
        """Resident memory now, from /proc (Linux); 0 when the process is not running."""
        pid = self.process.pid if self.process is not None else None
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return 0.0


class RssSampler:
    """Samples a proxy's RSS every 100 ms on a thread; ``peak()`` since the last ``reset()``."""

    def __init__(self, proxy: ProxyProcess) -> None:
        self.proxy = proxy
        self._peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self._peak = max(self._peak, self.proxy.rss_mb())

    def reset(self) -> None:
        self._peak = self.proxy.rss_mb()

    def peak(self) -> float:
        return round(max(self._peak, self.proxy.rss_mb()), 1)


# -- clients ----------------------------------------------------------------------------------


@dataclass
class Ack:
    """One acknowledged call: what the client sent and got, and the history it now believes."""

    session_id: str
    report_id: str
    user: str
    reply: str
    history: list[dict[str, Any]]
    unstored: bool  # the proxy said it could not store the call (passthrough)


@dataclass
class Tally:
    """Calls, errors by kind, latencies and acknowledgements of one scenario."""

    calls: int = 0
    errors: Counter = field(default_factory=Counter)
    latencies_ms: list[float] = field(default_factory=list)
    spans: list[tuple[float, float]] = field(default_factory=list)  # acknowledged calls' start, end
    acks: list[Ack] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {"calls": self.calls, "acknowledged": len(self.acks),
                "acknowledged_unstored": sum(a.unstored for a in self.acks),
                "errors": dict(sorted(self.errors.items())),
                "latency_ms": {"p50": round(percentile(self.latencies_ms, 0.5), 1),
                               "p99": round(percentile(self.latencies_ms, 0.99), 1)}}


def error_kind(error: BaseException) -> str:
    """``status 429``, or the exception's class name (a cut stream, a dropped connection)."""
    import openai

    if isinstance(error, openai.APIStatusError):
        return f"status {error.status_code}"
    return type(error).__name__


def _client(proxy: ProxyProcess, timeout: float = CLIENT_TIMEOUT_S) -> Any:
    import openai

    return openai.AsyncOpenAI(base_url=f"{proxy.url}/v1", api_key="sk-bench", max_retries=0,
                              timeout=timeout)


@dataclass
class Conversation:
    """One client's view of one session. Stateless: it sends its whole history every call;
    stateful: only the new message (X-Agentmem-Stateful)."""

    session_id: str
    stateful: bool = False
    name: str = ""  # tells apart clients that share a session
    history: list[dict[str, Any]] = field(default_factory=list)
    steps: int = 0
    last_error: str = ""

    def next_text(self, note: str = "") -> str:
        """Unique per call, so every stored turn can be traced to the call that sent it."""
        self.steps += 1
        return f"{_text(self.steps)} [{self.session_id}{self.name} #{self.steps}{note}]"

    async def turn(self, client: Any, tally: Tally, text: str, *, stream: bool = False,
                   extra_body: dict[str, Any] | None = None) -> Ack | None:
        """One call; on success the reply joins the history. Errors are tallied, not raised."""
        user = {"role": "user", "content": text}
        messages = [user] if self.stateful else [*self.history, user]
        headers = {"X-Session-Id": self.session_id}
        if self.stateful:
            headers["X-Agentmem-Stateful"] = "true"
        tally.calls += 1
        started = time.perf_counter()
        try:
            report_id, reply, warning = await _call(client, messages, headers, stream, extra_body)
        except Exception as error:  # noqa: BLE001 - every failure is data here
            self.last_error = error_kind(error)
            tally.errors[self.last_error] += 1
            return None
        tally.spans.append((started, time.perf_counter()))
        tally.latencies_ms.append((tally.spans[-1][1] - started) * 1000)
        self.history += [user, {"role": "assistant", "content": reply}]
        ack = Ack(self.session_id, report_id, text, reply, list(self.history),
                  unstored=STORE_WARNING in warning or PASSTHROUGH_WARNING in warning)
        tally.acks.append(ack)
        return ack


async def _call(client: Any, messages: list[dict[str, Any]], headers: dict[str, str], stream: bool,
                extra_body: dict[str, Any] | None) -> tuple[str, str, str]:
    """(report id, reply text, warning header) of one chat completion, plain or streamed."""
    raw = await client.chat.completions.with_raw_response.create(
        model="echo", messages=messages, stream=stream, extra_headers=headers,
        extra_body=extra_body)
    warning = raw.headers.get("x-agentmem-warning", "")
    report_id = raw.headers.get("x-agentmem-report", "")
    if not stream:
        return report_id, raw.parse().choices[0].message.content or "", warning
    pieces = [chunk.choices[0].delta.content or "" async for chunk in raw.parse() if chunk.choices]
    return report_id, "".join(pieces), warning


# -- auditing the store ---------------------------------------------------------------------


@dataclass
class Audit:
    lost: int = 0
    duplicated: int = 0
    stray: int = 0
    out_of_order: int = 0

    def add(self, other: Audit) -> None:
        self.lost += other.lost
        self.duplicated += other.duplicated
        self.stray += other.stray
        self.out_of_order += other.out_of_order

    def as_dict(self) -> dict[str, int]:
        return {"lost": self.lost, "duplicated": self.duplicated, "stray": self.stray,
                "out_of_order": self.out_of_order}


async def stored_turns(http: httpx.AsyncClient, session_id: str) -> list[dict[str, Any]]:
    """Every stored turn of a session (superseded ones too, each marked ``active``)."""
    response = await http.get(f"/v1/sessions/{session_id}", params={"include_superseded": True})
    if response.status_code == 404:
        return []
    response.raise_for_status()
    return response.json()["turns"]


def _content(turn: dict[str, Any]) -> str:
    return str(turn["message"].get("content") or "")


def audit_replies(acks: list[Ack], turns: list[dict[str, Any]]) -> Audit:
    """Each acknowledged, stored reply must be in the store exactly once, by its report id."""
    by_report = Counter(t.get("report_id") for t in turns if t.get("report_id"))
    audit = Audit()
    for ack in acks:
        if ack.unstored:
            continue
        found = by_report[ack.report_id]
        audit.lost += found == 0
        audit.duplicated += max(0, found - 1)
    return audit


def audit_history(expected: list[dict[str, Any]], turns: list[dict[str, Any]]) -> Audit:
    """The active history must be the expected one: every message once, in order."""
    active = [_content(t) for t in turns if t.get("active", True)]
    wanted = [str(m.get("content") or "") for m in expected]
    counts, wanted_set = Counter(active), set(wanted)
    return Audit(lost=sum(1 for w in wanted if counts[w] == 0),
                 duplicated=sum(c - 1 for text, c in counts.items() if text in wanted_set and c > 1),
                 stray=sum(1 for text in active if text not in wanted_set),
                 out_of_order=int([a for a in active if a in wanted_set] != wanted))


def audit_pairs(acks: list[Ack], turns: list[dict[str, Any]]) -> Audit:
    """Stateful clients: each acknowledged (message, reply) active once, the reply right after."""
    active = [_content(t) for t in turns if t.get("active", True)]
    counts = Counter(active)
    audit = Audit()
    known: set[str] = set()
    for ack in acks:
        known.update((ack.user, ack.reply))
        if ack.unstored:
            continue
        audit.lost += (counts[ack.user] == 0) + (counts[ack.reply] == 0)
        audit.duplicated += max(0, counts[ack.user] - 1) + max(0, counts[ack.reply] - 1)
        where = active.index(ack.user) if counts[ack.user] else -1
        audit.out_of_order += where >= 0 and active[where + 1: where + 2] != [ack.reply]
    audit.stray = sum(1 for text in active if text not in known)
    return audit


def audit_last_writer(acks: list[Ack], turns: list[dict[str, Any]]) -> Audit:
    """Stateless clients sharing a session: the newest active reply names the call whose
    whole history must be the active history."""
    active = [t for t in turns if t.get("active", True)]
    by_report = {ack.report_id: ack for ack in acks}
    last = next((by_report[t["report_id"]] for t in reversed(active)
                 if t.get("report_id") in by_report), None)
    if last is None:
        return Audit(lost=sum(not a.unstored for a in acks), stray=len(active))
    return audit_history(last.history, turns)


async def audit_conversations(http: httpx.AsyncClient, conversations: list[Conversation],
                              acks: list[Ack]) -> Audit:
    """Replies by report id, and each session's active history against its client's view."""
    by_session: dict[str, list[Ack]] = {}
    for conversation in conversations:
        by_session.setdefault(conversation.session_id, [])
    for ack in acks:
        by_session.setdefault(ack.session_id, []).append(ack)
    total = Audit()
    for session_id, session_acks in by_session.items():
        turns = await stored_turns(http, session_id)
        total.add(audit_replies(session_acks, turns))
        owners = [c for c in conversations if c.session_id == session_id]
        if any(c.stateful for c in owners):
            total.add(audit_pairs(session_acks, turns))
        elif len(owners) > 1:
            total.add(audit_last_writer(session_acks, turns))
        else:
            total.add(audit_history(owners[0].history, turns))
    return total


async def checkpoint(client: Any, conversations: list[Conversation], tally: Tally) -> None:
    """One more call per session, retried until acknowledged and stored (bounded), so the
    audit also covers the calls made while the store was away."""
    async def settle(conversation: Conversation) -> None:
        for _ in range(20):
            ack = await conversation.turn(client, tally, conversation.next_text(" checkpoint"))
            if ack is not None and not ack.unstored:
                return
            await asyncio.sleep(0.5)

    await asyncio.gather(*(settle(c) for c in conversations))


# -- scenarios ---------------------------------------------------------------------------------


@dataclass
class Bench:
    """The running processes and the measurements so far."""

    workdir: Path
    scale: Scale
    redis: RedisProcess
    proxy: ProxyProcess
    standby: ProxyProcess
    sampler: RssSampler
    rng: random.Random

    def client(self, timeout: float = CLIENT_TIMEOUT_S) -> Any:
        return _client(self.proxy, timeout)

    def http(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.proxy.url, timeout=60)

    async def finish(self, tally: Tally, conversations: list[Conversation],
                     started: float, **extra: Any) -> dict[str, Any]:
        """Audit the store, then the scenario's figures as one JSON object."""
        async with self.http() as http:
            audit = await audit_conversations(http, conversations, tally.acks)
        return {**tally.summary(), **audit.as_dict(), "peak_rss_mb": self.sampler.peak(),
                "seconds": round(time.perf_counter() - started, 1), **extra}


def _session(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def concurrent_sessions(bench: Bench) -> dict[str, Any]:
    """(a) N sessions at once, M sequential turns each."""
    started, tally = time.perf_counter(), Tally()
    conversations = [Conversation(_session("a")) for _ in range(bench.scale.sessions)]
    await _turns_each(bench.client(), tally, conversations, bench.scale.turns)
    return await bench.finish(tally, conversations, started,
                              sessions=len(conversations), turns=bench.scale.turns)


async def one_session_many_clients(bench: Bench) -> dict[str, Any]:
    """(b) Many clients on one session: stateful (each sends only its new message) and
    stateless (each resends its own history, so each call supersedes the previous branch)."""
    started, result = time.perf_counter(), {}
    for mode, stateful in (("stateful", True), ("stateless", False)):
        tally, session = Tally(), _session(f"b-{mode}")
        conversations = [Conversation(session, stateful=stateful, name=f"/{i}")
                         for i in range(bench.scale.shared_clients)]
        await _turns_each(bench.client(), tally, conversations, bench.scale.shared_calls)
        result[mode] = await bench.finish(tally, conversations, started)
    return {**result, **_sum_modes(result)}


async def _turns_each(client: Any, tally: Tally, conversations: list[Conversation], turns: int
                      ) -> None:
    """Every conversation at once, each making ``turns`` calls one after the other."""
    async def run(conversation: Conversation) -> None:
        for _ in range(turns):
            await conversation.turn(client, tally, conversation.next_text())

    await asyncio.gather(*(run(c) for c in conversations))


def _sum_modes(parts: dict[str, dict[str, Any]]) -> dict[str, int]:
    """A scenario with sub-modes reports their loss figures summed at its top level too."""
    keys = ("calls", "lost", "duplicated", "stray", "out_of_order")
    return {key: sum(int(part[key]) for part in parts.values()) for key in keys}


async def proxy_kill(bench: Bench) -> dict[str, Any]:
    """(c) kill -9 of the proxy at random points of plain and streamed calls, then restart.

    Right after each kill the proxy is restarted (as a supervisor would), and meanwhile
    every session whose call was cut is retried on the standby replica (same Redis): that
    wait measures how long the dead proxy's lock held the session. Once the restarted proxy
    answers, every session makes its next call there; that wait, from the kill, is how long
    a session was unusable through its own proxy (the restart's start-up included).
    """
    started, tally = time.perf_counter(), Tally()
    conversations = [Conversation(_session("c")) for _ in range(bench.scale.crash_sessions)]
    standby = _client(bench.standby)
    via_standby, via_restart, restarts = [], [], []
    for _ in range(bench.scale.proxy_kills):
        killed_at, cut = await _run_until_killed(bench, conversations, tally)
        restart = asyncio.create_task(asyncio.to_thread(bench.proxy.start, False))
        waits = await asyncio.gather(*(_retry_timed(c, standby, tally, killed_at) for c in cut))
        via_standby += [w for w in waits if w is not None]
        restarts.append(await restart)
        client = bench.client()
        waits = await asyncio.gather(*(_retry_timed(c, client, tally, killed_at) for c in conversations))
        via_restart += [w for w in waits if w is not None]
    await checkpoint(bench.client(), conversations, tally)
    return await bench.finish(tally, conversations, started, kills=bench.scale.proxy_kills,
                              restart_s_max=round(max(restarts, default=0), 1),
                              usable_via_standby_s_max=round(max(via_standby, default=0), 1),
                              usable_via_restart_s_max=round(max(via_restart, default=0), 1),
                              cut_calls=len(via_standby))


async def _run_until_killed(bench: Bench, conversations: list[Conversation], tally: Tally
                            ) -> tuple[float, list[Conversation]]:
    """Calls (every other session streams; random upstream delays) until a kill at a random
    moment; returns the kill time and the sessions whose call it cut."""
    client, killed = bench.client(), asyncio.Event()
    cut: list[Conversation] = []

    async def run(index: int, conversation: Conversation) -> None:
        while not killed.is_set():
            delay = bench.rng.choice((0, 0, 50, 200, 400))
            text = conversation.next_text(f" [[slow:{delay}]]" if delay else "")
            ack = await conversation.turn(client, tally, text, stream=index % 2 == 1)
            if ack is None and killed.is_set():
                cut.append(conversation)

    async def killer() -> float:
        await asyncio.sleep(bench.rng.uniform(0.5, 2.5))
        bench.proxy.kill()
        killed.set()
        return time.perf_counter()

    runners = [asyncio.create_task(run(i, c)) for i, c in enumerate(conversations)]
    killed_at = await killer()
    await asyncio.gather(*runners)
    return killed_at, cut


async def _retry_timed(conversation: Conversation, client: Any, tally: Tally, since: float,
                       deadline_s: float = 180) -> float | None:
    """Retry one call until it is acknowledged; seconds from ``since`` to that moment."""
    limit = time.perf_counter() + deadline_s
    while time.perf_counter() < limit:
        if await conversation.turn(client, tally, conversation.next_text(" retry")) is not None:
            return time.perf_counter() - since
        await asyncio.sleep(0.2)
    return None


async def redis_kill(bench: Bench) -> dict[str, Any]:
    """(d) kill -9 of redis-server mid-traffic and a restart from its append-only file, with
    appendfsync everysec and always. Calls during the outage pass through, unstored."""
    started, parts = time.perf_counter(), {}
    for fsync in ("everysec", "always"):
        tally, conversations = Tally(), [Conversation(_session(f"d-{fsync}")) for _ in range(4)]
        bench.redis.fsync = fsync
        bench.redis.stop()
        bench.redis.start()
        recovered = []
        for _ in range(bench.scale.redis_kills):
            recovered.append(await _traffic_while(bench, conversations, tally, _kill_redis))
        await checkpoint(bench.client(), conversations, tally)
        parts[fsync] = await bench.finish(tally, conversations, started,
                                          healthy_again_s_max=round(max(recovered), 2))
    parts["embedded"] = await _embedded_redis_kill(bench)
    return {**parts, **_sum_modes(parts)}


async def _embedded_redis_kill(bench: Bench) -> dict[str, Any]:
    """A proxy on its own embedded Redis (the default set-up): kill -9 of that redis-server
    mid-traffic; the proxy's watch restarts it from its append-only file by itself."""
    started, tally = time.perf_counter(), Tally()
    folder = bench.workdir / "embedded"
    folder.mkdir(exist_ok=True)
    proxy = ProxyProcess(folder, "proxy", bench.workdir / "config.yaml", None)
    proxy.start()
    try:
        local = dataclasses.replace(bench, proxy=proxy)
        conversations = [Conversation(_session("d-embedded")) for _ in range(4)]
        recovered = [await _traffic_while(local, conversations, tally, _kill_embedded)
                     for _ in range(bench.scale.redis_kills)]
        await checkpoint(local.client(), conversations, tally)
        return await local.finish(tally, conversations, started,
                                  healthy_again_s_max=round(max(recovered), 2))
    finally:
        proxy.stop()


async def _kill_embedded(bench: Bench) -> float:
    """kill -9 of the proxy's embedded redis-server; seconds until /healthz says ok again
    (nobody restarts it but the proxy's own watch)."""
    pid = int((bench.proxy.data_dir / "redis.pid").read_text().strip())
    os.kill(pid, signal.SIGKILL)
    return await _healthy_again(bench, time.perf_counter())


async def _kill_redis(bench: Bench) -> float:
    """kill -9, restart at once; seconds until the proxy's /healthz says ok again."""
    bench.redis.kill()
    killed_at = time.perf_counter()
    await asyncio.to_thread(bench.redis.start)
    return await _healthy_again(bench, killed_at)


async def _healthy_again(bench: Bench, since: float, limit_s: float = 120) -> float:
    """Seconds from ``since`` until the proxy's /healthz says ok."""
    async with bench.http() as http:
        while (await http.get("/healthz")).json()["status"] != "ok":
            if time.perf_counter() - since > limit_s:
                raise RuntimeError(f"the proxy's Redis was not back within {limit_s:g} s")
            await asyncio.sleep(0.05)
    return time.perf_counter() - since


async def _traffic_while(bench: Bench, conversations: list[Conversation], tally: Tally,
                         fault: Callable[[Bench], Awaitable[float]]) -> float:
    """Sequential calls in every session while ``fault`` runs after a random pause; returns
    what the fault measured. Traffic goes on one second after the fault ends."""
    client, done = bench.client(), asyncio.Event()

    async def run(conversation: Conversation) -> None:
        while not done.is_set():
            await conversation.turn(client, tally, conversation.next_text())

    runners = [asyncio.create_task(run(c)) for c in conversations]
    await asyncio.sleep(bench.rng.uniform(0.3, 1.5))
    measured = await fault(bench)
    await asyncio.sleep(1)
    done.set()
    await asyncio.gather(*runners)
    return measured


FAULTS = {
    # name: (directive, stream, extra body, the status the client should see)
    "status_500": ("[[status:500]]", False, None, "status 500"),
    "status_429": ("[[status:429]]", False, None, "status 429"),
    "upstream_timeout": ("[[slow:3000]]", False, {"timeout": 1}, "status 504"),
    "cut_stream": ("[[cut:3]]", True, None, "APIError"),
    "stalled_stream": ("[[stall:3,3000]]", True, {"timeout": 1}, "APIError"),
    "short_stall": ("[[stall:3,300]]", True, None, "acknowledged"),
    "retry_after_429": ("[[status:429]] [[retry_after:2]]", False, None, "status 429"),
}


async def upstream_faults(bench: Bench) -> dict[str, Any]:
    """(e) The provider fails: 500, 429 (also with Retry-After), a timeout (the request's own
    ``timeout``), a stream cut after three chunks, a stream that stalls past the timeout (and
    one that stalls briefly, which must be relayed untouched). Each fault sits between good
    calls in one stateless session; the client drops the failed message and goes on, as an
    application would."""
    started, tally, client = time.perf_counter(), Tally(), bench.client()
    conversations = {name: Conversation(_session(f"e-{name}")) for name in FAULTS}
    seen: dict[str, Counter] = {name: Counter() for name in FAULTS}

    async def run(name: str, conversation: Conversation) -> None:
        directive, stream, extra, _ = FAULTS[name]
        for _ in range(bench.scale.fault_rounds):
            await conversation.turn(client, tally, conversation.next_text())
            ack = await conversation.turn(client, tally, conversation.next_text(f" {directive}"),
                                          stream=stream, extra_body=extra)
            seen[name][conversation.last_error if ack is None else "acknowledged"] += 1

    await asyncio.gather(*(run(name, c) for name, c in conversations.items()))
    await checkpoint(client, list(conversations.values()), tally)
    unexpected = {name: dict(seen[name]) for name, (*_, want) in FAULTS.items()
                  if set(seen[name]) != {want}}
    return await bench.finish(tally, list(conversations.values()), started,
                              outcomes={name: dict(c) for name, c in seen.items()},
                              unexpected_outcomes=len(unexpected))


async def soak(bench: Bench) -> dict[str, Any]:
    """(f) Many calls in rotating sessions (20 turns each, 8 at a time): RSS growth after a
    warm-up tenth of the calls."""
    started, tally, client = time.perf_counter(), Tally(), bench.client()
    total, warmup = bench.scale.soak_calls, max(1, bench.scale.soak_calls // 10)
    conversations: list[Conversation] = []
    rss = {"after_warmup": 0.0}

    async def worker() -> None:
        conversation = Conversation(_session("f"))
        conversations.append(conversation)
        while tally.calls < total:
            if conversation.steps >= 20:
                conversation = Conversation(_session("f"))
                conversations.append(conversation)
            await conversation.turn(client, tally, conversation.next_text())
            if tally.calls >= warmup and not rss["after_warmup"]:
                rss["after_warmup"] = bench.proxy.rss_mb()

    await asyncio.gather(*(worker() for _ in range(8)))
    end = bench.proxy.rss_mb()
    return await bench.finish(tally, conversations, started,
                              rss_mb_after_warmup=round(rss["after_warmup"], 1),
                              rss_mb_end=round(end, 1),
                              rss_growth_mb=round(end - rss["after_warmup"], 1))


def paste_text(size: int) -> str:
    """About ``size`` bytes of varied sentences, as a pasted log or document would be."""
    parts, length, i = [], 0, 0
    while length < size:
        parts.append(_text(i, 3))
        length += len(parts[-1]) + 1
        i += 1
    return " ".join(parts)


async def noisy_neighbour(bench: Bench) -> dict[str, Any]:
    """(g) Quiet sessions' latency alone, then while one session's call carries a big paste.
    A quiet call counts as *during* when its span overlaps the paste call's (a call that began
    before the paste and waited for it is the neighbour's victim too)."""
    started, client, tally = time.perf_counter(), bench.client(), Tally()
    conversations = [Conversation(_session("g")) for _ in range(bench.scale.quiet_sessions)]
    paste_done = asyncio.Event()

    async def run(conversation: Conversation) -> None:
        while not paste_done.is_set():
            await conversation.turn(client, tally, conversation.next_text())

    runners = [asyncio.create_task(run(c)) for c in conversations]
    await asyncio.sleep(4)
    paste, paste_tally = Conversation(_session("g-paste")), Tally()
    await paste.turn(client, paste_tally, paste_text(bench.scale.paste_bytes) + " [end of paste]")
    paste_done.set()
    await asyncio.gather(*runners)
    window = paste_tally.spans[0] if paste_tally.spans else (started, time.perf_counter())
    quiet = [(b - a) * 1000 for a, b in tally.spans if b <= window[0]]
    during = [(b - a) * 1000 for a, b in tally.spans if a < window[1] and b > window[0]]
    quiet_p99, during_p99 = percentile(quiet, 0.99), percentile(during, 0.99)
    paste_figures = {**paste_tally.summary(), "bytes": bench.scale.paste_bytes,
                     "ms": round((window[1] - window[0]) * 1000, 1)}
    tally.calls += paste_tally.calls  # the paste is audited with the rest
    tally.acks += paste_tally.acks
    return await bench.finish(tally, [*conversations, paste], started, quiet_calls=len(quiet),
                              quiet_p99_ms=round(quiet_p99, 1), during_calls=len(during),
                              during_p99_ms=round(during_p99, 1),
                              p99_ratio=round(during_p99 / quiet_p99, 2) if quiet and during else None,
                              paste=paste_figures)


RUNNERS: dict[str, Callable[[Bench], Awaitable[dict[str, Any]]]] = {
    "concurrent_sessions": concurrent_sessions, "one_session_many_clients": one_session_many_clients,
    "proxy_kill": proxy_kill, "redis_kill": redis_kill, "upstream_faults": upstream_faults,
    "soak": soak, "noisy_neighbour": noisy_neighbour,
}


# -- the whole run -----------------------------------------------------------------------------


def write_config(workdir: Path, upstream: str) -> Path:
    """A settings file whose one route, `echo`, goes to the echo upstream at ``upstream`` (/v1)."""
    config = workdir / "config.yaml"
    config.write_text("models:\n  - name: echo\n    litellm_params:\n"
                      f"      model: openai/echo\n      api_base: {upstream}\n      api_key: sk-bench\n")
    return config


def run_reliability(*, scale: str = "small", scenarios: tuple[str, ...] = tuple(SCENARIOS),
                    seed: int = 13) -> dict[str, Any]:
    """Start Redis, the echo upstream and two proxies; run the chosen scenarios in order."""
    chosen = [SCENARIOS[key] for key in scenarios]
    workdir = Path(tempfile.mkdtemp(prefix="agentmem-reliability-"))
    upstream_port = _free_port()
    upstream = subprocess.Popen([sys.executable, "-m", "agentmem", "echo-upstream", "--port",
                                 str(upstream_port)], env=_serve_env(workdir),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    redis = RedisProcess(workdir / "redis")
    config = write_config(workdir, f"http://127.0.0.1:{upstream_port}/v1")
    proxy = ProxyProcess(workdir, "proxy", config, redis.url)
    standby = ProxyProcess(workdir, "standby", config, redis.url)
    try:
        redis.start()
        _wait(f"http://127.0.0.1:{upstream_port}/v1/models", upstream)
        started = time.perf_counter()
        for each in (proxy, standby):
            each.launch()
        for each in (proxy, standby):
            each.ready()
        start_s = time.perf_counter() - started
        with RssSampler(proxy) as sampler:
            bench = Bench(workdir, SCALES[scale], redis, proxy, standby, sampler, random.Random(seed))
            results = asyncio.run(_run_all(bench, chosen))
        return {"scale": scale, "proxy_start_s": round(start_s, 1), "workdir": str(workdir),
                "scenarios": results, "totals": _totals(results)}
    finally:
        for process in (standby, proxy):
            process.stop()
        _stop([upstream])
        redis.stop()
        shutil.rmtree(redis.folder, ignore_errors=True)  # the logs stay, for post-mortems


async def _run_all(bench: Bench, chosen: list[str]) -> dict[str, Any]:
    results = {}
    for name in chosen:
        bench.sampler.reset()
        results[name] = await RUNNERS[name](bench)
    return results


def _totals(results: dict[str, Any]) -> dict[str, int]:
    """Loss figures summed over the scenarios that are about loss."""
    about_loss = [results[name] for name in LOSS_SCENARIOS if name in results]
    return {key: sum(int(r.get(key, 0)) for r in about_loss)
            for key in ("calls", "lost", "duplicated", "stray", "out_of_order")}
