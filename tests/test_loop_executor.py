"""The proxy's default executor: litellm's request building on the loop, and nothing else.

Real litellm calls to the real echo upstream; litellm's ``completion`` is wrapped only to see
which thread runs it.
"""

from __future__ import annotations

import asyncio
import threading

import litellm.main
import pytest

from agentmem import loop_executor
from agentmem import upstream as upstream_module
from agentmem.errors import UpstreamError
from agentmem.loop_executor import inline_setup, install


@pytest.fixture
def completion_threads(monkeypatch) -> list[int]:
    threads: list[int] = []
    original = litellm.main.completion

    def observed(*args, **kwargs):
        threads.append(threading.get_ident())
        return original(*args, **kwargs)

    monkeypatch.setattr(litellm.main, "completion", observed)
    monkeypatch.setattr(upstream_module, "_set_up", set())
    return threads


def _calls(upstream_url: str, *, installed: bool):
    async def run():
        if installed:
            install()
        loop = asyncio.get_running_loop()
        request = {"model": "openai/echo", "api_base": f"{upstream_url}/v1", "api_key": "sk-test",
                   "messages": [{"role": "user", "content": "hi"}]}
        replies = [await upstream_module.acompletion(dict(request)) for _ in range(3)]
        unarmed = await loop.run_in_executor(None, threading.get_ident)
        with inline_setup():  # armed, but what is submitted is not litellm's request building
            armed = await loop.run_in_executor(None, threading.get_ident)
        return threading.get_ident(), replies, unarmed, armed

    return asyncio.run(run())


def test_litellm_request_building_runs_on_the_proxy_loop_once_litellm_is_set_up(
        upstream, completion_threads):
    loop_thread, replies, unarmed, armed = _calls(upstream.url, installed=True)
    assert [r.choices[0].message.content for r in replies] == ["echo: hi"] * 3
    assert completion_threads[0] != loop_thread  # litellm's first-use set-up: in a thread
    assert completion_threads[1:] == [loop_thread, loop_thread]
    assert unarmed != loop_thread and armed != loop_thread  # everything else: the pool


def test_a_loop_without_the_executor_keeps_litellms_threads(upstream, completion_threads):
    loop_thread, replies, _, armed = _calls(upstream.url, installed=False)
    assert [r.choices[0].message.content for r in replies] == ["echo: hi"] * 3
    assert loop_thread not in completion_threads and armed != loop_thread


def test_only_providers_whose_request_building_does_no_io_are_inlined():
    inline = upstream_module._inline_provider
    assert inline({"model": "openai/gpt-4o-mini"}) == inline({"model": "gpt-4o-mini"}) == "openai"
    assert inline({"model": "hosted_vllm/llama", "api_base": "http://127.0.0.1:1/v1"}) == "hosted_vllm"
    for model in ("azure/gpt-4o", "bedrock/anthropic.claude-3", "vertex_ai/gemini-1.5-pro"):
        assert inline({"model": model}) is None
    assert inline({"messages": []}) is None
    assert inline({"model": "openai/gpt-4o-mini", "api_base": ["not", "a", "url"]}) is None


def test_the_flag_ends_with_the_call_that_set_it(upstream, completion_threads):
    """A call that fails before litellm submits anything leaves no armed flag behind for a
    later submission of the same task."""
    async def run():
        install()
        loop = asyncio.get_running_loop()
        upstream_module._set_up.add("openai")
        with pytest.raises(UpstreamError):
            await upstream_module.acompletion({"model": "openai/echo", "messages": "not a list",
                                               "api_base": f"{upstream.url}/v1", "api_key": "k"})
        assert loop_executor._armed.get() is None
        return threading.get_ident(), await loop.run_in_executor(None, threading.get_ident)

    loop_thread, later = asyncio.run(run())
    assert later != loop_thread
