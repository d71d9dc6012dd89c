"""An agent step's calls on two workers (two engines, one real redis-server) keep one prefix."""

from __future__ import annotations

import json
import uuid

import redis

from agentmem import Hygiene
from agentmem.config import Settings
from agentmem.policy import policy_from_dict
from agentmem.store import SessionHandle
from agentmem.store.keys import SessionKeys
from tests.conversations import SHOPPING_HISTORY as HISTORY
from tests.conversations import WEATHER_CALLED, WEATHER_THEN_CAR

STEP = [{"role": "assistant", "content": None, "tool_calls": [
            {"id": "t9", "type": "function", "function": {"name": "recipes", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "t9",
         "content": "Spaghetti aglio e olio: pasta, garlic, olive oil, chili flakes, parsley."}]
POLICY = policy_from_dict({"name": "steps-shared", "stages": ["prune"], "embed": False,
                           "ttl_seconds": 600, "prune": {"history_floor_tokens": 0,
                                                         "history_fraction": 0.3,
                                                         "keep_recent_exchanges": 1}})


async def test_a_steps_later_call_on_another_worker_replays_the_first_calls_outcome(redis_server):
    """Worker A prunes the step's first call; the step's second call lands on worker B, whose
    process never saw the step: it reads A's record beside the session and sends the same
    older history, byte for byte. A session deleted takes the record with it."""
    workers = [Hygiene("off", settings=Settings(redis_url=redis_server.url)) for _ in range(2)]
    session = f"steps-{uuid.uuid4().hex[:8]}"
    before_step = len(HISTORY) - 1

    def prefix(result):
        return [m for i, m in zip(result.kept_indices, result.messages) if i < before_step]

    try:
        first = await workers[0].apply(HISTORY, session_id=session, policy=POLICY)
        await workers[0].drain()
        second = await workers[1].apply([*HISTORY, *STEP], session_id=session, policy=POLICY)
        [run] = [r for r in second.report.stages if r.stage == "prune"]
        assert run.replayed and run.decisions == first.report.stages[0].decisions
        assert prefix(second) == prefix(first)
        assert not any("spaghetti" in json.dumps(m).lower() for m in prefix(second))
        plain = redis.Redis.from_url(redis_server.url)
        keys = SessionKeys("default", session)
        assert plain.hexists(keys.steps, "prune") and 0 < plain.ttl(keys.steps) <= 600
        assert await workers[1].store().delete(SessionHandle("default", session))
        assert not plain.exists(keys.steps)
    finally:
        for worker in workers:
            await worker.aclose()
            worker.connector.close()


async def test_a_steps_later_call_on_another_worker_offers_the_tools_the_first_offered(redis_server):
    """Worker B, which never saw the step, still only adds to the tools worker A offered."""
    from tests.test_tools_stage import TOOLS

    policy = policy_from_dict({"name": "steps-tools", "stages": ["tools"], "embed": False,
                               "tools": {"memory": {"enabled": False}}})
    question, answer = WEATHER_THEN_CAR, WEATHER_CALLED
    workers = [Hygiene("off", settings=Settings(redis_url=redis_server.url)) for _ in range(2)]
    session = f"steps-{uuid.uuid4().hex[:8]}"
    try:
        first = await workers[0].apply([question], tools=TOOLS, session_id=session, policy=policy)
        await workers[0].drain()
        second = await workers[1].apply([question, *answer], tools=TOOLS, session_id=session,
                                        policy=policy)
        offered = [[t["function"]["name"] for t in r.tools] for r in (first, second)]
        assert len(offered[0]) < len(TOOLS) and set(offered[0]) <= set(offered[1])
    finally:
        for worker in workers:
            await worker.aclose()
            worker.connector.close()


async def test_only_a_reply_that_continues_the_step_leaves_its_record_to_share(redis_server):
    """A chat answer ends its step: no later call will read the record, so it is neither
    encoded nor written; a tool call continues the step, so it is, beside the session."""
    worker = Hygiene("off", settings=Settings(redis_url=redis_server.url))
    plain = redis.Redis.from_url(redis_server.url)
    replies = {"answer": {"role": "assistant", "content": "Pasta with garlic and olive oil."},
               "tool call": {"role": "assistant", "content": None, "tool_calls": [{
                   "id": "t9", "type": "function",
                   "function": {"name": "find_recipe", "arguments": "{\"q\": \"pasta\"}"}}]}}
    stored = {}
    try:
        for kind, reply in replies.items():
            session = f"steps-{uuid.uuid4().hex[:8]}"
            call = await worker.prepare({"model": "echo", "messages": HISTORY},
                                        session_id=session, policy=POLICY)
            [run] = [r for r in call.report.stages if r.stage == "prune"]
            assert run.decisions  # the stage changed the older history: a record to share
            await call.finish(reply)
            stored[kind] = plain.hexists(SessionKeys("default", session).steps, "prune")
        assert stored == {"answer": False, "tool call": True}
    finally:
        await worker.aclose()
        worker.connector.close()
