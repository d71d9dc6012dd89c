"""A proxy killed and restarted is usable at once: its locks and jobs are seen to be orphaned,
and a server that is still loading MiniLM serves calls instead of making them wait.

Real parts: Debian redis-server, real processes killed with SIGKILL, the real MiniLM.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time

import pytest
import redis.asyncio as aioredis

from agentmem import Hygiene
from agentmem.config import Settings
from agentmem.models.embedder import Embedder
from agentmem.pending import SERVERS_KEY, alive_key, new_server_id, stream_key
from agentmem.store import SessionHandle, SessionStore, owner
from tests.servers import RedisServer, require_redis_server

HOLD = """
import asyncio, sys
import redis.asyncio as aioredis
from agentmem.store import SessionHandle, SessionStore

async def main():
    store = SessionStore(aioredis.from_url(sys.argv[1]))
    async with store.locked(SessionHandle("t", sys.argv[2]), timeout=float(sys.argv[3]), wait=5):
        print("locked", flush=True)
        await asyncio.sleep(600)

asyncio.run(main())
"""


def _hold_lock_then_die(url: str, session: str, lease_s: float) -> None:
    """A process that takes the session's lock and is killed (SIGKILL) while holding it."""
    holder = subprocess.Popen([sys.executable, "-c", HOLD, url, session, str(lease_s)],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=10)


def test_a_token_names_its_process_and_only_a_dead_one_is_dead():
    mine = owner.new_token()
    assert not owner.holder_is_dead(mine)
    assert not owner.holder_is_dead(f"somehost/{mine}")  # a server id: host first
    printed = subprocess.run([sys.executable, "-c",
                              "from agentmem.store import owner; print(owner.new_token())"],
                             capture_output=True, text=True, check=True).stdout.strip()
    assert owner.holder_is_dead(printed)  # that process has exited
    machine = mine.split("/")[0].rsplit(".", 2)[0]
    # Unknown is alive: another machine (or PID namespace), the old token format, garbage.
    assert not owner.holder_is_dead(printed.replace(machine, "other-boot.4026531836"))
    assert not owner.holder_is_dead("0f6c1b2e9d8a4c3b")
    assert not owner.holder_is_dead(None)
    assert not owner.holder_is_dead(b"x/123")


async def test_a_dead_holders_lock_is_taken_at_once_a_live_or_foreign_one_is_waited_for(redis_server):
    client = aioredis.from_url(redis_server.url)
    store = SessionStore(client)
    try:
        # A killed holder on this machine: taken at once, although its lease has 30 s left.
        await asyncio.to_thread(_hold_lock_then_die, redis_server.url, "dead-holder", 30)
        started = time.perf_counter()
        async with store.locked(SessionHandle("t", "dead-holder"), timeout=8, wait=20):
            took = time.perf_counter() - started
        assert took < 1.0, f"waited {took:.1f} s for a dead holder's lock"

        # A holder that cannot be checked (another machine): its lease decides.
        handle = SessionHandle("t", "foreign-holder")
        await client.set(handle.keys.lock, "other-boot.1.2.3/feedbeef", px=1500)
        started = time.perf_counter()
        async with store.locked(handle, timeout=8, wait=20):
            took = time.perf_counter() - started
        assert 1.0 < took < 5.0, f"a foreign holder's lease was not waited out ({took:.1f} s)"

        # A live holder (this process): waited for, never broken.
        handle = SessionHandle("t", "live-holder")
        async with store.locked(handle, timeout=8, wait=20) as lock:
            token = lock.local.token
            with pytest.raises(Exception, match="busy"):
                async with store.locked(handle, timeout=8, wait=0.5):
                    pass
            assert await client.get(handle.keys.lock) == token
    finally:
        await client.aclose()


async def test_a_restarted_server_adopts_a_dead_servers_jobs_without_waiting_out_its_lease(tmp_path):
    """The jobs of a server killed on this machine are adoptable at once (its alive key,
    15 s, is not waited out): the restarted server redoes them in its first look."""
    if not RedisServer.available():
        if require_redis_server():
            pytest.fail("redis-server is required (AGENTMEM_REQUIRE_REDIS_SERVER=1)")
        pytest.skip("Debian redis-server is not installed")
    redis_server = RedisServer(tmp_path / "redis").start()  # its own: no other test's jobs
    client = aioredis.from_url(redis_server.url)
    try:
        dead = subprocess.run([sys.executable, "-c",
                               "from agentmem.pending import new_server_id; print(new_server_id())"],
                              capture_output=True, text=True, check=True).stdout.strip()
        await client.xadd(stream_key(dead), {"kind": "after_reply", "tenant": "t", "session": "s",
                                             "turns": "0", "policy": "off", "ttl": "0"})
        await client.set(alive_key(dead), b"1", ex=15)
        await client.sadd(SERVERS_KEY, dead)
        live = new_server_id()
        await client.set(alive_key(live), b"1", ex=15)  # a live replica's lease: left alone
        await client.sadd(SERVERS_KEY, live)
        await client.xadd(stream_key(live), {"kind": "after_reply", "tenant": "t", "session": "s2",
                                             "turns": "0", "policy": "off", "ttl": "0"})

        hygiene = Hygiene("off", redis_url=redis_server.url)
        try:
            ledger = hygiene.after_reply_jobs().ledger(hygiene.store())
            adopted = await ledger.adopt()
            assert [job.session_id for _, job in adopted] == ["s"]
            assert await client.exists(stream_key(dead)) == 0
            assert await client.xlen(stream_key(live)) == 1
        finally:
            await hygiene.aclose()
            hygiene.connector.close()
    finally:
        await client.aclose()
        redis_server.stop()


def _long_conversation(turns: int) -> list[dict[str, str]]:
    messages = []
    for i in range(turns):
        question = (f"Question {i}: what about the lantern in the harbour museum number {i}? "
                    "It was moved twice last spring. The curator wrote a report.")
        answer = (f"Answer {i}: the lantern number {i} is kept in the east wing. "
                  "Visitors may see it on Sundays. Tickets cost four euros.")
        messages += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
    messages[4]["content"] += " My locker code is 7731."
    return [*messages, {"role": "user", "content": "What is my locker code?"}]


async def test_a_call_does_not_wait_for_a_loading_model_and_says_what_it_skipped(data_dir):
    """While MiniLM is loading (a server just started), the stages that need vectors are
    skipped for the call, with a warning, and the rest run; once loaded, the call is pruned."""
    embedder = Embedder()
    hygiene = Hygiene("default", settings=Settings(data_dir=data_dir), embedder=embedder)
    messages = _long_conversation(40)
    try:
        embedder.will_load()  # the server's warm-up has begun, and is not done
        started = time.perf_counter()
        early = await hygiene.apply(messages, session_id="warming-up")
        took = time.perf_counter() - started
        assert not embedder.loaded  # the call neither loaded it nor waited for it
        assert took < 5.0
        skipped = {run.stage: run.skipped for run in early.report.stages if run.skipped}
        assert "prune" in skipped and "loading" in skipped["prune"]
        assert any("prune skipped" in warning for warning in early.report.warnings)
        assert early.messages == messages  # nothing half-pruned is sent

        await asyncio.to_thread(embedder.load)
        later = await hygiene.apply(messages, session_id="warming-up-2")
        assert not any(run.skipped for run in later.report.stages)
        assert len(str(later.messages)) < len(str(messages))  # pruned now
        assert "7731" in str(later.messages)
    finally:
        await hygiene.aclose()
        hygiene.connector.close()


def test_the_warm_up_pays_litellms_first_call_cost():
    """``Hygiene.warm_up`` makes litellm's first real call cheap (it was about 1 s)."""
    script = (
        "import asyncio, time\n"
        "from agentmem import Hygiene\n"
        "h = Hygiene('off')\n"
        "asyncio.run(h.warm_up(models=False))\n"
        "import litellm\n"
        "start = time.perf_counter()\n"
        "try:\n"
        "    asyncio.run(litellm.acompletion(model='openai/x', api_base='http://127.0.0.1:1/v1', "
        "api_key='k', max_retries=0, timeout=2, messages=[{'role': 'user', 'content': 'hi'}]))\n"
        "except Exception:\n"
        "    pass\n"
        "print(time.perf_counter() - start)\n")
    took = float(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                                check=True).stdout.strip().splitlines()[-1])
    assert took < 0.5, f"litellm's first call after the warm-up took {took:.2f} s"


def test_a_job_under_an_operators_policy_file_is_redone_with_that_policy(tmp_path):
    """A restarted server redoes a job with the policy its call ran under, also when that is a
    file of the server's ``policy_dirs`` (found by file name, or by the name inside the file);
    a name it does not serve still gets the embeddings only, and a path is never read."""
    from agentmem.config import Settings
    from agentmem.pending import AfterReplyJob, AfterReplyWork

    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / "mine.yaml").write_text("extends: default\nname: mine\ntools:\n  max_tools: 3\n")
    (folder / "other-file.yaml").write_text("extends: default\nname: renamed\n")
    engine = Hygiene("off", settings=Settings(data_dir=tmp_path / "data", policy_dirs=[folder]))
    try:
        work = AfterReplyWork(engine)

        def redone_with(policy: str):
            return work.policy_for(AfterReplyJob("default", "s", (1,), policy))

        mine = redone_with("mine")
        assert mine.name == "mine" and mine.tools.max_tools == 3 and "quarantine" in mine.stages
        assert redone_with("renamed").name == "renamed" and redone_with("renamed").stages
        assert redone_with("nobody").stages == []
        assert redone_with("../policies/mine").stages == []
    finally:
        engine.close()
