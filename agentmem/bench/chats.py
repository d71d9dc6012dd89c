"""`agentmem bench chats`: what quarantine's clash check does to chats with a general assistant.

A chat file holds one JSON line per chat: ``system`` (a role prompt or null), ``messages``
(user and assistant turns) and ``contradictions`` (the chat's written self-contradictions: two
sentences copied from the messages, ``older`` and ``newer``, a ``speaker`` and a ``kind``).
Each chat is replayed as a proxied session under the policy: one hygiene call at every user
turn with the messages up to it, background work drained in between, and a last call so the
last reply is checked too. A written contradiction is *caught* when a clash record pairs its
two sentences (either one withheld, the other its related statement); every other clash record
is a *false record*, a sentence of an ordinary chat withheld from the model. The clash bench
asks about one last turn; this asks what a whole conversation loses (`agentmem/bench/data/
general_chats_check.jsonl`, README: Benchmarks, Stop 66).
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from agentmem.bench.formats import ChatRecord, read_jsonl, read_locomo
from agentmem.bench.scratch import scratch_hygiene

BENCH_POLICY = "default"
CLOSING = {"role": "user", "content": "Thanks!"}  # the call that stores and checks the last reply


def read_chats(paths: list[Path]) -> list[dict[str, Any]]:
    """Every chat of the files, validated (``ChatRecord``: a bad line is a ``BenchDataError``
    naming its file and line), as plain dicts."""
    return [record.model_dump() for path in paths for record in read_jsonl(path, ChatRecord)]


def chat_messages(chat: dict[str, Any]) -> list[dict[str, str]]:
    """The chat as a request's messages: its role prompt (if any), then its turns."""
    system = [{"role": "system", "content": chat["system"]}] if chat.get("system") else []
    return system + [{"role": m["role"], "content": m["content"]} for m in chat["messages"]]


def locomo_chats(path: Path, conversations: list[int], turns: int = 300) -> list[dict[str, Any]]:
    """LoCoMo conversations (the history bench's file) as chats: the first speaker as the user,
    the second as the assistant, consecutive turns of one speaker joined, the first ``turns``
    messages from the first user turn; no contradiction written (LoCoMo's are not marked), so
    every clash record is counted as false. Long chit-chat between friends: what the clash
    check withholds from a companion app's chats (README, Benchmarks, Stop 66)."""
    samples = read_locomo(path)
    chats = []
    for index in conversations:
        conversation = samples[index].conversation
        messages: list[dict[str, str]] = []
        session = 1
        while f"session_{session}" in conversation:
            for turn in conversation[f"session_{session}"]:
                role = "user" if turn["speaker"] == conversation["speaker_a"] else "assistant"
                if messages and messages[-1]["role"] == role:
                    messages[-1]["content"] += " " + turn["text"]
                elif messages or role == "user":
                    messages.append({"role": role, "content": turn["text"]})
            session += 1
        chats.append({"id": f"locomo-{index}", "system": None, "messages": messages[:turns],
                      "contradictions": []})
    return chats


def _same(sentence: str, written: str) -> bool:
    """A record's sentence is a written one: one holds the other (the engine's sentence split
    and the writer's may differ at a colon or a quote)."""
    a, b = " ".join(sentence.split()), " ".join(written.split())
    return bool(a and b) and (a in b or b in a)


def _pairs(record: Any, clash: dict[str, Any]) -> bool:
    """Whether the record withholds one of the written contradiction's sentences for the other."""
    related = [str(r.get("text", "")) for r in record.related]
    return any(_same(record.text, one) and any(_same(text, other) for text in related)
               for one, other in ((clash["older"], clash["newer"]), (clash["newer"], clash["older"])))


async def _run(chats: list[dict[str, Any]], policy: str) -> dict[str, Any]:
    from agentmem.policy import load_policy
    from agentmem.quarantine.records import QuarantineStore
    from agentmem.store import SessionHandle

    caught = false_records = false_in_consistent = chats_with_false = 0
    written = 0
    details = []
    async with scratch_hygiene(load_policy(policy), "chats") as hygiene:
        for chat in chats:
            session = f"chat-{uuid.uuid4().hex[:12]}"
            messages = chat_messages(chat)
            for turn in [i for i, m in enumerate(messages) if m["role"] == "user"]:
                await hygiene.apply(messages[: turn + 1], session_id=session)
                await hygiene.drain()
            if messages[-1]["role"] == "assistant":  # its last reply is checked on the next call
                await hygiene.apply([*messages, CLOSING], session_id=session)
                await hygiene.drain()
            records = [r for r in await QuarantineStore(hygiene.store()).all(
                SessionHandle(hygiene.tenant, session)) if r.kind == "clash"]
            contradictions = chat.get("contradictions") or []
            written += len(contradictions)
            caught += sum(any(_pairs(r, clash) for r in records) for clash in contradictions)
            false = [r for r in records if not any(_pairs(r, clash) for clash in contradictions)]
            false_records += len(false)
            false_in_consistent += 0 if contradictions else len(false)
            chats_with_false += bool(false)
            details += [{"chat": chat["id"], "detector": r.detector, "score": r.score,
                         "withheld": r.text, "against": [x.get("text") for x in r.related]}
                        for r in false]
    consistent = sum(not c.get("contradictions") for c in chats)
    return {"n": len(chats), "consistent_chats": consistent,
            "contradictions": written, "contradictions_caught": caught,
            "recall": caught / written if written else None,
            "false_records": false_records,
            "false_records_per_chat": false_records / len(chats) if chats else 0.0,
            "false_records_in_consistent_chats": false_in_consistent,
            "chats_with_a_false_record": chats_with_false, "false": details}


def run_chats(chats: list[dict[str, Any]], *, policy: str = BENCH_POLICY) -> dict[str, Any]:
    return asyncio.run(_run(chats, policy))
