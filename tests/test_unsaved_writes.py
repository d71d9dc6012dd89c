"""A reply that went out while Redis was down keeps its turns: the write is retried until
Redis is back (Debian's redis-server, killed with SIGKILL and restarted from its append-only
file, as an operator's crash or restart does)."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from agentmem import Hygiene, Policy
from agentmem.config import Settings
from agentmem.store import SessionHandle
from tests.servers import RedisServer

ALWAYS = ("--appendfsync", "always")  # every write on disk before a SIGKILL


@pytest.fixture
def crashable_redis(tmp_path):
    if not RedisServer.available():
        pytest.skip("Debian redis-server is not installed")
    server = RedisServer(tmp_path / "redis").start(*ALWAYS)
    yield server
    if server.process and server.process.poll() is None:
        server.stop()


def crash(server: RedisServer) -> None:
    assert server.process is not None
    server.process.kill()
    server.process.wait(timeout=10)


def policy(**overrides) -> Policy:
    return Policy(**{"name": "plain", "stages": [], "embed": False, "lock_timeout_s": 8,
                     "lock_wait_s": 20, **overrides})


def reply(text: str) -> dict:
    return {"role": "assistant", "content": f"echo: {text}"}


async def stateful_turn(engine: Hygiene, session: str, text: str, rules: Policy) -> list[dict]:
    """One stateful call (the client sends its new message only); returns what the provider
    would have been sent."""
    call = await engine.prepare({"model": "echo", "messages": [{"role": "user", "content": text}]},
                                session_id=session, stateful=True, policy=rules)
    sent = call.outgoing["messages"]
    await call.finish(reply(text))
    return sent


async def test_a_reply_sent_while_redis_was_down_is_stored_once_it_is_back(crashable_redis):
    engine = Hygiene(settings=Settings(redis_url=crashable_redis.url))
    session, rules = f"un-{uuid.uuid4().hex[:8]}", policy(commit_retry_s=60)
    try:
        await stateful_turn(engine, session, "My code is 4711.", rules)
        call = await engine.prepare({"model": "echo", "messages": [
            {"role": "user", "content": "My name is Ada."}]}, session_id=session, stateful=True,
            policy=rules)
        crash(crashable_redis)  # the provider answers while Redis is down
        await call.finish(reply("My name is Ada."))
        warning = call.headers()["X-Agentmem-Warning"]
        await asyncio.sleep(1.0)
        crashable_redis.start(*ALWAYS)  # back, from its append-only file
        sent = await stateful_turn(engine, session, "What is my name?", rules)
        assert [m["content"] for m in sent] == [
            "My code is 4711.", "echo: My code is 4711.", "My name is Ada.",
            "echo: My name is Ada.", "What is my name?"]
        turns = await engine.store().active_turns(SessionHandle("default", session))
        assert len(turns) == 6 and engine.unsaved.pending() == 0
        assert "not stored yet" in warning and "retried for up to 60s" in warning
    finally:
        await engine.aclose()
        engine.connector.close()


async def test_a_lock_left_by_a_failed_release_does_not_hold_the_session_after_a_restart(
        crashable_redis):
    """The call failed while Redis was down, so its lock was never released; Redis comes back
    with it from the append-only file. No call of this process holds it: the session's next
    call takes it at once instead of waiting out the lease."""
    engine = Hygiene(settings=Settings(redis_url=crashable_redis.url))
    session, rules = f"un-{uuid.uuid4().hex[:8]}", policy(lock_timeout_s=30)
    try:
        call = await engine.prepare({"model": "echo", "messages": [
            {"role": "user", "content": "Hello?"}]}, session_id=session, policy=rules)
        crash(crashable_redis)
        await call.fail(RuntimeError("the provider failed too"))
        crashable_redis.start(*ALWAYS)
        started = time.monotonic()
        again = await engine.prepare({"model": "echo", "messages": [
            {"role": "user", "content": "Hello?"}]}, session_id=session, policy=rules)
        assert time.monotonic() - started < 5  # not the 30 s lease
        await again.finish(reply("Hello?"))
        turns = await engine.store().active_turns(SessionHandle("default", session))
        assert [t.role for t in turns] == ["user", "assistant"]
    finally:
        await engine.aclose()
        engine.connector.close()
