"""`agentmem bench history`: does the evidence of a long conversation reach the model?

LoCoMo samples become proxied-style sessions: speaker_a is `user`, speaker_b `assistant`,
each session's date prefixed to its first turn, and each QA's question the final user
message. Every request runs through the same pipeline the proxy uses, with the session in
Redis. Baselines get the same token count per question: the most recent turns, and the
sentences most similar to the question by MiniLM cosine.
"""

from __future__ import annotations

import asyncio
import re
import tempfile
import time
from typing import Any

import numpy as np

from agentmem.bench.results import percentile
from agentmem.ingest import message_tokens
from agentmem.text import count_tokens, split_sentences


def conversation_messages(sample) -> tuple[list[dict[str, Any]], dict[str, int]]:
    conversation = sample.conversation
    a, b = conversation.get("speaker_a"), conversation.get("speaker_b")
    numbers = sorted(int(m.group(1)) for key in conversation
                     if (m := re.fullmatch(r"session_(\d+)", key)))
    messages: list[dict[str, Any]] = []
    where: dict[str, int] = {}
    for number in numbers:
        date = conversation.get(f"session_{number}_date_time", "")
        for position, turn in enumerate(conversation[f"session_{number}"]):
            role = "user" if turn.get("speaker") == a else "assistant" if turn.get("speaker") == b else "user"
            text = turn.get("text", "")
            if position == 0 and date:
                text = f"[{date}] {text}"
            where[turn["dia_id"]] = len(messages)
            messages.append({"role": role, "content": text})
    return messages, where


def _evidence(qa, where: dict[str, int]) -> list[int]:
    ids = []
    for entry in qa.evidence:
        for part in re.split(r"[;,\s]+", entry):
            if part in where:
                ids.append(where[part])
    return sorted(set(ids))


async def _run(samples, policy: str, limit: int | None, scaling_wanted: bool = True) -> dict[str, Any]:
    from agentmem.api import Hygiene
    from agentmem.config import Settings
    from agentmem.models.embedder import default_embedder

    hygiene = Hygiene(policy, settings=Settings(data_dir=tempfile.mkdtemp(prefix="agentmem-history-")))
    embedder = default_embedder()
    retained = full = total = 0
    recency_hits = embed_hits = 0
    fractions, latencies = [], []
    questions = 0
    try:
        for number, sample in enumerate(samples):
            messages, where = conversation_messages(sample)
            session = f"locomo-{number}"
            await hygiene.apply(messages + [{"role": "user", "content": "Hello again."}], session_id=session)
            await hygiene.drain()  # ingest-time embeddings of the whole conversation
            sentence_rows = [(i, s.start, s.end) for i, m in enumerate(messages)
                             for s in split_sentences(m["content"])]
            sentence_vectors = embedder.encode([messages[i]["content"][a:b] for i, a, b in sentence_rows])
            turn_tokens = [message_tokens(m) for m in messages]
            for qa in sample.qa:
                evidence = _evidence(qa, where)
                if not evidence:
                    continue
                if limit is not None and questions >= limit:
                    break
                questions += 1
                request = messages + [{"role": "user", "content": qa.question}]
                started = time.perf_counter()
                result = await hygiene.apply(request, session_id=session)
                elapsed_ms = (time.perf_counter() - started) * 1000
                latencies.append(result.report.latency_ms.get("hygiene", elapsed_ms))
                fractions.append(result.report.tokens_after / max(1, result.report.tokens_before))
                outgoing = dict(zip(result.kept_indices, result.messages))
                budget = result.report.tokens_after - message_tokens(request[-1])
                recent = _recency(turn_tokens, budget)
                chosen = _embedding_topk(embedder.encode([qa.question])[0], sentence_vectors,
                                         sentence_rows, messages, budget)
                for index in evidence:
                    total += 1
                    kept = outgoing.get(index)
                    if kept is not None and kept.get("content"):
                        retained += 1
                        full += kept["content"] == messages[index]["content"]
                    recency_hits += index in recent
                    embed_hits += index in chosen
        scaling = await _latency_vs_length(hygiene, samples) if scaling_wanted else {}
    finally:
        await hygiene.aclose()
        hygiene.connector.close()
    return {
        "latency_vs_turns": scaling,
        "n": questions, "evidence_turns": total,
        "evidence_recall": retained / total if total else 0.0,
        "evidence_full_recall": full / total if total else 0.0,
        "token_fraction": float(np.mean(fractions)) if fractions else 0.0,
        "latency_ms_p50": percentile(latencies, 0.5), "latency_ms_p95": percentile(latencies, 0.95),
        "baselines": {"recency": {"evidence_recall": recency_hits / total if total else 0.0},
                      "embedding_topk": {"evidence_recall": embed_hits / total if total else 0.0}},
        "policy": policy,
    }


async def _latency_vs_length(hygiene, samples, lengths=(60, 150, 300, 600), per_length=20):
    """Call latency of the same questions against the longest conversation cut to N turns."""
    longest = max(samples, key=lambda s: len(conversation_messages(s)[0]))
    messages, _ = conversation_messages(longest)
    questions = [qa.question for qa in longest.qa if qa.evidence][:per_length]
    out = {}
    for length in lengths:
        if length > len(messages):
            break
        session = f"scaling-{length}"
        history = messages[:length]
        await hygiene.apply(history + [{"role": "user", "content": "Hello again."}], session_id=session)
        await hygiene.drain()
        await hygiene.apply(history + [{"role": "user", "content": "Warm up."}], session_id=session)
        times = []
        for question in questions:
            result = await hygiene.apply(history + [{"role": "user", "content": question}],
                                         session_id=session)
            times.append(result.report.latency_ms["hygiene"])
        out[str(length)] = {"latency_ms_p50": percentile(times, 0.5),
                            "latency_ms_p95": percentile(times, 0.95)}
    return out


def _recency(turn_tokens: list[int], budget: int) -> set[int]:
    kept, used = set(), 0
    for index in range(len(turn_tokens) - 1, -1, -1):
        if used + turn_tokens[index] > budget:
            break
        kept.add(index)
        used += turn_tokens[index]
    return kept


def _embedding_topk(query, vectors, rows, messages, budget: int) -> set[int]:
    order = np.argsort(-(vectors @ query))
    kept, used = set(), 0
    for row in order:
        index, a, b = rows[row]
        cost = count_tokens(messages[index]["content"][a:b]) + (3 if index not in kept else 0)
        if used + cost > budget:
            continue
        kept.add(index)
        used += cost
    return kept


def run_history(samples, *, policy: str, limit: int | None = None) -> dict[str, Any]:
    return asyncio.run(_run(samples, policy, limit))
