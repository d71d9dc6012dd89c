"""The session store: turns, history matching, the per-session lock, reports.

Invariants this module keeps:
- A turn, once written, is never modified or deleted (until the whole session is deleted or
  expires). The *active* list says which turns form the current history; when a client's
  history diverges from the stored one, the later stored turns leave the active list but
  stay in ``turns``.
- All writes of one call happen in one MULTI/EXEC, guarded by WATCH on the session lock, so
  a call that lost its lock cannot write, and a reader never sees half a call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.lock import Lock
from redis.exceptions import LockError, RedisError, ResponseError

from agentmem.errors import SessionBusy
from agentmem.report import Report
from agentmem.store import owner
from agentmem.store.keys import SessionKeys, tenant_index

log = logging.getLogger("agentmem.store")

CLUSTER_CHECK_S = 2.0  # SessionStore.ping on a cluster: every master answers within this


class StoreUnavailable(Exception):
    """Redis could not be reached or failed mid-operation."""


class TurnRecord(BaseModel):
    """One message of a session, verbatim, with what ingest derived from it."""

    id: int
    position: int
    role: str
    message: dict[str, Any]  # exactly as the client sent it (or as the provider replied)
    hash: str
    chain: str
    tokens: int
    sentences: list[tuple[int, int]] = Field(default_factory=list)  # spans into the text
    created_at: float = Field(default_factory=time.time)
    source: str  # user | system | assistant | tool:NAME
    partial: bool = False  # a streamed reply that was cut before it finished
    error: str | None = None
    report_id: str | None = None


@dataclass(frozen=True)
class SessionHandle:
    tenant: str
    session_id: str

    @property
    def keys(self) -> SessionKeys:
        return SessionKeys(self.tenant, self.session_id)


@dataclass
class StoredPrefix:
    """How much of a client's history the store already holds."""

    matched: int  # positions 0..matched-1 are stored with the same content
    stored: int  # length of the stored active history
    next_turn_id: int
    tokens_matched: int  # cumulative tokens of the matched prefix
    exists: bool

    @property
    def diverged_at(self) -> int | None:
        return self.matched if self.matched < self.stored else None


@dataclass
class PendingWrite:
    """Everything one call will write, collected on the call path and committed once."""

    turns: list[TurnRecord] = field(default_factory=list)
    truncate_to: int | None = None
    report: Report | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    tokens_base: int = 0  # cumulative tokens of the history before the first new turn
    steps: dict[str, str] = field(default_factory=dict)  # stage -> its agent-step record (state/steps.py)


def _wrap_errors(func):
    async def wrapper(*args, **kwargs):
        try:
            return await func(*args, **kwargs)
        except RedisError as error:
            if isinstance(error, (LockError,)):
                raise
            raise StoreUnavailable(f"{type(error).__name__}: {error}") from error
        except OSError as error:
            raise StoreUnavailable(f"{type(error).__name__}: {error}") from error
    wrapper.__name__ = func.__name__
    wrapper.__doc__ = func.__doc__
    return wrapper


_COMMIT = """
local token = ARGV[1]
if token ~= '' and redis.call('GET', KEYS[1]) ~= token then
  return redis.error_reply('LOCKLOST')
end
local truncate = tonumber(ARGV[2])
if truncate == 0 then
  redis.call('DEL', KEYS[4], KEYS[5])
elseif truncate > 0 then
  redis.call('LTRIM', KEYS[4], 0, truncate - 1)
  redis.call('LTRIM', KEYS[5], 0, truncate - 1)
end
if ARGV[5] ~= '' then
  redis.call('HSET', KEYS[6], ARGV[5], ARGV[6])
  redis.call('RPUSH', KEYS[7], ARGV[5])
  redis.call('HINCRBY', KEYS[2], 'calls', 1)
end
local i = 8
for _ = 1, tonumber(ARGV[7]) do
  redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1])
  redis.call('RPUSH', KEYS[4], ARGV[i])
  redis.call('RPUSH', KEYS[5], ARGV[i + 2])
  i = i + 3
end
redis.call('HSETNX', KEYS[2], 'created_at', ARGV[4])
local fields = tonumber(ARGV[i])
i = i + 1
for _ = 1, fields do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
  i = i + 2
end
local ttl = tonumber(ARGV[3])
for k = 2, 9 do
  if ttl > 0 then redis.call('EXPIRE', KEYS[k], ttl) else redis.call('PERSIST', KEYS[k]) end
end
if ARGV[i] == '1' then redis.call('DEL', KEYS[1]) end
return 1
"""

# Take the lock (KEYS[1]) if free and, only then, read what match_prefix needs first: the
# chain's length (KEYS[2]), the turn count (KEYS[3]), the chain's last entry, whether the
# session exists (KEYS[4]). ARGV: token, lease in ms (0: none).
_ACQUIRE_AND_PROBE = """
local ok
if tonumber(ARGV[2]) > 0 then
  ok = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
else
  ok = redis.call('SET', KEYS[1], ARGV[1], 'NX')
end
if not ok then return {0} end
return {1, redis.call('LLEN', KEYS[2]), redis.call('HLEN', KEYS[3]),
        redis.call('LINDEX', KEYS[2], -1) or false, redis.call('EXISTS', KEYS[4])}
"""

# Delete KEYS[1] if it still holds ARGV[1] (a dead holder's lock token).
_DELETE_IF_EQUAL = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


# Write hash fields of a session only while it exists: after-reply work (a call's embeddings)
# that lands after the session was deleted must not bring a key of it back.
# KEYS[1]: the session's meta; KEYS[2]: the hash. ARGV: ttl (0: none), the write (HSET, or
# HSETNX to keep fields already there), then field, value pairs.
_SET_IF_SESSION = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
for i = 3, #ARGV, 2 do redis.call(ARGV[2], KEYS[2], ARGV[i], ARGV[i + 1]) end
if tonumber(ARGV[1]) > 0 then redis.call('EXPIRE', KEYS[2], ARGV[1]) end
return 1
"""


class SessionStore:
    def __init__(self, redis: Any) -> None:
        # a redis.asyncio.Redis with bytes replies; its stubs type every reply as bytes | str
        self.redis = redis
        self._commit_script = redis.register_script(_COMMIT)
        self._delete_if_equal = redis.register_script(_DELETE_IF_EQUAL)
        self._acquire_script = redis.register_script(_ACQUIRE_AND_PROBE)
        self._set_if_session = redis.register_script(_SET_IF_SESSION)
        self._chain_memo: OrderedDict[str, list[str]] = OrderedDict()  # see turn_tokens
        self._probes: dict[str, tuple[str, list[Any]]] = {}  # lock key: (token, prefix reads)

    async def close(self) -> None:
        await self.redis.aclose()

    @_wrap_errors
    async def ping(self) -> bool:
        """Whether the store can serve every session (``/healthz``).

        One server: PING. A Redis Cluster client's PING reaches some live node and succeeds
        while a master is down and every call on its slots fails, so there each master (as
        the client knows them, refreshed on a connection error) must answer CLUSTER INFO with
        ``cluster_state:ok``: a master down or hung fails at once, before the live nodes mark
        it failed (``cluster-node-timeout``); a slot no master serves fails as their state.
        The whole check is bounded by ``CLUSTER_CHECK_S``, so a stopped host cannot hang it.
        """
        if not isinstance(self.redis, RedisCluster):
            return bool(await self.redis.ping())
        try:
            replies: dict[str, Any] = await asyncio.wait_for(
                self.redis.cluster_info(target_nodes=RedisCluster.PRIMARIES), CLUSTER_CHECK_S)
        except TimeoutError:
            raise StoreUnavailable(f"a cluster master did not answer within {CLUSTER_CHECK_S} s"
                                   ) from None
        # one master answers its info, several a {node name: info} mapping
        infos: dict[str, Any] = {"": replies} if "cluster_state" in replies else replies
        for node, info in infos.items():
            state = info.get("cluster_state")
            if state != "ok":
                raise StoreUnavailable(f"cluster_state:{state} on {node or 'the master'}")
        return True

    # -- the lock ---------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def locked(self, handle: SessionHandle, *, timeout: float, wait: float
                     ) -> AsyncIterator[Lock]:
        """Serialise calls on one session; the lock is extended while the call runs."""
        lock = self.redis.lock(handle.keys.lock, timeout=timeout, blocking_timeout=wait,
                               thread_local=False)
        token = owner.new_token()
        owner.hold(token)
        try:
            acquired = await self._acquire_and_probe(lock, handle, token, timeout)
            if not acquired and await self._break_if_dead(handle.keys.lock):
                acquired = await lock.acquire(blocking=False, token=token)
            if not acquired:
                acquired = await lock.acquire(token=token)
        except (RedisError, OSError) as error:
            owner.drop(token)
            raise StoreUnavailable(f"{type(error).__name__}: {error}") from error
        if not acquired:
            owner.drop(token)
            raise SessionBusy(
                f"session {handle.session_id!r} is busy with another request (waited {wait:g}s)",
                code="session_busy")
        keeper = asyncio.create_task(self._keep_alive(lock, timeout))
        try:
            yield lock
        finally:
            keeper.cancel()
            self._probes.pop(handle.keys.lock, None)
            if lock.local.token is not None:  # commit() may have released it already
                with contextlib.suppress(LockError, RedisError, OSError):
                    await lock.release()
            owner.drop(token)

    async def _acquire_and_probe(self, lock: Lock, handle: SessionHandle, token: str,
                                 timeout: float) -> bool:
        """The lock's first try and ``match_prefix``'s reads in one round trip: one script
        reads only when the SET wins, so the reads see the session as the lock holder will
        (the previous holder's commit and release are one script too). Saves a round trip on
        every call; one script rather than a five-command pipeline saves its client-side work."""
        keys = handle.keys
        reply = await self._acquire_script(
            keys=[keys.lock, keys.chain, keys.turns, keys.meta],
            args=[token, int(timeout * 1000) if timeout else 0])
        if not reply[0]:
            return False
        probe = [reply[1], reply[2], reply[3] or None, reply[4]]
        lock.local.token = token.encode()  # what Lock.acquire records: release/extend use it
        self._probes[handle.keys.lock] = (token, probe)
        return True

    def _take_probe(self, handle: SessionHandle, token: bytes | None) -> list[Any] | None:
        """The reads taken with this holder's lock, once (a stale probe is never used)."""
        entry = self._probes.pop(handle.keys.lock, None)
        if entry is None or token is None or entry[0].encode() != token:
            return None
        return entry[1]

    async def _break_if_dead(self, key: str) -> bool:
        """Free a lock whose holder is a process of this machine that has died (a proxy
        killed and restarted: its sessions are usable at once, not after the lease), or this
        process when none of its calls holds it (its release failed while Redis was down, and
        Redis came back with it); True if freed. The holder is read and deleted in one
        script, so a live successor's lock (a new token) is never deleted."""
        holder = await self.redis.get(key)
        if not (owner.holder_is_dead(holder) or owner.abandoned_here(holder)):
            return False
        return bool(await self._delete_if_equal(keys=[key], args=[holder]))

    @staticmethod
    async def _keep_alive(lock: Lock, timeout: float) -> None:
        """Renew the lease every third of it. A renewal that fails on a Redis blip is tried
        again at the next tick; a lock found lost (LockError) is not renewed: the commit checks
        the token and refuses to write for a call that lost its session."""
        with contextlib.suppress(LockError, asyncio.CancelledError):
            while True:
                await asyncio.sleep(timeout / 3)
                with contextlib.suppress(RedisError, OSError):
                    await lock.reacquire()

    # -- ingest -------------------------------------------------------------------------------

    @_wrap_errors
    async def match_prefix(self, handle: SessionHandle, chains: list[str],
                           lock: Lock | None = None) -> StoredPrefix:
        """Compare the client's chain hashes with the stored ones (usually no round trip of
        its own: ``locked`` read the ends of the chain with the lock)."""
        keys = handle.keys
        taken = self._take_probe(handle, lock.local.token) if lock is not None else None
        if taken is None:
            async with self.redis.pipeline(transaction=False) as pipe:
                _probe_prefix(pipe, keys)
                taken = await pipe.execute()
        stored, next_id, probe, exists = taken
        n = len(chains)
        if stored == 0:
            return StoredPrefix(0, 0, next_id, 0, bool(exists))
        probe_at = min(n, stored) - 1
        if probe_at == stored - 1 and probe is not None:
            entry = probe.decode()
        else:
            raw = await self.redis.lindex(keys.chain, probe_at)
            entry = raw.decode() if raw else ""
        if probe_at >= 0 and entry.split(":")[0] == chains[probe_at]:
            return StoredPrefix(probe_at + 1, stored, next_id, int(entry.split(":")[1]), True)
        # Slow path: the histories differ before probe_at; find the longest common prefix.
        low = await self._common_prefix(keys.chain, [f"{c}:" for c in chains], probe_at)
        raw = await self.redis.lindex(keys.chain, low - 1) if low else None
        tokens = int(raw.decode().split(":")[1]) if raw else 0
        return StoredPrefix(low, stored, next_id, tokens, True)

    async def _common_prefix(self, key: str, expected: list[str], upto: int) -> int:
        """How many leading chain entries start with ``expected[i]``, given that entry ``upto``
        does not. Chain entries hash whole prefixes, so a match at p implies matches before p:
        a binary search of LINDEX round trips instead of reading the whole list."""
        low, high = 0, upto
        while low < high:
            middle = (low + high) // 2
            raw = await self.redis.lindex(key, middle)
            if raw is not None and raw.decode().startswith(expected[middle]):
                low = middle + 1
            else:
                high = middle
        return low

    @_wrap_errors
    async def active_messages(self, handle: SessionHandle) -> list[dict[str, Any]]:
        """The stored history as messages, for clients that send only new messages."""
        return [t.message for t in await self.active_turns(handle)]

    @_wrap_errors
    async def active_ids(self, handle: SessionHandle) -> list[int]:
        """Turn ids by position: ``ids[position]`` is the turn at that position."""
        return [int(i) for i in await self.redis.lrange(handle.keys.active, 0, -1)]

    @_wrap_errors
    async def turn_tokens(self, handle: SessionHandle) -> list[int]:
        """Token count per stored position, from the cumulative counts kept at ingest.

        Chain entries hash the whole prefix, so if the entry at the end of what this process
        read last time is unchanged, everything before it is too: only the tail is fetched.
        """
        key = handle.keys.chain
        known = self._chain_memo.get(key) or []
        start = 0
        if known:
            entry = await self.redis.lindex(key, len(known) - 1)
            if entry is not None and entry.decode() == known[-1]:
                start = len(known)
            else:  # a superseded tail (an edited or regenerated turn): keep what still matches
                start = await self._common_prefix(key, known, len(known) - 1)
        tail = [e.decode() for e in await self.redis.lrange(key, start, -1)]
        entries = known[:start] + tail
        if entries:
            self._chain_memo[key] = entries
            self._chain_memo.move_to_end(key)
            while len(self._chain_memo) > 256:
                self._chain_memo.popitem(last=False)
        cumulative = [int(e.rsplit(":", 1)[1]) for e in entries]
        return [b - a for a, b in zip([0, *cumulative], cumulative)]

    @_wrap_errors
    async def active_turns(self, handle: SessionHandle) -> list[TurnRecord]:
        keys = handle.keys
        ids = await self.redis.lrange(keys.active, 0, -1)
        if not ids:
            return []
        raw = await self.redis.hmget(keys.turns, ids)
        return [TurnRecord.model_validate_json(r) for r in raw if r is not None]

    @_wrap_errors
    async def commit(self, handle: SessionHandle, lock: Lock | None, write: PendingWrite, *,
                     ttl: int | None, release: bool = True) -> None:
        """Write one call's turns, report and counters atomically, if we still hold the lock.

        One server-side script: it checks the lock token, writes, refreshes TTLs and (with
        ``release``) frees the lock, all in a single round trip.
        """
        keys = handle.keys
        now = time.time()
        token = (lock.local.token or b"").decode() if lock is not None else ""
        args: list[Any] = [token, -1 if write.truncate_to is None else write.truncate_to,
                           ttl or 0, now]
        if write.report is not None:
            args += [write.report.id, write.report.model_dump_json()]
        else:
            args += ["", ""]
        cumulative = write.tokens_base
        args.append(len(write.turns))
        for turn in write.turns:
            cumulative += turn.tokens
            args += [turn.id, turn.model_dump_json(), f"{turn.chain}:{cumulative}"]
        meta = {"tenant": handle.tenant, "session_id": handle.session_id, "updated_at": now,
                **write.meta}
        args.append(len(meta))
        for field_name, value in meta.items():
            args += [field_name, value]
        args.append(1 if release and lock is not None else 0)
        # The tenant's session index lives in its own slot, so it cannot join the script; it
        # is sent alongside on a second connection (one round trip on the call path, not two).
        # A stale index entry is harmless: listing drops ids whose session is gone. So are the
        # agent-step records: a missing one only makes another worker decide the step anew.
        outcomes: tuple[Any, ...] = await asyncio.gather(
            self._commit_script(
                keys=[keys.lock, keys.meta, keys.turns, keys.active, keys.chain, keys.reports,
                      keys.report_ids, keys.embeddings, keys.quarantine], args=args,
                client=self.redis),
            self.redis.zadd(tenant_index(handle.tenant), {handle.session_id: now}),
            self._set_fields(keys.steps, write.steps, ttl),
            return_exceptions=True)
        committed, indexed, stepped = outcomes
        if isinstance(committed, ResponseError) and "LOCKLOST" in str(committed):
            raise LockError("the session lock expired before the call could be stored") from None
        if isinstance(committed, BaseException):
            raise committed
        if release and lock is not None:
            lock.local.token = None  # freed by the script; nothing left to release
        if isinstance(indexed, Exception):  # the call is stored: only the listing is behind
            log.warning("session %s: the tenant's session index was not updated: %s",
                        handle.session_id, indexed)
        if isinstance(stepped, Exception):
            log.warning("session %s: the agent-step records were not stored: %s",
                        handle.session_id, stepped)

    @_wrap_errors
    async def add_embeddings(self, handle: SessionHandle, embeddings: dict[int, bytes], *,
                             ttl: int | None) -> None:
        await self.set_session_fields(handle, handle.keys.embeddings,
                                      {str(k): v for k, v in embeddings.items()}, ttl=ttl)

    @_wrap_errors
    async def set_session_fields(self, handle: SessionHandle, name: str, mapping: dict[str, Any],
                                 *, ttl: int | None, keep_existing: bool = False) -> bool:
        """Write fields of one of the session's hashes, in one script, only while the session
        exists (work that finishes after a DELETE writes nothing); False if it is gone.

        ``keep_existing``: a field already there is left as it is (HSETNX).
        """
        if not mapping:
            return True
        args: list[Any] = [ttl or 0, "HSETNX" if keep_existing else "HSET"]
        for field_name, value in mapping.items():
            args += [field_name, value]
        return bool(await self._set_if_session(keys=[handle.keys.meta, name], args=args))

    async def _set_fields(self, name: str, mapping: dict[str, Any], ttl: int | None) -> None:
        """Hash fields written outside the call's commit script, so the key's lifetime is set
        here too, in the same transaction."""
        if not mapping:
            return
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(name, mapping=mapping)
            if ttl:
                pipe.expire(name, ttl)
            await pipe.execute()

    @_wrap_errors
    async def embeddings(self, handle: SessionHandle, turn_ids: list[int]) -> dict[int, bytes]:
        if not turn_ids:
            return {}
        values = await self.redis.hmget(handle.keys.embeddings, [str(i) for i in turn_ids])
        return {i: v for i, v in zip(turn_ids, values) if v is not None}

    # -- reading ------------------------------------------------------------------------------

    @_wrap_errors
    async def list_sessions(self, tenant: str, *, limit: int = 100, offset: int = 0
                            ) -> list[dict[str, Any]]:
        """Most recently updated first; ids whose data expired are dropped from the index."""
        index = tenant_index(tenant)
        ids = [i.decode() for i in await self.redis.zrevrange(index, offset, offset + limit - 1)]
        out, stale = [], []
        for session_id in ids:
            meta = await self.meta(SessionHandle(tenant, session_id))
            if meta is None:
                stale.append(session_id)
            else:
                out.append(meta)
        if stale:
            await self.redis.zrem(index, *stale)
        return out

    @_wrap_errors
    async def meta(self, handle: SessionHandle) -> dict[str, Any] | None:
        keys = handle.keys
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(keys.meta)
            pipe.llen(keys.active)
            pipe.hlen(keys.turns)
            raw, active, total = await pipe.execute()
        if not raw:
            return None
        meta = {k.decode(): v.decode() for k, v in raw.items()}
        for name in ("created_at", "updated_at"):
            if name in meta:
                meta[name] = float(meta[name])
        meta["calls"] = int(meta.get("calls", 0))
        meta["turn_count"] = active
        meta["stored_turn_count"] = total
        return meta

    @_wrap_errors
    async def all_turns(self, handle: SessionHandle) -> list[TurnRecord]:
        raw = await self.redis.hgetall(handle.keys.turns)
        turns = [TurnRecord.model_validate_json(v) for v in raw.values()]
        return sorted(turns, key=lambda t: t.id)

    @_wrap_errors
    async def reports(self, handle: SessionHandle, *, limit: int = 100) -> list[Report]:
        keys = handle.keys
        ids = await self.redis.lrange(keys.report_ids, -limit, -1)
        if not ids:
            return []
        raw = await self.redis.hmget(keys.reports, ids)
        return [Report.model_validate_json(r) for r in raw if r is not None]

    @_wrap_errors
    async def report(self, handle: SessionHandle, report_id: str) -> Report | None:
        raw = await self.redis.hget(handle.keys.reports, report_id)
        return Report.model_validate_json(raw) if raw else None

    @_wrap_errors
    async def delete(self, handle: SessionHandle) -> bool:
        keys = handle.keys
        removed = await self.redis.delete(*keys.data_keys())
        await self.redis.zrem(tenant_index(handle.tenant), handle.session_id)
        return removed > 0


def _probe_prefix(pipe: Any, keys: Any) -> None:
    """What ``match_prefix`` reads first: stored turns, next turn id, the last chain entry,
    and whether the session exists."""
    pipe.llen(keys.chain)
    pipe.hlen(keys.turns)
    pipe.lindex(keys.chain, -1)
    pipe.exists(keys.meta)
