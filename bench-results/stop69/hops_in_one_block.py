"""Scratch (stop 69), a diagnostic: are a HotpotQA question's supporting facts read in one block?

Per record of ``hotpot10_dev.jsonl``: the 512-token blocks the shipped pruner cuts the passage
into, whether every gold sentence falls in one block, and F1 at the shipped rule, by question
type (bridge / comparison, from HippoRAG's source file the dev file was built from).
Usage: ``python hops_in_one_block.py DEV_FILE HIPPORAG_TRAIN_JSON``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from agentmem.bench.formats import PruneRecord, read_jsonl
from agentmem.bench.prune import (
    _inputs,
    lexical_scores,
    pruner_keeps,
    pruner_scores,
    sentence_embeddings,
)
from agentmem.models.embedder import default_embedder
from agentmem.models.pruner import cached_pruner
from agentmem.models.registry import pruner_path


def main(dev: Path, source: Path) -> None:
    records = read_jsonl(dev, PruneRecord)
    kinds = {row["question"]: row["type"] for row in json.loads(source.read_text())}
    pruner = cached_pruner(pruner_path(None))
    rule = pruner.keep_rule()
    similarities, vectors = sentence_embeddings(default_embedder(), records)
    keeps = pruner_keeps(records, pruner_scores(pruner, records), rule, similarities, vectors,
                         lexical_scores(records))
    rows = []
    for record, keep in zip(records, keeps):
        if not any(record.labels):
            continue
        first = 1 if record.title else 0
        blocks = pruner.blocks(record.question, _inputs(record))
        block_of: dict[int, int] = {}
        for number, block in enumerate(blocks):
            for owner in block.owners:
                if owner >= first:
                    block_of.setdefault(owner - first, number)
        gold = [i for i, label in enumerate(record.labels) if label]
        hit, kept = sum(1 for i in gold if keep[i]), sum(keep)
        precision, recall = (hit / kept if kept else 0.0), hit / len(gold)
        f1 = 2 * precision * recall / (precision + recall) if hit else 0.0
        one_block = len({block_of[i] for i in gold}) == 1
        rows.append((kinds.get(record.question, "?"), one_block, f1, precision, recall))
    for kind in ("bridge", "comparison"):
        for one_block in (True, False):
            chosen = [row[2:] for row in rows if row[0] == kind and row[1] == one_block]
            if chosen:
                f1, precision, recall = np.mean(chosen, axis=0)
                where = "one block" if one_block else "split"
                print(f"{kind} {where}: {len(chosen)} records, F1 {f1:.3f} P {precision:.3f} "
                      f"R {recall:.3f}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
