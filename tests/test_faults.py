"""Faults outside agentmem: a failing provider, a cut stream, Redis going away."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import openai
import pytest

from agentmem.config import Settings
from agentmem.proxy import create_app
from tests.conftest import echo_routes
from tests.servers import RedisServer, ThreadServer, free_port


def test_upstream_error_passes_through_and_stores_no_turns(client, http, session_id):
    client.chat.completions.create(model="echo", messages=[{"role": "user", "content": "fine"}],
                                   extra_headers={"X-Session-Id": session_id})
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(
            model="echo", messages=[{"role": "user", "content": "fine"},
                                    {"role": "assistant", "content": "echo: fine"},
                                    {"role": "user", "content": "break [[status:503]]"}],
            extra_headers={"X-Session-Id": session_id})
    assert caught.value.status_code == 503
    assert "503" in caught.value.message
    assert caught.value.response.headers["x-agentmem-session"] == session_id
    session = http.get(f"/v1/sessions/{session_id}").json()
    assert session["turn_count"] == 2  # the failed call's user turn was not stored
    reports = http.get(f"/v1/sessions/{session_id}/reports").json()["data"]
    assert [r["status"] for r in reports] == ["ok", "error"]
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model="echo",
                                       messages=[{"role": "user", "content": "x [[status:429]]"}],
                                       extra_headers={"X-Session-Id": session_id + "-429"})


def test_unreachable_provider_is_a_clear_error(upstream, tmp_path, session_id):
    dead = [{"name": "dead", "litellm_params": {
        "model": "openai/echo", "api_base": f"http://127.0.0.1:{free_port()}/v1", "api_key": "sk-x"}}]
    proxy = ThreadServer(create_app(Settings(data_dir=tmp_path, models=dead), warm_models=False)).start()
    try:
        response = httpx.post(f"{proxy.url}/v1/chat/completions", timeout=60,
                              headers={"X-Session-Id": session_id},
                              json={"model": "dead", "messages": [{"role": "user", "content": "hi"}]})
    finally:
        proxy.stop()
    assert response.status_code == 502  # a gateway that cannot reach its upstream; not our 500
    error = response.json()["error"]
    assert error["message"].startswith("upstream:") and error["type"] == "upstream_unreachable"
    assert " object at 0x" not in error["message"]


def test_a_client_cannot_steer_the_provider_url_or_key(proxy, received, session_id):
    """api_base / base_url / api_key / extra_headers in a body would send the route's key to a
    URL of the client's choosing: the proxy drops them and says so."""
    trap = free_port()
    response = httpx.post(f"{proxy.url}/v1/chat/completions", timeout=60,
                          headers={"X-Session-Id": session_id},
                          json={"model": "echo", "messages": [{"role": "user", "content": "hi"}],
                                "api_base": f"http://127.0.0.1:{trap}/v1",
                                "base_url": f"http://127.0.0.1:{trap}/v1", "api_key": "sk-mine",
                                "extra_headers": {"X-Leak": "1"}, "temperature": 0.2})
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "echo: hi"  # the route's upstream
    warning = response.headers["x-agentmem-warning"]
    assert "api_base, api_key, base_url, extra_headers" in warning
    [sent] = received.requests()
    assert sent["temperature"] == 0.2 and "api_key" not in sent


def test_provider_too_slow_is_a_504(proxy, session_id, http):
    response = httpx.post(f"{proxy.url}/v1/chat/completions", timeout=60,
                          headers={"X-Session-Id": session_id},
                          json={"model": "echo", "timeout": 0.5,
                                "messages": [{"role": "user", "content": "hi [[slow:5000]]"}]})
    assert response.status_code == 504
    assert response.json()["error"]["type"] == "upstream_timeout"
    reports = http.get(f"/v1/sessions/{session_id}/reports").json()["data"]
    assert [r["status"] for r in reports] == ["error"]  # recorded, and no turn stored


def test_the_providers_retry_after_reaches_the_client(proxy, session_id, http):
    """A 429 with Retry-After: the client's backoff must see the provider's wait, not guess."""
    rate_limited = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="sk-test", max_retries=0)
    with pytest.raises(openai.RateLimitError) as caught:
        rate_limited.chat.completions.create(
            model="echo", messages=[{"role": "user", "content": "hi [[status:429]] [[retry_after:7]]"}],
            extra_headers={"X-Session-Id": session_id})
    headers = caught.value.response.headers
    assert headers["retry-after"] == "7"
    assert headers["x-agentmem-session"] == session_id  # the report headers are kept too
    assert http.get(f"/v1/sessions/{session_id}/reports").json()["data"][-1]["status"] == "error"


def test_a_stream_that_stalls_past_the_timeout_ends_with_an_error_and_a_partial_reply(
        client, http, session_id):
    """The provider stops sending mid-stream: the client gets what came and then an error
    (not a hang), and the session keeps the partial reply, marked."""
    stream = client.chat.completions.create(
        model="echo", stream=True, timeout=30, extra_body={"timeout": 1},
        messages=[{"role": "user", "content": "tell me about the harbour lanterns [[stall:3,4000]]"}],
        extra_headers={"X-Session-Id": session_id})
    received = []
    started = time.perf_counter()
    with pytest.raises((openai.APIError, httpx.HTTPError)):
        for chunk in stream:
            received.append(chunk.choices[0].delta.content or "" if chunk.choices else "")
    assert time.perf_counter() - started < 4  # the provider's 1 s, not the stall's 4 s
    assert "".join(received).strip()
    turns = http.get(f"/v1/sessions/{session_id}").json()["turns"]
    assert [t["role"] for t in turns] == ["user", "assistant"]
    assert turns[1]["partial"] is True
    assert turns[1]["message"]["content"] == "".join(received)


def test_a_short_stall_is_relayed_untouched(client, session_id):
    stream = client.chat.completions.create(
        model="echo", stream=True,
        messages=[{"role": "user", "content": "short pause please [[stall:2,600]]"}],
        extra_headers={"X-Session-Id": session_id})
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == "echo: short pause please"


def test_stream_cut_midway_marks_the_reply_partial(client, http, session_id):
    history = [{"role": "user", "content": "tell me a long story about the sea [[cut:4]]"}]
    stream = client.chat.completions.create(model="echo", messages=history, stream=True,
                                            extra_headers={"X-Session-Id": session_id})
    received = []
    with pytest.raises((openai.APIError, httpx.HTTPError)):
        for chunk in stream:
            received.append(chunk.choices[0].delta.content or "")
    assert received  # some chunks arrived before the cut
    turns = http.get(f"/v1/sessions/{session_id}").json()["turns"]
    assert [t["role"] for t in turns] == ["user", "assistant"]
    reply = turns[1]
    assert reply["partial"] is True and "stream" in reply["error"]
    assert reply["message"]["content"] == "".join(received)
    assert http.get(f"/v1/sessions/{session_id}/reports").json()["data"][-1]["status"] == "partial"
    # The client retries without the partial reply: the session stays consistent.
    retry = [{"role": "user", "content": "tell me a short story"}]
    client.chat.completions.create(model="echo", messages=retry, extra_headers={"X-Session-Id": session_id})
    session = http.get(f"/v1/sessions/{session_id}", params={"include_superseded": True}).json()
    assert [t["message"]["content"] for t in session["turns"] if t["active"]] == [
        "tell me a short story", "echo: tell me a short story"]
    assert sum(not t["active"] for t in session["turns"]) == 2


def test_client_disconnect_midstream_keeps_session_consistent(proxy, http, session_id):
    words = " ".join(f"word{i}" for i in range(400))
    body = {"model": "echo", "stream": True,
            "messages": [{"role": "user", "content": words + " [[slow:50]]"}]}
    with httpx.stream("POST", f"{proxy.url}/v1/chat/completions", json=body,
                      headers={"X-Session-Id": session_id}, timeout=30) as response:
        for _ in zip(range(3), response.iter_lines()):
            pass  # read a little, then hang up
    import time

    deadline = time.time() + 10
    while time.time() < deadline:
        turns = http.get(f"/v1/sessions/{session_id}").json().get("turns", [])
        if len(turns) == 2:
            break
        time.sleep(0.1)
    assert [t["role"] for t in turns] == ["user", "assistant"]
    # Whether the relay finished before noticing the hang-up or not, the reply is whole or marked.
    assert turns[1]["partial"] is False or "disconnected" in turns[1]["error"]


def _proxy_on(redis_url, upstream, policy="default"):
    settings = Settings(redis_url=redis_url, models=echo_routes(upstream.url), policy=policy)
    return ThreadServer(create_app(settings, warm_models=False)).start()


def test_redis_down_passes_through_with_warning(upstream, received, tmp_path, redis_server):
    redis = RedisServer(tmp_path / "redis").start()
    proxy = _proxy_on(redis.url, upstream)
    try:
        client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="x", max_retries=0)
        history = [{"role": "user", "content": "remember this"}]
        client.chat.completions.create(model="echo", messages=history, extra_headers={"X-Session-Id": "r1"})
        redis.stop()
        raw = client.chat.completions.with_raw_response.create(
            model="echo", messages=history + [{"role": "assistant", "content": "echo: remember this"},
                                              {"role": "user", "content": "still there?"}],
            extra_headers={"X-Session-Id": "r1"})
        assert raw.parse().choices[0].message.content == "echo: still there?"
        assert "session store unavailable" in raw.headers["x-agentmem-warning"]
        # the kind of fault, not the server's Redis address
        assert str(redis.port) not in raw.headers["x-agentmem-warning"]
        assert received.requests()[-1]["messages"][-1]["content"] == "still there?"
        assert httpx.get(f"{proxy.url}/healthz").json()["status"] == "degraded"
        assert httpx.get(f"{proxy.url}/v1/sessions/r1").status_code == 503
        redis.start()
        turns = httpx.get(f"{proxy.url}/v1/sessions/r1").json()["turns"]
        assert [t["message"]["content"] for t in turns] == ["remember this", "echo: remember this"]
    finally:
        proxy.stop()
        redis.stop()


def test_redis_down_with_error_policy_is_a_503(upstream, received, tmp_path):
    policy = tmp_path / "strict.yaml"
    policy.write_text("name: strict-store\non_fault: error\n")
    proxy = _proxy_on(f"redis://127.0.0.1:{free_port()}/0", upstream, policy=str(policy))
    try:
        response = httpx.post(f"{proxy.url}/v1/chat/completions", timeout=30,
                              json={"model": "echo", "messages": [{"role": "user", "content": "hi"}]})
        assert response.status_code == 503
        assert response.json()["error"]["type"] == "agentmem_unavailable"
        assert received.requests() == []  # nothing was sent to the provider
    finally:
        proxy.stop()


def test_a_killed_proxy_frees_its_session_within_seconds(upstream, tmp_path, redis_server):
    """kill -9 in the middle of a call: the lock names its holder process, so another proxy on
    the same machine sees the holder is dead and serves the session at once (without that,
    the lease: 8 s)."""
    config = tmp_path / "config.yaml"
    config.write_text("models:\n  - name: echo\n    litellm_params:\n      model: openai/echo\n"
                      f"      api_base: {upstream.url}/v1\n      api_key: sk-test\n")
    env = {**os.environ, "AGENTMEM_DATA_DIR": str(tmp_path / "data")}

    def serve() -> tuple[subprocess.Popen, str]:
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, "-m", "agentmem", "serve", "--port", str(port), "--config", str(config),
             "--redis-url", redis_server.url, "--policy", "off", "--log-level", "warning"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        deadline = time.time() + 90
        while time.time() < deadline:
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    return process, url
            except httpx.HTTPError:
                time.sleep(0.2)
        process.kill()
        raise AssertionError("agentmem serve did not start")

    first, first_url = serve()
    second, second_url = serve()
    try:
        body = {"model": "echo", "messages": [{"role": "user", "content": "wait [[slow:30000]]"}]}
        headers = {"X-Session-Id": "lease-1"}

        def doomed_call() -> None:
            with contextlib.suppress(httpx.HTTPError):  # its proxy is killed under it
                httpx.post(f"{first_url}/v1/chat/completions", json=body, headers=headers, timeout=60)

        hung = threading.Thread(target=doomed_call, daemon=True)
        hung.start()
        time.sleep(1.5)  # the first proxy holds the session's lock, waiting on the provider
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        killed = time.time()
        response = httpx.post(f"{second_url}/v1/chat/completions", headers=headers, timeout=60,
                              json={"model": "echo", "messages": [{"role": "user", "content": "hello"}]})
        usable_after = time.time() - killed
        assert response.status_code == 200, response.text
        assert usable_after < 4, f"the session stayed locked {usable_after:.1f} s after the kill"
    finally:
        for process in (first, second):
            if process.poll() is None:
                process.kill()
                process.wait(timeout=10)
