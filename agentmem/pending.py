"""After-reply work that outlives its process: recorded in Redis when queued, removed when done.

After a reply, a call's new turns are embedded and each stage's ``after_reply`` hook runs (the
quarantine's detection), in the background of the process that served the call. A large
paste makes that minutes of work: a server shutting down should not wait for it, and one that
crashed cannot. So each job is also an entry of a Redis stream naming what to redo from the
stored turns (tenant, session, turn ids, policy), deleted when the job is done.

Keys, under one hash tag so a cluster keeps them in one slot and a script may use them all:

- ``agentmem:{jobs}:stream:<server>``: a server's unfinished jobs, in queue order;
- ``agentmem:{jobs}:alive:<server>``: exists while the server lives (a lease it renews while
  it has jobs running);
- ``agentmem:{jobs}:servers``: the servers that may have a stream.

A server whose alive key is gone (it shut down and let go, or it died and the lease ran out)
is an orphan: the first server to look moves its entries into its own stream, in one script so
two servers never both take them, and redoes them. A server shutting down deletes its own alive
key, so the next start (or a running replica) takes its jobs over at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import re
import socket
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentmem.errors import PolicyError
from agentmem.policy import Policy, preset_names
from agentmem.store import SessionStore, StoreUnavailable, owner
from agentmem.store.sessions import _wrap_errors

if TYPE_CHECKING:
    from agentmem.api import Hygiene

log = logging.getLogger("agentmem.pending")

LEASE_S = 15.0  # a server that stops renewing for this long is taken for dead
ADOPT_EVERY_S = 5.0  # how often a server looks for orphaned jobs
ADOPT_BATCH = 200  # jobs moved per script run (one script must not hold Redis long)
# Backlog jobs of one loop (``queue(..., in_turn=True)``) doing their work at once; the rest
# wait their turn holding no more than their record.
RUNNING_JOBS = 4
_BASE = "agentmem:{jobs}"
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")  # a policy file name, never a path
SERVERS_KEY = f"{_BASE}:servers"


def stream_key(server: str) -> str:
    return f"{_BASE}:stream:{server}"


def alive_key(server: str) -> str:
    return f"{_BASE}:alive:{server}"


def new_server_id() -> str:
    """Unique per process start: a restarted server is a new server that adopts the old one.
    It names the process (``agentmem.store.owner``), so a server restarted on the same machine
    sees that its predecessor died and adopts its jobs at once, not after the lease."""
    return f"{socket.gethostname()}/{owner.new_token()}"


@dataclass(frozen=True)
class AfterReplyJob:
    """What redoing one call's after-reply work needs; the rest is read from the stored turns."""

    tenant: str
    session_id: str
    turn_ids: tuple[int, ...]
    policy: str  # the policy's name: the server's own, a preset, or one of its policy_dirs
    ttl: int = 0  # the session's TTL in seconds (0: none), for a policy no longer known

    def fields(self) -> dict[str, str]:
        return {"kind": "after_reply", "tenant": self.tenant, "session": self.session_id,
                "turns": ",".join(map(str, self.turn_ids)), "policy": self.policy,
                "ttl": str(self.ttl)}

    @classmethod
    def parse(cls, flat: list[bytes]) -> AfterReplyJob | None:
        """From a stream entry's flat field list; None for an entry this version cannot read."""
        try:
            raw = {flat[i].decode(): flat[i + 1].decode() for i in range(0, len(flat) - 1, 2)}
            if raw.get("kind") != "after_reply":
                return None
            turns = tuple(int(t) for t in raw["turns"].split(",") if t)
            return cls(raw["tenant"], raw["session"], turns, raw["policy"], int(raw.get("ttl") or 0))
        except (KeyError, ValueError, UnicodeDecodeError):
            return None


# Move up to ARGV[4] entries of an orphan's stream into ours, unless the orphan is alive.
# KEYS: orphan's alive key, orphan's stream, our stream, the servers set, our alive key.
# ARGV: orphan id, our id, lease seconds, batch size.
_ADOPT = """
if redis.call('EXISTS', KEYS[1]) == 1 then return {} end
local moved = {}
for _, entry in ipairs(redis.call('XRANGE', KEYS[2], '-', '+', 'COUNT', tonumber(ARGV[4]))) do
  local id = redis.call('XADD', KEYS[3], '*', unpack(entry[2]))
  redis.call('XDEL', KEYS[2], entry[1])
  moved[#moved + 1] = {id, entry[2]}
end
if redis.call('XLEN', KEYS[2]) == 0 then
  redis.call('DEL', KEYS[2])
  redis.call('SREM', KEYS[4], ARGV[1])
end
if #moved > 0 then
  redis.call('SADD', KEYS[4], ARGV[2])
  redis.call('SET', KEYS[5], '1', 'EX', tonumber(ARGV[3]))
end
return moved
"""

# Let go: drop our lease; with nothing left, drop our stream and our name too.
# KEYS: our alive key, our stream, the servers set. ARGV: our id.
_RELEASE = """
redis.call('DEL', KEYS[1])
if redis.call('XLEN', KEYS[2]) == 0 then
  redis.call('DEL', KEYS[2])
  redis.call('SREM', KEYS[3], ARGV[1])
end
return 1
"""


class Ledger:
    """One server's record of its jobs in one Redis."""

    def __init__(self, redis: Any, server: str, *, lease_s: float = LEASE_S):
        self.redis = redis
        self.server = server
        self.lease = max(1, math.ceil(lease_s))
        self._adopt = redis.register_script(_ADOPT)
        self._release = redis.register_script(_RELEASE)

    @_wrap_errors
    async def record(self, job: AfterReplyJob) -> str:
        """Add a job (and renew our lease with it, so a recorded job always has a live owner)."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.xadd(stream_key(self.server), job.fields())
            pipe.set(alive_key(self.server), b"1", ex=self.lease)
            pipe.sadd(SERVERS_KEY, self.server)
            entry, _, _ = await pipe.execute()
        return entry.decode()

    @_wrap_errors
    async def done(self, entry: str) -> None:
        await self.redis.xdel(stream_key(self.server), entry)

    @_wrap_errors
    async def renew(self) -> None:
        await self.redis.set(alive_key(self.server), b"1", ex=self.lease)

    @_wrap_errors
    async def release(self) -> None:
        await self._release(keys=[alive_key(self.server), stream_key(self.server), SERVERS_KEY],
                            args=[self.server], client=self.redis)

    @_wrap_errors
    async def pending(self) -> int:
        return int(await self.redis.xlen(stream_key(self.server)))

    @_wrap_errors
    async def adopt(self, batch: int = ADOPT_BATCH) -> list[tuple[str, AfterReplyJob]]:
        """Take over the jobs of servers that are gone; (our new entry id, job) for each."""
        out: list[tuple[str, AfterReplyJob]] = []
        for raw in await self.redis.smembers(SERVERS_KEY):
            other = raw.decode()
            if other == self.server:
                continue
            if owner.holder_is_dead(other):  # killed on this machine: no need to wait out its lease
                await self.redis.delete(alive_key(other))
            moved = await self._adopt(
                keys=[alive_key(other), stream_key(other), stream_key(self.server), SERVERS_KEY,
                      alive_key(self.server)],
                args=[other, self.server, self.lease, batch], client=self.redis)
            for entry, flat in moved:
                job = AfterReplyJob.parse(flat)
                if job is None:  # written by a newer version: leave nothing unreadable behind
                    await self.done(entry.decode())
                else:
                    out.append((entry.decode(), job))
        return out


class AfterReplyWork:
    """An engine's after-reply jobs: run at once in the background, recorded until done,
    adopted from servers that are gone (see the module docstring)."""

    def __init__(self, hygiene: Hygiene, *, lease_s: float = LEASE_S,
                 adopt_every_s: float = ADOPT_EVERY_S):
        self.hygiene = hygiene
        self.server = new_server_id()
        self.lease_s = lease_s
        self.adopt_every_s = adopt_every_s
        self._ledgers: weakref.WeakKeyDictionary[SessionStore, Ledger] = weakref.WeakKeyDictionary()
        self.tasks: set[asyncio.Task] = set()  # jobs queued or running, on any loop
        self._keepers: dict[asyncio.AbstractEventLoop, asyncio.Task] = {}
        self._adopters: dict[asyncio.AbstractEventLoop, asyncio.Task] = {}
        self._turns: dict[asyncio.AbstractEventLoop, asyncio.Semaphore] = {}
        self.adopted_waiting = 0  # adopted jobs in hand, not started yet (one runs at a time)

    def ledger(self, store: SessionStore) -> Ledger:
        ledger = self._ledgers.get(store)
        if ledger is None:
            ledger = self._ledgers[store] = Ledger(store.redis, self.server, lease_s=self.lease_s)
        return ledger

    # -- queueing ------------------------------------------------------------------------------

    def queue(self, store: SessionStore, job: AfterReplyJob,
              work: Callable[[], Awaitable[None]], *, in_turn: bool = False) -> asyncio.Task:
        """Record the job and run ``work`` now, or with ``in_turn`` when one of the loop's
        ``RUNNING_JOBS`` turns is free (a backlog's job, whose work loads its session: loaded
        all at once, a backlog is every session in memory). The record is a write that must
        land (the engine's shutdown waits for it); the work may be cancelled, its record stays."""
        recorded = self.hygiene.spawn(self._record(store, job))
        return self._start(store, recorded, work, in_turn=in_turn)

    async def _record(self, store: SessionStore, job: AfterReplyJob) -> str | None:
        try:
            return await self.ledger(store).record(job)
        except StoreUnavailable as error:  # the work still runs; only its record is missing
            log.warning("session %s: after-reply job not recorded: %s", job.session_id, error)
            return None

    def _start(self, store: SessionStore, recorded: Awaitable[str | None],
               work: Callable[[], Awaitable[None]], *, in_turn: bool = False) -> asyncio.Task:
        task = self.hygiene.spawn(self._run(store, recorded, work, in_turn))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        self._keep_lease(store)
        return task

    async def _run(self, store: SessionStore, recorded: Awaitable[str | None],
                   work: Callable[[], Awaitable[None]], in_turn: bool) -> None:
        entry = await asyncio.shield(recorded)
        try:
            if in_turn:
                async with self._turn():
                    await work()
            else:
                await work()
        finally:
            # Done, or failed for good (a retry elsewhere would fail alike): drop the record.
            # Cancelled (a shutdown): keep it, the next owner redoes the job.
            if entry is not None and not _cancelling():
                with contextlib.suppress(StoreUnavailable):
                    await self.ledger(store).done(entry)

    def _turn(self) -> asyncio.Semaphore:
        """This loop's turns for backlog jobs: one starts its work (reads its session, embeds)
        only when one of ``RUNNING_JOBS`` is free, so a backlog waits as records."""
        loop = asyncio.get_running_loop()
        turns = self._turns.get(loop)
        if turns is None:
            turns = self._turns[loop] = asyncio.Semaphore(RUNNING_JOBS)
        return turns

    def _keep_lease(self, store: SessionStore) -> None:
        loop = asyncio.get_running_loop()
        keeper = self._keepers.get(loop)
        if keeper is None or keeper.done():
            self._keepers[loop] = loop.create_task(self._renew_while_busy(store, loop))

    async def _renew_while_busy(self, store: SessionStore, loop: asyncio.AbstractEventLoop) -> None:
        """Renew the lease while this loop runs jobs, so nobody adopts work still in hand."""
        while any(task.get_loop() is loop for task in self.tasks):
            await asyncio.sleep(self.lease_s / 3)
            with contextlib.suppress(StoreUnavailable):
                await self.ledger(store).renew()

    # -- adopting ------------------------------------------------------------------------------

    def adopt_orphans(self) -> None:
        """Keep taking over the jobs of servers that are gone, on this loop, until ``stop``."""
        loop = asyncio.get_running_loop()
        adopter = self._adopters.get(loop)
        if adopter is None or adopter.done():
            self._adopters[loop] = loop.create_task(self._adopt_forever())

    async def _adopt_forever(self) -> None:
        while True:
            try:
                await self._adopt_once()
            except Exception:  # noqa: BLE001 - keep looking; the jobs stay recorded meanwhile
                log.exception("looking for orphaned after-reply jobs failed")
            await asyncio.sleep(self.adopt_every_s)

    async def _adopt_once(self) -> None:
        try:
            store = self.hygiene.store()
            adopted = await self.ledger(store).adopt()
        except StoreUnavailable as error:
            log.debug("no orphaned jobs looked for: %s", error)
            return
        if adopted:
            log.info("redoing %d after-reply job(s) left by stopped servers", len(adopted))
        # One at a time: one lane of the background inference queue, whose lanes are served
        # round robin, so the live sessions' work keeps its share of the CPU.
        remaining = len(adopted)
        self.adopted_waiting += remaining
        try:
            for entry, job in adopted:
                self.adopted_waiting, remaining = self.adopted_waiting - 1, remaining - 1
                done = asyncio.get_running_loop().create_future()
                done.set_result(entry)
                task = self._start(store, done,
                                   functools.partial(self.hygiene.redo_after_reply, store, job))
                await asyncio.gather(task, return_exceptions=True)  # a failure is logged, not ours
        finally:  # cancelled (a shutdown): the rest stay recorded, no longer in hand
            self.adopted_waiting -= remaining

    def policy_for(self, job: AfterReplyJob) -> Policy:
        """The job's policy: the engine's own or a preset, never a path (a job's fields come
        from Redis). Another name (a policy this server does not run) still gets the turns
        embedded, with the session's TTL, but no stage hooks."""
        if job.policy == self.hygiene.policy.name:
            return self.hygiene.policy
        if job.policy in preset_names():
            return self.hygiene.policy_named(job.policy)
        served = self._from_policy_dirs(job.policy)
        if served is not None:
            return served
        log.warning("session %s: policy %r is not known here; redoing the embeddings only",
                    job.session_id, job.policy)
        return Policy(name=job.policy, stages=[], ttl_seconds=job.ttl if job.ttl >= 60 else None)

    def _from_policy_dirs(self, name: str) -> Policy | None:
        """The operator's policy file (``policy_dirs``) whose policy has this name: clients
        pick one by file name, and the job recorded the policy's own name (usually the same;
        else the folders' files are read to find it)."""
        if not _PLAIN_NAME.fullmatch(name) or ".." in name:
            return None
        folders = self.hygiene.settings.policy_dirs
        named = [folder / f"{name}.yaml" for folder in folders]
        others = [path for folder in folders if folder.is_dir()
                  for path in sorted(folder.glob("*.yaml")) if path not in named]
        for path in [*named, *others]:
            if path.is_file():
                try:
                    found = self.hygiene.policy_named(str(path))
                except PolicyError:
                    continue
                if found.name == name:
                    return found
        return None

    # -- stopping ------------------------------------------------------------------------------

    def stop(self, *, cancel_jobs: bool) -> list[asyncio.Task]:
        """Stop adopting on this loop; with ``cancel_jobs``, cancel its running jobs (their
        records stay for the next owner). Returns the tasks cancelled, to be awaited."""
        loop = asyncio.get_running_loop()
        cancelled = []
        adopter = self._adopters.pop(loop, None)
        if adopter is not None:
            adopter.cancel()
            cancelled.append(adopter)
        if cancel_jobs:
            for task in [t for t in self.tasks if t.get_loop() is loop]:
                task.cancel()
                cancelled.append(task)
        return cancelled

    async def release(self, store: SessionStore | None) -> None:
        """Stop renewing and let go of this server's name: whatever it left is adoptable now."""
        loop = asyncio.get_running_loop()
        keeper = self._keepers.pop(loop, None)
        if keeper is not None:
            keeper.cancel()
            await asyncio.gather(keeper, return_exceptions=True)
        if store is not None:
            with contextlib.suppress(StoreUnavailable):
                await self.ledger(store).release()


def _cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
