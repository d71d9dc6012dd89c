"""The noisy neighbour, measured in process: one session pastes ~1 MB while another chats.

The real engine (``Hygiene`` with the default policy, MiniLM, an embedded Redis in a fresh
folder) runs every call's whole lifecycle (prepare, then finish with a canned reply, which
starts the after-reply embedding and quarantine work) with no provider, so what is timed is
agentmem alone. Session B makes ordinary calls on a 30+ turn history: first alone (quiet),
then while session A's paste is prepared and its after-reply work runs (noisy). The figures
are B's hygiene latency (``report.latency_ms["hygiene"]``) quiet and noisy, and A's own.

    agentmem bench noisy --paste-mb 1 --calls 30 [--as-tool web_fetch] [--json OUT]

``--as-tool NAME``: A's text arrives as what its tool NAME returned (an agent that fetched a
page: a user question, the assistant's call, the tool's answer) instead of a user's paste; a
tool the policy does not trust (``web_*``, ``*search*``, ...) has its output checked for
poison, on the call path when it can be read whole, else after the reply.
"""

from __future__ import annotations

import asyncio
import random
import tempfile
import time
import uuid
from typing import Any

from agentmem.bench.results import percentile

WORDS = ("order kettle Lyon invoice station meeting migration snapshot supplier warehouse pallet "
         "audit river garden ticket payment holiday harbour violin recipe engine bridge lantern "
         "market signal theory museum forest battery planet mirror ladder compass").split()


def paste(megabytes: float, seed: int = 0) -> str:
    """About ``megabytes`` of distinct sentences (numbered, so none repeats)."""
    rng = random.Random(seed)
    out: list[str] = []
    size, target = 0, int(megabytes * 1024 * 1024)
    while size < target:
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 16)))
        sentence = f"Line {len(out)} says the {words}."
        out.append(sentence)
        size += len(sentence) + 1
    return " ".join(out)


def exchange(i: int, rng: random.Random) -> list[dict[str, str]]:
    """One user turn and one reply, five sentences each."""
    def text(kind: str) -> str:
        return " ".join(f"{kind} {i}.{k} mentions the " + " ".join(rng.choice(WORDS) for _ in range(12))
                        + "." for k in range(5))
    return [{"role": "user", "content": text("Question")},
            {"role": "assistant", "content": text("Answer")}]


async def chat(hygiene: Any, session: str, history: list[dict[str, str]], rng: random.Random,
               turn: int) -> dict[str, Any]:
    """One call of session B: a new question on its history; its hygiene and stage ms."""
    user, reply = exchange(turn, rng)
    body = {"model": "gpt-4o", "messages": [*history, user]}
    async with hygiene.call(body, session_id=session) as call:
        await call.finish(reply)
    history += [user, reply]
    report = call.report
    return {"hygiene_ms": float(report.latency_ms["hygiene"]), "warnings": report.warnings,
            "stages_ms": {run.stage: run.latency_ms for run in report.stages}}


async def calls_of_b(hygiene: Any, session: str, history: list[dict[str, str]],
                     rng: random.Random, count: int, start: int, pause: float
                     ) -> list[dict[str, Any]]:
    out = []
    for k in range(count):
        out.append(await chat(hygiene, session, history, rng, start + k))
        await asyncio.sleep(pause)
    return out


def paste_messages(text: str, tool: str | None) -> list[dict[str, Any]]:
    """A user's paste, or (``tool``) a question whose tool call returned the text."""
    if tool is None:
        return [{"role": "user", "content": text}]
    call = {"id": "call_a", "type": "function",
            "function": {"name": tool, "arguments": '{"url": "https://example.org/page"}'}}
    return [{"role": "user", "content": "What does the page say about the harbour?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_a", "content": text}]


async def paste_of_a(hygiene: Any, text: str, tool: str | None = None) -> dict[str, Any]:
    """Session A's call with the paste; its report's latency and warnings."""
    body = {"model": "gpt-4o", "messages": paste_messages(text, tool)}
    async with hygiene.call(body, session_id=f"noisy-a-{uuid.uuid4().hex[:8]}") as call:
        await call.finish({"role": "assistant", "content": "Thanks, I have read it."})
    report = call.report
    return {"hygiene_ms": report.latency_ms["hygiene"], "warnings": report.warnings,
            "stages_ms": {run.stage: run.latency_ms for run in report.stages}}


def summary(calls: list[dict[str, Any]]) -> dict[str, Any]:
    values = [call["hygiene_ms"] for call in calls]
    slowest = max(calls, key=lambda call: call["hygiene_ms"])
    return {"n": len(values), "p50_ms": round(percentile(values, 0.5), 1),
            "p99_ms": round(percentile(values, 0.99), 1), "max_ms": round(max(values), 1),
            "slowest_stages_ms": slowest["stages_ms"]}


async def measure(paste_mb: float, calls: int, history_turns: int, pause: float,
                  drain: bool = True, tool: str | None = None) -> dict[str, Any]:
    from agentmem import Hygiene
    from agentmem.config import Settings
    from agentmem.models.runtime import favour_latency, freeze_startup_objects

    favour_latency()  # as `agentmem serve` does
    with tempfile.TemporaryDirectory() as folder:
        hygiene = Hygiene("default", settings=Settings(data_dir=folder))
        try:
            rng = random.Random(1)
            session = f"noisy-b-{uuid.uuid4().hex[:8]}"
            history = [m for i in range(history_turns // 2) for m in exchange(i, rng)]
            turn = history_turns
            await chat(hygiene, session, history, rng, turn)  # warm up: models, B's corpus
            await hygiene.drain()
            freeze_startup_objects()  # as `agentmem serve` does once warm
            for k in range(3):
                await chat(hygiene, session, history, rng, turn + 1 + k)
            await hygiene.drain()
            turn += 4
            quiet = await calls_of_b(hygiene, session, history, rng, calls, turn, pause)
            await hygiene.drain()
            turn += calls
            text = paste(paste_mb)
            started = time.perf_counter()
            a_task = asyncio.ensure_future(paste_of_a(hygiene, text, tool))
            await asyncio.sleep(0.05)  # A's call is under way
            noisy = await calls_of_b(hygiene, session, history, rng, calls, turn, pause)
            a = await a_task
            a["wall_s"] = round(time.perf_counter() - started, 2)
            if drain:  # how long A's background work (embeddings, quarantine) still ran
                drain_started = time.perf_counter()
                await hygiene.drain()
                a["background_left_s"] = round(time.perf_counter() - drain_started, 2)
                await hygiene.aclose()
        finally:
            hygiene.connector.close()
    ratio = summary(noisy)["p99_ms"] / summary(quiet)["p99_ms"]
    return {"paste_chars": len(text), "paste_as": tool or "user", "b_history_turns": history_turns,
            "b_quiet": summary(quiet), "b_noisy": summary(noisy), "b_p99_ratio": round(ratio, 2),
            "a": a}


def run_noisy(paste_mb: float = 1.0, calls: int = 30, history_turns: int = 30,
              pause: float = 0.05, drain: bool = True, tool: str | None = None) -> dict[str, Any]:
    return asyncio.run(measure(paste_mb, calls, history_turns, pause, drain=drain, tool=tool))
