"""The prune stage: keep the history the current turn needs, sentence by sentence.

Query: the latest user message, plus the pending tool calls and their results when the
request is an agent step. The most recent exchanges and the current step stay verbatim.

Older turns get a token budget (a share of their tokens). Their sentences are ranked by
MiniLM cosine to the query (vectors cached at ingest) plus BM25 (names, numbers and rare words
that embeddings blur) plus the cosine of their exchange (their turn with the one before), each
inheriting a share of the nearby turns' best score (agentmem/stages/selection.py),
optionally rescored by the Provence pruner for the best recalled turns,
and kept greedily until the budget is full; each kept sentence brings its neighbours so "this"
keeps its antecedent. Large tool outputs inside the recent window are pruned by Provence
against the query, which is the passage-level job it was trained for. Tool-call units are never
split: they go whole, or their messages shrink (to their best sentence at least).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from itertools import compress
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentmem.cache_marks import last_marked_message
from agentmem.conversation import (
    agent_step_start,
    continues_step,
    last_user_index,
    query_of,
    recent_start,
)
from agentmem.file_reads import file_read_answers, offers_file_edits
from agentmem.ingest import tools_tokens
from agentmem.lexical import relative_bm25, terms
from agentmem.messages import text_of
from agentmem.models.array_cache import ArrayCache
from agentmem.models.keep_rule import CONFIG_KEYS
from agentmem.models.runtime import read_passage, run_inference
from agentmem.recaps import asks_for_recap
from agentmem.report import Action, Decision
from agentmem.stages.base import Draft, Stage, StageContext
from agentmem.stages.selection import (
    TurnRows,
    add_exchange_similarity,
    add_sitting_context,
    add_turn_context,
    diversified,
    excluded_rows,
    fill,
    lead_budget,
    silence,
)
from agentmem.state.steps import StepReplay
from agentmem.structured import JsonLayout, parses_as_json, tool_layout
from agentmem.text import (
    GAP_MARK_TOKENS,
    MESSAGE_OVERHEAD_TOKENS,
    gap_marks,
    kept_text,
    split_sentences,
)
from agentmem.text_kinds import text_kind

if TYPE_CHECKING:
    from agentmem.policy import Policy


class PruneSettings(BaseModel):
    """The prune stage (see agentmem/stages/prune.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    keep_history_for_recaps: bool = Field(
        True, description="A request to sum up the conversation itself (\"Can you summarise "
        "everything we discussed?\", agentmem/recaps.py) leaves the history whole: scored "
        "against it, the older turns all look alike, and the share kept is what the summary "
        "would cover. The budget stage still holds it to the model's window.")
    checkpoint: str | None = Field(
        None, description="Pruner folder, a shipped one by name (pruner-minilm-int8: the int8 "
        "copy, a tool output read ~1.8x faster on CPU, see its model card), or a hub name such as "
        "naver/provence-reranker-debertav3-v1 "
        "or naver/xprovence-reranker-bgem3-v1, or a highlighter such as "
        "zilliz/semantic-highlight-bilingual-v1 (agentmem/models/highlighters.py; downloaded only "
        "with AGENTMEM_ALLOW_NETWORK=1); null: the shipped one.")
    threshold: float | None = Field(
        None, ge=0, description="null: the checkpoint's rule. Set alone (no fuse_* or margin), "
        "a keep probability: the model's own rule, as Provence's threshold; with them, a "
        "threshold on the fused score, which may pass 1.")
    rule: Literal["paper", "hf_code", "mean_prob"] | None = None
    floor: float | None = Field(
        None, ge=0, le=1, description="Share of a pruned tool output's tokens kept whatever the "
        "threshold, best sentences first (agentmem/models/keep_rule.py); null: the checkpoint's.")
    min_similarity: float | None = Field(
        None, ge=-1, le=1, description="Least MiniLM cosine to the query a sentence the threshold "
        "keeps must have (agentmem/models/keep_rule.py); null: the checkpoint's.")
    floor_tokens: int | None = Field(
        None, ge=1, description="Most tokens the floor asks for, however long the output "
        "(agentmem/models/keep_rule.py); null: the checkpoint's.")
    bridge: float | None = Field(
        None, ge=0, description="The floor ranks a sentence by its query cosine plus this times "
        "its best cosine to a kept sentence (the second hop resembles the first); null: the "
        "checkpoint's.")
    fuse_cosine: float | None = Field(
        None, ge=0, description="Fused rule: weight of the query cosine added to a sentence's "
        "keep probability (agentmem/models/keep_rule.py); null: the checkpoint's.")
    fuse_lexical: float | None = Field(
        None, ge=0, description="Fused rule: weight of the sentence's BM25 to the query, "
        "relative to the output's best; null: the checkpoint's.")
    margin: float | None = Field(
        None, ge=0, description="Fused rule: also keep sentences within this of the output's "
        "best fused score; null: the checkpoint's.")
    name_bridge: float | None = Field(
        None, ge=0, description="Fused rule: added to the fused score of a sentence that opens "
        "by defining a name the two best sentences mention and the query does not (a second "
        "hop; agentmem/names.py); null: the checkpoint's.")
    step_stable: bool = Field(
        True, description="An agent step's later calls get the older history exactly as its "
        "first call did (decided for the user's message), so the request's prefix stays "
        "byte-identical for provider prompt caches and the stage's work is not redone "
        "(agentmem/state/steps.py); false: each call decides anew, with the step's tool "
        "results in the query.")
    respect_cache_marks: bool = Field(
        True, description="Messages up to the request's last prompt-cache mark "
        "(`cache_control`) go out as the client sent them: pruned anew for each query, they "
        "would change the cached prefix on every call, and the provider would bill it again "
        "as a cache write (agentmem/cache_marks.py). Clients that mark nothing are unaffected.")
    keep_recent_exchanges: int = Field(2, ge=0, description="Exchanges kept verbatim.")
    large_tool_output_tokens: int = Field(
        400, ge=1, description="Tool outputs this large are pruned even inside the recent window.")
    file_reads_as_read: bool = Field(
        True, description="A file read by path (or printed by `cat`, `sed -n`, ...) goes out "
        "whole inside the recent window when the request offers a tool that edits files "
        "(agentmem/file_reads.py): the agent's edit needs its exact text. False: prose files "
        "are pruned like any large tool output (source code, being machine text, never is).")
    neighbours: int = Field(0, ge=0, description="Sentences kept on each side of a kept one.")
    history_fraction: float = Field(
        0.145, ge=0, le=1, description="Budget for turns older than the recent window, as a "
        "share of their tokens (with lead_slope: the share at a lead of lead_pivot).")
    lead_slope: float = Field(
        0.0, ge=0, description="The share moves with the query: history_fraction x (1 + "
        "lead_slope x (lead_pivot - lead)), where lead is how far the best older turn's score "
        "stands above the lead_turns-th best (agentmem.stages.selection.lead_budget): a "
        "clear answer takes less, evidence spread over many turns more. 0: a fixed share.")
    lead_pivot: float = Field(0.66, description="The lead at which the share is history_fraction.")
    lead_turns: int = Field(10, ge=2, description="The lead is measured to this best turn.")
    lead_least: float = Field(
        0.4, ge=0, description="Least share lead_slope gives, in history_fractions.")
    lead_most: float = Field(
        1.75, ge=0, description="Largest share lead_slope gives, in history_fractions (at "
        "most all the older turns). Below it, the turns that lead are held whole.")
    history_tokens: int | None = Field(
        None, ge=0, description="Absolute budget for the older turns; wins if set.")
    history_floor_tokens: int = Field(
        2048, ge=0, description="Older history up to this size is never pruned.")
    lexical_weight: float = Field(
        1.0, ge=0, description="Weight of BM25 (scaled to [0, 1]) next to the embedding cosine.")
    turn_spread: float = Field(
        0.3, ge=0, description="Score handicap of a further sentence from a turn that already "
        "has one kept: spreads the budget over more turns.")
    context_weight: float = Field(
        0.4, ge=0, description="Share of the adjacent turns' best score a sentence inherits.")
    exchange_weight: float = Field(
        0.6, ge=0, description="Weight of the cosine between the query and a sentence's exchange "
        "(its turn's and the turn before's sentence vectors summed): a short answer is found "
        "through its question, a turn about the query as a whole through its whole.")
    window_turns: int = Field(
        3, ge=1, description="Turns on each side whose best score a sentence inherits a share "
        "of (1: the adjacent turns only, context_weight).")
    window_weight: float = Field(
        0.4, ge=0, description="Share of the best score of the turns 2..window_turns away a "
        "sentence inherits, times window_decay per turn past the first: evidence spread over a "
        "stretch of the conversation is kept together.")
    window_decay: float = Field(
        0.7, gt=0, le=1, description="Factor on window_weight per turn of distance: the turn "
        "d = 2..window_turns away inherits window_weight x window_decay^(d-1).")
    sitting_weight: float = Field(
        0.0, ge=0, description="Share of the best score of its sitting's older turns a sentence "
        "inherits, where turns open with a date stamp ('[1:56 pm on 8 May, 2023] ...', "
        "agentmem.episodes): a question names a sitting by anything said in it.")
    rerank_turns: int = Field(
        0, ge=0, description="Best recalled older turns the pruner rescores (0: embeddings and "
        "BM25 only, the fast path).")
    rerank_weight: float = Field(1.0, ge=0, description="Weight of the pruner's probability.")
    rerank_context_turns: int = Field(
        1, ge=0, description="Older turns on each side read with a recalled turn by the pruner "
        "(a reply's antecedent is in the turn before it).")
    rerank_scope: Literal["top", "margin"] = Field(
        "top", description="Which recalled turns the pruner reads: the best ones (top), or "
        "those at the edge of the budget (margin: the last kept and the first left out by the "
        "first stage, where a second opinion changes what is kept).")
    rerank_tokens: int = Field(
        3072, ge=0, description="Pruner input tokens per call (recalled turns with their "
        "neighbours, best first); past it, the other recalled turns keep the embedding + BM25 "
        "score and the report says so.")
    pruner_sentences: int = Field(
        256, ge=0, description="Sentences of large tool outputs the pruner scores per call; "
        "past them, a sentence is kept only if it shares a term with the query.")
    selection: Literal["greedy", "mmr", "cluster"] = Field(
        "greedy", description="How older sentences are chosen inside the budget: by relevance "
        "(greedy), relevance minus redundancy with those already chosen (mmr), or the best of "
        "each embedding cluster first (cluster). README: Context assembly.")
    redundancy_weight: float = Field(
        0.3, ge=0, le=1, description="mmr: weight of the largest cosine to a chosen sentence.")
    cluster_spread: float = Field(
        0.3, ge=0, description="cluster: score handicap of every sentence but its cluster's best.")
    cluster_similarity: float = Field(
        0.6, ge=-1, le=1, description="cluster: cosine at which a sentence joins a more "
        "relevant one's cluster.")
    selection_pool: int = Field(
        256, ge=2, description="mmr and cluster reorder only this many best candidates.")

    @model_validator(mode="after")
    def _lead_bounds_in_order(self) -> PruneSettings:
        if self.lead_least > self.lead_most:
            raise ValueError(f"lead_least ({self.lead_least}) is above lead_most ({self.lead_most})")
        return self

    def keep_rule_overrides(self) -> dict[str, Any]:
        """The keep rule's settings this policy sets (None: the checkpoint's), as keyword
        arguments of ``Pruner.keep_rule``: the stage and ``/v1/highlight`` build one rule."""
        return {name: getattr(self, name) for name in CONFIG_KEYS}


@dataclass
class Candidate:
    index: int  # position in the history
    text: str
    spans: list[tuple[int, int]]
    droppable: bool  # a plain user/assistant message; tool-unit members only shrink
    role: str = "user"
    rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # corpus rows


def expand(keep: list[bool], neighbours: int) -> list[bool]:
    out = list(keep)
    for i, kept in enumerate(keep):
        if kept:
            for j in range(max(0, i - neighbours), min(len(keep), i + neighbours + 1)):
                out[j] = True
    return out


class PruneStage(Stage):
    name: ClassVar[str] = "prune"
    settings_model = PruneSettings
    runs_after = frozenset({"quarantine"})  # never bring back what quarantine withheld

    def wants_query(self, policy: Policy, request: dict[str, Any]) -> list[str]:
        """Only histories past the floor are pruned (~4 characters per token). A later call of
        an agent step replays what the step's first call decided (``step_stable``) and reads
        no query vector: its query holds the tool result (up to ~1,100 characters, ~80 ms of
        a core), whose prefetch only took a core from the call's poison check. When the
        replay misses, ``apply`` embeds the query itself."""
        messages = request["messages"]
        if (policy.prune.step_stable and continues_step(messages)) or _recap(policy.prune, messages):
            return []  # (a recap leaves the history whole: nothing to score)
        if policy.prune.respect_cache_marks and last_marked_message(messages) == len(messages) - 1:
            return []  # all of it in the client's cached prefix: nothing to score
        size = sum(len(text_of(m)) for m in messages)
        return [query_of(messages)] if size > 4 * max(policy.prune.history_floor_tokens, 1) else []

    async def apply(self, draft: Draft, context: StageContext) -> None:
        settings = context.policy.prune
        history = context.history
        step_start = agent_step_start(history)
        step = StepReplay.of(context, draft, step_start, settings.model_dump_json()) \
            if settings.step_stable else None
        if step is not None and await step.replay(draft, context.run):
            return
        await self._prune(draft, context, step_start)
        if step is not None:
            await step.record(draft, context.run)

    async def _prune(self, draft: Draft, context: StageContext, step_start: int) -> None:
        settings = context.policy.prune
        history = context.history
        if _recap(settings, history):
            context.run.skipped = RECAP
            return
        query = query_of(history, context.channels.excluded_spans)
        if not query:
            return
        start = recent_start(history, settings.keep_recent_exchanges)
        cached = context.last_cache_mark if settings.respect_cache_marks else None
        if cached is not None and cached >= len(history) - 1:
            context.run.skipped = CACHED
            return
        older, large_outputs = [], []
        for message in draft.messages:
            role, index = message.role, message.index
            if role in {"system", "developer"} or index >= step_start:
                continue
            if cached is not None and index <= cached:
                continue  # in the prefix the client asked the provider to cache
            original = history[index]
            if not isinstance(original.get("content"), str) or not original["content"].strip():
                continue
            in_unit = role == "tool" or bool(original.get("tool_calls"))
            if index < start:
                older.append(Candidate(index, original["content"], [], not in_unit, role))
            elif role == "tool" and _tokens(original) > settings.large_tool_output_tokens:
                large_outputs.append(Candidate(index, original["content"], [], False, role))
        if older:
            await self._select_history(draft, context, older, query)
        if large_outputs:
            await self._prune_tool_outputs(draft, context, large_outputs, query)

    async def _select_history(self, draft: Draft, context: StageContext,
                              older: list[Candidate], query: str) -> None:
        """Older turns: the most relevant sentences (dense + BM25) inside the history budget."""
        settings = context.policy.prune
        corpus = await context.corpus(max(c.index for c in older) + 1)
        positions = np.asarray([c.index for c in older])
        rows = np.flatnonzero(np.isin(corpus.position, positions))
        total = int(corpus.tokens[rows].sum()) + MESSAGE_OVERHEAD_TOKENS * len(older)
        room = await _prompt_room(draft, context, {c.index for c in older})
        budget = _history_budget(settings, room, int(settings.history_fraction * total))
        if total <= budget:  # (the query's budget, set below, is at most total: the same test)
            return
        for candidate in older:
            span = corpus.rows_of[candidate.index]
            candidate.rows = np.arange(span.start, span.stop)
            candidate.spans = corpus.spans[span.start: span.stop]
        vector = await context.query_vector(query)
        score = np.zeros(len(corpus.spans), dtype=np.float32)
        score[rows] = corpus.vectors[rows] @ vector
        unembedded = rows[~corpus.embedded[rows]]
        if len(unembedded):
            _impute_dense(score, rows, corpus.embedded, corpus.position)
            context.report.warnings.append(f"prune: {len(unembedded):,} sentences not embedded "
                                           "in time; scored lexically")
        lexical = corpus.lexical.scores(terms(query))[rows]
        if lexical.max() > 0:
            score[rows] += settings.lexical_weight * lexical / lexical.max()
        turns = TurnRows.of(older)
        excluded = excluded_rows(context, corpus)
        silence(score, excluded, rows)  # before the context rules: it lifts no neighbour
        if settings.exchange_weight:
            add_exchange_similarity(turns, score, corpus.turn_sums(), vector,
                                    settings.exchange_weight, withheld=(
                                        corpus.position[excluded], corpus.vectors[excluded]))
        if settings.sitting_weight:
            add_sitting_context(turns, score, corpus.dated_turns(), settings.sitting_weight)
        add_turn_context(turns, score, settings.context_weight, window=settings.window_turns,
                         window_weight=settings.window_weight, decay=settings.window_decay)
        score[excluded] = -np.inf  # quarantined by an earlier stage: never brought back
        if settings.lead_slope and not settings.history_tokens:  # the share for this query
            budget = _history_budget(settings, room, lead_budget(
                turns, score, corpus.tokens, total, settings.history_fraction,
                lead_turns=settings.lead_turns, slope=settings.lead_slope,
                pivot=settings.lead_pivot, least=settings.lead_least, most=settings.lead_most))
        if settings.rerank_turns and settings.rerank_tokens:
            picks = _rerank_picks(older, score, rows, corpus, budget, settings)
            await self._rerank(context, older, picks, score, query, corpus.tokens)
        ranked = score if settings.selection == "greedy" else diversified(
            settings.selection, rows, score, corpus.vectors,
            redundancy_weight=settings.redundancy_weight, pool=settings.selection_pool,
            cluster_spread=settings.cluster_spread, cluster_similarity=settings.cluster_similarity)
        kept = fill(rows, ranked, corpus, budget, settings.neighbours, settings.turn_spread)
        question = _opening_question(context.history, older, kept, score)
        if question is not None:  # its sentence comes out of the same budget
            kept = fill(rows, ranked, corpus, budget - int(corpus.tokens[question])
                        - MESSAGE_OVERHEAD_TOKENS, settings.neighbours, settings.turn_spread)
            kept[question] = True
        kept[excluded] = False
        reason = (f"no sentence of this turn was among the most relevant to the query within "
                  f"the history budget of {budget} tokens ({budget / total:.1%} of the older "
                  f"turns' {total})")
        self._apply_keep(draft, context, older, kept, score, corpus.tokens, reason)

    async def _rerank(self, context: StageContext, older: list[Candidate], picks: list[int],
                      score: np.ndarray, query: str, tokens: np.ndarray) -> None:
        """Two-stage mode: the pruner rescores the sentences of the best recalled turns.

        Each recalled turn is read in a window with ``rerank_context_turns`` older turns on
        each side (one transcript), so a reply like "Me too, last May" is judged with the turn
        it answers; the windows of a call go to the model as one batch, on the call's lane of
        the inference pool. A window's scores are cached by (checkpoint, query, window text):
        an agent loop's steps share their query, and a repeated question costs nothing. The
        work per call is bounded by ``rerank_tokens``: the best turns are read first, the rest
        keep their first-stage score (the report warns), so a call never waits on an
        unbounded forward pass on CPU.
        """
        from agentmem.models.pruner import cached_pruner
        from agentmem.models.registry import pruner_path

        settings = context.policy.prune
        checkpoint = pruner_path(settings.checkpoint)
        side = settings.rerank_context_turns
        query_key = hashlib.blake2b(query.encode(), digest_size=16).hexdigest()
        found: dict[int, np.ndarray] = {}
        todo: list[tuple[int, list[Candidate], int, str]] = []
        spent = unread = 0
        shown = _as_shown(older, context.channels.excluded_spans)  # withheld: not read
        for i in picks:
            low, high = max(0, i - side), min(len(older), i + side + 1)
            window = shown[low:high]
            key = _window_key(checkpoint, query_key, window, i - low)
            cached = _RERANK_CACHE.get(key)
            if cached is not None:
                found[i] = cached
                continue
            cost = sum(int(tokens[c.rows].sum()) + MESSAGE_OVERHEAD_TOKENS for c in window)
            if spent + cost > settings.rerank_tokens:
                unread += 1
                continue
            spent += cost
            todo.append((i, window, i - low, key))
        if todo:
            pruner = await run_inference(cached_pruner, checkpoint)
            read = await run_inference(_score_windows, pruner, query,
                                       [(window, centre) for _, window, centre, _ in todo])
            for (i, _, _, key), probabilities in zip(todo, read):
                _RERANK_CACHE.put(key, probabilities)
                found[i] = probabilities
        # margin: centred on the read turns' mean, so the read turns move against each other
        # and against the turns around them, not all up past the turns kept without a read.
        centre = (float(np.mean(np.concatenate(list(found.values()))))
                  if found and settings.rerank_scope == "margin" else 0.0)
        for i, probabilities in found.items():
            rows = older[i].rows
            if shown[i] is not older[i]:  # read without its withheld sentences
                seen = set(shown[i].spans)
                rows = rows[[span in seen for span in older[i].spans]]
            score[rows] += settings.rerank_weight * (probabilities - centre)
        if unread:
            context.report.warnings.append(
                f"prune: {unread} recalled turns past the pruner budget ({settings.rerank_tokens} "
                "tokens) keep their embedding + BM25 score")

    @staticmethod
    def _apply_keep(draft: Draft, context: StageContext, older: list[Candidate], kept: np.ndarray,
                    score: np.ndarray, corpus_tokens: np.ndarray, reason: str) -> None:
        """Drop turns with nothing kept (tool-call units only whole), shrink the rest.

        Which turns are whole, empty or partial comes from array arithmetic over each turn's
        row range: a 2,000-turn call sorts 2,000 turns, and only the partial ones (a few
        hundred) and the members of tool-call units are visited in Python."""
        count = len(older)
        starts = np.fromiter((c.rows[0] for c in older), np.int64, count)
        stops = np.fromiter((c.rows[-1] + 1 for c in older), np.int64, count)
        cumulative = np.concatenate(([0], np.cumsum(kept, dtype=np.int64)))
        kept_rows = cumulative[stops] - cumulative[starts]
        whole = kept_rows == stops - starts
        bounds = np.column_stack((starts, stops)).ravel()  # each turn's best score, -inf padded
        best = np.maximum.reduceat(np.append(score, np.float32(-np.inf)), bounds)[::2].tolist()
        droppable = np.fromiter((c.droppable for c in older), bool, count)
        dropped: dict[int, float] = {older[o].index: best[o]
                                     for o in np.flatnonzero(droppable & (kept_rows == 0)).tolist()}
        shrunk = [older[o] for o in np.flatnonzero(droppable & (kept_rows > 0) & ~whole).tolist()]
        if not droppable.all():  # tool-call members: whole units go together, others shrink
            ordinal = {c.index: o for o, c in enumerate(older)}
            # A unit's call message usually has no text (content null): it is not a candidate,
            # but it goes with its replies, or an old tool output could never be dropped.
            units = [([older[ordinal[m.index]] for m in unit if m.index in ordinal],
                      [m.index for m in unit if m.index not in ordinal])
                     for unit in draft.units()
                     if len(unit) > 1 and any(m.index in ordinal for m in unit)
                     and all(m.index in ordinal or _textless_call(m.message) for m in unit)]
            grouped = {c.index for members, _ in units for c in members}
            units += [([c], []) for c in older if not c.droppable and c.index not in grouped]
            for unit, calls in units:
                members = [ordinal[c.index] for c in unit]
                if all(whole[o] for o in members):
                    continue
                if len(unit) + len(calls) > 1 and not any(kept_rows[o] for o in members):
                    unit_best = max(best[o] for o in members)
                    dropped.update((older[o].index, best[o]) for o in members)
                    dropped.update((index, unit_best) for index in calls)
                    continue
                shrunk += [older[o] for o in members if not whole[o]]
        run = context.run
        current = {m.index: m.message for m in draft.messages}
        kept_list, score_list, token_list = kept.tolist(), score.tolist(), corpus_tokens.tolist()
        rewritten: dict[int, dict[str, Any]] = {}
        tokens: dict[int, int] = {}
        for c in shrunk:
            first, last = int(c.rows[0]), int(c.rows[-1]) + 1
            keep, scores = kept_list[first:last], score_list[first:last]
            if not any(keep):  # a member of a kept tool-call unit keeps its best sentence
                finite = [i for i, value in enumerate(scores) if math.isfinite(value)]
                if not finite:  # quarantine withheld it whole: its placeholder goes as it is
                    continue
                keep[max(finite, key=scores.__getitem__)] = True
            layout = _stored_layout(c)  # a tool's JSON answer keeps whole records
            rewritten[c.index] = _shrink(current[c.index], c, keep, scores, run, SHRUNK, layout)
            if layout is None and not current[c.index].get("tool_calls"):  # JSON is recounted
                marks = gap_marks(rewritten[c.index]["content"])  # cuts marked in machine text
                tokens[c.index] = (MESSAGE_OVERHEAD_TOKENS + sum(compress(token_list[first:last], keep))
                                   + GAP_MARK_TOKENS * marks)
        run.decisions.extend(drop_runs(dropped, reason))
        draft.drop_indices(set(dropped))
        draft.replace_messages(rewritten, tokens)

    async def _prune_tool_outputs(self, draft: Draft, context: StageContext,
                                  outputs: list[Candidate], query: str) -> None:
        """Large tool outputs of recent exchanges: Provence keeps the sentences the query needs.

        Only prose is read: machine text (source code, a diff, a log, a table;
        ``agentmem.text_kinds``) goes to the model verbatim, since an agent works on exactly
        what it just read (a file it is about to edit) and the prose model's sentences are
        not its units. So does a file read by path when the request offers a tool that edits
        files (``agentmem.file_reads``): a README the agent will fix is prose, but its edit
        needs the exact text.

        A tool's JSON answer is read by its rows (``agentmem.structured``: records, long
        strings' sentences and the frame around them, each on one line) and keeps whole
        records, so what the model gets still parses; JSON with nothing to choose among (one
        short record) is left whole and not read."""
        from agentmem.models.pruner import cached_pruner
        from agentmem.models.registry import pruner_path

        settings = context.policy.prune
        readable: list[tuple[Candidate, JsonLayout | None]] = []
        as_read = (file_read_answers(context.history)
                   if settings.file_reads_as_read and offers_file_edits(draft.tools) else set())
        for candidate in outputs:
            if candidate.index in as_read:
                continue  # a file the agent read and may edit next: its exact text
            layout = tool_layout(candidate.text)
            if layout is None and parses_as_json(candidate.text):
                continue  # JSON with nothing to choose among (one record): whole, not read
            if layout is None and text_kind(candidate.text) == "machine":
                continue  # code, a diff, a log, a table: the prose pruner would cut it apart
            # the spans ingest stored (``message_units``), so their vectors are read, not made
            spans = layout.spans if layout is not None else split_sentences(candidate.text)
            candidate.spans = [(a, b) for a, b in spans]
            readable.append((candidate, layout))
        if not readable:
            return
        pruner = await run_inference(cached_pruner, pruner_path(settings.checkpoint))
        keep_rule = pruner.keep_rule(**settings.keep_rule_overrides())
        room, unscored = settings.pruner_sentences, 0
        embedder = context.state.embedder
        for candidate, layout in readable:
            # What the pruner reads: the sentences, or a JSON output's units one per line.
            units = ([layout.reading(row) for row in range(len(layout.spans))] if layout
                     else [candidate.text[a:b] for a, b in candidate.spans])
            # what the model will see: a sentence quarantine withheld is not read with the
            # others, nor their yardstick (the keep rule's best, its bridge names, BM25's range)
            withheld = context.channels.excluded_spans.get(candidate.index, set())
            shown = [i for i, span in enumerate(candidate.spans) if span not in withheld]
            if not shown:
                continue  # quarantine withheld all of it: its placeholder goes as it is
            texts = [units[i] for i in shown[:room]]
            probabilities, keep, unread = [], [], False
            if texts:
                # the query's cosine vetoes unrelated keeps and orders the floor (never
                # waiting for a MiniLM that a restarted server is still loading); the
                # vectors stored at ingest are read for the same spans
                head = Candidate(candidate.index, candidate.text,
                                 [candidate.spans[i] for i in shown[:len(texts)]], False,
                                 candidate.role)
                similarities, vectors, bm25 = None, None, None
                if embedder.loaded and keep_rule.min_similarity is not None:
                    similarities, vectors = await _query_cosines(context, head, query)
                if similarities is not None and keep_rule.out_of_reach(similarities):
                    scores, unread = pruner.unread(texts), True  # the cheap signals decide
                else:
                    room -= len(texts)
                    read = _as_read(candidate, texts)
                    scores = (await _read_transcript(pruner, query, [read]))[read.index]
                    if similarities is None and embedder.loaded and \
                            keep_rule.wants_similarities(scores):
                        similarities, vectors = await _query_cosines(context, head, query)
                if keep_rule.fuse_lexical:
                    bm25 = relative_bm25(query, texts)
                # an unread output's decisions report what decided them: the query cosine
                probabilities = list(similarities if unread and similarities is not None
                                     else scores.probabilities)
                keep = keep_rule.decide(scores, similarities=similarities, vectors=vectors,
                                        lexical=None if bm25 is None else bm25.tolist(),
                                        texts=texts, question=query)
            tail = [units[i] for i in shown[len(keep):]]
            if tail:  # past the call's pruner budget: the query's terms decide
                unscored += len(tail)
                lexical = _lexical_keep(tail, query)
                probabilities += lexical
                keep += [score > 0 for score in lexical]
            probabilities, keep = _in_place(shown, len(units), probabilities, keep)
            reason = UNRELATED if unread else "below the pruner's keep threshold for the query" + (
                " (past the pruner budget: no term of the query)" if tail else "")
            if layout is not None:
                is_unit = [kind != "frame" for kind in layout.kinds]
                # quarantine withholds rows (the same spans): frame text withheld leaves its
                # version of the output in place
                if any(not unit and span in withheld for span, unit in zip(candidate.spans, is_unit)):
                    continue
                keep = [k and span not in withheld for k, span in zip(keep, candidate.spans)]
                if all(compress(keep, is_unit)) and not withheld:
                    continue
                units_shown = [i for i in shown if is_unit[i]]
                if not any(compress(keep, is_unit)) and units_shown:  # the best unit at least
                    keep[max(units_shown, key=probabilities.__getitem__)] = True
                draft.replace_message(candidate.index, _shrink(
                    draft.message_at(candidate.index), candidate, keep, probabilities,
                    context.run, reason, layout))
                continue
            keep = expand(keep, settings.neighbours)
            keep = [k and span not in withheld for k, span in zip(keep, candidate.spans)]
            if all(keep):
                continue
            if not any(keep) and shown:
                keep[max(shown, key=probabilities.__getitem__)] = True
            draft.replace_message(candidate.index, _shrink(
                draft.message_at(candidate.index), candidate, keep, probabilities,
                context.run, reason))
        if unscored:
            context.report.warnings.append(
                f"prune: {unscored:,} tool-output sentences past the pruner budget "
                f"({settings.pruner_sentences}); kept only where they share a term with the query")


def _recap(settings: PruneSettings, history: list[dict[str, Any]]) -> bool:
    """Whether the user's newest message asks to sum up the conversation and the policy
    leaves the history whole for that (``agentmem.recaps``)."""
    asked = last_user_index(history)
    return settings.keep_history_for_recaps and asked is not None \
        and asks_for_recap(text_of(history[asked]))


def _history_budget(settings: PruneSettings, room: int | None, share: int) -> int:
    """Tokens the older turns may keep: ``history_tokens``, else their ``share`` (never under
    ``history_floor_tokens``); near the model's window, what the prompt leaves (``room``),
    chosen by sentence here rather than by whole turn downstream."""
    budget = settings.history_tokens or max(settings.history_floor_tokens, share)
    return budget if room is None or room >= budget else max(room, 0)


async def _prompt_room(draft: Draft, context: StageContext, older: set[int]) -> int | None:
    """What the budget stage's prompt budget leaves for the older turns: the budget less the
    messages that always go (the system prompt, the recent window, the current step, as they
    are now), the tools and the room kept for an agent step's next results; None when the
    policy enforces no budget. The budget stage would otherwise drop whole older turns after
    this stage chose their sentences (`agentmem bench agent-history --max-prompt-tokens`)."""
    from agentmem.stages.budget import budget_for, message_counter, reserve_for

    policy = context.policy
    prompt = budget_for(context.model, policy.budget) if "budget" in policy.stages else None
    if prompt is None:
        return None
    counted = await context.position_tokens()
    tokens = message_counter(context.history, counted)
    pinned = sum(tokens(m) for m in draft.messages if m.index not in older)
    reserve = reserve_for(draft, policy.budget, prompt, context.history, counted)
    return prompt - pinned - tools_tokens(draft.tools) - reserve


SHRUNK = "not among the most relevant sentences within the history budget"
RECAP = "the user asks to sum up the conversation: the history is left whole"
CACHED = ("the client marks the newest message for the provider's prompt cache: the history "
          "goes out as sent (prune.respect_cache_marks)")
UNRELATED = ("unrelated to the query (every sentence under the keep rule's least cosine), "
             "so not read by the pruner: its floor keeps the closest; score: the query cosine")


def _opening_question(history: list[dict[str, Any]], older: list[Candidate], kept: np.ndarray,
                      score: np.ndarray) -> int | None:
    """The row to keep so that the cut history does not open with the assistant's turn.

    Bedrock's Claude and Gemini refuse a conversation whose first turn is the assistant's (an
    answer, a tool call or its result), and an answer reads best after its question. When the
    history opens (its first older turn with a kept sentence, or an earlier turn the stage
    does not cut) with a turn that is not the user's, this is the best sentence of the user
    turn before it; ``None`` when the cut opens with a user turn, or the client's own history
    has no user turn before it."""
    candidates = {c.index for c in older}
    kept_first = next((c.index for c in older if kept[c.rows].any()), len(history))
    # A turn the stage does not cut (the recent window, or a tool result it cannot read, which
    # keeps its whole tool-call unit) goes out as it is: it may open the history too.
    uncut_first = next((i for i in range(kept_first) if i not in candidates
                        and history[i].get("role") not in ("system", "developer")
                        and not _textless_call(history[i])), len(history))
    opening = min(kept_first, uncut_first)
    if opening == len(history) or history[opening].get("role") == "user":
        return None
    question = next((c for c in reversed(older)
                     if c.index < opening and history[c.index].get("role") == "user"), None)
    if question is None:
        return None
    finite = [row for row in question.rows.tolist() if math.isfinite(score[row])]
    return max(finite, key=lambda row: score[row]) if finite else None


def drop_runs(dropped: dict[int, float], reason: str) -> list[Decision]:
    """One decision per run of consecutive messages dropped for the same reason.

    A 2,000-turn session drops most of its turns on every call; one decision (and one stored
    report entry) per turn cost ~10 ms a call and ~0.5 MB of report; the budget stage's drops
    near a model's window are as many. ``detail.unit`` lists every message the decision drops
    and ``detail.scores`` each one's score (prune: its best sentence's; budget: its unit's).
    """
    decisions, indices = [], sorted(dropped)
    start = 0
    for end in range(1, len(indices) + 1):
        if end < len(indices) and indices[end] == indices[end - 1] + 1:
            continue
        unit = indices[start:end]
        scores = [round(dropped[i], 4) for i in unit]
        decisions.append(Decision.model_construct(  # trusted fields, built in bulk
            action=Action.DROP_MESSAGE, span=None, spans=None, span_scores=None, tool=None,
            message_index=unit[0], position=unit[0], score=max(scores), reason=reason,
            detail={"unit": unit, "scores": scores}))
        start = end
    return decisions


def _shrink(original: dict[str, Any], candidate: Candidate, keep: list[bool], scores: list[float],
            run, reason: str, layout: JsonLayout | None = None) -> dict[str, Any]:
    """The message with only its kept sentences; one decision lists every removed span. With
    ``layout`` (a tool's JSON answer, its rows the candidate's spans) only units are removed,
    the frame going with what holds it, and the result still parses."""
    # A span without a finite score was withheld by quarantine, whose decision reports it.
    removable = [True] * len(keep) if layout is None else [k != "frame" for k in layout.kinds]
    removed = [(span, score) for span, k, score, unit in zip(candidate.spans, keep, scores, removable)
               if unit and not k and math.isfinite(score)]
    if removed:
        run.decisions.append(spans_decision(candidate.index, removed, reason, layout is not None))
    return {**original, "content": kept_content(candidate.text, candidate.spans, keep, layout)}


def spans_decision(index: int, removed: Sequence[tuple[tuple[int, int], float]], reason: str,
                   json: bool) -> Decision:
    """One ``prune_spans`` decision listing every span removed from a message, with its score
    (the budget stage's overflow cut reports its own this way too)."""
    return Decision.model_construct(  # trusted fields, built in bulk
        action=Action.PRUNE_SPANS, message_index=index, position=index,
        span=None, tool=None, detail={"format": "json"} if json else {},
        reason=reason, score=max(s for _, s in removed),
        spans=[span for span, _ in removed], span_scores=[float(s) for _, s in removed])


def kept_content(text: str, spans: Sequence[tuple[int, int]], keep: Sequence[bool],
                 layout: JsonLayout | None = None) -> str:
    """A message's text with only its kept spans: a JSON answer by its layout (it still
    parses), machine text with a mark at each cut, prose as the kept sentences."""
    if layout is not None:
        return layout.keep(keep)
    return kept_text(text, spans, keep, mark_gaps=text_kind(text) == "machine")


def _transcript(candidates: list[Candidate]) -> tuple[list[str], list[int]]:
    """The candidates as one transcript ("role: text" on each turn's first sentence), the
    way the pruner reads chat history: its sentences and each one's turn."""
    sentences, owners = [], []
    for candidate in candidates:
        for number, (a, b) in enumerate(candidate.spans):
            text = candidate.text[a:b]
            sentences.append(f"{candidate.role}: {text}" if number == 0 else text)
            owners.append(candidate.index)
    return sentences, owners


def _per_turn(score: Any, owners: list[int], candidates: list[Candidate]) -> dict[int, Any]:
    from agentmem.models.pruner import SentenceScores

    out = {}
    for candidate in candidates:
        rows = [i for i, owner in enumerate(owners) if owner == candidate.index]
        out[candidate.index] = SentenceScores(
            probabilities=[score.probabilities[i] for i in rows],
            kept_fraction_by_threshold=[score.kept_fraction_by_threshold[i] for i in rows],
            ranking_score=score.ranking_score)
    return out


async def _read_transcript(pruner, query: str, candidates: list[Candidate]) -> dict[int, Any]:
    """Score the candidates as one transcript ("role: text" on each turn's first sentence;
    blocks are cut at sentence boundaries); per-turn scores. A passage longer than one model
    block (a large tool output) has its blocks read in parallel by idle inference workers,
    with the same scores as one pass (``agentmem.models.runtime.read_passage``)."""
    sentences, owners = _transcript(candidates)
    if not sentences:
        return {}
    return _per_turn(await read_passage(pruner, query, sentences), owners, candidates)


def _rerank_picks(older: list[Candidate], score: np.ndarray, rows: np.ndarray, corpus,
                  budget: int, settings: PruneSettings) -> list[int]:
    """Positions in ``older`` of the turns the pruner reads, in order of priority. ``top``: the
    best recalled turns. ``margin``: a first fill by the first-stage score finds the budget's
    edge; half the reads go to the weakest kept turns, half to the strongest left out
    (alternating, from the edge outwards). The best turns are kept whatever the pruner says,
    so reading them spends the pruner on decisions already made."""
    best_of = np.full(len(older), -np.inf, dtype=np.float32)
    for i, candidate in enumerate(older):
        if len(candidate.rows):
            best_of[i] = score[candidate.rows].max()
    readable = np.flatnonzero(np.isfinite(best_of))
    ranked = readable[np.argsort(-best_of[readable], kind="stable")].tolist()
    if settings.rerank_scope == "top":
        return ranked[: settings.rerank_turns]
    kept = fill(rows, score, corpus, budget, settings.neighbours, settings.turn_spread)
    inside = [i for i in ranked if kept[older[i].rows].any()]
    outside = [i for i in ranked if not kept[older[i].rows].any()]
    picks: list[int] = []
    weakest_kept, strongest_out = iter(reversed(inside)), iter(outside)
    while len(picks) < settings.rerank_turns:
        added = False
        for source in (weakest_kept, strongest_out):
            nxt = next(source, None)
            if nxt is not None and len(picks) < settings.rerank_turns:
                picks.append(nxt)
                added = True
        if not added:
            break
    return picks


def _score_windows(pruner, query: str, windows: list[tuple[list[Candidate], int]]
                   ) -> list[np.ndarray]:
    """Per window (turns, index of the recalled one): the recalled turn's sentence
    probabilities, each window read as one transcript ("role: text" per turn, as
    ``_read_transcript``), all windows in one ``score_batch`` (batched forward passes)."""
    pairs, owners = [], []
    for window, centre in windows:
        sentences: list[str] = []
        rows: list[int] = []
        for number, candidate in enumerate(window):
            for first, (a, b) in enumerate(candidate.spans):
                text = candidate.text[a:b]
                if number == centre:
                    rows.append(len(sentences))
                sentences.append(f"{candidate.role}: {text}" if first == 0 else text)
        pairs.append((query, sentences))
        owners.append(rows)
    # Batches of similar length: a batch is padded to its longest window, and 16 windows in
    # one batch of 32 measured ~25% slower than length-sorted batches of 8 (same outputs).
    order = sorted(range(len(pairs)), key=lambda i: sum(len(text) for text in pairs[i][1]))
    scores: list[Any] = [None] * len(pairs)
    for i, score in zip(order, pruner.score_batch([pairs[i] for i in order], batch_size=8)):
        scores[i] = score
    return [np.asarray([score.probabilities[r] for r in rows], dtype=np.float32)
            for score, rows in zip(scores, owners)]


def _window_key(checkpoint: str, query_key: str, window: list[Candidate], centre: int) -> str:
    """What a window's scores depend on: the model, the query, the turns' roles, text and the
    sentences read of it."""
    digest = hashlib.blake2b(digest_size=16)
    for part in (checkpoint, query_key, str(centre)):
        digest.update(part.encode() + b"\0")
    for candidate in window:
        digest.update(candidate.role.encode() + b"\0" + candidate.text.encode() + b"\1"
                      + repr(candidate.spans).encode() + b"\2")
    return digest.hexdigest()


def _as_shown(candidates: list[Candidate], withheld: dict[int, set[tuple[int, int]]]
              ) -> list[Candidate]:
    """The candidates as the model will see them: without the sentences an earlier stage
    withheld (the same object where none was)."""
    return [replace(c, spans=[span for span in c.spans if span not in withheld[c.index]])
            if withheld.get(c.index) else c for c in candidates]


# per-window pruner scores: pure functions of their key (model, query, the window's turns), so
# shared by all sessions and tenants without telling one anything of another's (a hit needs
# the same text and query)
_RERANK_CACHE = ArrayCache(4096)


async def _query_cosines(context: StageContext, candidate: Candidate,
                         query: str) -> tuple[list[float], np.ndarray]:
    """Each sentence's cosine to the query, and the sentence vectors (for the keep rule's
    bridge term). A tool output of an earlier exchange was embedded
    after that reply (ingest): its stored vectors are read, not computed again (embedding a
    large output's sentences on the call path cost about as much as the pruner's pass). A turn
    not embedded yet, or split differently, is embedded now."""
    spans = candidate.spans
    vector = await context.query_vector(query)  # memoised: the call embedded it already
    corpus = await context.corpus(candidate.index + 1, vectors=False)
    if candidate.index < len(corpus.rows_of):
        own_rows = corpus.rows_of[candidate.index]  # by span: a withheld one may be left out
        where = dict(zip(corpus.spans[own_rows.start: own_rows.stop],
                         range(own_rows.start, own_rows.stop)))
        rows = [where.get(span, -1) for span in spans]
        if -1 not in rows and bool(corpus.embedded[rows].all()):
            stored = corpus.vectors[rows]
            return [float(x) for x in stored @ vector], stored
    own = [candidate.text[a:b] for a, b in spans]
    fresh = await run_inference(context.state.embedder.encode, own)
    return [float(x) for x in fresh @ vector], fresh


def _lexical_keep(texts: list[str], query: str) -> list[float]:
    """Per sentence, the share of the query's terms it contains: the cheap stand-in for the
    pruner past its per-call budget (0: shares none, dropped)."""
    wanted = set(terms(query))
    if not wanted:
        return [0.0] * len(texts)
    return [len(wanted.intersection(terms(text))) / len(wanted) for text in texts]


def _in_place(shown: list[int], count: int, probabilities: list[float], keep: list[bool]
              ) -> tuple[list[float], list[bool]]:
    """A tool output's scores and keeps, read for its ``shown`` units only, put back in place
    among all ``count`` of them: a withheld unit scores 0 and is not kept."""
    if len(shown) == count:
        return probabilities, keep
    placed_probabilities, placed_keep = [0.0] * count, [False] * count
    for i, probability, kept in zip(shown, probabilities, keep):
        placed_probabilities[i], placed_keep[i] = probability, kept
    return placed_probabilities, placed_keep


def _as_read(candidate: Candidate, texts: list[str]) -> Candidate:
    """What the pruner reads of a tool output: ``texts`` (its sentences, or a JSON answer's
    rows) one per line, as a candidate of its own."""
    spans, cursor = [], 0
    for text in texts:
        spans.append((cursor, cursor + len(text)))
        cursor += len(text) + 1
    return Candidate(candidate.index, "\n".join(texts), spans, False, candidate.role)


def _stored_layout(candidate: Candidate) -> JsonLayout | None:
    """The JSON layout of a tool message whose spans are its rows (as ingest stored them)."""
    layout = tool_layout(candidate.text) if candidate.role == "tool" else None
    if layout is None or [tuple(span) for span in layout.spans] != list(candidate.spans):
        return None
    return layout


def _impute_dense(score: np.ndarray, rows: np.ndarray, embedded: np.ndarray,
                  position: np.ndarray) -> None:
    """Dense scores for rows with no vector yet (past a call's embedding budget): the mean of
    their turn's embedded sentences (one message keeps to a topic), else the median over the
    embedded candidates: a neutral prior, so BM25 alone ranks them against each other and
    they are neither buried (a zero cosine would) nor favoured."""
    known = rows[embedded[rows]]
    neutral = float(np.median(score[known])) if len(known) else 0.0
    by_turn: dict[int, list[float]] = {}
    for row in known.tolist():
        by_turn.setdefault(int(position[row]), []).append(float(score[row]))
    for row in rows[~embedded[rows]].tolist():
        turn = by_turn.get(int(position[row]))
        score[row] = sum(turn) / len(turn) if turn else neutral


def _tokens(message: dict[str, Any]) -> int:
    from agentmem.ingest import message_tokens

    return message_tokens(message)


def _textless_call(message: dict[str, Any]) -> bool:
    """An assistant message that only calls tools (no text to score)."""
    return bool(message.get("tool_calls")) and not text_of(message).strip()
