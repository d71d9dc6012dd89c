"""`agentmem bench code-reads`: does a file a coding agent read reach the model whole?

Coding agents (and any agent with a shell) read machine text: source files, diffs, logs. The
other benches' tool outputs are prose. Here each Python file of a folder (by default the
installed ``agentmem`` package, so the bench needs no data) becomes one agent session: the user
asks about the file, the assistant calls ``read_file``, the tool returns the file, and the user
asks about one of its functions (by name) — the agent's next move is an edit of exactly that
text. Measured per file and function, through the same pipeline as the proxy:

- ``function_intact``: the function's source, every line and its indentation, is in the
  outgoing request (what an edit's ``old_string`` must match);
- ``output_verbatim``: the tool message goes out unchanged;
- ``parses``: the outgoing tool message is there and still parses as Python (the lines that
  mark a cut left out);
- ``unmarked_cuts``: the tool message went out cut with no mark where lines are missing (a
  file read as contiguous when it is not);
- ``kept_share``: characters of the tool message sent, over the file's;
- ``kind_ms_p50`` / ``kind_ms_max``: what telling the file from prose costs on the call path
  (``agentmem.text_kinds.text_kind``, uncached), and ``machine_text``: the share it calls code.

``--edit`` has the agent edit the function (its last line gains a comment) and read the file
again before the question, as an agent checks its work: the new version must reach the model
(``function_intact``, and the other measures, are of the second read) and the stale one not
(``stale_function_sent``: the function as it was before the edit is in the request);
``tokens_sent`` is the request's size either way.

``--older N`` puts N further exchanges (short questions and answers about other things)
between the read and the question, so the read is older history rather than the recent
window: the history budget decides there, not the tool-output path.
"""

from __future__ import annotations

import ast
import asyncio
import json
import random
import re
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentmem.bench.scratch import scratch_hygiene
from agentmem.messages import text_of
from agentmem.text import GAP_MARK, gap_marks
from agentmem.text_kinds import text_kind

MIN_FUNCTION_LINES = 5
MIN_FILE_CHARACTERS = 4_000
READ_ID = "read-1"  # the read_file call's id, which its tool message answers
EDIT_ID, REREAD_ID = "edit-1", "read-2"  # --edit: the edit, and the same read once more
EDIT_MARK = "  # reviewed"
GAP_LINE = re.compile(rf"^{GAP_MARK.pattern}$", re.MULTILINE)  # a cut's mark on a line of its own
FILLER = [("Which branch are we on?", "We are on main."),
          ("Did the last test run pass?", "Yes, every test passed on the last run."),
          ("What time is the release planned for?", "The release is planned for Friday afternoon."),
          ("Who reviews the change?", "Priya reviews it once the build is green.")]


@dataclass(frozen=True)
class CodeRead:
    path: str
    source: str
    function: str
    body: str  # the function's source lines, as in the file

    @property
    def edited_body(self) -> str:
        return self.body + EDIT_MARK

    @property
    def edited_source(self) -> str:
        return self.source.replace(self.body, self.edited_body, 1)


def code_reads(folder: Path, *, files: int, seed: int) -> list[CodeRead]:
    """One read per Python file of ``folder`` (at least ``MIN_FILE_CHARACTERS``), asking
    about a function of at least ``MIN_FUNCTION_LINES`` lines drawn with ``seed``."""
    draw = random.Random(seed)
    reads = []
    for path in sorted(folder.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        if len(source) < MIN_FILE_CHARACTERS:
            continue
        lines = source.splitlines(keepends=True)
        functions = [node for node in ast.walk(ast.parse(source))
                     if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                     and node.end_lineno is not None
                     and node.end_lineno - node.lineno + 1 >= MIN_FUNCTION_LINES]
        if not functions:
            continue
        node = draw.choice(functions)
        body = "".join(lines[node.lineno - 1:node.end_lineno]).rstrip("\n")
        reads.append(CodeRead(str(path.relative_to(folder)), source, node.name, body))
    draw.shuffle(reads)
    return reads[:files]


def file_read(system: str, path: str, text: str) -> list[dict[str, Any]]:
    """A session's opening: the user points the agent at a file, and it reads it."""
    return [{"role": "system", "content": system},
            {"role": "user", "content": f"Have a look at {path}."},
            _call(READ_ID, "read_file", {"path": path}),
            {"role": "tool", "tool_call_id": READ_ID, "content": text},
            {"role": "assistant", "content": f"I have read {path}."}]


def filler(exchanges: int) -> list[dict[str, Any]]:
    """Short exchanges about other things, which push a read out of the recent window."""
    out = []
    for number in range(exchanges):
        question, answer = FILLER[number % len(FILLER)]
        out += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
    return out


def session(read: CodeRead, older: int, edit: bool = False) -> list[dict[str, Any]]:
    messages = file_read("You are a coding agent working in a Python repository.", read.path, read.source)
    if edit:
        last_line = read.body.splitlines()[-1]
        messages += [
            {"role": "user", "content": f"Mark the end of {read.function} as reviewed."},
            _call(EDIT_ID, "edit_file", {"path": read.path, "old_string": last_line,
                                         "new_string": last_line + EDIT_MARK}),
            {"role": "tool", "tool_call_id": EDIT_ID, "content": f"Edited {read.path}: 1 replacement."},
            _call(REREAD_ID, "read_file", {"path": read.path}),
            {"role": "tool", "tool_call_id": REREAD_ID, "content": read.edited_source},
            {"role": "assistant", "content": f"Done: {read.function} is marked as reviewed."}]
    messages += filler(older)
    messages.append({"role": "user", "content": f"In {read.path}, what does `{read.function}` do? "
                                                f"Fix the bug in {read.function}."})
    return messages


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function",
         "function": {"name": name, "arguments": json.dumps(arguments)}}]}


async def _run(reads: list[CodeRead], policy: str, older: int, edit: bool) -> dict[str, Any]:
    intact = verbatim = parses = stale = tokens = unmarked = 0
    share = 0.0
    async with scratch_hygiene(policy, "code-reads") as hygiene:
        for number, read in enumerate(reads):
            messages = session(read, older, edit)
            result = await hygiene.apply(messages, session_id=f"code-{number}")
            source, body = (read.edited_source, read.edited_body) if edit else (read.source, read.body)
            target = REREAD_ID if edit else READ_ID
            tool = next((text_of(m) for m in result.messages if m.get("tool_call_id") == target), "")
            sent = "\n".join(text_of(m) for m in result.messages)
            intact += body in sent
            stale += edit and _stale(read, sent)
            verbatim += tool == source
            share += len(tool) / len(source)
            parses += _parses(tool)
            unmarked += bool(tool) and tool != source and not gap_marks(tool)
            tokens += result.report.tokens_after
    n = len(reads) or 1
    kinds, costs = _kinds(reads)
    return {"n": len(reads), "policy": policy, "older_exchanges": older, "edit": edit,
            "function_intact": intact / n, "output_verbatim": verbatim / n,
            "parses": parses / n, "kept_share": share / n, "unmarked_cuts": unmarked / n,
            "stale_function_sent": stale / n, "tokens_sent": tokens / n,
            "machine_text": kinds.count("machine") / n,
            "kind_ms_p50": statistics.median(costs) if costs else 0.0,
            "kind_ms_max": max(costs, default=0.0)}


def _stale(read: CodeRead, sent: str) -> bool:
    """Whether the function as it was before the edit (its last line without the mark) is sent."""
    return re.search(re.escape(read.body) + f"(?!{re.escape(EDIT_MARK)})", sent) is not None


def _parses(source: str) -> bool:
    """Whether the tool message was sent at all and still parses as Python, read without the
    lines that mark a cut (what is kept between them is whole blocks)."""
    if not source:
        return False
    try:
        ast.parse(GAP_LINE.sub("", source))
    except SyntaxError:
        return False
    return True


def _kinds(reads: list[CodeRead]) -> tuple[list[str], list[float]]:
    """Each file's kind and what telling it cost, in milliseconds, bypassing the cache."""
    kinds: list[str] = []
    costs: list[float] = []
    for read in reads:
        start = time.perf_counter()
        kinds.append(text_kind.__wrapped__(read.source))
        costs.append((time.perf_counter() - start) * 1000)
    return kinds, costs


def run_code_reads(folder: Path, *, policy: str = "default", files: int = 60, older: int = 0,
                   edit: bool = False, seed: int = 0) -> dict[str, Any]:
    return asyncio.run(_run(code_reads(folder, files=files, seed=seed), policy, older, edit))
