"""`agentmem bench tools`: does the tool a call needs survive the tool loadout, and at what cost?

Every record runs through the same pipeline the proxy uses (``Hygiene.apply``, Redis, the
policy's stages, with the tools stage added when the policy lacks it). Baselines keep the
same number of tools per record as the stage did, ranked by MiniLM cosine alone or BM25
alone, so the hybrid's gain is measured at equal size. Latency is the tools stage's own
(``report.stages[...].latency_ms``) over the records whose tools it ranks (offered at least
``min_offered``): the cold pass includes embedding tool lists seen for the first time and
waiting for the query embedding the call prefetched; the warm pass repeats such records with
their query vector memoised, which is the stage's selection cost with embeddings cached.

``--warm FILE`` (a traffic file: past queries and the tools the model called) measures the
usage memory: the records are fed to a fresh engine's memory first, as if the model had called
their gold tools after their queries (definitions resolved by name from the evaluation file's
tools, so each lands on the identity the stage will look up), skipping any whose query is also
an evaluation query; then each tool list's model is trained (background work a deployment
would have done while serving that traffic), learning is frozen and the evaluation file is
measured. A run
without the warm-up, on another fresh engine, comes first, so both numbers are in one result.
Besides the adaptive selection's recall, recall at fixed k (the k best by the stage's final
scores) is reported for both.

``--follow-up`` gives each ranked record's step a second call, as an agent loop makes it (the
model called the gold tool and its result came back) and reports how often the second call
offers the same tools as the first, drops one, or adds one (``tools.step_stable``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from agentmem.bench.formats import ToolsRecord, read_jsonl
from agentmem.bench.results import percentile
from agentmem.bench.scratch import scratch_hygiene
from agentmem.errors import InvalidRequest
from agentmem.ingest import tools_tokens
from agentmem.lexical import terms
from agentmem.policy import Policy, load_policy

WARM_RECORDS = 200
PRIMED_LISTS = 50
RECALL_AT = (5, 10)


class TrafficRecord(BaseModel):
    """One past call of a traffic file: the user's request and the tool(s) the model called."""

    model_config = ConfigDict(extra="ignore")

    id: str
    query: str
    gold: list[str]


def read_traffic(path) -> list[TrafficRecord]:
    return read_jsonl(path, TrafficRecord)


def bench_policy(policy: Policy) -> Policy:
    """The policy with the tools stage (alone, if it had none) and no ingest embeddings, which
    nothing here reads and which would compete with the measured calls for the CPU."""
    stages = policy.stages if "tools" in policy.stages else ["tools"]
    return policy.model_copy(update={"stages": stages, "embed": False})


class _Tally:
    """Per-record recall and size, for the stage and for each baseline."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, bool, int, int, float, float]] = []  # offered, has gold, hits,
        # gold count, tool fraction, token fraction
        self.gold_ranks: list[int] = []  # per record with gold: the worst rank of its gold tools

    def rank(self, offered: list[dict[str, Any]], scores: dict[str, float] | None,
             gold: list[str]) -> None:
        """Where the record's gold tools rank by the stage's final scores (1 = best; ties keep
        the list's order). Without scores (the stage left the list alone) every tool counts
        as rank 1; a gold tool that was not offered never counts as found."""
        if not gold:
            return
        names = [_name(t) for t in offered]
        if scores is None:
            ranks = dict.fromkeys(names, 1)
        else:
            order = sorted(range(len(names)), key=lambda i: -scores.get(names[i], -np.inf))
            ranks = {}
            for position, index in enumerate(order, 1):
                ranks.setdefault(names[index], position)
        self.gold_ranks.append(max(ranks.get(g, 10**9) for g in gold))

    def recall_at(self, ks=RECALL_AT) -> dict[str, float]:
        ranks = np.asarray(self.gold_ranks)
        return {str(k): float(np.mean(ranks <= k)) if len(ranks) else 0.0 for k in ks}

    def add(self, offered: list[dict[str, Any]], kept: list[dict[str, Any]], gold: list[str]) -> None:
        names = {_name(t) for t in kept}
        hits = sum(g in names for g in gold)
        self.rows.append((len(offered), bool(gold), hits, len(gold), len(kept) / max(1, len(offered)),
                          tools_tokens(kept) / max(1, tools_tokens(offered))))

    def summary(self, min_offered: int = 0) -> dict[str, Any]:
        rows = [r for r in self.rows if r[0] >= min_offered]
        golden = [r for r in rows if r[1]]
        return {
            "n": len(rows),
            "gold_recall": float(np.mean([r[2] == r[3] for r in golden])) if golden else 0.0,
            "tool_recall": sum(r[2] for r in golden) / max(1, sum(r[3] for r in golden)),
            "tool_fraction": float(np.mean([r[4] for r in rows])) if rows else 0.0,
            "token_fraction": float(np.mean([r[5] for r in rows])) if rows else 0.0,
        }


def _name(tool: dict[str, Any]) -> str:
    from agentmem.state.toolcat import function_of

    return str(function_of(tool).get("name") or "")


async def _baselines(record, messages, kept_count: int, tallies: dict[str, _Tally], state) -> None:
    from agentmem.conversation import query_of
    from agentmem.state.toolcat import function_of

    tools = record.tools
    tallies["keep_all"].add(tools, tools, record.gold)
    query = query_of(messages)
    catalogue = await state.catalogues.catalogue_for([function_of(t) for t in tools])
    dense = catalogue.vectors @ await state.queries.vector(query)
    lexical = catalogue.lexical.scores(terms(query))
    for name, scores in (("embedding_only", dense), ("bm25_only", lexical)):
        top = np.sort(np.argsort(-scores, kind="stable")[:kept_count])
        tallies[name].add(tools, [tools[i] for i in top], record.gold)


async def _run(records, policy_name: str, traffic=None, follow_up: bool = False) -> dict[str, Any]:
    policy = bench_policy(load_policy(policy_name))
    if traffic is None:
        return await _measure(records, policy, follow_up=follow_up)
    cold = await _measure(records, policy)
    warm = await _measure(records, policy, traffic, follow_up)
    keys = ("gold_recall", "tool_recall", "tool_fraction", "token_fraction", "kept_mean",
            "recall_at", "latency_ms_p50", "warm_latency_ms_p50")
    return {**warm, "without_warm_up": {key: cold[key] for key in keys}}


async def _measure(records, policy: Policy, traffic=None, follow_up: bool = False) -> dict[str, Any]:
    """One fresh engine (its own embedded Redis): warm its usage memory when traffic is given,
    then run every record through the pipeline with learning frozen (``follow_up``: and the
    step's second call, ``_second_call``)."""

    memory = policy.tools.memory.model_copy(update={"learn": False})
    policy = policy.model_copy(update={"tools": policy.tools.model_copy(update={"memory": memory})})
    stage = _Tally()
    tallies = {name: _Tally() for name in ("keep_all", "embedding_only", "bm25_only")}
    cold, warm, hygiene_ms = [], [], []
    invalid = 0
    warm_up = None
    second = _StepTally()
    async with scratch_hygiene(policy, "tools") as hygiene:
        if traffic is not None:
            warm_up = await warm_memory(hygiene, traffic, records)
            warm_up["tool_lists_primed"] = await train_models(hygiene, records)
        for number, record in enumerate(records):
            messages = record.messages or [{"role": "user", "content": record.query}]
            try:
                result = await hygiene.apply(messages, tools=record.tools, session_id=f"tools-{number}")
            except InvalidRequest:
                invalid += 1
                continue
            kept = result.tools or []
            stage.add(record.tools, kept, record.gold)
            stage.rank(record.tools, _stage_scores(result.report), record.gold)
            if _scored(record, policy):
                cold.append(_stage_ms(result.report))
                hygiene_ms.append(result.report.latency_ms.get("hygiene", 0.0))
                if follow_up and kept:
                    later = await hygiene.apply(_second_call(record, messages, kept), tools=record.tools,
                                                session_id=f"tools-{number}")
                    second.add(kept, later.tools or [], record.gold)
            await _baselines(record, messages, len(kept), tallies, hygiene.state)
        scored = [record for record in records if _scored(record, policy)][:WARM_RECORDS]
        for number, record in enumerate(scored):  # query vectors now memoised
            messages = record.messages or [{"role": "user", "content": record.query}]
            try:
                result = await hygiene.apply(messages, tools=record.tools, session_id=f"warm-{number}")
            except InvalidRequest:
                continue
            warm.append(_stage_ms(result.report))
    offered = [r[0] for r in stage.rows]
    out = {
        **stage.summary(),
        "recall_at": {**stage.recall_at(), "adaptive": stage.summary()["gold_recall"]},
        "latency_ms_p50": percentile(cold, 0.5), "latency_ms_p95": percentile(cold, 0.95),
        "warm_latency_ms_p50": percentile(warm, 0.5), "warm_latency_ms_p95": percentile(warm, 0.95),
        "hygiene_ms_p50": percentile(hygiene_ms, 0.5), "scored_records": len(cold),
        "offered_mean": float(np.mean(offered)) if offered else 0.0,
        "kept_mean": float(np.mean([r[4] * r[0] for r in stage.rows])) if stage.rows else 0.0,
        "offered_ge4": stage.summary(min_offered=4),
        "irrelevance": _irrelevance(stage),
        "baselines": {name: {**tally.summary(), "offered_ge4": tally.summary(min_offered=4)}
                      for name, tally in tallies.items()},
        "invalid_records": invalid,
        "policy": policy.name, "stages": policy.stages,
        "settings": policy.tools.model_dump(),
    }
    if warm_up is not None:
        out["warm_up"] = warm_up
    if follow_up:
        out["follow_up"] = second.summary()
    return out


def _second_call(record: ToolsRecord, messages: list[dict[str, Any]], kept: list[dict[str, Any]]
                 ) -> list[dict[str, Any]]:
    """The step's second call, as an agent loop sends it: the model called the gold tool (the
    first one offered when no gold tool was) and its result came back, a text that speaks of
    that tool (its name and description), as results do."""
    names = [tool["function"]["name"] for tool in kept]
    called = next((name for name in record.gold if name in names), names[0])
    description = kept[names.index(called)]["function"].get("description", "")
    return [*messages,
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call-1", "type": "function", "function": {"name": called, "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call-1",
             "content": f"{called}: {description} Here are the results you asked for."}]


class _StepTally:
    """A step's two calls: does the second offer what the first did?"""

    def __init__(self) -> None:
        self.rows: list[tuple[bool, bool, bool, bool]] = []  # same list, dropped, added, gold kept

    def add(self, first: list[dict[str, Any]], later: list[dict[str, Any]], gold: list[str]) -> None:
        before = [tool["function"]["name"] for tool in first]
        after = [tool["function"]["name"] for tool in later]
        self.rows.append((before == after, bool(set(before) - set(after)),
                          bool(set(after) - set(before)), bool(set(gold) & set(after))))

    def summary(self) -> dict[str, Any]:
        n = len(self.rows)
        share = [sum(row[i] for row in self.rows) / n if n else 0.0 for i in range(4)]
        return {"n": n, "same_tools": share[0], "dropped_a_tool": share[1],
                "added_a_tool": share[2], "gold_recall": share[3]}


async def warm_memory(hygiene, traffic: list[TrafficRecord], records: list[ToolsRecord]
                      ) -> dict[str, Any]:
    """Feed the traffic to the engine's usage memory, as if the model had called each record's
    gold tools after its query, skipping queries that are also evaluation queries (a warm-up
    must never see what it is measured on)."""
    from agentmem.state.toolcat import function_of
    from agentmem.tools_memory import ToolExample, add_tool_examples

    evaluated = {normal_query(r.query) for r in records}
    evaluated |= {normal_query(str(r.messages[-1].get("content") or "")) for r in records if r.messages}
    schemas: dict[str, dict[str, Any]] = {}  # name -> {schema json: parameters}
    for record in records:
        for tool in record.tools:
            function = function_of(tool)
            parameters = function.get("parameters") or {}
            schemas.setdefault(str(function.get("name") or ""), {})[repr(parameters)] = parameters
    examples: list[ToolExample] = []
    skipped = unknown = 0
    for item in traffic:
        if normal_query(item.query) in evaluated:
            skipped += 1
            continue
        for name in item.gold:
            known = schemas.get(name)
            unknown += known is None
            for parameters in (known or {"": None}).values():
                examples.append(ToolExample(query=item.query, tool=name, parameters=parameters))
    added = await add_tool_examples(hygiene, examples) if examples else {"added": 0, "tools": 0}
    return {"records": len(traffic), "used": len(traffic) - skipped,
            "skipped_evaluation_queries": skipped, "examples": added["added"],
            "tools": added["tools"], "unknown_tool_names": unknown}


async def train_models(hygiene, records: list[ToolsRecord], most: int = PRIMED_LISTS) -> int:
    """Let the background training of the usage memory's model (agentmem/state/tool_model.py)
    finish for each distinct tool list (the first ``most``) before measuring, as it would have
    in a deployment that served the warm-up traffic: one call per list starts its training
    (the call itself is not measured), then the bench waits for it. Returns how many lists."""
    usage = hygiene.state.catalogues.usage
    seen: set[tuple[str, ...]] = set()
    for number, record in enumerate(records):
        names = tuple(_name(t) for t in record.tools)
        if names in seen:
            continue
        seen.add(names)
        if len(seen) > most:
            break
        messages = record.messages or [{"role": "user", "content": record.query}]
        try:
            await hygiene.apply(messages, tools=record.tools, session_id=f"train-{number}")
        except InvalidRequest:
            continue
        await usage.trained()
    return min(len(seen), most)


def normal_query(text: str) -> str:
    return " ".join(text.split()).casefold()


def _stage_scores(report) -> dict[str, float] | None:
    """The tools stage's final score per tool name, from its summary decision."""
    from agentmem.report import Action

    for run in report.stages:
        if run.stage == "tools":
            for decision in run.decisions:
                if decision.action == Action.KEEP_TOOLS:
                    return (decision.detail or {}).get("scores")
    return None


def _irrelevance(tally: _Tally) -> dict[str, Any]:
    """Records where no tool fits (empty gold): how much is still offered."""
    rows = [r for r in tally.rows if not r[1]]
    return {"n": len(rows), "tool_fraction": float(np.mean([r[4] for r in rows])) if rows else 0.0,
            "token_fraction": float(np.mean([r[5] for r in rows])) if rows else 0.0}


def _scored(record, policy: Policy) -> bool:
    """Whether the stage ranks this record's tools (latency is reported over those only)."""
    return len(record.tools) >= max(policy.tools.min_offered, policy.tools.min_tools + 1)


def _stage_ms(report) -> float:
    return next((run.latency_ms for run in report.stages if run.stage == "tools"), 0.0)


def run_tools(records, *, policy: str, warm: list[TrafficRecord] | None = None,
              follow_up: bool = False) -> dict[str, Any]:
    return asyncio.run(_run(records, policy, warm, follow_up))
