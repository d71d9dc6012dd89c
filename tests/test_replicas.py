"""Two `agentmem serve` processes on one redis-server, serving one session: nothing lost or doubled.

The replicas share nothing but Redis: the session lock and the commit script are what keep
one session consistent when its calls land on either. The checks are the reliability
bench's (``agentmem.bench.reliability``): acknowledged replies stored exactly once (by report
id), and the active history equal to what the clients were acknowledged.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import httpx
import pytest

from agentmem.bench.reliability import (
    Conversation,
    ProxyProcess,
    Tally,
    audit_conversations,
    stored_turns,
    write_config,
)


@pytest.fixture(scope="module")
def replicas(upstream, redis_server, tmp_path_factory) -> Iterator[list[ProxyProcess]]:
    workdir = tmp_path_factory.mktemp("replicas")
    config = write_config(workdir, f"{upstream.url}/v1")
    pair = [ProxyProcess(workdir, name, config, redis_server.url) for name in ("one", "two")]
    try:
        for proxy in pair:
            proxy.launch()
        for proxy in pair:
            proxy.ready(embedder=False)
        yield pair
    finally:
        for proxy in pair:
            proxy.stop()


def _clients(replicas: list[ProxyProcess]) -> list:
    import openai

    return [openai.AsyncOpenAI(base_url=f"{p.url}/v1", api_key="sk-test", max_retries=0, timeout=120)
            for p in replicas]


async def _audit(replicas: list[ProxyProcess], conversations: list[Conversation], tally: Tally):
    async with httpx.AsyncClient(base_url=replicas[0].url, timeout=30) as http:
        audit = await audit_conversations(http, conversations, tally.acks)
        turns = await stored_turns(http, conversations[0].session_id)
    return audit, [t for t in turns if t["active"]]


async def test_one_session_alternating_between_replicas(replicas):
    clients, tally = _clients(replicas), Tally()
    conversation = Conversation(f"rep-alt-{uuid.uuid4().hex[:8]}")
    for step in range(6):
        await conversation.turn(clients[step % 2], tally, conversation.next_text(),
                                stream=step % 3 == 2)
    assert tally.errors == {} and len(tally.acks) == 6
    audit, active = await _audit(replicas, [conversation], tally)
    assert audit.as_dict() == {"lost": 0, "duplicated": 0, "stray": 0, "out_of_order": 0}
    assert [t["message"]["content"] for t in active] == [m["content"] for m in conversation.history]


async def test_stateful_clients_on_both_replicas_at_once(replicas):
    """Each client sends only its new message; the replicas serialise them through the lock."""
    clients, tally = _clients(replicas), Tally()
    session = f"rep-both-{uuid.uuid4().hex[:8]}"
    conversations = [Conversation(session, stateful=True, name=f"/{i}") for i in range(4)]

    async def run(index: int, conversation: Conversation) -> None:
        for _ in range(3):
            await conversation.turn(clients[index % 2], tally, conversation.next_text())

    await asyncio.gather(*(run(i, c) for i, c in enumerate(conversations)))
    assert tally.errors == {} and len(tally.acks) == 12
    audit, active = await _audit(replicas, conversations, tally)
    assert audit.as_dict() == {"lost": 0, "duplicated": 0, "stray": 0, "out_of_order": 0}
    assert len(active) == 24  # every message and reply, once


async def test_stateless_clients_on_both_replicas_at_once(replicas):
    """Each client resends its own history: the newest committed branch is the session."""
    clients, tally = _clients(replicas), Tally()
    session = f"rep-branches-{uuid.uuid4().hex[:8]}"
    conversations = [Conversation(session, name=f"/{i}") for i in range(4)]

    async def run(index: int, conversation: Conversation) -> None:
        for step in range(3):
            await conversation.turn(clients[(index + step) % 2], tally, conversation.next_text())

    await asyncio.gather(*(run(i, c) for i, c in enumerate(conversations)))
    assert tally.errors == {} and len(tally.acks) == 12
    audit, active = await _audit(replicas, conversations, tally)
    assert audit.as_dict() == {"lost": 0, "duplicated": 0, "stray": 0, "out_of_order": 0}
    assert len(active) == 6  # one client's three exchanges
