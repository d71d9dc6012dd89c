"""What an agent step costs the budget stage when it fetched a page larger than its budget.

The page stays in the step, and the step's turns always go out, so every call of the step
cuts the page to what the budget leaves (``stages/overflow.py``). This builds such steps: a
page of ``--chars`` characters made of a prune-format file's passages (rotated per trial), a
question from the file, and ``--calls`` calls, each adding a small tool result, at a
``--budget``-token prompt budget; it reports the budget stage's milliseconds on the step's
first call and on its later calls, and how many later calls sent the page as the first
did (the requests offer the agent's tool, as an agent's do) and how many first calls' cut
page still holds an answer sentence of the question. The engine runs in the server's
process settings (``bench.scratch``). Run it on a quiet machine.

    python -m agentmem.bench.page_step --data ../shared/data/prune/squad_dev.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
from pathlib import Path
from typing import Any

TOOLS = [{"type": "function", "function": {"name": "web_fetch", "description": "Fetch a web page.",
                                           "parameters": {"type": "object", "properties": {}}}}]


def _call(number: int) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [{
        "id": f"c{number}", "type": "function", "function": {"name": "web_fetch", "arguments": "{}"}}]}


async def page_steps(data: str, *, trials: int = 4, calls: int = 3, chars: int = 300_000,
                     budget: int = 8000) -> dict[str, Any]:
    from agentmem.bench.formats import PruneRecord, read_jsonl
    from agentmem.bench.scratch import scratch_hygiene
    from agentmem.policy import policy_from_dict

    records = read_jsonl(data, PruneRecord)
    passages = list(dict.fromkeys(" ".join(r.sentences) for r in records))
    policy = policy_from_dict({"extends": "default", "name": "page-step",
                               "budget": {"max_prompt_tokens": budget}})
    first: list[float] = []
    later: list[float] = []
    same = 0  # later calls that sent the page as the step's first call did
    kept = 0  # first calls whose cut page holds an answer sentence of the question
    async with scratch_hygiene("default", "page-step") as hygiene:
        for trial in range(trials):
            shift = trial * len(passages) // trials
            text = " ".join(passages[shift:] + passages[:shift])
            page = (text * (chars // max(1, len(text)) + 1))[:chars]
            record = records[(trial * 997 + 7) % len(records)]
            question = record.question
            answers = [sentence for sentence, label in zip(record.sentences, record.labels) if label]
            history = [{"role": "system", "content": "You are a research agent."},
                       {"role": "user", "content": question}, _call(0),
                       {"role": "tool", "tool_call_id": "c0", "content": page}]
            sent = None
            for number in range(1, calls + 1):
                result = await hygiene.apply(history, tools=TOOLS, session_id=f"page-{trial}",
                                             policy=policy)
                [run] = [r for r in result.report.stages if r.stage == "budget"]
                (first if number == 1 else later).append(run.latency_ms)
                if number == 1:
                    sent = result.messages[3]
                    kept += any(answer in str(sent["content"]) for answer in answers)
                else:
                    same += result.messages[3] == sent
                await hygiene.drain()
                history += [_call(number), {"role": "tool", "tool_call_id": f"c{number}",
                                            "content": f"Result {number}: nothing more on this."}]
    return {"trials": trials, "calls": calls, "chars": chars, "budget": budget,
            "budget_stage_first_call_ms": [round(x, 1) for x in first],
            "budget_stage_later_calls_ms": [round(x, 1) for x in later],
            "first_call_p50": statistics.median(first),
            "later_calls_p50": statistics.median(later) if later else None,
            "later_calls_page_as_first": same, "later_calls": len(later),
            "first_calls_answer_kept": kept}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", required=True, help="a prune-format JSONL file")
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--calls", type=int, default=3, help="calls per step")
    parser.add_argument("--chars", type=int, default=300_000, help="the page's length")
    parser.add_argument("--budget", type=int, default=8000, help="max_prompt_tokens")
    parser.add_argument("--json", type=Path, help="write the result here")
    args = parser.parse_args()
    result = asyncio.run(page_steps(args.data, trials=args.trials, calls=args.calls,
                                    chars=args.chars, budget=args.budget))
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
