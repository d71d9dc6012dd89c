"""agentmem inside LiteLLM's own proxy, offline: 30 tools and a long history go in, less goes out.

    python examples/litellm_proxy_plugin.py

Starts the deterministic echo upstream, runs ``litellm --config examples/litellm_proxy/config.yaml``
with the agentmem callback against it, sends two calls (the second streamed) through the
``openai`` client, and prints what reached the upstream and what the session stored.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import openai
import uvicorn

from agentmem.echo import create_echo_app
from agentmem.store import RedisConnector, SessionHandle, SessionStore
from agentmem.store.keys import tenant_index

CONFIG = Path(__file__).parent / "litellm_proxy" / "config.yaml"
SESSION = "litellm-demo-1"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_echo_upstream() -> str:
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_echo_app(), port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}"


def start_litellm(env: dict[str, str], port: int, log: Path) -> subprocess.Popen:
    """LiteLLM's proxy as its users run it; its first start takes 10-30 s."""
    litellm = Path(sys.executable).with_name("litellm")
    process = subprocess.Popen([str(litellm), "--config", str(CONFIG), "--port", str(port)],
                               env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    deadline = time.time() + 150
    while time.time() < deadline and process.poll() is None:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health/liveliness", timeout=2).is_success:
                return process
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    process.kill()
    sys.exit(f"litellm did not start:\n{log.read_text(errors='replace')[-3000:]}")


def tools() -> list[dict]:
    names = ["get_weather", "send_email", "create_invoice", "search_flights", "book_hotel",
             "translate_text", "convert_currency", "get_stock_price", "schedule_meeting",
             "create_ticket", "resize_image", "run_sql_query", "get_exchange_rates", "order_pizza",
             "track_package", "set_reminder", "play_music", "read_calendar", "post_tweet",
             "summarize_pdf", "lookup_recipe", "find_restaurant", "call_taxi", "check_traffic",
             "compute_route", "get_news", "pay_bill", "open_door", "measure_air_quality",
             "buy_stock"]
    return [{"type": "function", "function": {
        "name": name, "description": f"{name.replace('_', ' ').capitalize()} for the user.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}}
        for name in names]


def history() -> list[dict]:
    topics = ["the quarterly budget", "a delayed shipment", "the office move", "a printer fault",
              "the hiring plan", "a customer refund", "the team offsite", "a billing error"]
    messages = [{"role": "system", "content": "You are an operations assistant with tools."}]
    for topic in topics:
        detail = " ".join(f"Note {i} about {topic}: the figures changed again this week."
                          for i in range(25))
        messages += [{"role": "user", "content": f"Let us talk about {topic}. {detail}"},
                     {"role": "assistant", "content": f"Understood, I noted everything about {topic}."}]
    messages.append({"role": "user", "content":
                     'What is the weather in Paris right now? [[tool:get_weather {"query": "Paris"}]]'})
    return messages


async def stored_turns(data_dir: Path, session_id: str) -> list:
    """The session's turns, read from agentmem's store (tenant: a hash of the LiteLLM key)."""
    connector = RedisConnector(directory=data_dir)
    store = SessionStore(connector.client())
    try:
        async for key in store.redis.scan_iter(match=tenant_index("*")):
            tenant = key.decode().split("{", 1)[1].split("}", 1)[0]
            turns = await store.active_turns(SessionHandle(tenant, session_id))
            if turns:
                return turns
        return []
    finally:
        await store.close()
        connector.close()


def main() -> None:
    upstream = start_echo_upstream()
    data_dir = Path(tempfile.mkdtemp(prefix="agentmem-litellm-"))
    key, port = f"sk-demo-{secrets.token_hex(16)}", free_port()
    env = {**os.environ, "ECHO_BASE_URL": f"{upstream}/v1", "LITELLM_MASTER_KEY": key,
           "AGENTMEM_POLICY": "agent", "AGENTMEM_DATA_DIR": str(data_dir),
           "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False",
           "DISABLE_SCHEMA_UPDATE": "True", "HF_HUB_OFFLINE": "1"}
    env.pop("DATABASE_URL", None)
    proxy = start_litellm(env, port, data_dir / "litellm.log")
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key, max_retries=0)
        messages, offered = history(), tools()
        raw = client.chat.completions.with_raw_response.create(
            model="echo", messages=messages, tools=offered, extra_headers={"X-Session-Id": SESSION})
        reply, headers = raw.parse().choices[0].message, raw.headers
        sent = httpx.get(f"{upstream}/_echo/requests").json()[-1]
        print(f"tools: {len(offered)} offered, {len(sent['tools'])} reached the upstream "
              f"({', '.join(t['function']['name'] for t in sent['tools'])})")
        size = lambda ms: sum(len(m.get("content") or "") for m in ms)  # noqa: E731
        print(f"messages: {len(messages)} sent ({size(messages)} characters), "
              f"{len(sent['messages'])} reached the upstream ({size(sent['messages'])} characters)")
        print(f"tokens: {headers['x-agentmem-tokens-before']} before, "
              f"{headers['x-agentmem-tokens-after']} after (report {headers['x-agentmem-report']})")
        call = reply.tool_calls[0]
        print(f"assistant called {call.function.name}({call.function.arguments})")

        messages += [reply.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": "Paris: 21 C, sunny"}]
        stream = client.chat.completions.create(model="echo", messages=messages, tools=offered,
                                                stream=True, extra_headers={"X-Session-Id": SESSION})
        text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
        print("streamed reply:", text)

        turns, deadline = [], time.time() + 20  # LiteLLM logs a stream's success just after it ends
        while len(turns) < len(messages) + 1 and time.time() < deadline:
            time.sleep(0.3)
            turns = asyncio.run(stored_turns(data_dir, SESSION))
        print(f"stored turns: {len(turns)} (last: {', '.join(t.role for t in turns[-3:])})")
    finally:  # SIGINT, not SIGTERM: uvicorn then exits through atexit, which stops agentmem's Redis
        proxy.send_signal(signal.SIGINT)
        try:
            proxy.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proxy.kill()
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
