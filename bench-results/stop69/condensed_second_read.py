"""Scratch (stop 69): a condensed second read of a long passage (bench-results/stop69/RULE.md).

A passage of two or more 512-token blocks is read again as one block: its top sentences by
the first read's probability, in their original order, with the unchanged question. Sentences
in that block get the mean (or the max) of their two probabilities; the keep rule is the
shipped one. Usage: ``python condensed_second_read.py PRUNE_FILE`` (first reads are cached in
``/work/s69``). Prints F1 for the first read alone and for both combinations.
"""

from __future__ import annotations

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


def one_block_of_best(pruner, question: str, inputs: list[str], probabilities) -> list[int] | None:
    """Indices of the best sentences that fit one block, in passage order (None: one block)."""
    if len(pruner.blocks(question, inputs)) < 2:
        return None
    chosen: list[int] = []
    for index in np.argsort(-np.array(probabilities), kind="stable"):
        trial = sorted([*chosen, int(index)])
        if len(pruner.blocks(question, [inputs[j] for j in trial])) > 1:
            break
        chosen = trial
    return chosen


def main(path: Path) -> None:
    records = read_jsonl(path, PruneRecord)
    pruner = cached_pruner(pruner_path(None))
    rule = pruner.keep_rule()
    similarities, vectors = sentence_embeddings(default_embedder(), records)
    lexical = lexical_scores(records)
    cache = Path(f"/work/s69/{path.stem}.first.pkl")
    if cache.exists():
        first = pickle.loads(cache.read_bytes())
    else:
        started = time.time()
        first = pruner_scores(pruner, records)
        print("first read", round(time.time() - started, 1), "s", flush=True)
        cache.write_bytes(pickle.dumps(first))
    picks = [one_block_of_best(pruner, r.question, _inputs(r), s.probabilities)
             for r, s in zip(records, first)]
    pairs = [(r.question, [_inputs(r)[j] for j in chosen])
             for r, chosen in zip(records, picks) if chosen is not None]
    started = time.time()
    second = iter(pruner.score_batch(pairs, batch_size=32))
    print(path.stem, "second read of", len(pairs), "passages:", round(time.time() - started, 1),
          "s; mean picked", np.mean([len(p) for p in picks if p]) if pairs else 0, flush=True)
    reads = [None if chosen is None else next(second) for chosen in picks]

    def combined(mode: str) -> list:
        out = []
        for score, chosen, again in zip(first, picks, reads):
            if chosen is None:
                out.append(score)
                continue
            p = list(score.probabilities)
            for k, j in enumerate(chosen):
                q = again.probabilities[k]
                p[j] = (p[j] + q) / 2 if mode == "mean" else max(p[j], q)
            out.append(replace(score, probabilities=p))
        return out

    for tag, scores in [("first", first), ("mean", combined("mean")), ("max", combined("max"))]:
        keeps = pruner_keeps(records, scores, rule, similarities, vectors, lexical)
        m = prune_metrics(records, keeps, rule.threshold)
        print(f"{path.stem} {tag:6s} F1 {m['f1']:.4f} P {m['precision']:.3f} "
              f"R {m['recall']:.3f} compression {m['compression']:.3f}", flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
