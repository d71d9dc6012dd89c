"""The budget stage: fit the prompt into a token budget, most useful history first.

After pruning, if the request is still over budget (the model's context window from litellm
times ``context_fraction``, or ``max_prompt_tokens``), older units are chosen greedily by
relevance to the query minus an MMR redundancy penalty (similarity to what is already
chosen), until the budget is full. System messages, the recent window and the current step
are always kept; kept messages never change order; tool-call units go whole or not at all.
When those kept turns alone are over the budget, their largest tool outputs are cut to fit
(``overflow.fit_tool_outputs``: a page larger than the model's window).

Within an agent step (``step_stable``) the step's later calls start from what its earlier calls
dropped and only drop more: an agent near its model's window grows the step with every tool
result, and choosing the older units anew on each call (for a query that now holds the tool
results) kept different ones each time, so the request's prefix changed from the first older
unit on and a provider's prompt cache served nothing of it. A request that offers tools keeps
room free when it has to drop older units, so the step's next results fit without dropping
again: ``step_reserve`` of the budget, or, when the session's latest tool results are larger,
as much as the largest of them, up to ``step_reserve_max`` (a fixed share held the prefix only
while results stayed under it: at a 5,000-token budget a 500-800-token search result
outgrew 10% on most steps).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from agentmem.conversation import agent_step_start, opening_role, query_of, recent_start
from agentmem.ingest import message_tokens, tools_tokens
from agentmem.messages import text_of
from agentmem.models.embedder import from_bytes
from agentmem.models.runtime import embed
from agentmem.stages.base import Draft, OutgoingMessage, Stage, StageContext
from agentmem.stages.overflow import fit_tool_outputs
from agentmem.stages.prune import drop_runs
from agentmem.state.steps import StepReplay


class BudgetSettings(BaseModel):
    """The budget stage (see agentmem/stages/budget.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_prompt_tokens: int | None = Field(None, ge=1, description="Absolute budget; wins if set.")
    context_fraction: float = Field(
        0.75, gt=0, le=1, description="Budget as a share of the model's context window.")
    mmr_lambda: float = Field(0.3, ge=0, le=1, description="Weight of the redundancy penalty.")
    step_stable: bool = Field(
        True, description="An agent step's later calls keep what its earlier calls dropped and "
        "only drop more, so the request's prefix stays the same (provider prompt caches).")
    step_reserve: float = Field(
        0.1, ge=0, lt=1, description="Share of the budget left free when older units must be "
        "dropped from a request that offers tools: room for the step's next tool results.")
    step_reserve_max: float = Field(
        0.25, ge=0, lt=1, description="The most that room grows to when the session's latest "
        "tool results are larger than step_reserve of the budget: as large as the largest.")


_SYSTEM = frozenset({"system", "developer"})


def _opening_with_the_user(units: list[list[OutgoingMessage]], fixed: list[int],
                           optional: list[int], keep: set[int], cost: list[int], remaining: int,
                           history: list[dict[str, Any]]) -> set[int]:
    """``keep``, changed so that a conversation the client opened with the user's turn does
    not go out opening with the assistant's (Anthropic, Bedrock and Gemini refuse it): the
    user turn before the first kept unit comes back when it fits in what is left of the
    budget, else that unit goes too, until the first is the user's (or one that always goes
    out)."""
    if opening_role(history) != "user":
        return keep
    while True:
        first = next((n for n in sorted({*fixed, *keep})
                      if any(m.role not in _SYSTEM for m in units[n])), None)
        if first is None or first not in keep or units[first][0].role == "user":
            return keep
        question = next((n for n in reversed(optional) if n < first and n not in keep
                         and units[n][0].role == "user"), None)
        if question is not None and cost[question] <= remaining:
            return keep | {question}
        keep = keep - {first}
        remaining += cost[first]


def budget_for(model: str, settings) -> int | None:
    if settings.max_prompt_tokens:
        return settings.max_prompt_tokens
    from agentmem.upstream import context_window

    window = context_window(model)
    return int(window * settings.context_fraction) if window else None


def message_counter(history: list[dict[str, Any]], counted: list[int]
                    ) -> Callable[[OutgoingMessage], int]:
    """An outgoing message's tokens: as ingest counted them (``counted``, by position), or as
    the stage that rewrote it did (prune sums its kept sentences' counts); only the rest are
    counted again (at 2,000 turns, counting the ~650 pruned copies again cost ~10 ms a call; a
    300,000-character page the call brings, ~40 ms)."""
    def tokens(m: OutgoingMessage) -> int:
        if m.message is history[m.index] and m.index < len(counted):
            return counted[m.index]
        if m.tokens is not None and m.message is not history[m.index]:
            return m.tokens
        return message_tokens(m.message)
    return tokens


RECENT_RESULTS = 5  # the session's latest tool results that size the room for the next one


def reserve_for(draft: Draft, settings: BudgetSettings, budget: int,
                history: list[dict[str, Any]], counted: list[int]) -> int:
    """The room kept free for an agent step's next tool results when the request offers tools
    (an agent may call again in this step; else 0): ``step_reserve`` of the budget, or the
    largest of the session's latest tool results as they arrived (``counted``: ingest's
    counts; a result in the step is sent whole), up to ``step_reserve_max`` of the budget."""
    if not (draft.tools or draft.functions):
        return 0
    largest = 0
    seen = 0
    for index in range(len(history) - 1, -1, -1):
        if history[index].get("role") in {"tool", "function"}:
            size = counted[index] if index < len(counted) else message_tokens(history[index])
            largest = max(largest, size)
            seen += 1
            if seen == RECENT_RESULTS:
                break
    grown = min(largest, int(settings.step_reserve_max * budget))
    return max(int(settings.step_reserve * budget), grown)


class BudgetStage(Stage):
    name: ClassVar[str] = "budget"
    settings_model = BudgetSettings
    runs_after = frozenset({"quarantine", "tools", "prune", "assembly"})  # counts what the others left

    async def apply(self, draft: Draft, context: StageContext) -> None:
        settings = context.policy.budget
        budget = budget_for(context.model, settings)
        if budget is None:
            return
        history = context.history
        counted = await context.position_tokens()
        tokens = message_counter(history, counted)

        def fits() -> bool:
            return sum(tokens(m) for m in draft.messages) + tools_tokens(draft.tools) <= budget

        if fits():
            return
        step_start = agent_step_start(history)
        step = (StepReplay.of(context, draft, step_start, f"{settings.model_dump_json()}|{budget}")
                if settings.step_stable else None)
        # the step's drops so far first: enough, unless its new results are over the reserve
        if step is not None and await step.replay(draft, context.run) and fits():
            return
        # within a step, the older units are chosen for the user's message, as on the step's
        # first call (and as the prune stage chooses them): its vector is cached by then, and
        # without a record (no session) the same units come out while the reserve holds
        query = query_of(history[: step_start + 1] if settings.step_stable else history,
                         context.channels.excluded_spans)
        await self._fit(draft, context, budget, tokens, query,
                        reserve_for(draft, settings, budget, history, counted))
        if step is not None:
            await step.record(draft, context.run)

    async def _fit(self, draft: Draft, context: StageContext, budget: int,
                   tokens: Callable[[OutgoingMessage], int], query: str, reserve: int) -> None:
        """Drop older units, least relevant first, until the request fits ``budget`` with
        ``reserve`` left free."""
        settings = context.policy.budget
        history = context.history
        units = draft.units()
        cost = [sum(tokens(m) for m in unit) for unit in units]
        protected_from = recent_start(history, context.policy.prune.keep_recent_exchanges)
        fixed: list[int] = []
        optional: list[int] = []
        for number, unit in enumerate(units):
            pinned = any(m.role in {"system", "developer"} or m.index >= protected_from for m in unit)
            (fixed if pinned else optional).append(number)
        remaining = budget - sum(cost[n] for n in fixed) - tools_tokens(draft.tools)
        if remaining < 0:  # the turns that always go out are over on their own
            always = [m for n in fixed for m in units[n]]
            # an agent's step keeps the fixed share free too, so its next small result goes
            # out after the same cut page (the grown reserve would be sized by the page itself)
            room = int(settings.step_reserve * budget) if draft.tools or draft.functions else 0
            still = await fit_tool_outputs(draft, context, always, {m.index: tokens(m) for m in always},
                                           -remaining, budget, room)
            if still:
                context.report.warnings.append(
                    f"budget: the system prompt, the recent turns and the current step are "
                    f"{still:,} tokens over the prompt budget of {budget} with their tool outputs "
                    "cut as far as they go; sent as they are")
            remaining = -still
            units = draft.units()  # the cut copies, for the older units dropped below
        if not optional:  # nothing to choose among: no query to embed
            return
        # an agent (the request offers tools) may call again in this step: its next results
        # should fit without dropping more of the older units (which changes the prefix)
        remaining -= reserve
        vectors, known = await self._vectors([units[n] for n in optional], query, context)
        query_vector, unit_vectors = vectors[0], vectors[1:]
        relevance = unit_vectors @ query_vector
        if not known.all():  # past the call's embedding budget: a neutral relevance
            relevance[~known] = float(np.median(relevance[known])) if known.any() else 0.0
            context.report.warnings.append(f"budget: {int((~known).sum()):,} messages not "
                                           "embedded in time; ranked by redundancy only")
        similarity = unit_vectors @ unit_vectors.T
        redundancy = np.zeros(len(optional))  # max similarity to anything chosen so far
        open_ = np.ones(len(optional), dtype=np.bool_)
        chosen: list[int] = []
        while open_.any():
            gain = np.where(open_, relevance - settings.mmr_lambda * redundancy, -np.inf)
            best = int(np.argmax(gain))
            open_[best] = False
            if cost[optional[best]] <= remaining:
                chosen.append(best)
                remaining -= cost[optional[best]]
                redundancy = np.maximum(redundancy, similarity[:, best])
        keep = _opening_with_the_user(units, fixed, optional, {optional[i] for i in chosen}, cost,
                                      remaining, history)
        dropped: dict[int, float] = {}
        for position, number in enumerate(optional):
            if number not in keep:
                draft.drop_unit(units[number])
                dropped.update((m.index, float(relevance[position])) for m in units[number])
        free = f" ({reserve} kept free for the agent's next tool results)" if reserve else ""
        context.run.decisions.extend(drop_runs(  # one per run: at the window a session drops hundreds
            dropped, f"over the prompt budget of {budget} tokens{free}; lower relevance after "
                     "redundancy"))

    @staticmethod
    async def _vectors(units: list[list[OutgoingMessage]], query: str, context: StageContext
                       ) -> tuple[np.ndarray, np.ndarray]:
        """Row 0: the query; then one unit-normalised mean vector per unit: the mean of its
        messages' stored sentence vectors (a tool call's unit: the assistant's call has no
        text, its result has), else (at most the call's embedding budget) embedded now, else
        zero. Also, per unit, whether it has a vector."""
        embedder = context.state.embedder
        cached: dict[int, bytes] = {}
        if context.store is not None and context.session is not None:
            ids = await context.store.active_ids(context.session)
            wanted = {m.index: ids[m.index] for unit in units for m in unit if m.index < len(ids)}
            raw = await context.store.embeddings(context.session, list(wanted.values()))
            cached = {index: raw[turn] for index, turn in wanted.items() if turn in raw}
        stored = [[rows for m in unit if m.index in cached and len(rows := from_bytes(cached[m.index]))]
                  for unit in units]
        budget = context.state.limits.call_path_sentences
        todo = [number for number, vectors in enumerate(stored) if not vectors][:budget]
        texts = [" ".join(text_of(m.message) for m in units[number])[:2000] for number in todo]
        fresh = dict(zip(todo, await embed(embedder.encode, texts)))
        out = [await context.query_vector(query)]
        known = np.ones(len(units), np.bool_)
        for number, vectors in enumerate(stored):
            if vectors:
                vector = np.vstack(vectors).mean(axis=0)
            else:
                vector = fresh.get(number)
                if vector is None:
                    vector, known[number] = np.zeros_like(out[0]), False
            out.append(vector / (np.linalg.norm(vector) or 1.0))
        return (np.vstack(out) if len(out) > 1 else np.asarray(out)), known
