"""`agentmem bench doc-reads`: does a prose file an agent read and is about to edit reach it whole?

``bench code-reads`` covers source files, which are machine text and go out whole. A
README, a design note or a changelog is prose: the pruner reads it like any large tool
output, which is right for an agent that reads a report to answer a question about it, and
wrong for one that is about to edit the file (its edit tool matches the old text exactly).
Here each prose file of a folder (Markdown by default) becomes one agent session: the user
asks the agent to look at the file, it calls ``read_file``, and the user then asks it to
rewrite one paragraph, named by its first words. The request offers ``read_file`` and
``edit_file`` (``--read-only``: ``read_file`` alone, an agent that cannot edit). Measured per
file, through the same pipeline as the proxy:

- ``paragraph_intact``: the paragraph, every line of it, is in the outgoing request;
- ``output_verbatim``: the tool message goes out unchanged;
- ``kept_share``: characters of the tool message sent, over the file's;
- ``tokens_sent``: the request's size; ``prose``: the share of files ``text_kind`` calls prose
  (machine text goes out whole whatever the tools).

``--older N`` puts N further exchanges between the read and the question (older history: the
history budget decides there, whatever the tools).
"""

from __future__ import annotations

import asyncio
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentmem.bench.code_reads import READ_ID, file_read, filler
from agentmem.bench.scratch import scratch_hygiene
from agentmem.messages import text_of
from agentmem.text_kinds import reads_as_prose, text_kind

MIN_FILE_CHARACTERS = 4_000
MAX_FILE_CHARACTERS = 100_000  # what a file-reading tool returns at most (Claude Code's Read: 2,000 lines)
MIN_PARAGRAPH_CHARACTERS = 200
OPENING_WORDS = 8
TOOLS = [{"type": "function", "function": {
             "name": "read_file", "description": "Read a file of the repository.",
             "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                            "required": ["path"]}}},
         {"type": "function", "function": {
             "name": "edit_file", "description": "Replace old_string with new_string in a file.",
             "parameters": {"type": "object", "properties": {
                 "path": {"type": "string"}, "old_string": {"type": "string"},
                 "new_string": {"type": "string"}}, "required": ["path", "old_string", "new_string"]}}}]
_NOT_PROSE = re.compile(r"^\s*(?:[#|>`<!]|\s{4}|[-*+] \[)")


@dataclass(frozen=True)
class DocRead:
    path: str
    text: str
    paragraph: str  # as in the file, its line breaks included

    @property
    def opening(self) -> str:
        return " ".join(self.paragraph.split()[:OPENING_WORDS])


def doc_reads(folder: Path, pattern: str, *, files: int, seed: int) -> list[DocRead]:
    """One read per file of ``folder`` matching ``pattern`` (``MIN_FILE_CHARACTERS`` to
    ``MAX_FILE_CHARACTERS``) with a prose paragraph to ask about, drawn with ``seed``."""
    draw = random.Random(seed)
    reads = []
    for path in sorted(folder.glob(pattern)):
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if not MIN_FILE_CHARACTERS <= len(text) <= MAX_FILE_CHARACTERS:
            continue
        paragraphs = [block.strip("\n") for block in re.split(r"\n\s*\n", text)]
        prose = [p for p in paragraphs if len(p) >= MIN_PARAGRAPH_CHARACTERS
                 and not any(_NOT_PROSE.match(line) for line in p.splitlines())
                 and reads_as_prose(p.splitlines()[0]) and text.count(p) == 1]
        if prose:
            reads.append(DocRead(str(path.relative_to(folder)), text, draw.choice(prose)))
    draw.shuffle(reads)
    return reads[:files]


def session(read: DocRead, older: int) -> list[dict[str, Any]]:
    return [*file_read("You are a coding agent working in a repository.", read.path, read.text),
            *filler(older),
            {"role": "user", "content": f"In {read.path}, the paragraph that begins "
                                        f"\"{read.opening}\" is hard to follow. Rewrite it."}]


async def _run(reads: list[DocRead], policy: str, older: int, read_only: bool) -> dict[str, Any]:
    intact = verbatim = tokens = 0
    share = 0.0
    tools = TOOLS[:1] if read_only else TOOLS
    async with scratch_hygiene(policy, "doc-reads") as hygiene:
        for number, read in enumerate(reads):
            result = await hygiene.apply(session(read, older), tools=tools, session_id=f"doc-{number}")
            tool = next((text_of(m) for m in result.messages if m.get("tool_call_id") == READ_ID), "")
            intact += read.paragraph in "\n".join(text_of(m) for m in result.messages)
            verbatim += tool == read.text
            share += len(tool) / len(read.text)
            tokens += result.report.tokens_after
    n = len(reads) or 1
    return {"n": len(reads), "policy": policy, "older_exchanges": older, "read_only": read_only,
            "paragraph_intact": intact / n, "output_verbatim": verbatim / n,
            "kept_share": share / n, "tokens_sent": tokens / n,
            "prose": sum(text_kind.__wrapped__(r.text) == "prose" for r in reads) / n}


def run_doc_reads(folder: Path, *, pattern: str = "**/*.md", policy: str = "default", files: int = 60,
                  older: int = 0, read_only: bool = False, seed: int = 0) -> dict[str, Any]:
    reads = doc_reads(folder, pattern, files=files, seed=seed)
    return asyncio.run(_run(reads, policy, older, read_only))
