"""Stage latency of the tools stage with a large, fully learned tool list (issue 16's goal:
p50 <= 10 ms at 200 tools and <= 20 ms at 1,000 tools with warm caches).

Why a separate measurement: the MetaTool bench offers 199 tools; MCP servers add many more,
and with usage memory every tool may have past queries and the tenant a trained model, which
is the most work a call can do. This builds a list of ``--tools`` tools (MetaTool's, then BFCL's
functions, then numbered copies), gives every tool ``--examples`` past queries through the
feedback library call, lets the background model train, then times the stage (its own
``latency_ms`` from the report) over calls whose query vectors are memoised.

    python -m agentmem.bench.tools_scale --tools 1000 --json bench-results/tools_scale_1000.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from agentmem.bench.scratch import scratch_hygiene

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "tools"


def tool_list(count: int, data: Path) -> list[dict[str, Any]]:
    """``count`` distinct tools: the MetaTool catalogue, BFCL's functions, then copies."""
    from agentmem.state.toolcat import function_of

    tools: dict[str, dict[str, Any]] = {}
    for name in ("metatool_dev.jsonl", "bfcl_dev.jsonl"):
        for line in (data / name).read_text().splitlines():
            for tool in json.loads(line)["tools"]:
                function = function_of(tool)
                tools.setdefault(str(function.get("name")), {"type": "function", "function": function})
    out = list(tools.values())[:count]
    base = list(out)
    while len(out) < count:
        function = dict(base[len(out) % len(base)]["function"])
        function["name"] = f"{function['name']}_{len(out)}"
        out.append({"type": "function", "function": function})
    return out


async def measure(count: int, examples: int, calls: int, policy: str, data: Path) -> dict[str, Any]:
    from agentmem.bench.results import percentile
    from agentmem.policy import load_policy
    from agentmem.tools_memory import ToolExample, add_tool_examples

    loaded = load_policy(policy)
    memory = loaded.tools.memory.model_copy(update={"learn": False})
    loaded = loaded.model_copy(update={"stages": ["tools"], "embed": False, "tools":
                                       loaded.tools.model_copy(update={"memory": memory})})
    tools = tool_list(count, data)
    queries = [json.loads(line)["query"] for line in
               (data / "metatool_dev_queries.jsonl").read_text().splitlines()]
    async with scratch_hygiene(loaded, "scale") as hygiene:
        labelled = [ToolExample(query=f"{queries[(i * examples + j) % len(queries)]} ({j})",
                                tool=tool["function"]["name"])
                    for i, tool in enumerate(tools) for j in range(examples)]
        await add_tool_examples(hygiene, labelled)
        probes = queries[:calls]
        for number, query in enumerate(probes):  # embeds the probes, starts the training
            await hygiene.apply([{"role": "user", "content": query}], tools=tools,
                                session_id=f"cold-{number}")
        await hygiene.state.catalogues.usage.trained()
        latencies, modelled = [], 0
        for number, query in enumerate(probes):
            result = await hygiene.apply([{"role": "user", "content": query}], tools=tools,
                                         session_id=f"warm-{number}")
            run = next(r for r in result.report.stages if r.stage == "tools")
            latencies.append(run.latency_ms)
            modelled += any((d.detail or {}).get("model") for d in run.decisions)
    return {"tools": count, "examples_per_tool": examples, "calls": len(latencies),
            "calls_with_model": modelled, "latency_ms_p50": percentile(latencies, 0.5),
            "latency_ms_p95": percentile(latencies, 0.95), "policy": loaded.name}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tools", type=int, default=1000)
    parser.add_argument("--examples", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--policy", default="agent")
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = asyncio.run(measure(args.tools, args.examples, args.calls, args.policy, args.data))
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
