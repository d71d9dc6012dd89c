"""agentmem on a real Redis Cluster: 3 masters + 3 replicas of Debian's redis-server on loopback.

- every key of a session carries the hash tag ``{tenant:session}``: one slot, so the commit
  script and the lock work on a cluster;
- a ``redis+cluster://HOST:PORT`` URL gives a cluster client (redis-py's ``RedisCluster``): round
  trip, session list, embeddings, and a master's failover;
- a plain ``redis://`` URL to one cluster node is a single-node client, which cannot follow
  MOVED redirections: a call passes through unstored for a session whose slot lives on another
  node (the test documents why the cluster URL is needed).
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from agentmem import Hygiene
from agentmem.config import Settings
from agentmem.store import SessionHandle
from agentmem.store.keys import SessionKeys, tenant_index
from tests.servers import free_port, probe_node, require_redis_server, wait_until

NODE_TIMEOUT_MS = 1000


class ClusterNodes:
    """Six redis-server processes in cluster mode (each with its own bus port) joined by
    ``redis-cli --cluster create --cluster-replicas 1``."""

    def __init__(self, folder: Path, size: int = 6) -> None:
        self.folder = folder
        self.size = size
        self.ports: list[int] = []
        self.processes: dict[int, subprocess.Popen] = {}

    def start(self) -> ClusterNodes:
        for _ in range(self.size):
            self._start_node()
        subprocess.run(["redis-cli", "--cluster", "create",
                        *[f"127.0.0.1:{p}" for p in self.ports], "--cluster-replicas", "1",
                        "--cluster-yes"], check=True, capture_output=True, timeout=60)
        wait_until(self.healthy, "the cluster is ok on every node")
        return self

    def _start_node(self, tries: int = 5) -> None:
        """Start one node on fresh ports, again on others if it exits at start.

        A port from ``free_port`` is only free when asked: before redis-server binds it, an
        outgoing connection (another test, a node's cluster bus) may take it, and the node
        exits at once. Nodes start one by one so no port handed out is still unbound.
        """
        for _ in range(tries):
            port, bus = free_port(), free_port()
            if bus == port:
                continue
            folder = self.folder / str(port)
            folder.mkdir(parents=True, exist_ok=True)
            process = subprocess.Popen(
                ["redis-server", "--port", str(port), "--cluster-port", str(bus),
                 "--bind", "127.0.0.1", "--cluster-enabled", "yes", "--cluster-config-file",
                 str(folder / "nodes.conf"), "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
                 "--appendonly", "yes", "--save", "", "--dir", str(folder)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait_until(lambda proc=process, p=port: proc.poll() is not None or probe_node(p).ping(),
                      f"node {port} answers or exits")
            if process.poll() is None:
                self.ports.append(port)
                self.processes[port] = process
                return
            process.wait(timeout=10)
        raise AssertionError(f"no cluster node started in {tries} tries")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.alive()[0]}/0"

    def alive(self) -> list[int]:
        return [p for p, process in self.processes.items() if process.poll() is None]

    def healthy(self) -> bool:
        return all(b"cluster_state:ok" in _node(p).execute_command("CLUSTER", "INFO")
                   for p in self.alive())

    def master_of(self, key: str) -> int:
        """The port of the master serving ``key``'s slot, as a live node sees it."""
        node = _node(self.alive()[0])
        slot = node.cluster("keyslot", key)
        for start, end, master, *_ in node.execute_command("CLUSTER", "SLOTS"):
            if start <= slot <= end:
                return int(master[1])
        raise AssertionError(f"slot {slot} is served by no node")

    def kill(self, port: int) -> None:
        self.processes[port].kill()
        self.processes[port].wait()

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()
        for process in self.processes.values():
            process.wait(timeout=10)


def _node(port: int) -> redis.Redis:
    return redis.Redis(port=port, socket_timeout=2)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[ClusterNodes]:
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        if require_redis_server():
            pytest.fail("redis-server is required (AGENTMEM_REQUIRE_REDIS_SERVER=1) but not installed")
        pytest.skip("Debian redis-server / redis-cli are not installed")
    nodes = ClusterNodes(tmp_path_factory.mktemp("cluster"))
    try:
        yield nodes.start()
    finally:
        nodes.stop()


def _engine(url: str, *, cluster_client: bool) -> Hygiene:
    if cluster_client:
        url = url.replace("redis://", "redis+cluster://", 1)
    return Hygiene("default", settings=Settings(redis_url=url))


async def _say(engine: Hygiene, upstream, session: str, history: list[dict]) -> str:
    """One call; returns the warning header ('' when the call was stored as asked)."""
    reply = await engine.acompletion("openai/echo", history, session_id=session,
                                     api_base=f"{upstream.url}/v1", api_key="sk-test")
    history.append(reply.choices[0].message.model_dump(exclude_none=True))
    return reply._hidden_params["agentmem"].get("X-Agentmem-Warning", "")


def _session_on(cluster: ClusterNodes, port: int, *, same: bool) -> str:
    """A session id whose slot is (or is not) served by the master on ``port``."""
    for _ in range(1000):
        session = f"cl-{uuid.uuid4().hex[:8]}"
        if (cluster.master_of(SessionKeys("default", session).turns) == port) == same:
            return session
    raise AssertionError("no such session id in 1000 tries")


def test_every_key_of_a_session_is_in_one_slot(cluster):
    node = _node(cluster.alive()[0])
    keys = SessionKeys("default", "cl-slots")
    names = [*keys.data_keys(), keys.lock, keys.judge_spent]
    assert len({node.cluster("keyslot", name) for name in names}) == 1
    # the tenant index is one key of its own, in the tenant's slot
    assert node.cluster("keyslot", tenant_index("default")) == node.cluster("keyslot", "{default}")


async def test_a_plain_url_to_a_cluster_node_is_not_enough(cluster, upstream):
    """A plain redis:// URL on a cluster node: why the redis+cluster:// URL is needed."""
    port = cluster.master_of(tenant_index("default"))
    url = f"redis://127.0.0.1:{port}/0"
    engine = _engine(url, cluster_client=False)
    elsewhere, here = _session_on(cluster, port, same=False), _session_on(cluster, port, same=True)
    try:
        warning = await _say(engine, upstream, elsewhere, [{"role": "user", "content": "hi"}])
        assert "session store unavailable (MovedError" in warning
        assert "could not be stored" not in warning
        # the tenant index shares this node: only a call on this node's slots gets stored
        assert await _say(engine, upstream, here, [{"role": "user", "content": "hi"}]) == ""
        other = next(p for p in cluster.alive() if p != port and _is_master(p))
        url_elsewhere = f"redis://127.0.0.1:{other}/0"
        await engine.aclose()
        engine.connector.close()
        engine = _engine(url_elsewhere, cluster_client=False)
        on_other = _session_on(cluster, other, same=True)
        # The session's slot is here but the tenant index lives elsewhere: the turns are
        # stored and the client is told nothing wrong; only the listing is behind (a log line).
        assert await _say(engine, upstream, on_other, [{"role": "user", "content": "hi"}]) == ""
        assert _node(other).llen(SessionKeys("default", on_other).active) == 2
    finally:
        await engine.aclose()
        engine.connector.close()


def _is_master(port: int) -> bool:
    return _node(port).info("replication")["role"] == "master"


async def test_round_trip_with_a_cluster_client(cluster, upstream):
    engine = _engine(cluster.url, cluster_client=True)
    masters = [p for p in cluster.alive() if _is_master(p)]
    assert len(masters) == 3
    sessions = [_session_on(cluster, port, same=True) for port in masters]  # one on each master
    try:
        for session in sessions:
            history = [{"role": "user", "content": "Remember: the vault code is 4512."}]
            assert await _say(engine, upstream, session, history) == ""
            history.append({"role": "user", "content": "What is the code?"})
            assert await _say(engine, upstream, session, history) == ""
        await engine.drain()
        store = engine.store()
        for session in sessions:
            turns = await store.active_turns(SessionHandle("default", session))
            assert [t.message["content"] for t in turns] == [
                "Remember: the vault code is 4512.", "echo: Remember: the vault code is 4512.",
                "What is the code?", "echo: What is the code?"]
            assert len(await store.embeddings(SessionHandle("default", session), [0, 1, 2, 3])) == 4
        listed = {s["session_id"] for s in await store.list_sessions("default", limit=1000)}
        assert set(sessions) <= listed
    finally:
        await engine.aclose()
        engine.connector.close()


async def test_a_master_fails_over_and_the_session_goes_on(cluster, upstream):
    engine = _engine(cluster.url, cluster_client=True)
    session = f"cl-{uuid.uuid4().hex[:8]}"
    keys = SessionKeys("default", session)
    history = [{"role": "user", "content": "Before the failover."}]
    try:
        assert await _say(engine, upstream, session, history) == ""
        await engine.drain()
        master = cluster.master_of(keys.turns)
        assert _node(master).execute_command("WAIT", 1, 5000) >= 1  # a replica has the turns
        cluster.kill(master)
        wait_until(lambda: cluster.master_of(keys.turns) != master and cluster.healthy(),
                  "a replica took the slot over", timeout=60)
        history.append({"role": "user", "content": "After the failover."})
        assert await _say(engine, upstream, session, history) == ""
        turns = await engine.store().active_turns(SessionHandle("default", session))
        assert [t.message["content"] for t in turns] == [
            "Before the failover.", "echo: Before the failover.",
            "After the failover.", "echo: After the failover."]
    finally:
        await engine.aclose()
        engine.connector.close()
