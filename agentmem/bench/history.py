"""`agentmem bench history`: does the evidence of a long conversation reach the model?

LoCoMo samples become proxied-style sessions: speaker_a is `user`, speaker_b `assistant`,
each session's date prefixed to its first turn, and each QA's question the final user
message. Every request runs through the same pipeline the proxy uses, with the session in
Redis. Baselines get the same token count per question: the most recent turns, and the
sentences most similar to the question by MiniLM cosine.

``compare``: further policies run on every question against the same stored session (ingested
once), each with its own recall, token fraction, latency and baselines at its own token count.
Why: the modes of the prune stage differ per question only in the call, and ingesting five
long conversations per mode cost most of a run on the 2-core machine. LoCoMo's licence is
non-commercial: it is used to evaluate, never to fit weights or choose parameters (those are
chosen on the SGD chat dev set, agentmem/train/chat_dev.py).

``evidence_recall_by_category``: recall per QA ``category`` (LoCoMo's 1-5; the chat dev set's
kinds 1-4), because a mean over kinds hides which kind of evidence a setting loses.
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import numpy as np

from agentmem.bench.results import percentile
from agentmem.bench.scratch import scratch_hygiene
from agentmem.ingest import message_tokens
from agentmem.messages import text_of
from agentmem.text import count_tokens, split_sentences


def conversation_messages(sample, captions: bool = True, names: bool = True
                          ) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The conversation as chat messages, and each turn's position. A turn that shares a photo
    carries its caption (``blip_caption``), rendered as LoCoMo's own evaluation renders it
    ("... and shared <caption>"): a question about the photo is about those words, and a chat
    client would have sent the image with the turn. ``names``: each turn's speaker is its
    message's ``name`` (OpenAI's field for a participant of a group chat), as LoCoMo's own
    retrieval evaluation names the speaker of every turn it indexes ('Caroline said, "..."'):
    its questions name the person ("What does Melanie paint?") whose turns say "I"."""
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
            if captions and turn.get("blip_caption"):
                text = f"{text} [and shared {turn['blip_caption']}]"
            if position == 0 and date:
                text = f"[{date}] {text}"
            where[turn["dia_id"]] = len(messages)
            message = {"role": role, "content": text}
            if names and turn.get("speaker"):
                message["name"] = turn["speaker"]
            messages.append(message)
    return messages, where


def _evidence(qa, where: dict[str, int]) -> list[int]:
    ids = []
    for entry in qa.evidence:
        for part in re.split(r"[;,\s]+", entry):
            if part in where:
                ids.append(where[part])
    return sorted(set(ids))


class Tally:
    """One policy's counts over the questions (this bench's and agent_history's)."""

    def __init__(self, policy: str) -> None:
        self.policy = policy
        self.retained = self.full = self.total = self.recency_hits = self.embed_hits = 0
        self.fractions: list[float] = []
        self.latencies: list[float] = []
        self.warnings: dict[str, int] = {}
        self.by_category: dict[str, list[int]] = {}  # category: [retained, evidence turns]

    def record(self, result, elapsed_ms: float) -> None:
        """A call's latency, token fraction and warnings (its warnings with numbers blanked,
        so the same warning counts as one)."""
        self.latencies.append(result.report.latency_ms.get("hygiene", elapsed_ms))
        self.fractions.append(result.report.tokens_after / max(1, result.report.tokens_before))
        for warning in result.report.warnings:
            key = re.sub(r"[\d,.]+", "N", warning)[:120]
            self.warnings[key] = self.warnings.get(key, 0) + 1

    def result(self, questions: int) -> dict[str, Any]:
        total = self.total
        return {
            "n": questions, "evidence_turns": total,
            "evidence_recall": self.retained / total if total else 0.0,
            "evidence_full_recall": self.full / total if total else 0.0,
            "token_fraction": float(np.mean(self.fractions)) if self.fractions else 0.0,
            "latency_ms_p50": percentile(self.latencies, 0.5),
            "latency_ms_p95": percentile(self.latencies, 0.95),
            "baselines": {"recency": {"evidence_recall": self.recency_hits / total if total else 0.0},
                          "embedding_topk": {"evidence_recall": self.embed_hits / total if total else 0.0}},
            "policy": self.policy,
            "evidence_recall_by_category": {
                category: {"evidence_recall": kept / total if total else 0.0, "evidence_turns": total}
                for category, (kept, total) in sorted(self.by_category.items())},
            **({"warnings": dict(self.warnings)} if self.warnings else {}),
        }


def turn_order(tallies: list[Tally], question: int) -> list[Tally]:
    """The policies in the order they run on one question: rotated by one per question, so each
    runs first, and pays the call's cold caches (the question's embedding, a new tool result's
    clause vectors), on an equal share of the questions. In a fixed order every compared policy
    found them warm, and its latency looked lower than the first policy's for that alone."""
    shift = question % len(tallies)
    return tallies[shift:] + tallies[:shift]


async def _run(samples, policy: str, limit: int | None, scaling_wanted: bool = True,
               compare: tuple[str, ...] = (), captions: bool = True, names: bool = True
               ) -> dict[str, Any]:
    from agentmem.models.embedder import default_embedder

    embedder = default_embedder()
    tallies = [Tally(name) for name in (policy, *compare)]
    questions = 0
    async with scratch_hygiene(policy, "history") as hygiene:
        for number, sample in enumerate(samples):
            if limit is not None and questions >= limit:
                break
            messages, where = conversation_messages(sample, captions, names)
            session = f"locomo-{number}"
            await hygiene.apply(messages + [{"role": "user", "content": "Hello again."}], session_id=session)
            await hygiene.drain()  # ingest-time embeddings of the whole conversation
            for name in compare:  # loads what each compared policy needs before timing it
                await hygiene.apply(messages + [{"role": "user", "content": "Warm up."}],
                                    session_id=session, policy=name)
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
                query_vector = embedder.encode([qa.question])[0]
                for tally in turn_order(tallies, questions):
                    started = time.perf_counter()
                    result = await hygiene.apply(request, session_id=session,
                                                 policy=None if tally is tallies[0] else tally.policy)
                    tally.record(result, (time.perf_counter() - started) * 1000)
                    outgoing = dict(zip(result.kept_indices, result.messages))
                    budget = result.report.tokens_after - message_tokens(request[-1])
                    recent = _recency(turn_tokens, budget)
                    chosen = _embedding_topk(query_vector, sentence_vectors, sentence_rows,
                                             messages, budget)
                    counts = tally.by_category.setdefault(str(qa.category), [0, 0])
                    for index in evidence:
                        tally.total += 1
                        counts[1] += 1
                        kept = outgoing.get(index)
                        if kept is not None and kept.get("content"):
                            tally.retained += 1
                            counts[0] += 1
                            tally.full += kept["content"] == messages[index]["content"]
                        tally.recency_hits += index in recent
                        tally.embed_hits += index in chosen
        scaling = await _latency_vs_length(hygiene, samples) if scaling_wanted else {}
    out = {"latency_vs_turns": scaling, **tallies[0].result(questions)}
    if compare:
        out["compare"] = {tally.policy: tally.result(questions) for tally in tallies[1:]}
    return out


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


def embedding_topk_rows(query, vectors, rows, messages, budget: int) -> set[int]:
    """The baseline: rows (message, start, end) of the sentences most similar to the query by
    MiniLM cosine that fit ``budget`` tokens (a message's overhead counted once)."""
    kept: set[int] = set()
    turns: set[int] = set()
    used = 0
    for row in np.argsort(-(vectors @ query)).tolist():
        index, a, b = rows[row]
        cost = count_tokens(text_of(messages[index])[a:b]) + (3 if index not in turns else 0)
        if used + cost > budget:
            continue
        kept.add(row)
        turns.add(index)
        used += cost
    return kept


def _embedding_topk(query, vectors, rows, messages, budget: int) -> set[int]:
    """The messages the baseline keeps something of."""
    return {rows[row][0] for row in embedding_topk_rows(query, vectors, rows, messages, budget)}


def run_history(samples, *, policy: str, limit: int | None = None, compare: tuple[str, ...] = (),
                scaling: bool = True, captions: bool = True, names: bool = True) -> dict[str, Any]:
    """The bench for ``policy`` (and each of ``compare`` on the same sessions); ``scaling``:
    add the call latency by conversation length (``policy`` only); ``captions``: photo
    captions in their turns, ``names``: speakers as the messages' ``name``
    (``conversation_messages``)."""
    result = asyncio.run(_run(samples, policy, limit, scaling, compare, captions, names))
    result["captions"], result["names"] = captions, names
    return result
