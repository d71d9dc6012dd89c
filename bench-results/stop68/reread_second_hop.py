"""Scratch (Stop 68, not package code): a second read of a passage with the first hop in the
query. Prints F1 at the shipped keep rule for the first read alone and for four fixed ways of
combining the two reads. Usage: python reread_second_hop.py NAME (reads /work/hq/NAME_dev.jsonl,
caches both reads in /work/hq/NAME.scores.pkl)."""

import pickle
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from agentmem.bench.formats import PruneRecord, read_jsonl
from agentmem.bench.prune import (
    _inputs,
    lexical_scores,
    prune_metrics,
    pruner_keeps,
    pruner_scores,
    sentence_embeddings,
)
from agentmem.models.embedder import default_embedder
from agentmem.models.pruner import cached_pruner
from agentmem.models.registry import pruner_path

name = sys.argv[1]
records = read_jsonl(Path(f"/work/hq/{name}_dev.jsonl"), PruneRecord)
cache = Path(f"/work/hq/{name}.scores.pkl")
pruner = cached_pruner(pruner_path(None))
rule = pruner.keep_rule()
sims, vecs = sentence_embeddings(default_embedder(), records)
lex = lexical_scores(records)


def anchor_of(record, scores, cosines, bm25) -> int:
    """The passage's best fused sentence (the first hop), as an index into its sentences."""
    first = 1 if record.title else 0
    indices = list(range(first, len(scores.probabilities)))
    cos = [0.0] * first + [float(x) for x in cosines]
    lexical = [0.0] * first + [float(x) for x in bm25]
    _, fused, _ = rule.fused_keep(scores, indices, cos, lexical, _inputs(record), record.question)
    return max(indices, key=lambda i: fused[i]) - first


if cache.exists():
    with cache.open("rb") as handle:
        first_read, second_read, anchors = pickle.load(handle)
else:
    started = time.time()
    first_read = pruner_scores(pruner, records)
    print("pass1", time.time() - started, flush=True)
    anchors = [anchor_of(*row) for row in zip(records, first_read, sims, lex)]
    started = time.time()
    second_read = pruner.score_batch([(r.question + " " + r.sentences[a], _inputs(r))
                                      for r, a in zip(records, anchors)], batch_size=32)
    print("pass2", time.time() - started, flush=True)
    with cache.open("wb") as handle:
        pickle.dump((first_read, second_read, anchors), handle)


def combined(weight: float, mode: str) -> list:
    """Each sentence's probability from both reads (the anchor keeps its first read's)."""
    out = []
    for record, anchor, one, two in zip(records, anchors, first_read, second_read):
        first = 1 if record.title else 0
        probabilities = list(one.probabilities)
        for i, p in enumerate(probabilities):
            if i - first == anchor:
                continue
            other = two.probabilities[i]
            probabilities[i] = max(p, weight * other) if mode == "max" else p + weight * max(0.0, other - p)
        out.append(replace(one, probabilities=probabilities))
    return out


def r_precision(scores) -> float:
    values = []
    for record, score in zip(records, scores):
        if not any(record.labels):
            continue
        first = 1 if record.title else 0
        gold = sum(record.labels)
        top = np.argsort(-np.array(score.probabilities[first:]))[:gold]
        values.append(sum(record.labels[i] for i in top) / gold)
    return float(np.mean(values))


gold_anchor = np.mean([r.labels[a] for r, a in zip(records, anchors) if any(r.labels)])
print(name, "anchor is gold:", gold_anchor)
for tag, scores in [("base", first_read), ("max1", combined(1.0, "max")),
                    ("max.8", combined(0.8, "max")), ("max.6", combined(0.6, "max")),
                    ("add.5", combined(0.5, "add"))]:
    metrics = prune_metrics(records, pruner_keeps(records, scores, rule, sims, vecs, lex),
                            rule.threshold)
    print(f"{tag:6s} F1 {metrics['f1']:.3f} P {metrics['precision']:.3f} R {metrics['recall']:.3f} "
          f"rprec-model {r_precision(scores):.3f}", flush=True)
