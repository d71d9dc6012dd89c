"""A stateful client whose stream the provider cut asks again: the model is not sent the
truncated reply followed by the same question twice."""

from __future__ import annotations

import uuid

from agentmem import Hygiene, Policy
from agentmem.config import Settings
from agentmem.store import SessionHandle
from agentmem.streaming import CLIENT_DISCONNECTED, stream_failure

RULES = Policy(name="plain", stages=[], embed=False)


async def ask(engine: Hygiene, session: str, text: str) -> tuple[list[dict], object]:
    call = await engine.prepare({"model": "echo", "messages": [{"role": "user", "content": text}]},
                                session_id=session, stateful=True, policy=RULES)
    return call.outgoing["messages"], call


async def test_a_cut_stream_is_not_continued_and_a_left_one_is(data_dir):
    engine = Hygiene(settings=Settings(data_dir=data_dir))
    session = f"sp-{uuid.uuid4().hex[:8]}"
    try:
        _, call = await ask(engine, session, "Hi there.")
        await call.finish({"role": "assistant", "content": "echo: Hi there."})
        _, call = await ask(engine, session, "Tell me a long story.")
        await call.finish({"role": "assistant", "content": "echo: Once"}, partial=True,
                          error=stream_failure(ConnectionError("cut")))
        sent, call = await ask(engine, session, "Tell me a long story.")
        assert [m["content"] for m in sent] == ["Hi there.", "echo: Hi there.",
                                                "Tell me a long story."]
        await call.finish({"role": "assistant", "content": "echo: Once upon a time."})
        store, handle = engine.store(), SessionHandle("default", session)
        assert [t.message["content"] for t in await store.active_turns(handle)] == [
            "Hi there.", "echo: Hi there.", "Tell me a long story.", "echo: Once upon a time."]
        kept = [t.message["content"] for t in await store.all_turns(handle)]
        assert "echo: Once" in kept and len(kept) == 5  # the cut reply is kept, superseded

        # a stream the client left is the client's own doing: it has what it read
        _, call = await ask(engine, session, "And another?")
        await call.finish({"role": "assistant", "content": "echo: And"}, partial=True,
                          error=CLIENT_DISCONNECTED)
        sent, call = await ask(engine, session, "Go on.")
        assert [m["content"] for m in sent][-3:] == ["And another?", "echo: And", "Go on."]
        await call.finish({"role": "assistant", "content": "echo: Go on."})
    finally:
        await engine.aclose()
        engine.connector.close()
