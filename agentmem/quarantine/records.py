"""Quarantine records: what was withheld from the model, why, and whether it still is.

A record never deletes anything. It names a sentence of a stored turn (turn id + character
span, plus the text for humans), the detector and score that flagged it, and its status.
``released`` and ``confirmed`` records stop applying on the next call; ``confirmed`` also
tells the poison detector the claim is true. Records live in one Redis hash per session and
share the session's lifetime.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any, Literal

from pydantic import BaseModel, Field

from agentmem.store.sessions import SessionHandle, SessionStore, _wrap_errors

Status = Literal["active", "released", "confirmed"]


class QuarantineRecord(BaseModel):
    id: str = ""  # derived from kind, turn and span: detecting the same thing twice is one record
    kind: Literal["clash", "poison"]
    detector: str  # "nli:<model>", "judge:<model>", "recurrence"
    turn_id: int
    position: int  # where the turn was in the history when it was flagged
    span: tuple[int, int]  # characters of the turn's text
    text: str
    source: str  # user | system | assistant | tool:NAME
    score: float | None = None
    reason: str
    related: list[dict[str, Any]] = Field(default_factory=list)  # the other side: turn_id, span, text
    claim: str | None = None  # poison: the canonical claim all its occurrences share
    occurrences: list[dict[str, Any]] = Field(default_factory=list)  # poison: every further
    # occurrence of the claim ({"turn_id", "span", "position", "text"}), withheld with it
    note: str | None = None  # keep_both: the clarification added next to the statement
    status: Status = "active"
    created_at: float = Field(default_factory=time.time)
    history: list[dict[str, Any]] = Field(default_factory=list)  # status changes: what, when, who

    def model_post_init(self, _context: Any) -> None:
        if not self.id:
            digest = hashlib.sha1(f"{self.kind}:{self.turn_id}:{self.span[0]}:{self.span[1]}".encode())
            self.id = f"q_{digest.hexdigest()[:16]}"

    @property
    def key(self) -> tuple[int, int, int]:
        return (self.turn_id, *self.span)

    @property
    def keys(self) -> list[tuple[int, int, int]]:
        """Every sentence the record withholds: its own, then its further occurrences."""
        return [self.key, *((int(o["turn_id"]), int(o["span"][0]), int(o["span"][1]))
                            for o in self.occurrences)]


class QuarantineStore:
    """Redis I/O for records (one hash per session: record id -> JSON)."""

    def __init__(self, store: SessionStore):
        self.store = store

    @_wrap_errors
    async def all(self, handle: SessionHandle) -> list[QuarantineRecord]:
        raw = await self.store.redis.hvals(handle.keys.quarantine)
        records = [QuarantineRecord.model_validate_json(value) for value in raw]
        return sorted(records, key=lambda r: (r.created_at, r.id))

    @_wrap_errors
    async def get(self, handle: SessionHandle, record_id: str) -> QuarantineRecord | None:
        raw = await self.store.redis.hget(handle.keys.quarantine, record_id)
        return QuarantineRecord.model_validate_json(raw) if raw else None

    async def add(self, handle: SessionHandle, records: list[QuarantineRecord], *,
                  ttl: int | None, after_reply: bool = False) -> None:
        """Write new records; never overwrite: a released or confirmed record stays so.

        ``after_reply``: written by work that runs after the call's commit, so only while the
        session exists: a DELETE that came first must not get a key of it back. The call path
        writes unguarded, since a new session's meta is only written by its first commit.
        """
        await self._write(handle, records, ttl=ttl, overwrite=False, after_reply=after_reply)

    async def save(self, handle: SessionHandle, records: list[QuarantineRecord], *,
                   ttl: int | None, after_reply: bool = False) -> None:
        """Overwrite records (a claim group that gained occurrences); ``after_reply`` as in
        :meth:`add`."""
        await self._write(handle, records, ttl=ttl, overwrite=True, after_reply=after_reply)

    @_wrap_errors
    async def _write(self, handle: SessionHandle, records: list[QuarantineRecord], *,
                     ttl: int | None, overwrite: bool, after_reply: bool) -> None:
        if not records:
            return
        if after_reply:
            await self.store.set_session_fields(
                handle, handle.keys.quarantine, {r.id: r.model_dump_json() for r in records},
                ttl=ttl, keep_existing=not overwrite)
            return
        async with self.store.redis.pipeline(transaction=True) as pipe:
            for record in records:
                write = pipe.hset if overwrite else pipe.hsetnx
                write(handle.keys.quarantine, record.id, record.model_dump_json())
            if ttl:
                pipe.expire(handle.keys.quarantine, ttl)
            await pipe.execute()

    @_wrap_errors
    async def set_status(self, handle: SessionHandle, record_id: str, status: Status, *,
                         by: str = "api") -> QuarantineRecord | None:
        record = await self.get(handle, record_id)
        if record is None:
            return None
        if record.status != status:
            record.history.append({"from": record.status, "to": status, "at": time.time(), "by": by})
            record.status = status
            await self.store.redis.hset(handle.keys.quarantine, record.id, record.model_dump_json())
        return record
