"""`agentmem bench overhead`: what the proxy adds to a call, side by side with LiteLLM's proxy.

Processes on loopback, as in production: the echo upstream, ``agentmem serve`` on a fresh
embedded Redis, LiteLLM's own proxy (``litellm --config``, a master key, no callbacks, the same
upstream), and this process as the client. Every measured step sends the same messages to each
target in a rotating order: the upstream itself with a raw ``httpx`` POST (the floor), the
upstream through ``litellm.acompletion`` (litellm's client cost), LiteLLM's proxy, and agentmem
under each preset. Proxies are called with the same raw ``httpx`` POST as the floor, so a
target's overhead at a percentile is its latency minus the floor's at that percentile.
Streaming is measured the same way as time to the first body byte (``ttfb_ms_p50``).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from agentmem.bench.results import percentile

SENTENCES = [
    "The deployment failed at the database migration step.",
    "Our customer in Lyon reported the same timeout twice this week.",
    "Please keep the answer short and mention the ticket number.",
    "The invoice was sent on Monday and the payment is still pending.",
    "I prefer a vegetarian restaurant close to the station.",
    "The test suite takes eleven minutes on the CI runners.",
    "Last time we rolled back by restoring the snapshot from Sunday.",
    "The meeting moved to Thursday afternoon because of the holiday.",
]


def _text(i: int, n: int = 2) -> str:
    return " ".join(SENTENCES[(i + k) % len(SENTENCES)] for k in range(n)) + f" (note {i})"


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "agentmem", *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _wait(url: str, process: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{url}: server exited with {process.returncode}")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not start")


def _wait_embedder(url: str, timeout: float = 120) -> None:
    """The proxy loads MiniLM in the background at start; measuring during that load is noise."""
    deadline = time.time() + timeout
    while time.time() < deadline and httpx.get(url, timeout=5).json().get("embedder") != "loaded":
        time.sleep(0.2)


def _start_litellm_proxy(workdir: Path, upstream: str, env: dict[str, str]
                         ) -> tuple[subprocess.Popen, str, str] | None:
    """LiteLLM's proxy as people run it (a master key, no callbacks, no database), or None when
    the ``litellm`` command is not installed next to this Python."""
    command = Path(sys.executable).with_name("litellm")
    if not command.exists():
        return None
    key, port = f"sk-bench-{os.getpid()}", _free_port()
    config = workdir / "litellm.yaml"
    config.write_text(
        "model_list:\n  - model_name: echo\n    litellm_params:\n      model: openai/echo\n"
        f"      api_base: {upstream}\n      api_key: sk-bench\n"
        "router_settings:\n  num_retries: 0\n"
        "general_settings:\n  master_key: os.environ/LITELLM_MASTER_KEY\n")
    litellm_env = {**env, "LITELLM_MASTER_KEY": key, "LITELLM_TELEMETRY": "False",
                   "DISABLE_SCHEMA_UPDATE": "True"}
    for name in ("DATABASE_URL",):
        litellm_env.pop(name, None)
    process = subprocess.Popen([str(command), "--config", str(config), "--port", str(port),
                                "--host", "127.0.0.1"], env=litellm_env, cwd=workdir,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return process, f"http://127.0.0.1:{port}", key


def run_overhead(*, calls: int = 200, turn_calls: int = 30,
                 sizes: tuple[int, ...] = (10, 100, 1000),
                 policies: tuple[str, ...] = ("off", "default"),
                 stream_calls: int = 50, litellm_proxy: bool = True) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="agentmem-bench-"))
    upstream_port, proxy_port = _free_port(), _free_port()
    upstream = f"http://127.0.0.1:{upstream_port}/v1"
    config = workdir / "config.yaml"
    config.write_text(
        "models:\n  - name: echo\n    litellm_params:\n"
        f"      model: openai/echo\n      api_base: {upstream}\n      api_key: sk-bench\n")
    env = {**os.environ, "AGENTMEM_DATA_DIR": str(workdir / "data"),
           "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    processes = [_start(["echo-upstream", "--port", str(upstream_port)], env),
                 _start(["serve", "--port", str(proxy_port), "--config", str(config),
                         "--log-level", "warning"], env)]
    peer = _start_litellm_proxy(workdir, upstream, env) if litellm_proxy else None
    if peer is not None:
        processes.append(peer[0])
    try:
        _wait(f"{upstream}/models", processes[0])
        _wait(f"http://127.0.0.1:{proxy_port}/healthz", processes[1])
        _wait_embedder(f"http://127.0.0.1:{proxy_port}/healthz")
        targets = [Target("floor", f"{upstream}/chat/completions", {})]
        if peer is not None:
            _wait(f"{peer[1]}/health/liveliness", peer[0], timeout=180)
            targets.append(Target("litellm_proxy", f"{peer[1]}/v1/chat/completions",
                                  {"Authorization": f"Bearer {peer[2]}"}))
        agentmem = f"http://127.0.0.1:{proxy_port}/v1/chat/completions"
        targets += [Target(name, agentmem, {"X-Agentmem-Policy": name}, session=True)
                    for name in policies]
        pid = processes[1].pid
        return asyncio.run(_measure(upstream, targets, calls, turn_calls, sizes, stream_calls,
                                    lambda: peak_rss_mb(pid)))
    finally:
        _stop(processes)


@dataclass
class Target:
    """One place a chat request can go: its URL, its headers, whether it keeps sessions."""

    name: str
    url: str
    headers: dict[str, str]
    session: bool = False

    def headers_for(self, conversation: str) -> dict[str, str]:
        if not self.session:
            return self.headers
        return {**self.headers, "X-Session-Id": f"{self.name}-{conversation}"}


def _stop(processes: list[subprocess.Popen], grace: float = 30) -> None:
    """Terminate, and kill what has not exited after ``grace`` seconds: a slow shutdown must
    not throw away the measurements."""
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident memory so far (Linux ``VmHWM``); 0 where unknown."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return 0.0


async def _measure(upstream: str, targets: list[Target], calls: int, turn_calls: int,
                   sizes: tuple[int, ...], stream_calls: int,
                   peak_rss: Callable[[], float] = lambda: 0.0) -> dict[str, Any]:
    from agentmem.upstream import litellm

    async with httpx.AsyncClient(timeout=120) as http:

        async def post(target: Target, messages: list[dict], conversation: str) -> tuple[float, dict]:
            started = time.perf_counter()
            response = await http.post(target.url, headers=target.headers_for(conversation),
                                       json={"model": "echo", "messages": messages})
            elapsed = (time.perf_counter() - started) * 1000
            response.raise_for_status()
            return elapsed, response.json()

        async def direct(messages: list[dict]) -> float:
            started = time.perf_counter()
            await litellm.acompletion(model="openai/echo", messages=messages, api_base=upstream,
                                      api_key="sk-bench")
            return (time.perf_counter() - started) * 1000

        async def first_byte(target: Target, messages: list[dict], conversation: str) -> float:
            started = time.perf_counter()
            async with http.stream("POST", target.url, headers=target.headers_for(conversation),
                                   json={"model": "echo", "messages": messages,
                                         "stream": True}) as response:
                response.raise_for_status()
                elapsed = None
                async for _ in response.aiter_raw():
                    if elapsed is None:
                        elapsed = (time.perf_counter() - started) * 1000
            return elapsed if elapsed is not None else (time.perf_counter() - started) * 1000

        async def step(messages: list[dict], conversation: str, turn: int,
                       samples: dict[str, list[float]]) -> dict:
            """Every target once, in an order that rotates with the step; the reply appended
            to the conversation is the last session-keeping target's (agentmem's). After an
            agentmem call the bench waits for that call's after-reply work, so no target is
            measured while another preset's background work runs (that work is reported on
            its own: the sweep's after-reply phases)."""
            order = [*targets, None]  # None: litellm straight to the upstream
            shift = turn % len(order)
            reply: dict | None = None
            for target in order[shift:] + order[:shift]:
                if target is None:
                    samples["direct"].append(await direct(messages))
                    continue
                elapsed, body = await post(target, messages, conversation)
                samples[target.name].append(elapsed)
                if target.session:
                    await _settled(target, poll=0.002)
                if target.session or reply is None:
                    reply = body["choices"][0]["message"]
            assert reply is not None
            return {"role": "assistant", "content": reply.get("content") or ""}

        # Warm every path (connections, litellm's client, agentmem's models), then settle.
        warm = _empty_samples(targets)
        for i in range(20):
            await step([{"role": "user", "content": _text(i)}], f"warm-{i}", i, warm)
        await asyncio.sleep(2)

        samples = _empty_samples(targets)
        for conversation in range(max(1, calls // 10)):
            history: list[dict] = [{"role": "system", "content": "You are a support assistant."}]
            for turn in range(10):
                history.append({"role": "user", "content": _text(conversation * 10 + turn)})
                history.append(await step(history, str(conversation), turn, samples))

        ttfb: dict[str, list[float]] = {t.name: [] for t in targets}
        for i in range(stream_calls):
            messages = [{"role": "user", "content": _text(i, 3)}]
            shift = i % len(targets)
            for target in targets[shift:] + targets[:shift]:
                ttfb[target.name].append(await first_byte(target, messages, f"stream-{i}"))
                if target.session:
                    await _settled(target, poll=0.002)

        result = _side_by_side(samples, ttfb)
        sweep = next((t for t in reversed(targets) if t.session), None)
        result["by_turns"] = ({} if sweep is None else
                              await _by_turns(post, direct, sweep, sizes, turn_calls, peak_rss))
        return result


def _empty_samples(targets: list[Target]) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {target.name: [] for target in targets}
    samples["direct"] = []
    return samples


def _side_by_side(samples: dict[str, list[float]], ttfb: dict[str, list[float]]) -> dict[str, Any]:
    """Per target: latency p50/p99, overhead over the floor, streaming first byte; and the
    ratios of agentmem's overhead to LiteLLM's proxy's."""
    floor = samples["floor"]
    out: dict[str, Any] = {}
    for name, values in samples.items():
        entry = {"ms_p50": round(percentile(values, 0.5), 3),
                 "ms_p99": round(percentile(values, 0.99), 3), "n": len(values)}
        if name != "floor":
            entry["overhead_ms_p50"] = round(percentile(values, 0.5) - percentile(floor, 0.5), 3)
            entry["overhead_ms_p99"] = round(percentile(values, 0.99) - percentile(floor, 0.99), 3)
        if ttfb.get(name):
            entry["ttfb_ms_p50"] = round(percentile(ttfb[name], 0.5), 3)
        out[name] = entry
    peer = out.get("litellm_proxy", {}).get("overhead_ms_p50")
    if peer:
        out["ratios"] = {f"{name}_vs_litellm_proxy": round(entry["overhead_ms_p50"] / peer, 3)
                         for name, entry in out.items()
                         if name not in {"floor", "direct", "litellm_proxy"}}
    return out


async def _by_turns(post, direct, target: Target, sizes: tuple[int, ...],
                    turn_calls: int, peak_rss: Callable[[], float]) -> dict[str, Any]:
    """Long sessions through one agentmem preset: the proxy's latency minus litellm's direct
    call with the same messages (a longer history costs the client and upstream too); the
    seeding call's time per turn it brought (ingest: hashing, counting, storing); the
    proxy's peak RSS after each size.

    Calls are measured twice. **Settled** (``overhead_ms_*``): each call, the proxy's and the
    direct one, starts when the proxy has no after-reply work left, as in production, where
    the model's reply takes longer than the previous turn's after-reply work; this is the
    call path's own cost. **Back to back** (``back_to_back_overhead_ms_*``): each call is sent
    as soon as the previous reply is in, so the call path shares the CPU with the previous
    call's after-reply work (an instant upstream: the worst case on a 2-core machine)."""
    out: dict[str, Any] = {}
    for size in sizes:
        history = [{"role": "system", "content": "You are a support assistant."}]
        for i in range(size - 1):
            history.append({"role": "user" if i % 2 == 0 else "assistant", "content": _text(i)})
        if history[-1]["role"] == "user":
            history.append({"role": "assistant", "content": _text(size)})
        history.append({"role": "user", "content": "Seed the session."})
        conversation = f"turns-{size}"
        await _settled(target)  # the previous size's calls leave after-reply work: not this seed's
        seed_ms, body = await post(target, history, conversation)  # ingest of the whole history
        settle_ms = await _settled(target)  # its after-reply work: embeddings, detection
        history.append({"role": "assistant", "content": body["choices"][0]["message"]["content"]})
        # Every size asks new questions (``_text`` numbers its notes): a question asked before
        # would find its embedding cached, which real traffic does not.
        first = 1_000_000 * (len(out) + 1)
        settled = await _paired_calls(post, direct, target, history, conversation, turn_calls,
                                      settle=True, first=first)
        busy = await _paired_calls(post, direct, target, history, conversation, turn_calls,
                                   settle=False, first=first + 100_000)
        after_reply, phases = await _after_reply_per_turn(post, target, history, conversation,
                                                          first=first + 200_000)
        out[str(size)] = {
            **_overheads("", *settled),
            **_overheads("back_to_back_", *busy),
            "proxy_ms_p50": round(percentile(settled[0], 0.5), 3),
            "direct_ms_p50": round(percentile(settled[1], 0.5), 3),
            "n": len(settled[0]), "messages": len(history), "policy": target.name,
            "seed_ms_per_turn": round(seed_ms / size, 3),
            "ingest_ms_per_turn": round((seed_ms + settle_ms) / size, 3),
            "after_reply_ms_per_turn_p50": round(percentile(after_reply, 0.5), 3),
            "after_reply_ms_per_turn_p95": round(percentile(after_reply, 0.95), 3),
            # of which: the embeddings (the new turns' ingest) and each stage's detection
            "after_reply_phase_ms_per_turn_p50": {
                phase: round(percentile(values, 0.5), 3) for phase, values in phases.items()},
            "peak_rss_mb": peak_rss()}
    return out


async def _paired_calls(post, direct, target: Target, history: list[dict], conversation: str,
                        calls: int, *, settle: bool, first: int) -> tuple[list[float], list[float]]:
    """``calls`` new user turns (``_text(first)`` on), each sent through the proxy and straight
    through litellm (in alternating order); the proxy's reply is appended. ``settle``: each
    call waits until the proxy's after-reply work is done."""
    proxied: list[float] = []
    plain: list[float] = []
    for step in range(calls):
        history.append({"role": "user", "content": _text(first + step, 3)})
        body: dict = {}
        for kind in ("proxy", "direct") if step % 2 else ("direct", "proxy"):
            if settle:
                await _settled(target, poll=0.002)
            if kind == "direct":
                plain.append(await direct(history))
            else:
                elapsed, body = await post(target, history, conversation)
                proxied.append(elapsed)
        history.append({"role": "assistant", "content": body["choices"][0]["message"]["content"]})
    return proxied, plain


def _overheads(prefix: str, proxied: list[float], plain: list[float]) -> dict[str, float]:
    return {f"{prefix}overhead_ms_p{q}": round(percentile(proxied, q / 100) - percentile(plain, q / 100), 3)
            for q in (50, 95, 99)}


AFTER_REPLY_CALLS = 10


async def _after_reply_per_turn(post, target: Target, history: list[dict], conversation: str,
                                first: int) -> tuple[list[float], dict[str, list[float]]]:
    """A session growing one exchange per call, as it does in production: each call's
    after-reply work (storing the reply, embeddings, clash and poison detection) until the
    proxy is idle again, per new turn (the user's turn and the reply), and the same split by
    phase (the proxy's ``agentmem_after_reply_seconds``: ``embeddings``, then each stage).
    The seed's ingest spreads a whole history's work over its turns, with the detectors'
    per-reply caps; this is what each further turn costs."""
    out: list[float] = []
    phases: dict[str, list[float]] = {}
    for step in range(AFTER_REPLY_CALLS):
        history.append({"role": "user", "content": _text(first + step, 3)})
        await _settled(target, poll=0.002)
        before = await _after_reply_seconds(target)
        _, body = await post(target, history, conversation)
        started = time.perf_counter()
        await _settled(target, poll=0.002)
        out.append((time.perf_counter() - started) * 1000 / 2)
        after = await _after_reply_seconds(target)
        for phase, seconds in after.items():
            phases.setdefault(phase, []).append((seconds - before.get(phase, 0.0)) * 1000 / 2)
        history.append({"role": "assistant", "content": body["choices"][0]["message"]["content"]})
    return out, phases


async def _after_reply_seconds(target: Target) -> dict[str, float]:
    """The proxy's after-reply seconds so far, per phase (from ``/metrics``)."""
    from prometheus_client.parser import text_string_to_metric_families

    async with httpx.AsyncClient(timeout=30) as http:
        text = (await http.get(target.url.split("/v1/")[0] + "/metrics")).text
    return {sample.labels["phase"]: sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples if sample.name == "agentmem_after_reply_seconds_sum"}


async def _settled(target: Target, timeout: float = 600, poll: float = 0.1) -> float:
    """Milliseconds until the proxy has no after-reply work left (``/healthz``'s
    ``background``). The session-length sweep measures calls on a settled session, as one
    that grew a turn at a time would be; the seed's backlog is reported as ingest instead."""
    health = target.url.split("/v1/")[0] + "/healthz"
    started = time.perf_counter()
    async with httpx.AsyncClient(timeout=30) as http:
        while time.perf_counter() - started < timeout:
            if (await http.get(health)).json().get("background", 0) == 0:
                break
            await asyncio.sleep(poll)
    return (time.perf_counter() - started) * 1000
