"""`agentmem bench agent-history`: does the answer in an older tool output reach the model?

The history bench (LoCoMo) holds chat turns of a sentence or two; an agent's history is
mostly tool output, passages of many sentences where only one or two answer the question at
hand. This bench builds agent sessions from a prune-format file (SQuAD-style passages with
per-question sentence labels, FORMATS.md "prune"): at each step the user asks a question, the
assistant calls a ``search`` tool, the tool returns the passage with neighbours of the same
title and the assistant answers with the passage's answer sentence. The final question of a
call is another question about a passage returned many steps earlier, whose answer sentence
is not the one the assistant quoted then: it is only in the old tool output.

The search tool answers in paragraphs, or (``result_format="json"``) as a search API does,
one line of ``{"query": ..., "results": [{"title", "url", "content"}, ...]}``.

Every request runs through the same pipeline as the proxy, against the session stored once
(as the history bench). Measured per policy: answer-sentence recall (the gold sentence is in
the outgoing request), passage recall (something of the gold tool output is), the token
fraction, the quarantine decisions per call, the call latency, the MiniLM-cosine top-k rows
(sentences, or a JSON answer's rows) at the same tokens, and for JSON the tool outputs sent
that no longer parse.
Sessions are drawn with a fixed seed, so two runs (and two policies) see the same calls.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from agentmem.bench.history import Tally, embedding_topk_rows, turn_order
from agentmem.bench.results import percentile
from agentmem.bench.scratch import scratch_hygiene
from agentmem.ingest import message_tokens
from agentmem.messages import text_of
from agentmem.policy import Policy, load_policy
from agentmem.structured import message_units, parses_as_json

ResultFormat = Literal["prose", "json"]  # how the bench's search tool answers
# offered on every call, as an agent offers its tools (the tools stage leaves one tool alone;
# the budget stage keeps room for a step's next results when a request offers tools)
SEARCH_TOOL = {"type": "function", "function": {
    "name": "search", "description": "Search the web; returns the passages that match.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                   "required": ["query"]}}}


@dataclass(frozen=True)
class Passage:
    """A passage and its answerable questions (question, gold sentence positions)."""

    title: str
    sentences: tuple[str, ...]
    questions: tuple[tuple[str, frozenset[int]], ...]


@dataclass(frozen=True)
class FinalQuestion:
    question: str
    tool_index: int  # the message holding the passage
    gold: tuple[str, ...]  # answer sentences, none of them quoted by the assistant


@dataclass(frozen=True)
class AgentSession:
    messages: list[dict[str, Any]]
    finals: list[FinalQuestion]
    spare: tuple[Passage, ...] = ()  # passages this session never returned (follow-up results)


def passages_of(records) -> list[Passage]:
    """Prune records grouped by passage; unanswerable questions (no label) left out."""
    grouped: dict[tuple[str, ...], list[tuple[str, frozenset[int]]]] = {}
    titles: dict[tuple[str, ...], str] = {}
    for record in records:
        gold = frozenset(i for i, label in enumerate(record.labels) if label)
        if not gold:
            continue
        key = tuple(record.sentences)
        grouped.setdefault(key, []).append((record.question, gold))
        titles[key] = record.title or ""
    return [Passage(titles[key], key, tuple(questions)) for key, questions in grouped.items()]


def build_sessions(passages: list[Passage], *, steps: int, sessions: int, per_session: int,
                   results: int = 3, recent_steps: int = 2, rerun_every: int = 0,
                   seed: int = 0, result_format: ResultFormat = "prose") -> list[AgentSession]:
    """``sessions`` sessions of ``steps`` search steps each. A step's search returns
    ``results`` passages: the one its question is about and others of the same title, as a
    search engine returns neighbours of one topic. No passage is returned twice in a session,
    unless ``rerun_every`` is N > 0: then after every Nth step the agent runs an earlier step's
    search again (the same question, call and result, and the same answer), as agents do; the
    session is otherwise the same draw. ``result_format`` "json" returns the passages as a
    search API does, ``{"query": ..., "results": [{"title", "url", "content"}, ...]}`` (one
    line, non-ASCII as is), "prose" as paragraphs. Up to ``per_session``
    final questions per session ask about passages of steps older than the last
    ``recent_steps`` (the recent window is never pruned)."""
    rng = random.Random(seed)
    out = []
    for number in range(sessions):
        again = random.Random(seed + 1 + number)  # the reruns' own draw
        pool = rng.sample(passages, len(passages))
        messages: list[dict[str, Any]] = []
        finals: list[FinalQuestion] = []
        starts: list[int] = []  # where each drawn step begins (reruns are not drawn again)
        for step in range(steps):
            if not pool:
                break
            passage = pool.pop()
            asked, asked_gold = passage.questions[0]
            others = [p for p in pool if p.title == passage.title][: results - 1]
            others += [p for p in pool if p not in others][: results - 1 - len(others)]
            for other in others:
                pool.remove(other)
            found = [passage, *others]
            rng.shuffle(found)
            call_id = f"call_{number}_{step}"
            starts.append(len(messages))
            messages.append({"role": "user", "content": asked})
            messages.append({"role": "assistant", "content": None, "tool_calls": [{
                "id": call_id, "type": "function",
                "function": {"name": "search", "arguments": json.dumps({"query": asked})}}]})
            tool_index = len(messages)
            messages.append({"role": "tool", "tool_call_id": call_id,
                             "content": _search_result(asked, found, result_format)})
            messages.append({"role": "assistant",
                             "content": " ".join(passage.sentences[i] for i in sorted(asked_gold))})
            for question, gold in passage.questions[1:]:
                if not gold & asked_gold:
                    finals.append(FinalQuestion(question, tool_index,
                                                tuple(passage.sentences[i] for i in sorted(gold))))
                    break
            if rerun_every and step and step % rerun_every == 0:
                first = starts[again.randrange(step)]
                user, called, answered, reply = (dict(m) for m in messages[first:first + 4])
                rerun_id = f"{call_id}_again"
                called["tool_calls"] = [{**called["tool_calls"][0], "id": rerun_id}]
                messages += [user, called, {**answered, "tool_call_id": rerun_id}, reply]
        recent = len(messages) - 4 * recent_steps  # each step is four messages
        finals = [final for final in finals if final.tool_index < recent]
        rng.shuffle(finals)
        out.append(AgentSession(messages, finals[:per_session],
                                tuple(pool[-results * per_session:])))
    return out


def _search_result(query: str, found: list[Passage], result_format: ResultFormat) -> str:
    if result_format == "prose":
        return "\n\n".join(" ".join(p.sentences) for p in found)
    hits = [{"title": p.title, "url": f"https://example.org/{i}/{p.title.replace(' ', '_')}",
             "content": " ".join(p.sentences)} for i, p in enumerate(found)]
    return json.dumps({"query": query, "results": hits}, ensure_ascii=False)


def _as_sent(sentence: str, result_format: ResultFormat) -> str:
    """A sentence as it stands in a tool output of that format (escaped inside JSON)."""
    return json.dumps(sentence, ensure_ascii=False)[1:-1] if result_format == "json" else sentence


def _follow_up(final: FinalQuestion, found: tuple[Passage, ...], number: int,
               result_format: ResultFormat) -> list[dict[str, Any]]:
    """The step's second call adds: the agent searches for the final question, and the tool
    returns passages the session never saw."""
    call_id = f"follow_{number}"
    return [{"role": "assistant", "content": None, "tool_calls": [{
                "id": call_id, "type": "function",
                "function": {"name": "search", "arguments": json.dumps({"query": final.question})}}]},
            {"role": "tool", "tool_call_id": call_id,
             "content": _search_result(final.question, list(found), result_format)
             or "No results."}]


def _prefix(result: Any, before: int) -> list[dict[str, Any]]:
    """The outgoing messages that come from history[:before] (what precedes the step)."""
    return [m for i, m in zip(result.kept_indices, result.messages) if i < before]


def _policies(names: tuple[str, ...], max_prompt_tokens: int | None) -> dict[str, Policy]:
    """Each policy by its name (a preset or a YAML path), with the prompt budget set to
    ``max_prompt_tokens`` when given (an agent near its model's window)."""
    out = {}
    for name in names:
        policy = load_policy(name)
        if max_prompt_tokens is not None:
            policy = policy.model_copy(update={"budget": policy.budget.model_copy(
                update={"max_prompt_tokens": max_prompt_tokens})})
        out[name] = policy
    return out


async def _run(sessions: list[AgentSession], policy: str, compare: tuple[str, ...],
               result_format: ResultFormat = "prose", follow_up: bool = False,
               results: int = 3, back_to_back: bool = False,
               max_prompt_tokens: int | None = None) -> dict[str, Any]:
    from agentmem.models.embedder import default_embedder

    embedder = default_embedder()
    policies = _policies((policy, *compare), max_prompt_tokens)
    tools = [SEARCH_TOOL]
    tallies = [Tally(name) for name in (policy, *compare)]
    sentence_hits = {tally.policy: [0, 0, 0] for tally in tallies}  # ours, embedding, total
    withheld: dict[str, list[int]] = {tally.policy: [] for tally in tallies}
    broken = {tally.policy: 0 for tally in tallies}  # outgoing JSON tool outputs that fail to parse
    # the step's second call: (prefix identical, prefix token share, latency ms) per question
    second: dict[str, list[tuple[bool, float, float]]] = {tally.policy: [] for tally in tallies}
    questions = 0
    async with scratch_hygiene(policies[policy], "agent-history") as hygiene:
        for number, session in enumerate(sessions):
            messages = session.messages
            name = f"agent-{number}"
            await hygiene.apply(messages + [{"role": "user", "content": "Next question."}],
                                session_id=name, tools=tools)
            await hygiene.drain()
            for other in compare:
                await hygiene.apply(messages + [{"role": "user", "content": "Warm up."}],
                                    session_id=name, policy=policies[other], tools=tools)
            rows = [(i, s.start, s.end) for i, m in enumerate(messages)
                    for s in message_units(text_of(m), m.get("role", ""))]
            vectors = embedder.encode([text_of(messages[i])[a:b] for i, a, b in rows])
            for number_in_session, final in enumerate(session.finals):
                questions += 1
                request = messages + [{"role": "user", "content": final.question}]
                query = embedder.encode([final.question])[0]
                passage = text_of(messages[final.tool_index])
                tool_rows = [r for r, (i, _, _) in enumerate(rows) if i == final.tool_index]
                gold = [_as_sent(g, result_format) for g in final.gold]
                # the rows holding a gold sentence: its sentence (or parts of it), or the
                # record it sits in (a tool's JSON answer is cut by records, agentmem.structured)
                row_text = {r: passage[rows[r][1]:rows[r][2]] for r in tool_rows}
                rows_of_gold = [[r for r in tool_rows if row_text[r] in g or g in row_text[r]]
                                for g in gold]
                for tally in turn_order(tallies, questions):
                    started = time.perf_counter()
                    result = await hygiene.apply(
                        request, session_id=name, tools=tools,
                        policy=None if tally is tallies[0] else policies[tally.policy])
                    tally.record(result, (time.perf_counter() - started) * 1000)
                    withheld[tally.policy].append(sum(
                        len(stage.decisions) for stage in result.report.stages
                        if stage.stage == "quarantine"))
                    outgoing = dict(zip(result.kept_indices, result.messages))
                    if result_format == "json":
                        broken[tally.policy] += sum(not parses_as_json(text_of(m))
                                                    for m in result.messages if m["role"] == "tool")
                    budget = result.report.tokens_after - message_tokens(request[-1])
                    chosen = embedding_topk_rows(query, vectors, rows, messages, budget)
                    kept_text = text_of(outgoing.get(final.tool_index, {}))
                    tally.total += 1
                    tally.retained += bool(kept_text)
                    tally.full += kept_text == passage
                    tally.embed_hits += any(r in chosen for r in tool_rows)
                    hits = sentence_hits[tally.policy]
                    hits[0] += sum(g in kept_text for g in gold)
                    hits[1] += sum(bool(found) and all(r in chosen for r in found)
                                   for found in rows_of_gold)
                    hits[2] += len(final.gold)
                    found = session.spare[results * number_in_session:][:results]
                    if follow_up and found:  # none left: not measured (see run_agent_history)
                        if not back_to_back:
                            await hygiene.drain()  # the reply's work, done while the tool runs
                        started = time.perf_counter()
                        later = await hygiene.apply(
                            request + _follow_up(final, found, number_in_session, result_format),
                            session_id=name, tools=tools,
                            policy=None if tally is tallies[0] else policies[tally.policy])
                        took = (time.perf_counter() - started) * 1000
                        first_prefix = _prefix(result, len(request) - 1)
                        later_prefix = _prefix(later, len(request) - 1)
                        common = 0
                        for a, b in zip(first_prefix, later_prefix):
                            if a != b:
                                break
                            common += message_tokens(a)
                        total = sum(message_tokens(m) for m in later_prefix)
                        second[tally.policy].append(
                            (first_prefix == later_prefix, common / total if total else 1.0, took))

    def result_of(tally: Tally) -> dict[str, Any]:
        ours, embedded, total = sentence_hits[tally.policy]
        return {
            "n": questions,
            "answer_sentence_recall": ours / total if total else 0.0,
            "passage_recall": tally.retained / tally.total if tally.total else 0.0,
            "passage_whole": tally.full / tally.total if tally.total else 0.0,
            "token_fraction": float(np.mean(tally.fractions)) if tally.fractions else 0.0,
            **({"unparsable_tool_outputs": broken[tally.policy]} if result_format == "json" else {}),
            "quarantine_decisions_mean": (float(np.mean(withheld[tally.policy]))
                                          if withheld[tally.policy] else 0.0),
            "latency_ms_p50": percentile(tally.latencies, 0.5),
            "latency_ms_p95": percentile(tally.latencies, 0.95),
            "baselines": {"embedding_topk": {
                "answer_sentence_recall": embedded / total if total else 0.0,
                "passage_recall": tally.embed_hits / tally.total if tally.total else 0.0}},
            "policy": tally.policy,
            **({"follow_up": _follow_up_result(second[tally.policy])} if follow_up else {}),
            **({"warnings": dict(tally.warnings)} if tally.warnings else {}),
        }

    out = result_of(tallies[0])
    if compare:
        out["compare"] = {tally.policy: result_of(tally) for tally in tallies[1:]}
    return out


def _follow_up_result(calls: list[tuple[bool, float, float]]) -> dict[str, Any]:
    """The step's second calls: how often the history before the step went out byte-identical
    (a provider's prompt cache serves it), its mean shared-prefix share, and their latency."""
    return {
        "n": len(calls),
        "prefix_identical": float(np.mean([same for same, _, _ in calls])) if calls else 0.0,
        "prefix_token_share": float(np.mean([share for _, share, _ in calls])) if calls else 0.0,
        "latency_ms_p50": percentile([took for _, _, took in calls], 0.5),
        "latency_ms_p95": percentile([took for _, _, took in calls], 0.95),
    }


def run_agent_history(records, *, policy: str, compare: tuple[str, ...] = (), steps: int = 40,
                      sessions: int = 4, per_session: int = 20, results: int = 3,
                      rerun_every: int = 0, seed: int = 0,
                      result_format: ResultFormat = "prose", follow_up: bool = False,
                      back_to_back: bool = False, max_prompt_tokens: int | None = None
                      ) -> dict[str, Any]:
    """The bench for ``policy`` (and each of ``compare``) on sessions built from prune
    records (``build_sessions``). ``follow_up``: each final question's step gets a second
    call (the agent's search for it, answered with passages the session never saw), measured
    for whether the history before the step goes out as on the first call (``follow_up`` in
    the result; the second call's turns are stored, so the next question diverges from them
    as a client's edit would). ``back_to_back``: the second call comes as soon as the first
    returns (a tool that answers at once), so it competes with the first call's background
    work for the cores, where by default that work is done first (a tool slower than it).
    A final question whose session has no unreturned passage left gets no second call (it
    would answer "No results.", a far lighter step); ``follow_up.n`` counts those measured:
    with the defaults on the shared SQuAD dev file 15 passages are left a session, enough
    for the first 5 of its 20 final questions (before stop 49 the other 15 were measured
    with "No results."). ``max_prompt_tokens``: every policy's prompt budget (an agent near its
    model's window: the budget stage drops older units, and ``follow_up`` measures whether it
    drops the same ones on the step's second call)."""
    built = build_sessions(passages_of(records), steps=steps, sessions=sessions,
                           per_session=per_session, results=results, rerun_every=rerun_every,
                           seed=seed, result_format=result_format)
    result = asyncio.run(_run(built, policy, compare, result_format, follow_up, results,
                              back_to_back, max_prompt_tokens))
    result.update(steps=steps, sessions=sessions, per_session=per_session, results=results,
                  rerun_every=rerun_every, seed=seed, result_format=result_format,
                  **({"back_to_back": True} if back_to_back else {}),
                  **({"max_prompt_tokens": max_prompt_tokens} if max_prompt_tokens else {}))
    return result
