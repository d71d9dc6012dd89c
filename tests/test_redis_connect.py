"""A new pooled connection's first command succeeds even when its health check falls due
inside the connect handshake (the event loop stalled past ``HEALTH_CHECK_S`` there, as it can
on a loaded two-core machine). redis-py pipelines ``CLIENT SETINFO`` on connect; Redis before
7.2 (the embedded 6.2, Debian's 7.0) refuses it, and a PING sent before its error was read
read that error instead: the command failed with "Unknown subcommand ... 'SETINFO'", and the
call's embeddings were lost (seen once in a history bench). A health check due on every
command stands in for the stall: without ``driver_info=None`` both tests fail with it."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentmem.store import connection
from agentmem.store.connection import RedisConnector


@pytest.fixture
def health_check_always_due(monkeypatch):
    monkeypatch.setattr(connection, "HEALTH_CHECK_S", 1e-9)


async def _first_commands(connector: RedisConnector) -> list:
    client = connector.client()
    try:
        return [await client.set("agentmem:test:connect", "1"),
                await client.get("agentmem:test:connect"), await client.delete("agentmem:test:connect")]
    finally:
        await client.aclose()


async def test_first_command_on_the_embedded_redis(health_check_always_due, tmp_path: Path):
    connector = RedisConnector(directory=tmp_path / "data")
    try:
        assert await _first_commands(connector) == [True, b"1", 1]
    finally:
        connector.close()


async def test_first_command_on_debian_redis_server(health_check_always_due, redis_server):
    connector = RedisConnector(redis_server.url)
    try:
        assert await _first_commands(connector) == [True, b"1", 1]
    finally:
        connector.close()
