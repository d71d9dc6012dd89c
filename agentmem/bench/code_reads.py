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
- ``parses``: the outgoing tool message still parses as Python;
- ``kept_share``: characters of the tool message sent, over the file's;
- ``kind_ms_p50`` / ``kind_ms_max``: what telling the file from prose costs on the call path
  (``agentmem.text_kinds.text_kind``, uncached), and ``machine_text``: the share it calls code.

``--older N`` puts N further exchanges (short questions and answers about other things)
between the read and the question, so the read is older history rather than the recent
window: the history budget decides there, not the tool-output path.
"""

from __future__ import annotations

import ast
import asyncio
import json
import random
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentmem.bench.scratch import scratch_hygiene
from agentmem.messages import text_of
from agentmem.text_kinds import text_kind

MIN_FUNCTION_LINES = 5
MIN_FILE_CHARACTERS = 4_000
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


def session(read: CodeRead, older: int) -> list[dict[str, Any]]:
    call = {"id": "read-1", "type": "function",
            "function": {"name": "read_file", "arguments": json.dumps({"path": read.path})}}
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent working in a Python repository."},
        {"role": "user", "content": f"Have a look at {read.path}."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "read-1", "content": read.source},
        {"role": "assistant", "content": f"I have read {read.path}."}]
    for number in range(older):
        question, answer = FILLER[number % len(FILLER)]
        messages += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
    messages.append({"role": "user", "content": f"In {read.path}, what does `{read.function}` do? "
                                                f"Fix the bug in {read.function}."})
    return messages


async def _run(reads: list[CodeRead], policy: str, older: int) -> dict[str, Any]:
    intact = verbatim = parses = 0
    share = 0.0
    async with scratch_hygiene(policy, "code-reads") as hygiene:
        for number, read in enumerate(reads):
            messages = session(read, older)
            result = await hygiene.apply(messages, session_id=f"code-{number}")
            sent = dict(zip(result.kept_indices, result.messages))
            tool = text_of(sent.get(3, {}))
            intact += read.body in "\n".join(text_of(m) for m in result.messages)
            verbatim += tool == read.source
            share += len(tool) / len(read.source)
            try:
                ast.parse(tool)
                parses += 1
            except SyntaxError:
                pass
    n = len(reads) or 1
    kinds, costs = _kinds(reads)
    return {"n": len(reads), "policy": policy, "older_exchanges": older,
            "function_intact": intact / n, "output_verbatim": verbatim / n,
            "parses": parses / n, "kept_share": share / n,
            "machine_text": kinds.count("machine") / n,
            "kind_ms_p50": statistics.median(costs) if costs else 0.0,
            "kind_ms_max": max(costs, default=0.0)}


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
                   seed: int = 0) -> dict[str, Any]:
    return asyncio.run(_run(code_reads(folder, files=files, seed=seed), policy, older))
