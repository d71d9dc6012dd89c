"""Bounded, fair inference: one session's paste never holds up another session's call.

Real parts only: the default engine (MiniLM, the embedded Redis, the default policy), a paste
of thousands of distinct sentences, another session's ordinary calls, and the process's
inference scheduler. Time bounds are generous (the machine is shared): before the scheduler
the other session's call waited for the whole paste (71 s measured for 1 MB).
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
import uuid
from concurrent.futures import Future

import numpy as np
import pytest

from agentmem import Hygiene
from agentmem.config import Settings
from agentmem.conversation import recent_start
from agentmem.models.embedder import default_embedder, from_bytes
from agentmem.models.runtime import FairQueue, Job, Scheduler
from agentmem.policy import policy_from_dict
from agentmem.state import CacheLimits
from agentmem.store import SessionHandle

BUDGET = 32  # sentences a call may embed on its path, small so a test history exceeds it
WORDS = ("kettle invoice station meeting migration snapshot supplier warehouse pallet audit "
         "river garden ticket payment holiday harbour violin recipe engine bridge lantern "
         "market signal museum forest battery planet mirror ladder compass").split()


@pytest.fixture(scope="module")
def engine(data_dir):
    hygiene = Hygiene("default", settings=Settings(data_dir=data_dir),
                      cache_limits=CacheLimits(call_path_sentences=BUDGET))
    yield hygiene
    hygiene.connector.close()


def _sentence(rng: random.Random, label: str) -> str:
    return f"{label} mentions the " + " ".join(rng.choice(WORDS) for _ in range(14)) + "."


def _conversation(exchanges: int, seed: int = 0) -> list[dict[str, str]]:
    """Exchanges of three sentences a turn; turn 2 holds the one fact the tests ask about."""
    rng = random.Random(seed)
    messages = []
    for i in range(exchanges):
        for role in ("user", "assistant"):
            text = " ".join(_sentence(rng, f"{role.title()} {i}.{k}") for k in range(3))
            messages.append({"role": role, "content": text})
    messages[2]["content"] += " My locker code is 7731 and the locker is in hall Quintus."
    return messages


def _paste(sentences: int) -> str:
    rng = random.Random(7)
    return " ".join(_sentence(rng, f"Line {i}") for i in range(sentences))


def _question(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


# Stored and embedded like the default, prune only: what the budget changes, without the
# quarantine's after-reply work on 180 new sentences (minutes of a shared CPU).
PRUNE = policy_from_dict({"name": "fair-prune", "stages": ["prune"]})


async def test_a_paste_does_not_hold_up_another_sessions_call(engine):
    other, pasting = f"fair-b-{uuid.uuid4().hex[:8]}", f"fair-a-{uuid.uuid4().hex[:8]}"
    history = _conversation(12)
    await engine.apply(history + [_question("What changed since yesterday?")], session_id=other)
    await engine.drain()
    paste = asyncio.ensure_future(engine.apply([_question(_paste(2000))], session_id=pasting))
    await asyncio.sleep(0.2)  # the paste's call is under way
    started = time.perf_counter()
    result = await engine.apply(history + [_question("Where is my locker?")], session_id=other)
    waited = time.perf_counter() - started
    busy = not paste.done() or engine.state.corpora.missing(engine.tenant, pasting) > 0
    pasted = await paste
    try:
        assert busy, "the paste was processed before the other call ran: nothing was measured"
        assert waited < 5.0, f"another session's call waited {waited:.1f} s behind a paste"
        assert not result.report.warnings
        assert pasted.report.latency_ms["hygiene"] < 30_000  # bounded, not minutes
    finally:
        await engine.drain()  # the paste's background embedding, before the next test
    assert engine.state.corpora.missing(engine.tenant, pasting) == 0  # embedded off the call path


async def test_a_call_over_budget_says_so_and_still_prunes(engine):
    session = f"fair-c-{uuid.uuid4().hex[:8]}"
    history = _conversation(30)  # 180 new sentences on one call, budget 32
    result = await engine.apply(history + [_question("What is my locker code?")],
                                session_id=session, policy=PRUNE)
    report = result.report
    assert any(w.startswith("prune: ") and "scored lexically" in w for w in report.warnings), \
        report.warnings
    assert not any("failed" in w or "unchanged" in w for w in report.warnings)
    assert report.tokens_after < report.tokens_before  # pruned
    sent = [m["content"] for m in result.messages]
    assert result.messages[-3:] == (history + [_question("What is my locker code?")])[-3:]
    assert any("7731" in text for text in sent)  # BM25 found the fact without its vector
    await engine.drain()


async def test_sentences_past_the_budget_get_vectors_in_the_background(engine):
    session = f"fair-d-{uuid.uuid4().hex[:8]}"
    history = _conversation(30, seed=1)
    first = await engine.apply(history + [_question("What is my locker code?")], session_id=session,
                               policy=PRUNE)
    assert any("past the call's embedding budget" in w for w in first.report.warnings)
    await engine.drain()
    assert engine.state.corpora.missing(engine.tenant, session) == 0  # filled in the cache
    store, handle = engine.store(), SessionHandle(engine.tenant, session)
    turns = await store.active_turns(handle)
    stored = await store.embeddings(handle, [turn.id for turn in turns])
    for turn in turns:  # and stored: a restarted process reads them from Redis
        assert turn.id in stored and from_bytes(stored[turn.id]).shape[0] == len(turn.sentences)
    text = history[5]["content"]
    expected = default_embedder().encode([text[a:b] for a, b in turns[5].sentences])
    assert np.allclose(from_bytes(stored[turns[5].id]), expected, atol=2e-3)
    later = await engine.apply(history + [_question("What is my locker code?"),
                                          _question("And which hall is it in?")],
                               session_id=session, policy=PRUNE)
    assert not later.report.warnings  # every older sentence had its vector this time
    await engine.drain()


async def test_a_huge_tool_output_is_scored_by_the_pruner_within_its_budget(engine):
    rng = random.Random(3)
    rows = [_sentence(rng, f"Row {i}") for i in range(60)]
    rows[40] = "Row 40 says the locker code is 7731."  # past the pruner's budget of 8
    history = [
        _question("Please list the rows of the audit table."),
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "t1", "type": "function", "function": {"name": "table", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "t1", "content": " ".join(rows)},
        {"role": "assistant", "content": "Here are the rows."},
        _question("What is the locker code?"),
    ]
    policy = policy_from_dict({"name": "fair-tool-output", "stages": ["prune"], "embed": False,
                               "prune": {"pruner_sentences": 8, "large_tool_output_tokens": 50}})
    result = await engine.apply(history, session_id=f"fair-e-{uuid.uuid4().hex[:8]}",
                                policy=policy)
    assert any(w.startswith("prune: 52 tool-output sentences past the pruner budget (8)")
               for w in result.report.warnings), result.report.warnings
    output = result.messages[2]["content"]
    assert "locker code is 7731" in output  # shares the query's terms: kept
    assert len(output) < len(history[2]["content"]) / 3  # the rest of the tail is dropped
    assert [m["role"] for m in result.messages] == [m["role"] for m in history]


def test_lanes_are_served_in_turn_and_a_new_lane_goes_first():
    queue = FairQueue()
    for name in ("a1", "a2", "a3"):
        queue.push("a", Job(str, (name,), Future(), 1))
    queue.push("b", Job(str, ("b1",), Future(), 1))
    queue.push("b", Job(str, ("b2",), Future(), 1))
    order = [queue.pop().args[0] for _ in range(5)]
    assert order == ["b1", "a1", "b2", "a2", "a3"] and not queue and queue.queued == 0


def test_a_full_background_queue_sheds_and_never_blocks():
    scheduler = Scheduler(workers=1, background_limit=16)
    release, running = threading.Event(), threading.Event()

    def hold() -> str:  # keeps the background worker busy, so later jobs stay queued
        running.set()
        release.wait(30)
        return "held"

    encode = default_embedder().encode
    try:
        held = scheduler.submit(hold, (), lane="a", background=True)
        assert held is not None and running.wait(30)
        started = time.perf_counter()
        queued = [scheduler.submit(encode, ([f"Sentence {i} of {lane}."] * 8,), lane=lane,
                                   background=True, size=8) for i, lane in enumerate("bcd")]
        assert time.perf_counter() - started < 1.0  # submitting never waits for the worker
        assert queued[0] is not None and queued[1] is not None and queued[2] is None
        assert scheduler.shed == 8
        call_path = scheduler.submit(encode, (["A call's query."],), lane="e", background=False)
        assert call_path is not None and call_path.result(60).shape == (1, 384)  # not held up
        release.set()
        assert held.result(30) == "held"
        assert [f.result(60).shape for f in queued[:2] if f is not None] == [(8, 384)] * 2
    finally:
        release.set()
        scheduler.stop(30)


def test_background_python_work_pauses_while_a_call_is_prepared():
    """A background worker's pure-Python loop waits at its pause points while a call is on
    its call path (and goes on when the call is through); call-path threads never wait."""
    import threading

    from agentmem.models import runtime

    def loop() -> tuple[float, float]:
        started = time.perf_counter()
        runtime.pause_point()
        return started, time.perf_counter()

    warm = runtime.scheduler().submit(int, (), lane="pause-test", background=True)
    assert warm is not None and warm.result(timeout=60) == 0  # the worker has started
    with runtime.on_call_path():
        future = runtime.scheduler().submit(loop, (), lane="pause-test", background=True)
        assert future is not None
        time.sleep(0.15)
        assert not future.done()  # paused: a call is being prepared
        elsewhere: list[tuple[float, float]] = []
        thread = threading.Thread(target=lambda: elsewhere.append(loop()))
        thread.start()
        thread.join()
        assert elsewhere[0][1] - elsewhere[0][0] < 0.05  # not a background worker: no pause
        call_done = time.perf_counter()
    # The niced worker may start the job late on a busy machine, so the pause is measured
    # from wherever it began: it lasted until the call was through, or the longest pause.
    started, ended = future.result(timeout=5)
    assert ended >= min(call_done, started + runtime.MAX_PAUSE_S) - 0.005
    assert ended - started < runtime.MAX_PAUSE_S + 0.1


def _fetched(page: str, question: str = "What does the page say about the harbour?") -> list[dict]:
    """An agent's step: a question, its web_fetch call (untrusted), the page it returned."""
    call = {"id": "w1", "type": "function",
            "function": {"name": "web_fetch", "arguments": '{"url": "https://example.org/a"}'}}
    return [_question(question), {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "w1", "content": page}]


async def test_a_page_past_the_budget_is_not_half_embedded_for_a_check_that_waits(engine):
    """The poison check reads every sentence with its vector or runs after the reply; a page
    past the call's budget used to have its last 32 sentences embedded on the call path
    anyway (~0.5 s for a 300,000-character page on two cores), then the check waited."""
    session = f"fair-f-{uuid.uuid4().hex[:8]}"
    result = await engine.apply(_fetched(_paste(200)), session_id=session)
    warnings = result.report.warnings
    assert any("the poison check runs after the reply" in w for w in warnings), warnings
    assert not any("past the call's embedding budget" in w for w in warnings), warnings
    await engine.drain()
    assert engine.state.corpora.missing(engine.tenant, session) == 0  # all of it, after the reply
    # within the budget the page is embedded on the call path and checked there
    small = await engine.apply(_fetched(_paste(20)), session_id=f"fair-g-{uuid.uuid4().hex[:8]}")
    assert not small.report.warnings, small.report.warnings
    await engine.drain()


async def test_a_page_whose_check_waits_is_read_after_the_reply(engine):
    """Past the budget the page's poison check runs after the reply, and nothing else on the
    call path reads the agent step's result: its ~200 sentences are not split, counted and
    indexed on the call path either (~0.2 s at 300,000 characters), but after the reply."""
    session = f"fair-i-{uuid.uuid4().hex[:8]}"
    messages = [{"role": "user", "content": "I keep my boat at the north harbour."},
                {"role": "assistant", "content": "Noted."}, *_fetched(_paste(200))]
    async with engine.call({"model": "gpt-4o", "messages": messages}, session_id=session) as call:
        assert any("the poison check runs after the reply" in w for w in call.report.warnings)
        assert engine.state.corpora.covered(engine.tenant, session) == 3  # up to the question
        assert call.outgoing["messages"][-1]["content"] == messages[-1]["content"]
    await engine.drain()
    assert engine.state.corpora.covered(engine.tenant, session) == len(messages)
    assert engine.state.corpora.missing(engine.tenant, session) == 0
    # the step's next result: the stored turns are read (they are the corpus already), not it
    call2 = {"id": "w2", "type": "function",
             "function": {"name": "web_fetch", "arguments": '{"url": "https://example.org/b"}'}}
    more = [*messages, {"role": "assistant", "content": None, "tool_calls": [call2]},
            {"role": "tool", "tool_call_id": "w2", "content": _paste(150)}]
    async with engine.call({"model": "gpt-4o", "messages": more}, session_id=session) as call:
        assert any("the poison check runs after the reply" in w for w in call.report.warnings)
        assert engine.state.corpora.covered(engine.tenant, session) == len(messages)
    await engine.drain()
    assert engine.state.corpora.covered(engine.tenant, session) == len(more)
    # a page within the budget is still read and checked on the call path
    small = f"fair-j-{uuid.uuid4().hex[:8]}"
    async with engine.call({"model": "gpt-4o", "messages": _fetched(_paste(20))},
                           session_id=small) as call:
        assert not call.report.warnings, call.report.warnings
        assert engine.state.corpora.covered(engine.tenant, small) == 3
    await engine.drain()


async def test_the_budget_goes_to_the_older_turns_the_prune_stage_scores(engine):
    """A long history arriving whole (the first call through the proxy) is past the poison
    check's budget, so the call's budget goes to the older turns the first stage ranks,
    newest first, and not to the recent turns it never scores."""
    session = f"fair-h-{uuid.uuid4().hex[:8]}"
    history = _conversation(30, seed=2) + [_question("What is my locker code?")]
    result = await engine.apply(history, session_id=session)
    lexical = [w for w in result.report.warnings if w.startswith("prune: ") and "scored lexically" in w]
    assert lexical, result.report.warnings
    unembedded = int(lexical[0].split()[1].replace(",", ""))
    older_turns = recent_start(history, engine.policy.prune.keep_recent_exchanges)
    older_rows = 3 * older_turns + 1  # three sentences a turn, and the locker's
    # the budget less the question's sentence (its vector is the query's, prefetched)
    assert unembedded == older_rows - (BUDGET - 1), (unembedded, older_rows)
    assert any("7731" in m["content"] for m in result.messages if isinstance(m["content"], str))
    await engine.drain()
