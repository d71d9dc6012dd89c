"""Writes the session store refused because it was down, retried until it is back.

A call's reply can reach the client while Redis is down (killed, restarting, failing over):
the client has the answer, so the session must not lose the turn. Above all a stateful
client, which sends only its new message, would never send it again. So the call's write is
kept in memory and retried in the background (``Policy.commit_retry_s``).

The retry still holds the call's lock token. Redis restarted from its append-only file brings
the lock back with it, and the commit's token check lets exactly this write through. When the
lease ran out meanwhile, the session is locked again and written only if no other call wrote
to it first (the stored history still matches the one the call was prepared on); otherwise the
write is given up and logged, never merged into a history that moved on.

The session's next call in this process waits for the retry first (``settle``), so it is built
on the turn it follows. What a process exit or a longer outage leaves unwritten is logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING

from redis.exceptions import LockError

from agentmem.errors import SessionBusy
from agentmem.store import StoreUnavailable, owner

if TYPE_CHECKING:
    from agentmem.api import Call
    from agentmem.store import SessionHandle
    from agentmem.store.sessions import PendingWrite, TurnRecord

log = logging.getLogger("agentmem")

_FIRST_DELAY_S = 0.2
_LONGEST_DELAY_S = 2.0
SETTLE_WAIT_S = 5.0  # how long a session's next call waits for its predecessor's retry


class _Retry:
    """One call's write, retried; ``wake`` makes it try again now."""

    def __init__(self) -> None:
        self.wake = asyncio.Event()
        self.task: asyncio.Task[bool] | None = None


class UnsavedWrites:
    """The retried writes of one engine, by session."""

    def __init__(self) -> None:
        self._pending: dict[tuple[str, str], _Retry] = {}

    def keep(self, call: Call, write: PendingWrite, turns: list[TurnRecord]) -> None:
        """Retry ``call``'s write in the background until it lands or the policy's window ends."""
        key = (call.handle.tenant, call.handle.session_id)
        retry = _Retry()
        token = (call.lock.local.token or b"").decode() if call.lock is not None else ""
        owner.hold(token)  # no call of ours may take the lock back as abandoned meanwhile
        retry.task = call.hygiene.spawn(self._retry(call, write, turns, retry))

        def done(_: asyncio.Task[bool]) -> None:
            owner.drop(token)
            if self._pending.get(key) is retry:
                del self._pending[key]

        retry.task.add_done_callback(done)
        self._pending[key] = retry

    def pending(self) -> int:
        return len(self._pending)

    async def settle(self, handle: SessionHandle) -> None:
        """Let the session's retried write land before its next call reads the session: it is
        tried again at once, and waited for a few seconds (the store is back, or it is not and
        the call will find it down too)."""
        retry = self._pending.get((handle.tenant, handle.session_id))
        if retry is None or retry.task is None or retry.task.get_loop() is not \
                asyncio.get_running_loop():  # another loop's store: its own calls settle it
            return
        retry.wake.set()
        await asyncio.wait({retry.task}, timeout=SETTLE_WAIT_S)

    async def _retry(self, call: Call, write: PendingWrite, turns: list[TurnRecord],
                     retry: _Retry) -> bool:
        store, handle = call.store, call.handle
        assert store is not None  # only a stored call has a write to retry
        deadline = time.monotonic() + call.policy.commit_retry_s
        delay = _FIRST_DELAY_S
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(retry.wake.wait(), delay)
            retry.wake.clear()
            try:
                try:
                    await store.commit(handle, call.lock, write, ttl=call.policy.ttl_seconds)
                except LockError:  # the lease ran out while the store was down
                    if not await self._relock_and_commit(call, write):
                        return False
            except StoreUnavailable as error:
                if time.monotonic() >= deadline:
                    log.error("session %s: the call's turns are lost: the store was still down "
                              "after %gs (%s)", handle.session_id, call.policy.commit_retry_s,
                              error)
                    return False
                delay = min(delay * 2, _LONGEST_DELAY_S)
                continue
            log.warning("session %s: the call is stored, after the store came back",
                        handle.session_id)
            if turns and call.policy.embed:
                call.history = list(call.history)
                call.hygiene.defer_after_reply(call, turns)
            return True

    @staticmethod
    async def _relock_and_commit(call: Call, write: PendingWrite) -> bool:
        store, handle, policy = call.store, call.handle, call.policy
        assert store is not None and call.prefix is not None
        try:
            async with store.locked(handle, timeout=policy.lock_timeout_s,
                                    wait=policy.lock_wait_s) as lock:
                now = await store.match_prefix(handle, call.chains, lock)
                if now != call.prefix:
                    log.error("session %s: the call's turns are not stored: another call wrote "
                              "to the session while the store was down", handle.session_id)
                    return False
                await store.commit(handle, lock, write, ttl=policy.ttl_seconds)
        except (SessionBusy, LockError):
            log.error("session %s: the call's turns are not stored: the session was taken by "
                      "another call while the store was down", handle.session_id)
            return False
        return True
