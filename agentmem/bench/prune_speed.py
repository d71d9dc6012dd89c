"""How long the pruner takes to read one passage, per checkpoint (the call path's cost of a
large tool output, which the stage reads alone: a batch of one).

Why a separate measurement: ``agentmem bench prune`` scores a whole file in batches, which
says nothing about one call's wait. This reads the first ``--limit`` records of a prune-format
file one at a time with each ``--checkpoint`` (alternating, so both see the same machine), and
reports p50 / p90 of the second pass per checkpoint (the first warms caches and allocators).
``--stage`` times the prune stage's own read instead (``_read_transcript``: jobs on the
inference scheduler, a long passage's blocks on idle workers in parallel); ``--highlight``
times what ``POST /v1/highlight`` does after parsing the body (the read as the stage's, the
query's cosine embedded beside it, the checkpoint's keep rule deciding). Run it on a quiet
machine.

    python -m agentmem.bench.prune_speed --data ../shared/data/prune/squad_dev.jsonl \\
        --checkpoint pruner-minilm --checkpoint pruner-minilm-int8 --limit 60
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def read_times(records: list[Any], checkpoints: list[str], passes: int = 2, *,
               stage: bool = False, highlight: bool = False) -> dict[str, Any]:
    """Per checkpoint: p50 and p90 milliseconds to score one record's sentences (last pass);
    ``stage``: through the prune stage's read on the inference scheduler; ``highlight``: the
    highlight endpoint's read, embedding and decisions."""
    from agentmem.models.embedder import default_embedder
    from agentmem.models.pruner import cached_pruner
    from agentmem.models.registry import pruner_path
    from agentmem.proxy.highlight import highlight_passage

    pruners = {name: cached_pruner(pruner_path(name)) for name in checkpoints}
    encode = default_embedder().encode
    times: dict[str, list[float]] = {}

    async def one_pass() -> dict[str, list[float]]:
        out: dict[str, list[float]] = {name: [] for name in checkpoints}
        for record in records:
            for name, pruner in pruners.items():
                start = time.perf_counter()
                if stage:
                    await _stage_read(pruner, record.question, list(record.sentences))
                elif highlight:
                    await highlight_passage(pruner, encode, record.question,
                                            list(record.sentences), pruner.keep_rule())
                else:
                    pruner.score_batch([(record.question, list(record.sentences))])
                out[name].append(1000 * (time.perf_counter() - start))
        return out

    for _ in range(passes):
        times = asyncio.run(one_pass())
    sentences = sorted(len(r.sentences) for r in records)
    return {"records": len(records), "median_sentences": sentences[len(sentences) // 2],
            "stage": stage, "highlight": highlight,
            "checkpoints": {name: {"p50_ms": round(percentile(t, 0.5), 1),
                                   "p90_ms": round(percentile(t, 0.9), 1)}
                            for name, t in times.items()}}


def tool_output(sentences: list[str], index: int = 0) -> Any:
    """The sentences joined into one tool message, as the prune stage's candidate."""
    from agentmem.stages.prune import Candidate

    text, spans = "", []
    for sentence in sentences:
        start = len(text) + (1 if text else 0)
        text = f"{text} {sentence}" if text else sentence
        spans.append((start, start + len(sentence)))
    return Candidate(index, text, spans, False, "tool")


async def _stage_read(pruner: Any, question: str, sentences: list[str]) -> Any:
    """The sentences as one tool output, read as the prune stage reads it."""
    from agentmem.stages.prune import _read_transcript

    return await _read_transcript(pruner, question, [tool_output(sentences)])


def main() -> None:
    from agentmem.bench.formats import PruneRecord, read_jsonl

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--checkpoint", action="append", required=True,
                        help="A pruner folder or a shipped one's name (repeat).")
    parser.add_argument("--limit", type=int, default=60)
    parser.add_argument("--stage", action="store_true",
                        help="Time the prune stage's read (blocks in parallel on idle workers).")
    parser.add_argument("--highlight", action="store_true",
                        help="Time /v1/highlight's work (read, embedding, decisions).")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    records = read_jsonl(args.data, PruneRecord)[: args.limit]
    result = {"data": str(args.data), **read_times(records, args.checkpoint,
                                                              stage=args.stage,
                                                              highlight=args.highlight)}
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
