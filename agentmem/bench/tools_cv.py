"""`agentmem bench tools-cv`: k-fold cross-validation of the tools stage's usage memory on
warm-up traffic alone.

Why: every setting of ``tools.memory`` (the bonus, the model's penalty, the selection's margin
and cap) has to be chosen without looking at the evaluation file, or the evaluation's recall
says nothing about new traffic. This splits the warm-up traffic into folds; each fold in turn
is scored as new queries while the other folds are the memory. Nothing here re-implements the
stage: the held-out queries go through the stage's own ``hybrid_scores``, ``memory_bonus``,
the model's ``train`` (as the background training runs it) and ``select``, on an ``Evidence``
stacked from the other folds exactly as the stage would read it from Redis (each tool's newest
``memory.examples`` distinct queries, float16 vectors). No engine, no Redis: the memory's
content is what ``bench tools --warm`` would store, so a fold costs the model's training only.

The tool list is the evaluation file's (its first record's tools); traffic whose query is also
an evaluation query is dropped first, as ``bench tools --warm`` drops it, so the evaluation
queries are never read. ``hide`` removes that share of the tools' history from every fold's
memory (a seeded draw): the held-out queries whose gold is among them measure whether memory
pushes down a tool the tenant never called, next to the same queries scored without memory.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentmem.bench.formats import ToolsRecord
from agentmem.bench.tools import TrafficRecord, bench_policy, normal_query
from agentmem.models.embedder import default_embedder, from_bytes, to_bytes
from agentmem.policy import Policy, load_policy
from agentmem.stages.tools import Turn, hybrid_scores, memory_bonus, select
from agentmem.state.tool_model import TrainingSet, train
from agentmem.state.tool_usage import MODEL_RATE, MODEL_STEPS, Evidence
from agentmem.state.toolcat import Catalogue, ToolCatalogues, function_of

RECALL_AT = (5, 10, 20)


@dataclass
class Traffic:
    """The usable warm-up queries, in file order (later = newer), against one tool list."""

    queries: list[str]
    vectors: np.ndarray  # (n, DIMENSION) float32, as the call path embeds them
    stored: np.ndarray  # the same rounded through float16, as the memory stores them
    text: np.ndarray  # (n, tools) the stage's text score of each query
    gold: np.ndarray  # (n, tools) bool


def cross_validate(records: list[ToolsRecord], traffic: list[TrafficRecord], *, policy: str,
                   folds: int = 5, seed: int = 0, hide: float = 0.0) -> dict[str, Any]:
    return asyncio.run(_cross_validate(records, traffic, bench_policy(load_policy(policy)),
                                       folds, seed, hide))


async def _cross_validate(records: list[ToolsRecord], traffic: list[TrafficRecord],
                          policy: Policy, folds: int, seed: int, hide: float) -> dict[str, Any]:
    embedder = default_embedder()
    catalogue = await ToolCatalogues(embedder).catalogue_for(
        [function_of(tool) for tool in records[0].tools])
    data, dropped = _traffic(records, traffic, catalogue, policy, embedder.encode)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(data.queries))
    hidden = np.zeros(len(catalogue.names), dtype=bool)
    hidden[rng.permutation(len(hidden))[: round(hide * len(hidden))]] = True
    warmed, cold, rows_no_history = _Tally(), _Tally(), []
    for fold in range(folds):
        test = np.sort(order[fold::folds])
        held = {normal_query(data.queries[i]) for i in test}
        memory = [i for i in range(len(data.queries))
                  if normal_query(data.queries[i]) not in held and not (data.gold[i] & hidden).any()]
        evidence = _evidence(data, memory, catalogue, policy.tools.memory.examples)
        model = _model(data, evidence, catalogue, policy)
        for i in test:
            text = data.text[i]
            scores = text
            if evidence is not None:
                scores = text + memory_bonus(evidence, data.vectors[i], policy.tools.memory)[0]
                if model is not None:
                    scores = scores + model.scores(data.vectors[i])
            pinned = np.zeros(len(scores), dtype=bool)
            kept = select(scores, pinned, policy.tools, top=float(text.max()),
                          learned=evidence is not None)[0]
            kept_cold = select(text, pinned, policy.tools)[0]
            warmed.add(scores, kept, data.gold[i])
            cold.add(text, kept_cold, data.gold[i])
            if (data.gold[i] & hidden).any():
                rows_no_history.append((warmed.rows[-1], cold.rows[-1]))
    out: dict[str, Any] = {
        "folds": folds, "seed": seed, "queries": len(data.queries),
        "skipped_evaluation_queries": dropped, "tools": len(catalogue.names),
        "warmed": warmed.summary(), "cold": cold.summary(),
        "policy": policy.name, "memory": policy.tools.memory.model_dump(),
    }
    if hide:
        out["hidden_tools"] = int(hidden.sum())
        out["no_history"] = {"queries": len(rows_no_history),
                             "warmed": _Tally.of([r[0] for r in rows_no_history]),
                             "cold": _Tally.of([r[1] for r in rows_no_history])}
    return out


def _traffic(records: list[ToolsRecord], traffic: list[TrafficRecord], catalogue: Catalogue,
             policy: Policy, encode) -> tuple[Traffic, int]:
    """The traffic that names tools of the list and is no evaluation query, embedded and
    text-scored once (every fold reuses it)."""
    evaluated = {normal_query(r.query) for r in records}
    evaluated |= {normal_query(str(r.messages[-1].get("content") or "")) for r in records if r.messages}
    index = {name: i for i, name in enumerate(catalogue.names)}
    usable = [t for t in traffic if normal_query(t.query) not in evaluated
              and t.gold and all(g in index for g in t.gold)]
    queries = [t.query for t in usable]
    vectors = np.asarray(encode(queries), dtype=np.float32)
    gold = np.zeros((len(usable), len(catalogue.names)), dtype=bool)
    for row, item in enumerate(usable):
        gold[row, [index[g] for g in item.gold]] = True
    text = np.stack([hybrid_scores(catalogue, v, Turn(q, q), policy.tools)
                     for v, q in zip(vectors, queries)])
    stored = from_bytes(to_bytes(vectors))
    dropped = sum(normal_query(t.query) in evaluated for t in traffic)
    return Traffic(queries, vectors, stored, text, gold), dropped


def _evidence(data: Traffic, rows: list[int], catalogue: Catalogue, limit: int
              ) -> Evidence | None:
    """What the stage stacks from a memory that recorded ``rows`` in order: per tool, its
    newest ``limit`` distinct queries, newest first."""
    parts, texts, tools = [], [], []
    counts = np.zeros(len(catalogue.names), dtype=np.int64)
    for tool in range(len(catalogue.names)):
        mine: list[int] = []
        for row in reversed(rows):
            if data.gold[row, tool] and all(data.queries[row] != data.queries[r] for r in mine):
                mine.append(row)
                if len(mine) == limit:
                    break
        if mine:
            parts.append(data.stored[mine])
            texts += [data.queries[r] for r in mine]
            tools.append(tool)
            counts[tool] = len(mine)
    return Evidence.stacked(parts, tools, counts, texts)


def _model(data: Traffic, evidence: Evidence | None, catalogue: Catalogue, policy: Policy):
    """The model the background training would serve for this memory (None where it would
    train none)."""
    memory = policy.tools.memory
    if evidence is None or not memory.model:
        return None
    training = evidence.training_set()
    if len(training.queries) < memory.model_min_queries:
        return None

    def text_scores(batch: TrainingSet) -> np.ndarray:
        return np.stack([hybrid_scores(catalogue, row, Turn(query, query), policy.tools)
                         for row, query in zip(batch.vectors, batch.queries)])

    return train(training, text_scores, weight=memory.weight, neutral=memory.neutral,
                 evidence=memory.evidence, l2=memory.model_l2, steps=MODEL_STEPS,
                 rate=MODEL_RATE, generation=0)


class _Tally:
    """Per held-out query: every gold kept, how many kept, the worst gold rank."""

    def __init__(self) -> None:
        self.rows: list[tuple[bool, int, int]] = []

    def add(self, scores: np.ndarray, kept: np.ndarray, gold: np.ndarray) -> None:
        rank = np.empty(len(scores), dtype=np.int64)
        rank[np.argsort(-scores, kind="stable")] = np.arange(len(scores))
        self.rows.append((bool(kept[gold].all()), int(kept.sum()), int(rank[gold].max())))

    def summary(self) -> dict[str, Any]:
        return self.of(self.rows)

    @staticmethod
    def of(rows: list[tuple[bool, int, int]]) -> dict[str, Any]:
        if not rows:
            return {"gold_recall": 0.0, "kept_mean": 0.0, "recall_at": {}}
        return {"gold_recall": float(np.mean([r[0] for r in rows])),
                "kept_mean": float(np.mean([r[1] for r in rows])),
                "recall_at": {str(k): float(np.mean([r[2] < k for r in rows])) for k in RECALL_AT}}
