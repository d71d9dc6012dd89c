"""Same-speaker pairs from written chats with a general assistant, for the NLI model's training.

A general assistant (no tool; a role prompt or none) gives advice: steps of one procedure,
options, caveats, numbers for different things ("simmer it for 4 hours" / "it keeps 4 days").
The clash cascade sends the NLI model the pairs its rules left, and the small model read such
pairs as contradicting (15 clash records on 64 written general-assistant chats, none a
contradiction: "Keep your eyes on the pool floor" / "Then kick with a float, face down"). This
module builds exactly those pairs, with the cascade's own candidate step, from chats written for
agentmem (``agentmem/train/data/general_chats_written.jsonl``, DATA.md) as "consistent" rows in
the format of ``chat_clash_pairs_written.jsonl``; each chat's written self-contradictions (about
one chat in three has one: "Pothos is toxic to cats" ... "a golden pothos would be a great
trailing option that's safe for your cats") are its "contradiction" rows, so the model also learns what a general assistant's
real slip looks like:

    python -m agentmem.train.chat_pairs CHATS.jsonl [CHATS.jsonl ...] --out OUT.jsonl

A chat is a JSON line in the format of ``agentmem bench chats`` (``agentmem/bench/chats.py``). A candidate pair whose newer side is a written contradiction's newer
sentence is left out: it may contradict more than the one sentence it was written against.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import typer


async def _pairs(chats: list[dict[str, Any]]) -> list[dict[str, str]]:
    from agentmem.bench.chats import chat_messages
    from agentmem.bench.clash import DialogueReader
    from agentmem.policy import load_policy

    settings = load_policy("default").quarantine
    reader = DialogueReader(settings)
    out: dict[tuple[str, str], dict[str, str]] = {}
    for chat in chats:
        written = chat.get("contradictions") or []
        for clash in written:
            out[(clash["older"], clash["newer"])] = {
                "older": clash["older"], "newer": clash["newer"], "label": "contradiction",
                "kind": f"general_{clash.get('kind') or 'chat'}", "chat": chat["id"]}
        slips = {clash["newer"].strip() for clash in written}
        for a, b in await reader.nli_pairs(chat_messages(chat)):
            if any(b.strip() in slip or slip in b for slip in slips):
                continue
            out.setdefault((a, b), {"older": a, "newer": b, "label": "consistent",
                                    "kind": "general_chat", "chat": chat["id"]})
    return list(out.values())


def main(chats: list[Path] = typer.Argument(..., exists=True, dir_okay=False,
                                            help="Written chat files (JSONL)."),
         out: Path = typer.Option(..., help="JSONL to write.")) -> None:
    from agentmem.bench.chats import read_chats

    rows = asyncio.run(_pairs(read_chats(chats)))
    out.write_text("".join(json.dumps(row) + "\n" for row in rows))
    contradictions = sum(row["label"] == "contradiction" for row in rows)
    typer.echo(f"{len(rows)} pairs ({contradictions} contradictions) from {len(chats)} files -> {out}")


if __name__ == "__main__":
    typer.run(main)
