"""Clash through the real proxy: each clash kind withholds the older statement (newer wins),
each hard-negative kind withholds nothing, a release restores the exact original messages,
and the LLM-judge plumbing asks once per pair and respects its verdict."""

from __future__ import annotations

import re
import uuid

import httpx
import pytest

from agentmem import Hygiene
from agentmem.config import Settings
from agentmem.policy import policy_from_dict
from agentmem.upstream import LitellmUpstream
from tests.conftest import echo_routes

CLASHES = {  # kind: (earlier user statement, later user statement)
    "value": ("I'm 34 and want to start running.",
              "As a 52-year-old with a dodgy knee, should I worry about pavement?"),
    "negation": ("I don't have a car, so I take the bus everywhere.",
                 "My car broke down again this morning."),
    "instruction_reversal": ("Never use emojis in your replies.",
                             "As I said, always add emojis to your replies."),
    "profile": ("I live in Canada with my family.",
                "My flat in Madrid is tiny, so the kids share a room."),
}
HARD_NEGATIVES = {
    "update": ("I live in Berlin.", "We moved to Lyon last month, so I now live in Lyon."),
    "other_person": ("I'm 34 years old.", "My brother is 41 years old."),
    "hypothetical": ("I'm vegetarian.", "If I weren't vegetarian, I would order the steak."),
    "restatement": ("I have two kids.", "My 2 children are at school all day."),
    "question": ("I'm 34 years old.", "How old do you think I should be to run a marathon?"),
}


def _dialogue(earlier: str, later: str) -> list[dict]:
    return [{"role": "user", "content": f"{earlier} Can you help me plan my week?"},
            {"role": "assistant", "content": "Of course. What matters most to you this week?"},
            {"role": "user", "content": later}]


def _send(client, session_id, messages):
    client.chat.completions.create(model="echo", messages=messages, extra_headers={
        "X-Session-Id": session_id, "X-Agentmem-Policy": "guarded"})


@pytest.mark.parametrize("kind", sorted(CLASHES))
def test_each_clash_kind_withholds_the_older_statement(kind, client, received, http):
    earlier, later = CLASHES[kind]
    session_id = f"clash-{kind}-{uuid.uuid4().hex[:8]}"
    messages = _dialogue(earlier, later)
    _send(client, session_id, messages)
    sent = received.requests()[-1]["messages"]
    assert earlier not in sent[0]["content"] and "Can you help me plan my week?" in sent[0]["content"]
    assert sent[-1]["content"] == later  # the newest statement wins
    records = http.get(f"/v1/sessions/{session_id}/quarantine").json()["data"]
    assert [r["kind"] for r in records] == ["clash"] and records[0]["detector"].startswith("rule:")
    assert records[0]["text"] == earlier and later[:40] in records[0]["reason"]

    released = http.post(f"/v1/sessions/{session_id}/quarantine/{records[0]['id']}/release")
    assert released.json()["status"] == "released"
    received.clear()
    _send(client, session_id, messages)
    assert received.requests()[-1]["messages"] == messages  # exactly what the client sent


@pytest.mark.parametrize("kind", sorted(HARD_NEGATIVES))
def test_hard_negatives_withhold_nothing(kind, client, received, http):
    earlier, later = HARD_NEGATIVES[kind]
    session_id = f"noclash-{kind}-{uuid.uuid4().hex[:8]}"
    messages = _dialogue(earlier, later)
    _send(client, session_id, messages)
    assert received.requests()[-1]["messages"] == messages
    records = http.get(f"/v1/sessions/{session_id}/quarantine").json()["data"]
    assert not [r for r in records if r["kind"] == "clash" and r["detector"].startswith("rule:")]


async def test_judge_is_asked_once_per_pair_and_decides(upstream, data_dir):
    """The rules are silent on this pair; the judge (the echo upstream, its verdict scripted
    by the test) is asked after the reply, and its "yes" makes the clash."""
    httpx.post(f"{upstream.url}/_echo/script", json={"match": "self-contradictions", "reply": "1: yes"})
    policy = policy_from_dict({"name": "judged", "stages": ["quarantine"], "quarantine": {
        "judge_model": "echo", "judge_threshold": 0.0, "clash_similarity": -1.0,
        "contradiction_threshold": 1.0, "poison": False}})
    settings = Settings(data_dir=data_dir, models=echo_routes(upstream.url))
    hygiene = Hygiene(policy, settings=settings, upstream=LitellmUpstream(settings.route))
    session_id = f"judge-{uuid.uuid4().hex[:8]}"
    history = [{"role": "user", "content": "I will stay at home the whole weekend."},
               {"role": "assistant", "content": "Sounds restful."},
               {"role": "user", "content": "My flight to Oslo leaves on Saturday morning."}]
    try:
        reply = await hygiene.acompletion("echo", history, session_id=session_id)
        await hygiene.drain()
        history += [reply.choices[0].message.model_dump(exclude_none=True),
                    {"role": "user", "content": "Sunday will be spent in Oslo as well."}]
        await hygiene.acompletion("echo", history, session_id=session_id)
        await hygiene.drain()
        asked = [r for r in httpx.get(f"{upstream.url}/_echo/requests").json()
                 if "self-contradictions" in str(r["messages"][0].get("content"))]
        from agentmem.quarantine.records import QuarantineStore
        from agentmem.store import SessionHandle

        records = await QuarantineStore(hygiene.store()).all(SessionHandle("default", session_id))
    finally:
        httpx.delete(f"{upstream.url}/_echo/script")
        await hygiene.aclose()
        hygiene.connector.close()
    judged = [r for r in records if r.detector == "judge:echo"]
    assert judged and all(r.kind == "clash" for r in judged)
    pairs = [pair for r in asked
             for pair in re.findall(r"A: (.*)\n\s*B: (.*)", r["messages"][1]["content"])]
    assert pairs and len(pairs) == len(set(pairs))  # asked once; later calls read the cache
