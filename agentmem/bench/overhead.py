"""`agentmem bench overhead`: what the proxy adds to a call, measured end to end.

Three processes on loopback, as in production: the echo upstream, ``agentmem serve`` on a
fresh embedded Redis, and this process as the client. Each measured call is made twice with
the same messages, once with litellm straight to the upstream and once with litellm through
the proxy (order alternating), so both sides pay the same client cost. Overhead at a
percentile is proxied minus direct at that percentile.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
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


def run_overhead(*, calls: int = 200, turn_calls: int = 30,
                 sizes: tuple[int, ...] = (10, 100, 1000),
                 policies: tuple[str, ...] = ("off", "default")) -> dict[str, Any]:
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
    try:
        _wait(f"{upstream}/models", processes[0])
        _wait(f"http://127.0.0.1:{proxy_port}/healthz", processes[1])
        _wait_embedder(f"http://127.0.0.1:{proxy_port}/healthz")
        return asyncio.run(_measure(upstream, f"http://127.0.0.1:{proxy_port}/v1", calls,
                                    turn_calls, sizes, policies))
    finally:
        _stop(processes)


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


async def _measure(upstream: str, proxy: str, calls: int, turn_calls: int,
                   sizes: tuple[int, ...], policies: tuple[str, ...]) -> dict[str, Any]:
    from agentmem.upstream import litellm

    async def once(api_base: str, messages: list[dict], headers: dict | None) -> tuple[float, Any]:
        started = time.perf_counter()
        response = await litellm.acompletion(model="openai/echo", messages=messages,
                                             api_base=api_base, api_key="sk-bench",
                                             extra_headers=headers)
        return (time.perf_counter() - started) * 1000, response

    async def pair(messages, headers, flip: bool, samples: dict) -> dict:
        order = [(proxy, headers), (upstream, None)] if flip else [(upstream, None), (proxy, headers)]
        reply = None
        for api_base, extra in order:
            elapsed, response = await once(api_base, messages, extra)
            samples["proxy" if api_base == proxy else "direct"].append(elapsed)
            if api_base == proxy:
                reply = response.choices[0].message.model_dump(exclude_none=True)
        assert reply is not None  # the proxy is always one of the two calls
        return reply

    result: dict[str, Any] = {}
    for policy in policies:
        # Warm both paths for this policy (litellm's client, the proxy's connections, and for
        # `default` the embedder's first inferences), then let background work settle.
        for i in range(20):
            await pair([{"role": "user", "content": _text(i)}],
                       {"X-Session-Id": f"warm-{policy}-{i}", "X-Agentmem-Policy": policy},
                       i % 2 == 1, {"proxy": [], "direct": []})
        await asyncio.sleep(2)
        samples: dict[str, list[float]] = {"proxy": [], "direct": []}
        for conversation in range(max(1, calls // 10)):
            history: list[dict] = [{"role": "system", "content": "You are a support assistant."}]
            headers = {"X-Session-Id": f"{policy}-{conversation}", "X-Agentmem-Policy": policy}
            for step in range(10):
                history.append({"role": "user", "content": _text(conversation * 10 + step)})
                history.append(await pair(history, headers, step % 2 == 1, samples))
        result[policy] = _summary(samples)

    result["by_turns"] = {}
    for size in sizes:
        history = [{"role": "system", "content": "You are a support assistant."}]
        for i in range(size - 1):
            history.append({"role": "user" if i % 2 == 0 else "assistant", "content": _text(i)})
        if history[-1]["role"] == "user":
            history.append({"role": "assistant", "content": _text(size)})
        headers = {"X-Session-Id": f"turns-{size}", "X-Agentmem-Policy": policies[-1]}
        history.append({"role": "user", "content": "Seed the session."})
        history.append((await once(proxy, history, headers))[1].choices[0].message.model_dump(
            exclude_none=True))  # ingest of the whole history happens here, not measured
        samples = {"proxy": [], "direct": []}
        for step in range(turn_calls):
            history.append({"role": "user", "content": _text(step, 3)})
            history.append(await pair(history, headers, step % 2 == 1, samples))
        result["by_turns"][str(size)] = {**_summary(samples), "messages": len(history)}
    return result


def _summary(samples: dict[str, list[float]]) -> dict[str, float]:
    proxy, direct = samples["proxy"], samples["direct"]
    return {
        "overhead_ms_p50": round(percentile(proxy, 0.5) - percentile(direct, 0.5), 3),
        "overhead_ms_p99": round(percentile(proxy, 0.99) - percentile(direct, 0.99), 3),
        "direct_ms_p50": round(percentile(direct, 0.5), 3),
        "proxy_ms_p50": round(percentile(proxy, 0.5), 3),
        "direct_ms_p99": round(percentile(direct, 0.99), 3),
        "proxy_ms_p99": round(percentile(proxy, 0.99), 3),
        "n": len(proxy),
    }
