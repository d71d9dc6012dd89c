"""`agentmem bench load`: throughput and latency of the real proxy under concurrent sessions.

``agentmem serve`` (the chosen policy, an embedded Redis in a fresh folder) runs as a
subprocess with 1 or more ``--workers``, in front of the echo upstream; C clients at once
each keep their own session (a stateless chat that grows a turn a call, as an OpenAI client
does) until the run's calls are made. The same load straight at the echo upstream is the
floor. Reported per worker count and concurrency: calls per second, p50/p99 latency, errors,
and the proxy's peak resident memory (supervisor and workers together).

    agentmem bench load --concurrency 1,8,32 --calls 300 --workers 1,2 [--json OUT]
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from agentmem.bench.overhead import _free_port, _stop, _text, _wait, peak_rss_mb
from agentmem.bench.results import percentile
from agentmem.policy import load_policy


def run_load(*, concurrency: tuple[int, ...] = (1, 8, 32), calls: int = 300,
             workers: tuple[int, ...] = (1, 2), policy: str = "default") -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="agentmem-load-"))
    port = _free_port()
    upstream = f"http://127.0.0.1:{port}/v1"
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    echo = subprocess.Popen([sys.executable, "-m", "agentmem", "echo-upstream", "--port", str(port)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    config = workdir / "config.yaml"
    config.write_text("models:\n  - name: echo\n    litellm_params:\n"
                      f"      model: openai/echo\n      api_base: {upstream}\n      api_key: sk-bench\n")
    try:
        _wait(f"{upstream}/models", echo)
        floor = {str(c): asyncio.run(_drive(f"{upstream}/chat/completions", c, calls))
                 for c in concurrency}
        result: dict[str, Any] = {"policy": policy, "calls": calls, "cores": os.cpu_count(),
                                  "floor": floor}
        for count in workers:
            result[f"workers_{count}"] = _one_server(workdir / f"w{count}", config, env, count,
                                                     policy, concurrency, calls)
        return result
    finally:
        _stop([echo])


def _one_server(folder: Path, config: Path, env: dict[str, str], workers: int, policy: str,
                concurrency: tuple[int, ...], calls: int) -> dict[str, Any]:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "-m", "agentmem", "serve", "--port", str(port), "--config", str(config),
         "--policy", policy, "--workers", str(workers), "--log-level", "warning"],
        env={**env, "AGENTMEM_DATA_DIR": str(folder)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait(f"{url}/healthz", server, timeout=180)
        if load_policy(policy).embed:  # a policy that embeds nothing never loads MiniLM
            _wait_models(url, workers)
        out: dict[str, Any] = {str(c): asyncio.run(_drive(f"{url}/v1/chat/completions", c, calls,
                                                          sessions=True))
                               for c in concurrency}
        out["peak_rss_mb"] = round(sum(peak_rss_mb(pid) for pid in _tree(server.pid)), 1)
        return out
    finally:
        _stop([server])


def _wait_models(url: str, workers: int, timeout: float = 180) -> None:
    """Until every worker answers /healthz with MiniLM loaded (calls before that skip stages)."""
    loaded: set[int] = set()
    deadline = time.time() + timeout
    while len(loaded) < workers:
        if time.time() > deadline:
            raise RuntimeError(f"{url}: MiniLM not loaded in every worker within {timeout:g} s")
        with httpx.Client(timeout=10) as http:  # a new connection: the kernel picks a worker
            health = http.get(f"{url}/healthz").json()
        if health.get("embedder") == "loaded":
            loaded.add(int(health.get("process", 0)))
        else:
            time.sleep(0.3)


def _tree(pid: int) -> list[int]:
    """The process and its descendants (Linux /proc), for the workers' memory."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo += children.get(current, [])
    return out


async def _drive(url: str, clients: int, calls: int, *, sessions: bool = False) -> dict[str, Any]:
    """``clients`` at once, each growing its own conversation, until ``calls`` are made."""
    latencies: list[float] = []
    errors: Counter[str] = Counter()
    made = 0
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)

    async with httpx.AsyncClient(timeout=300, limits=limits) as http:
        async def client(index: int) -> None:
            nonlocal made
            history: list[dict[str, Any]] = []
            headers = {"X-Session-Id": f"load-{clients}-{index}-{time.time_ns()}"} if sessions else {}
            while made < calls:
                made += 1
                history.append({"role": "user", "content": _text(made, 3)})
                started = time.perf_counter()
                try:
                    response = await http.post(url, headers=headers,
                                               json={"model": "echo", "messages": history})
                except httpx.HTTPError as error:
                    errors[type(error).__name__] += 1
                    history.pop()
                    continue
                if response.status_code != 200:
                    errors[f"status {response.status_code}"] += 1
                    history.pop()
                    continue
                latencies.append((time.perf_counter() - started) * 1000)
                history.append(response.json()["choices"][0]["message"])

        started = time.perf_counter()
        await asyncio.gather(*(client(i) for i in range(clients)))
        wall = time.perf_counter() - started
    return {"calls_per_s": round(len(latencies) / wall, 2), "p50_ms": round(percentile(latencies, 0.5), 1),
            "p99_ms": round(percentile(latencies, 0.99), 1), "ok": len(latencies),
            "errors": dict(errors)}
