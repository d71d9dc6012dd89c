"""A load the CPU cannot keep up with grows a backlog of after-reply work (embedding each
call's new turns). The backlog must not keep each call's whole request history in memory:
past a few dozen queued jobs, a job holds its ids only and reads its turns back from Redis
when its turn comes, and every turn is still embedded in the end."""

from __future__ import annotations

import gc
import uuid

from agentmem import Hygiene
from agentmem.api import HELD_AFTER_REPLY_JOBS, Call
from agentmem.config import Settings
from agentmem.pending import RUNNING_JOBS
from agentmem.store import SessionHandle

# ~300 sentences a call: embedding them takes far longer than the call itself.
PASTE = " ".join(f"Row {n} of the harbour ledger lists crate {n * 7} for pier {n % 9}."
                 for n in range(300))


async def test_a_backlog_of_after_reply_work_does_not_hold_the_calls(data_dir):
    engine = Hygiene("default", settings=Settings(data_dir=data_dir))
    engine.embedder.load()
    sessions = [f"bk-{uuid.uuid4().hex[:8]}" for _ in range(HELD_AFTER_REPLY_JOBS + 40)]
    try:
        for session in sessions:
            await engine.apply([{"role": "user", "content": f"Keep this for later. {PASTE}"},
                                {"role": "assistant", "content": "Noted."},
                                {"role": "user", "content": "Thanks."}], session_id=session)
        gc.collect()
        held = sum(type(o) is Call for o in gc.get_objects())  # no __class__ of lazy modules
        queued = len(engine.after_reply_jobs().tasks)
        assert queued > HELD_AFTER_REPLY_JOBS  # the backlog formed
        assert held <= HELD_AFTER_REPLY_JOBS + RUNNING_JOBS + 2, (held, queued)  # not one a job
        await engine.drain()
        store = engine.store()
        for session in (sessions[0], sessions[-1]):  # one held job, one read back from Redis
            handle = SessionHandle("default", session)
            turns = await store.active_turns(handle)
            embedded = await store.redis.hlen(handle.keys.embeddings)
            assert len(turns) == 3 and embedded == 3, (session, len(turns), embedded)
    finally:
        await engine.aclose()
        engine.connector.close()
