"""The same engine on Debian's redis-server (AGENTMEM_REDIS_URL), with TTLs and hash-tagged keys."""

from __future__ import annotations

import uuid

import redis

from agentmem import Hygiene
from agentmem.config import Settings
from agentmem.policy import policy_from_dict
from agentmem.store.keys import SessionKeys


async def test_round_trip_on_redis_server_with_ttl(redis_server, upstream):
    engine = Hygiene("default", settings=Settings(redis_url=redis_server.url))
    policy = policy_from_dict({"name": "short", "ttl_seconds": 600, "embed": True})
    session = f"rs-{uuid.uuid4().hex[:8]}"
    history = [{"role": "user", "content": "Store me in a real Redis. Twice over."}]
    try:
        reply = await engine.acompletion("openai/echo", history, session_id=session, policy=policy,
                                         api_base=f"{upstream.url}/v1", api_key="sk-test")
        history += [reply.choices[0].message.model_dump(exclude_none=True),
                    {"role": "user", "content": "Again."}]
        await engine.acompletion("openai/echo", history, session_id=session, policy=policy,
                                 api_base=f"{upstream.url}/v1", api_key="sk-test")
        await engine.aclose()
    finally:
        engine.connector.close()
    plain = redis.Redis.from_url(redis_server.url)
    keys = sorted(k.decode() for k in plain.keys(f"agentmem:{{default:{session}}}:*"))
    assert [k.rsplit(":", 1)[1] for k in keys] == ["active", "chain", "emb2", "meta", "report_ids",
                                                    "reports", "turns"]
    assert all(0 < plain.ttl(k) <= 600 for k in keys)
    assert plain.llen(f"agentmem:{{default:{session}}}:active") == 4
    assert plain.hlen(SessionKeys("default", session).embeddings) == 4  # every turn embedded
    assert plain.zscore("agentmem:tenant:{default}:sessions", session) is not None
