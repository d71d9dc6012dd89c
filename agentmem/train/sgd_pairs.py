"""Consistent same-speaker pairs from task dialogues, for the NLI model's training.

The clash cascade sends NLI the pairs its rules left: a statement and the most similar earlier
statements of its speaker that share a word. In task dialogues nearly all of them are
consistent (an assistant offering a second option, "It's on March 14th at 6 pm." / "It's
March 9th at 6 pm."; a user thanking, then declining), and the model trained on contradiction
pairs alone put many at 0.98+. This module builds exactly those pairs from Schema-Guided
Dialogue **train** files, with the cascade's own candidate step, as "consistent" rows in the
format of ``chat_clash_pairs_written.jsonl``:

    python -m agentmem.train.sgd_pairs SGD_FOLDER OUT.jsonl [--files 044,051,059,067]

Users of SGD do change their requests, but they announce it ("actually, make it 4"), which
the cascade's update guards read before any pair reaches NLI.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import typer

TRAIN_FILES = ("044", "051", "059", "067")


async def _pairs(dialogues: list[dict[str, Any]], questions: bool = False) -> list[tuple[str, str]]:
    from agentmem.bench.clash import DialogueReader
    from agentmem.policy import load_policy

    # the candidate step as it was when the shipped model's pairs were built (stop 52): questions
    # became candidates at stop 53, so they are asked for (--questions) rather than implied
    settings = load_policy("default").quarantine.model_copy(update={"nli_questions": questions})
    reader = DialogueReader(settings)
    out: dict[tuple[str, str], None] = {}
    for dialogue in dialogues:
        for pair in await reader.nli_pairs([
                {"role": "user" if turn["speaker"] == "USER" else "assistant", "content": turn["utterance"]}
                for turn in dialogue["turns"]]):
            out[pair] = None
    return list(out)


def main(folder: Path = typer.Argument(..., exists=True, file_okay=False, help="SGD train folder."),
         out: Path = typer.Argument(..., help="JSONL to write."),
         files: str = typer.Option(",".join(TRAIN_FILES), help="dialogues_NNN.json numbers."),
         questions: bool = typer.Option(False, help="Also the questions that speak of their asker "
                                        "(the cascade's candidates since stop 53).")) -> None:
    dialogues: list[dict[str, Any]] = []
    for number in files.split(","):
        dialogues += json.loads((folder / f"dialogues_{number.strip()}.json").read_text())
    pairs = asyncio.run(_pairs(dialogues, questions))
    out.write_text("".join(json.dumps({"older": a, "newer": b, "label": "consistent", "kind": "sgd"})
                           + "\n" for a, b in pairs))
    typer.echo(f"{len(pairs)} pairs from {len(dialogues)} dialogues -> {out}")


if __name__ == "__main__":
    typer.run(main)
