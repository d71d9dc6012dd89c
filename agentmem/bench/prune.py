"""`agentmem bench prune`: sentence-level keep/drop against labels (FORMATS.md, prune).

Our checkpoint runs at the keep rule stored in its config (threshold, sentence rule and token
floor, calibrated on dev files: ``agentmem train calibrate``), the same rule the prune stage
and ``/v1/highlight`` apply; the embedding baseline (MiniLM cosine between question and
sentence) gets its threshold chosen on the dev file.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from agentmem.lexical import relative_bm25
from agentmem.models.keep_rule import KeepRule

THRESHOLDS = [round(float(x), 2) for x in np.arange(0.05, 0.96, 0.05)]


def prune_metrics(records: Sequence[Any], keeps: Sequence[Sequence[bool]],
                  threshold: float) -> dict[str, Any]:
    """The FORMATS.md result keys for one set of keep decisions."""
    precisions, recalls, f1s = [], [], []
    tp = fp = fn = 0
    negative_total = negative_kept = 0
    total_chars = kept_chars = 0
    for record, keep in zip(records, keeps):
        labels = record.labels
        kept_chars += sum(len(s) for s, k in zip(record.sentences, keep) if k)
        total_chars += sum(len(s) for s in record.sentences)
        if not any(labels):
            negative_total += len(labels)
            negative_kept += sum(keep)
            continue
        hit = sum(1 for k, label in zip(keep, labels) if k and label)
        kept, gold = sum(keep), sum(labels)
        tp, fp, fn = tp + hit, fp + kept - hit, fn + gold - hit
        precision = hit / kept if kept else 1.0
        recall = hit / gold
        precisions.append(precision)
        recalls.append(recall)
        f1s.append(2 * precision * recall / (precision + recall) if precision + recall else 0.0)
    micro_p = tp / (tp + fp) if tp + fp else 1.0
    micro_r = tp / (tp + fn) if tp + fn else 0.0
    return {
        "n": len(records),
        "precision": float(np.mean(precisions)) if precisions else 0.0,
        "recall": float(np.mean(recalls)) if recalls else 0.0,
        "f1": float(np.mean(f1s)) if f1s else 0.0,
        "micro_f1": 2 * micro_p * micro_r / (micro_p + micro_r) if micro_p + micro_r else 0.0,
        "negative_keep_rate": negative_kept / negative_total if negative_total else 0.0,
        "compression": 1 - kept_chars / total_chars if total_chars else 0.0,
        "threshold": threshold,
    }


def _inputs(record) -> list[str]:
    return [record.title, *record.sentences] if record.title else list(record.sentences)


def pruner_scores(pruner, records) -> list:
    return pruner.score_batch([(r.question, _inputs(r)) for r in records], batch_size=32)


def pruner_keeps(records, scores, keep_rule: KeepRule,
                 similarities: Sequence[np.ndarray] | None = None,
                 vectors: Sequence[np.ndarray] | None = None,
                 lexical: Sequence[np.ndarray] | None = None) -> list[list[bool]]:
    """Decisions per record; a title is scored as sentence 0 but is not a record's sentence,
    so it is dropped from the decisions and the floor neither counts nor adds it.
    ``similarities``: per record, its sentences' cosine to the question, and ``vectors``
    their unit vectors, and ``lexical`` their relative BM25 to the question, used by the rule
    as the stage and ``/v1/highlight`` use them (computed here when the rule fuses and none
    is given)."""
    keeps = []
    for number, (record, score) in enumerate(zip(records, scores)):
        first = 1 if record.title else 0
        cosines, rows = None, None
        if similarities is not None:  # the title has none: it is not eligible anyway
            cosines = [0.0] * first + [float(x) for x in similarities[number]]
        if vectors is not None:
            rows = vectors[number]
            rows = np.vstack([np.zeros((first, rows.shape[1]), rows.dtype), rows]) if first else rows
        bm25 = None
        if keep_rule.fuse_lexical:
            own = lexical[number] if lexical is not None else lexical_scores([record])[0]
            bm25 = [0.0] * first + [float(x) for x in own]
        decision = keep_rule.decide(score, range(first, len(score.probabilities)), cosines, rows,
                                    bm25, _inputs(record), record.question)
        keeps.append(decision[first:])
    return keeps


def lexical_scores(records) -> list[np.ndarray]:
    """Per record, its sentences' BM25 to the question relative to the record's best."""
    return [relative_bm25(r.question, list(r.sentences)) for r in records]


def choose(records, keeps_for: Callable[[float], list[list[bool]]],
           thresholds: Sequence[float] = THRESHOLDS) -> tuple[float, dict[str, Any]]:
    best = max(((t, prune_metrics(records, keeps_for(t), t)) for t in thresholds),
               key=lambda item: item[1]["f1"])
    return best


def sentence_embeddings(embedder, records) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per record, its sentences' cosine to the question and their unit vectors."""
    questions = embedder.encode([r.question for r in records])
    flat = embedder.encode([s for r in records for s in r.sentences])
    similarities, vectors, cursor = [], [], 0
    for question, record in zip(questions, records):
        rows = flat[cursor:cursor + len(record.sentences)]
        cursor += len(record.sentences)
        similarities.append(rows @ question)
        vectors.append(rows)
    return similarities, vectors


def embedding_similarities(embedder, records) -> list[np.ndarray]:
    return sentence_embeddings(embedder, records)[0]


def kept_share(keeps: Sequence[Sequence[bool]]) -> float:
    """Share of all sentences kept (the issue's "keeps 8% of sentences")."""
    total = sum(len(k) for k in keeps)
    return sum(sum(k) for k in keeps) / total if total else 0.0


def run_prune(records, *, checkpoint: str | None, dev_file: Path | None,
              answers_file: Path | None = None, floor: float | None = None) -> dict[str, Any]:
    from agentmem.bench.formats import PruneRecord, read_jsonl
    from agentmem.models.embedder import default_embedder
    from agentmem.models.pruner import cached_pruner
    from agentmem.models.registry import pruner_path

    pruner = cached_pruner(pruner_path(checkpoint))  # on the configured runtime
    scores = pruner_scores(pruner, records)
    keep_rule = pruner.keep_rule() if floor is None else pruner.keep_rule(floor=floor)
    embedder = default_embedder()
    sims, vectors = sentence_embeddings(embedder, records)
    keeps = pruner_keeps(records, scores, keep_rule, sims, vectors)
    result = prune_metrics(records, keeps, keep_rule.threshold)
    result.update(asdict(keep_rule))  # the rule that decided (its threshold is the same)
    result["kept_sentences"] = kept_share(keeps)
    if answers_file is not None:  # token-level compression on top (agentmem/bench/compression.py)
        from agentmem.bench.compression import compression_result, squad_answers

        result["token_compression"] = compression_result(records, scores, keeps, pruner.tokenizer,
                                                         squad_answers(answers_file))
    dev = read_jsonl(dev_file, PruneRecord) if dev_file else records
    dev_sims = sims if dev is records else embedding_similarities(embedder, dev)
    threshold, _ = choose(dev, lambda t: [list(s > t) for s in dev_sims],
                          [x / 100 for x in range(0, 81, 2)])
    baseline = prune_metrics(records, [list(s > threshold) for s in sims], threshold)
    baseline["kept_sentences"] = kept_share([list(s > threshold) for s in sims])
    result["baselines"] = {"embedding_cosine": baseline}
    return result
