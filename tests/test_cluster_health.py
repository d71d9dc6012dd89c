"""``/healthz`` on a real Redis Cluster (3 masters, no replicas, Debian's redis-server on
loopback) says "degraded" as soon as the cluster cannot serve every slot, not only once a call
fails: PING on a cluster client reaches some live node and succeeds whatever the others do.

- a master killed: degraded at once, while the live nodes still say ``cluster_state:ok``
  (they flip to ``fail`` only after ``cluster-node-timeout``);
- a master stopped (SIGSTOP, a hung host): degraded within the check's short timeout, ok again
  once it runs (SIGCONT);
- ``cluster_state:fail`` with every node up (a slot no master serves): degraded.

Each test starts its own cluster: the module cluster of ``test_cluster.py`` has replicas and is
shared, and these tests break theirs on purpose.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from agentmem.api import Hygiene
from agentmem.config import Settings
from agentmem.proxy import create_app
from agentmem.store import StoreUnavailable
from tests.servers import ThreadServer, free_port, probe_node, require_redis_server, wait_until

# Long enough that the live nodes still say cluster_state:ok for the whole of a test that
# kills a master: the window in which PING alone answered "ok" while calls failed.
NODE_TIMEOUT_MS = 30_000


class Masters:
    """Three redis-server masters in cluster mode, no replicas: a master lost is slots lost."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.processes: dict[int, subprocess.Popen] = {}

    def start(self) -> Masters:
        for _ in range(3):
            self._start_node()
        subprocess.run(["redis-cli", "--cluster", "create",
                        *[f"127.0.0.1:{p}" for p in self.processes], "--cluster-replicas", "0",
                        "--cluster-yes"], check=True, capture_output=True, timeout=60)
        wait_until(lambda: all(self.state(p) == "ok" for p in self.processes),
                  "cluster_state:ok on every node")
        return self

    def _start_node(self, tries: int = 5) -> None:
        """One node on fresh ports (again on others if a port was taken before it bound)."""
        for _ in range(tries):
            port, bus = free_port(), free_port()
            if bus == port:
                continue
            folder = self.folder / str(port)
            folder.mkdir(parents=True, exist_ok=True)
            process = subprocess.Popen(
                ["redis-server", "--port", str(port), "--cluster-port", str(bus),
                 "--bind", "127.0.0.1", "--cluster-enabled", "yes",
                 "--cluster-config-file", str(folder / "nodes.conf"),
                 "--cluster-node-timeout", str(NODE_TIMEOUT_MS), "--save", "",
                 "--appendonly", "no", "--dir", str(folder)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait_until(lambda proc=process, p=port: proc.poll() is not None or probe_node(p).ping(),
                      f"node {port} answers or exits")
            if process.poll() is None:
                self.processes[port] = process
                return
            process.wait(timeout=10)
        raise AssertionError(f"no cluster node started in {tries} tries")

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{next(iter(self.processes))}/0"

    def state(self, port: int) -> str:
        return probe_node(port).cluster("info")["cluster_state"]

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                os.kill(process.pid, signal.SIGCONT)
                process.terminate()
        for process in self.processes.values():
            process.wait(timeout=10)


@pytest.fixture
def masters(tmp_path) -> Iterator[Masters]:
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        if require_redis_server():
            pytest.fail("redis-server is required (AGENTMEM_REQUIRE_REDIS_SERVER=1) but not installed")
        pytest.skip("Debian redis-server / redis-cli are not installed")
    nodes = Masters(tmp_path / "cluster")
    try:
        yield nodes.start()
    finally:
        nodes.stop()


def _health(url: str) -> dict:
    return httpx.get(f"{url}/healthz", timeout=30).json()


def test_a_killed_master_is_degraded_before_the_cluster_says_fail(masters):
    server = ThreadServer(create_app(Settings(redis_url=masters.url), warm_models=False)).start()
    try:
        health = _health(server.url)
        assert (health["status"], health["redis"]) == ("ok", "ok")
        first, *live = masters.processes
        masters.processes[first].kill()
        masters.processes[first].wait()
        started = time.perf_counter()
        health = _health(server.url)
        assert health["status"] == "degraded", health
        assert health["redis"].startswith("unavailable: "), health
        assert time.perf_counter() - started < 5
        # the live nodes have not noticed yet: this is the window PING alone called "ok"
        assert [masters.state(p) for p in live] == ["ok", "ok"]
        assert _health(server.url)["status"] == "degraded"  # and it stays so
    finally:
        server.stop()


async def test_a_stopped_master_is_degraded_within_the_timeout_and_ok_once_it_runs(masters):
    engine = Hygiene("off", settings=Settings(redis_url=masters.url))
    stopped = masters.processes[next(iter(masters.processes))]
    try:
        store = engine.store()
        assert await store.ping() is True
        os.kill(stopped.pid, signal.SIGSTOP)
        started = time.perf_counter()
        with pytest.raises(StoreUnavailable):
            await store.ping()
        assert time.perf_counter() - started < 5  # a hung master never hangs /healthz
        os.kill(stopped.pid, signal.SIGCONT)
        assert await store.ping() is True
    finally:
        os.kill(stopped.pid, signal.SIGCONT)
        await engine.aclose()
        engine.connector.close()


async def test_cluster_state_fail_is_degraded_with_every_node_up(masters):
    engine = Hygiene("off", settings=Settings(redis_url=masters.url))
    try:
        store = engine.store()
        assert await store.ping() is True
        for port in masters.processes:  # slot 0 served by no master: the cluster is down
            probe_node(port).execute_command("CLUSTER", "DELSLOTS", 0)
        wait_until(lambda: all(masters.state(p) == "fail" for p in masters.processes),
                  "cluster_state:fail on every node")
        with pytest.raises(StoreUnavailable, match="cluster_state"):
            await store.ping()
    finally:
        await engine.aclose()
        engine.connector.close()


async def test_a_single_node_store_pings_as_before(redis_server):
    engine = Hygiene("off", settings=Settings(redis_url=redis_server.url))
    try:
        assert await engine.store().ping() is True
    finally:
        await engine.aclose()
        engine.connector.close()
