"""The route surface beyond chat: /v1/embeddings and /v1/completions forwarded without
hygiene, the aliases without /v1, and configured models as an allow-list; all through the
real proxy against the echo upstream (and a dead port for the 502)."""

from __future__ import annotations

import base64
import hashlib
import struct

import httpx
import pytest

from agentmem.config import Settings
from agentmem.proxy import create_app
from tests.conftest import echo_routes
from tests.servers import ThreadServer, free_port


def _echo_vector(text: str, size: int = 8) -> list[float]:
    """What the echo upstream answers for a text (a hash, so a vector can be checked)."""
    return [round(b / 255 - 0.5, 4) for b in hashlib.blake2b(text.encode(), digest_size=size).digest()]


def test_embeddings_pass_through(client, http, received):
    result = client.embeddings.create(model="echo", input=["first text", "second"])  # base64 on the wire
    assert [d.index for d in result.data] == [0, 1]
    assert result.data[0].embedding == pytest.approx(_echo_vector("first text"), abs=1e-6)
    plain = http.post("/v1/embeddings", json={"model": "echo", "input": "one", "user": "u1",
                                              "encoding_format": "float"})
    assert plain.status_code == 200, plain.text
    assert plain.json()["data"][0]["embedding"] == _echo_vector("one")
    assert plain.headers["x-agentmem-policy"] == "passthrough"
    assert "x-agentmem-session" not in plain.headers  # no session: nothing is stored
    first, second = received.requests()
    assert first == {"model": "echo", "input": ["first text", "second"], "encoding_format": "base64"}
    assert second == {"model": "echo", "input": "one", "user": "u1", "encoding_format": "float"}


def test_completions_pass_through_plain_and_streamed(client, received):
    result = client.completions.create(model="echo", prompt="say this", max_tokens=16, temperature=0)
    assert result.choices[0].text == "echo: say this" and result.usage.total_tokens > 0
    chunks = list(client.completions.create(model="echo", prompt="say it slowly", stream=True))
    assert "".join(c.choices[0].text for c in chunks) == "echo: say it slowly"
    assert chunks[-1].choices[0].finish_reason == "stop"
    plain, streamed = received.requests()
    assert plain == {"model": "echo", "prompt": "say this", "max_tokens": 16, "temperature": 0}
    assert streamed["stream"] is True and streamed["prompt"] == "say it slowly"


def test_a_client_cannot_steer_a_passthrough_call(http, received):
    response = http.post("/v1/completions", json={"model": "echo", "prompt": "hi",
                                                  "api_base": "http://127.0.0.1:9/v1", "api_key": "sk-x"})
    assert response.status_code == 200, response.text
    assert "api_base, api_key" in response.headers["x-agentmem-warning"]
    [sent] = received.requests()
    assert sent == {"model": "echo", "prompt": "hi"}


@pytest.mark.parametrize(("path", "body"), [
    ("/chat/completions", {"messages": [{"role": "user", "content": "alias"}]}),
    ("/responses", {"input": "alias"}),
    ("/embeddings", {"input": "alias"}),
    ("/completions", {"prompt": "alias"}),
])
def test_aliases_without_v1(http, received, path, body):
    response = http.post(path, json={"model": "echo", **body})
    assert response.status_code == 200, response.text
    assert len(received.requests()) == 1


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
    ("/v1/responses", {"input": "hi"}),
    ("/v1/embeddings", {"input": "hi"}),
    ("/v1/completions", {"prompt": "hi"}),
])
def test_configured_models_are_an_allow_list(http, received, session_id, path, body):
    response = http.post(path, json={"model": "gpt-4o", **body}, headers={"X-Session-Id": session_id})
    assert response.status_code == 404, response.text
    assert response.json()["error"] == {
        "message": "The model `gpt-4o` does not exist or you do not have access to it.",
        "type": "invalid_request_error", "param": "model", "code": "model_not_found"}
    assert received.requests() == []
    assert http.get(f"/v1/sessions/{session_id}").status_code == 404


def test_allow_any_model_opts_out(upstream, tmp_path, received, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", f"{upstream.url}/v1")
    settings = Settings(data_dir=tmp_path, models=echo_routes(upstream.url), allow_any_model=True)
    proxy = ThreadServer(create_app(settings, warm_models=False)).start()
    try:
        response = httpx.post(f"{proxy.url}/v1/embeddings", timeout=60,
                              json={"model": "openai/echo-unlisted", "input": "x"})
    finally:
        proxy.stop()
    assert response.status_code == 200, response.text
    assert received.requests()[0]["model"] == "echo-unlisted"


def test_passthrough_provider_failures(http, tmp_path):
    """502 when the provider cannot be reached, 504 when it is too slow, its own status else."""
    slow = http.post("/v1/completions", json={"model": "echo", "prompt": "hi [[slow:5000]]", "timeout": 0.5})
    assert slow.status_code == 504 and slow.json()["error"]["type"] == "upstream_timeout"
    busy = http.post("/v1/embeddings", json={"model": "echo", "input": "x [[status:429]]"})
    assert busy.status_code == 429 and busy.json()["error"]["message"].startswith("upstream:")
    dead = [{"name": "dead", "litellm_params": {
        "model": "openai/echo", "api_base": f"http://127.0.0.1:{free_port()}/v1", "api_key": "sk-x"}}]
    proxy = ThreadServer(create_app(Settings(data_dir=tmp_path, models=dead), warm_models=False)).start()
    try:
        calls = (("/v1/embeddings", {"input": "x"}), ("/v1/completions", {"prompt": "x"}))
        responses = [httpx.post(f"{proxy.url}{path}", json={"model": "dead", **body}, timeout=60)
                     for path, body in calls]
    finally:
        proxy.stop()
    for response in responses:
        assert response.status_code == 502, response.text
        assert response.json()["error"]["type"] == "upstream_unreachable"


def test_bad_passthrough_bodies_are_400s(http, received):
    for path, body, param in (("/v1/embeddings", {"model": "echo"}, "input"),
                              ("/v1/completions", {"model": "echo", "prompt": 5}, "prompt"),
                              ("/v1/embeddings", {"input": "x"}, "model")):
        response = http.post(path, json=body)
        assert response.status_code == 400 and response.json()["error"]["param"] == param
    assert received.requests() == []


def test_echo_base64_matches_the_float_vector():
    vector = _echo_vector("abc")
    packed = base64.b64encode(struct.pack("<8f", *vector)).decode()
    assert struct.unpack("<8f", base64.b64decode(packed)) == pytest.approx(vector, abs=1e-6)


def test_a_provider_error_reaches_the_client_without_the_servers_traceback():
    """litellm appends the formatted traceback of a failure inside its own request transform to
    the error's message; the client gets the cause, not the server's file paths."""
    import litellm

    from agentmem.upstream import as_upstream_error

    error = litellm.APIConnectionError(
        message="expected string or bytes-like object, got 'int'\nTraceback (most recent call "
                'last):\n  File "/srv/site-packages/litellm/main.py", line 687, in acompletion',
        llm_provider="anthropic", model="claude-echo")
    upstream = as_upstream_error(error)
    assert upstream.status_code == 502
    assert "expected string or bytes-like object, got 'int'" in upstream.message
    assert "Traceback" not in upstream.message and "main.py" not in upstream.message
