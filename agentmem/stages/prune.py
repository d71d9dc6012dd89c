"""The prune stage: keep the history the current turn needs, sentence by sentence.

Query: the latest user message, plus the pending tool calls and their results when the
request is an agent step. The most recent exchanges stay verbatim. Older turns, and large
tool outputs, are scored by the Provence pruner; kept sentences are widened by their
neighbours so "this" keeps its antecedent. In long sessions the embeddings cached at ingest
recall the candidate turns first and the pruner scores only those. Tool-call units are never
split: a tool output may shrink (to its best sentence at least), the message stays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from agentmem.messages import text_of
from agentmem.models.embedder import from_bytes
from agentmem.models.runtime import run_inference
from agentmem.report import Decision
from agentmem.stages import register_stage
from agentmem.stages.base import Draft, StageContext
from agentmem.text import split_sentences


@dataclass
class Candidate:
    index: int  # position in the history
    text: str
    spans: list[tuple[int, int]]
    droppable: bool  # a plain user/assistant message; tool-unit members only shrink
    role: str = "user"


def query_of(history: list[dict[str, Any]]) -> str:
    """The latest user message, plus the pending tool calls and results of an agent step."""
    last_user = max((i for i, m in enumerate(history) if m.get("role") == "user"), default=None)
    parts = [text_of(history[last_user])] if last_user is not None else []
    tail = history[(last_user or -1) + 1:]
    for message in tail:
        for call in message.get("tool_calls") or ():
            function = call.get("function", {})
            parts.append(f"{function.get('name', '')} {function.get('arguments', '')}")
        if message.get("role") == "tool":
            parts.append(text_of(message)[:1000])
    return " ".join(p for p in parts if p).strip()


def recent_start(history: list[dict[str, Any]], keep_exchanges: int) -> int:
    """Index where the verbatim window begins: the K-th last user message."""
    users = [i for i, m in enumerate(history) if m.get("role") == "user"]
    if not users:
        return len(history)
    return users[-min(keep_exchanges, len(users))] if keep_exchanges > 0 else users[-1]


def expand(keep: list[bool], neighbours: int) -> list[bool]:
    out = list(keep)
    for i, kept in enumerate(keep):
        if kept:
            for j in range(max(0, i - neighbours), min(len(keep), i + neighbours + 1)):
                out[j] = True
    return out


@register_stage
class PruneStage:
    name: ClassVar[str] = "prune"

    async def apply(self, draft: Draft, context: StageContext) -> None:
        from agentmem.models.pruner import cached_pruner
        from agentmem.models.registry import default_pruner_path

        settings = context.policy.prune
        history = context.history
        query = query_of(history)
        if not query:
            return
        start = recent_start(history, settings.keep_recent_exchanges)
        step_start = _agent_step_start(history)
        candidates = []
        for message in draft.messages:
            role, index = message.role, message.index
            if role in {"system", "developer"} or index >= step_start:
                continue
            original = history[index]
            if not isinstance(original.get("content"), str) or not original["content"].strip():
                continue
            in_unit = role == "tool" or bool(original.get("tool_calls"))
            if index >= start and not (role == "tool" and _tokens(original) > settings.large_tool_output_tokens):
                continue
            text = original["content"]
            spans = [(s.start, s.end) for s in split_sentences(text)]
            if spans:
                candidates.append(Candidate(index, text, spans, droppable=not in_unit, role=role))
        if not candidates:
            return

        recalled = await self._recall(candidates, query, context, settings)
        pruner = await run_inference(cached_pruner, settings.checkpoint or default_pruner_path())
        threshold = settings.threshold if settings.threshold is not None else pruner.threshold
        rule = settings.rule or pruner.rule
        scored = [c for c in candidates if c.index in recalled]
        by_index = await run_inference(_score_transcript, pruner, query, scored)
        run = context.run
        for candidate in candidates:
            score = by_index.get(candidate.index)
            if score is None:
                keep = [False] * len(candidate.spans)
                reason, turn_score = "not recalled by embedding similarity to the query", None
            else:
                keep = expand(score.keep(threshold, rule), settings.neighbours)
                reason = "no sentence reached the keep threshold for the query"
                turn_score = max(score.probabilities)
            if all(keep):
                continue
            if not any(keep):
                if candidate.droppable:
                    draft.drop_unit([m for m in draft.messages if m.index == candidate.index])
                    run.decisions.append(Decision(
                        action="drop_message", message_index=candidate.index,
                        position=candidate.index, score=turn_score, reason=reason))
                    continue
                best = int(np.argmax(score.probabilities)) if score is not None else 0
                keep[best] = True  # a tool-unit message keeps its best sentence
            self._shrink(draft, candidate, keep, score, run)

    @staticmethod
    def _shrink(draft: Draft, candidate: Candidate, keep: list[bool], score, run) -> None:
        text = candidate.text
        kept = [text[a:b] for (a, b), k in zip(candidate.spans, keep) if k]
        for position, ((a, b), k) in enumerate(zip(candidate.spans, keep)):
            if not k:
                run.decisions.append(Decision(
                    action="prune_span", message_index=candidate.index, position=candidate.index,
                    span=(a, b), reason="below the keep threshold for the query",
                    score=score.probabilities[position] if score is not None else None))
        original = next(m.message for m in draft.messages if m.index == candidate.index)
        draft.replace_message(candidate.index, {**original, "content": " ".join(kept)})

    async def _recall(self, candidates: list[Candidate], query: str, context: StageContext,
                      settings) -> set[int]:
        """Indices the pruner will score: all of them, or the embedding top-N of long sessions."""
        everything = {c.index for c in candidates}
        if len(candidates) <= settings.candidates or context.store is None:
            return everything
        from agentmem.models.embedder import default_embedder

        store = context.store
        ids = await store.active_ids(context.session)
        turn_ids = {c.index: ids[c.index] for c in candidates if c.index < len(ids)}
        raw = await store.embeddings(context.session, list(turn_ids.values()))
        query_vector = (await run_inference(default_embedder().encode, [query]))[0]
        similarity = {}
        for candidate in candidates:
            vectors = raw.get(turn_ids.get(candidate.index, -1))
            if vectors is None:
                similarity[candidate.index] = 1.0  # no embedding yet: let the pruner decide
                continue
            similarity[candidate.index] = float((from_bytes(vectors) @ query_vector).max())
        ranked = sorted(similarity, key=similarity.get, reverse=True)
        return set(ranked[: settings.candidates])


def _score_transcript(pruner, query: str, candidates: list[Candidate]) -> dict[int, Any]:
    """Score the candidates as one transcript ("role: text" per turn), the way the pruner
    reads chat history; blocks are cut at sentence boundaries. Returns per-turn scores."""
    from agentmem.models.pruner import SentenceScores

    sentences, owners = [], []
    for candidate in candidates:
        for number, (a, b) in enumerate(candidate.spans):
            text = candidate.text[a:b]
            sentences.append(f"{candidate.role}: {text}" if number == 0 else text)
            owners.append(candidate.index)
    if not sentences:
        return {}
    [score] = pruner.score_batch([(query, sentences)])
    out = {}
    for candidate in candidates:
        rows = [i for i, owner in enumerate(owners) if owner == candidate.index]
        out[candidate.index] = SentenceScores(
            probabilities=[score.probabilities[i] for i in rows],
            kept_fraction_by_threshold=[score.kept_fraction_by_threshold[i] for i in rows],
            ranking_score=score.ranking_score)
    return out


def _agent_step_start(history: list[dict[str, Any]]) -> int:
    """Messages after the last user message belong to the current step and are never pruned."""
    return max((i for i, m in enumerate(history) if m.get("role") == "user"), default=len(history))


def _tokens(message: dict[str, Any]) -> int:
    from agentmem.ingest import message_tokens

    return message_tokens(message)
