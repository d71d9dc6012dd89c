"""The prune stage: keep the history the current turn needs, sentence by sentence.

Query: the latest user message, plus the pending tool calls and their results when the
request is an agent step. The most recent exchanges and the current step stay verbatim.

Older turns get a token budget (a share of their tokens). Their sentences are ranked by
MiniLM cosine to the query (vectors cached at ingest) plus BM25 (names, numbers and rare words
that embeddings blur), optionally rescored by the Provence pruner for the best recalled turns,
and kept greedily until the budget is full; each kept sentence brings its neighbours so "this"
keeps its antecedent. Large tool outputs inside the recent window are pruned by Provence
against the query, which is the passage-level job it was trained for. Tool-call units are never
split: they go whole, or their messages shrink (to their best sentence at least).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from agentmem.conversation import agent_step_start, query_of, recent_start
from agentmem.lexical import terms
from agentmem.messages import text_of
from agentmem.models.runtime import run_inference
from agentmem.report import Action, Decision
from agentmem.stages.base import Draft, Stage, StageContext
from agentmem.stages.selection import add_turn_context, diversified, excluded_rows, fill
from agentmem.text import MESSAGE_OVERHEAD_TOKENS, split_sentences

if TYPE_CHECKING:
    from agentmem.policy import Policy


class PruneSettings(BaseModel):
    """The prune stage (see agentmem/stages/prune.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    checkpoint: str | None = Field(
        None, description="Pruner folder, or a hub name such as naver/provence-reranker-debertav3-v1 "
        "or naver/xprovence-reranker-bgem3-v1, or a highlighter such as "
        "zilliz/semantic-highlight-bilingual-v1 (agentmem/models/highlighters.py; downloaded only "
        "with AGENTMEM_ALLOW_NETWORK=1); null: the shipped one.")
    threshold: float | None = Field(None, ge=0, le=1, description="null: the checkpoint's.")
    rule: Literal["paper", "hf_code", "mean_prob"] | None = None
    floor: float | None = Field(
        None, ge=0, le=1, description="Share of a pruned tool output's tokens kept whatever the "
        "threshold, best sentences first (agentmem/models/keep_rule.py); null: the checkpoint's.")
    keep_recent_exchanges: int = Field(2, ge=0, description="Exchanges kept verbatim.")
    large_tool_output_tokens: int = Field(
        400, ge=1, description="Tool outputs this large are pruned even inside the recent window.")
    neighbours: int = Field(0, ge=0, description="Sentences kept on each side of a kept one.")
    history_fraction: float = Field(
        0.18, ge=0, le=1, description="Budget for turns older than the recent window, as a "
        "share of their tokens.")
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
    rerank_turns: int = Field(
        0, ge=0, description="Best recalled older turns the pruner rescores (0: embeddings and "
        "BM25 only, the fast path).")
    rerank_weight: float = Field(1.0, ge=0, description="Weight of the pruner's probability.")
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
        """Only histories past the floor are pruned (~4 characters per token)."""
        messages = request["messages"]
        size = sum(len(text_of(m)) for m in messages)
        return [query_of(messages)] if size > 4 * max(policy.prune.history_floor_tokens, 1) else []

    async def apply(self, draft: Draft, context: StageContext) -> None:
        settings = context.policy.prune
        history = context.history
        query = query_of(history)
        if not query:
            return
        start = recent_start(history, settings.keep_recent_exchanges)
        step_start = agent_step_start(history)
        older, large_outputs = [], []
        for message in draft.messages:
            role, index = message.role, message.index
            if role in {"system", "developer"} or index >= step_start:
                continue
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
        budget = settings.history_tokens or max(settings.history_floor_tokens,
                                                int(settings.history_fraction * total))
        if total <= budget:
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
        if settings.context_weight:
            add_turn_context(older, score, settings.context_weight)
        if settings.rerank_turns:
            await self._rerank(context, older, score, query)
        excluded = excluded_rows(context, corpus)
        score[excluded] = -np.inf  # quarantined by an earlier stage: never brought back
        ranked = score if settings.selection == "greedy" else diversified(
            settings.selection, rows, score, corpus.vectors,
            redundancy_weight=settings.redundancy_weight, pool=settings.selection_pool,
            cluster_spread=settings.cluster_spread, cluster_similarity=settings.cluster_similarity)
        kept = fill(rows, ranked, corpus, budget, settings.neighbours, settings.turn_spread)
        kept[excluded] = False
        reason = (f"no sentence of this turn was among the most relevant to the query within "
                  f"the history budget of {budget} tokens")
        self._apply_keep(draft, context, older, kept, score, corpus.tokens, reason)

    async def _rerank(self, context: StageContext, older: list[Candidate], score: np.ndarray,
                      query: str) -> None:
        """Two-stage mode: the pruner rescores the sentences of the best recalled turns."""
        from agentmem.models.pruner import cached_pruner
        from agentmem.models.registry import default_pruner_path

        settings = context.policy.prune
        best = sorted(older, key=lambda c: -float(score[c.rows].max()) if len(c.rows) else 0.0)
        chosen = sorted(best[: settings.rerank_turns], key=lambda c: c.index)
        pruner = await run_inference(cached_pruner, settings.checkpoint or default_pruner_path())
        by_index = await run_inference(_score_transcript, pruner, query, chosen)
        for candidate in chosen:
            probabilities = np.asarray(by_index[candidate.index].probabilities, dtype=np.float32)
            score[candidate.rows] += settings.rerank_weight * probabilities

    @staticmethod
    def _apply_keep(draft: Draft, context: StageContext, older: list[Candidate], kept: np.ndarray,
                    score: np.ndarray, corpus_tokens: np.ndarray, reason: str) -> None:
        """Drop turns with nothing kept (tool-call units only whole), shrink the rest."""
        run = context.run
        by_index = {c.index: c for c in older}
        units = [[c] for c in older if c.droppable]  # plain messages: units of one
        if len(units) < len(older):  # tool-call members: group them as the draft does
            units += [[by_index[m.index] for m in unit] for unit in draft.units()
                      if len(unit) > 1 and all(m.index in by_index for m in unit)]
            grouped = {c.index for unit in units for c in unit}
            units += [[c] for c in older if c.index not in grouped]  # partial units only shrink
        current = {m.index: m.message for m in draft.messages}
        kept_list, score_list, token_list = kept.tolist(), score.tolist(), corpus_tokens.tolist()
        dropped: dict[int, float] = {}  # message index: its best sentence's score
        rewritten: dict[int, dict[str, Any]] = {}
        tokens: dict[int, int] = {}
        for unit in units:  # plain lists and slices: ~600 small turns per call, numpy is slower
            keeps = [kept_list[c.rows[0]: c.rows[-1] + 1] for c in unit]
            if all(all(keep) for keep in keeps):
                continue
            whole = len(unit) > 1 or unit[0].droppable
            if whole and not any(any(keep) for keep in keeps):
                for c in unit:
                    dropped[c.index] = max(score_list[c.rows[0]: c.rows[-1] + 1])
                continue
            for c, keep in zip(unit, keeps):
                if all(keep):
                    continue
                scores = score_list[c.rows[0]: c.rows[-1] + 1]
                if not any(keep):  # a member of a kept tool-call unit keeps its best sentence
                    keep[scores.index(max(scores))] = True
                rewritten[c.index] = _shrink(current[c.index], c, keep, scores, run,
                                             "not among the most relevant sentences within the "
                                             "history budget")
                if not current[c.index].get("tool_calls"):
                    sentence_tokens = token_list[c.rows[0]: c.rows[-1] + 1]
                    tokens[c.index] = MESSAGE_OVERHEAD_TOKENS + sum(
                        t for t, k in zip(sentence_tokens, keep) if k)
        run.decisions.extend(drop_runs(dropped, reason))
        draft.drop_indices(set(dropped))
        draft.replace_messages(rewritten, tokens)

    async def _prune_tool_outputs(self, draft: Draft, context: StageContext,
                                  outputs: list[Candidate], query: str) -> None:
        """Large tool outputs of recent exchanges: Provence keeps the sentences the query needs."""
        from agentmem.models.pruner import cached_pruner
        from agentmem.models.registry import default_pruner_path

        settings = context.policy.prune
        for candidate in outputs:
            candidate.spans = [(s.start, s.end) for s in split_sentences(candidate.text)]
        pruner = await run_inference(cached_pruner, settings.checkpoint or default_pruner_path())
        keep_rule = pruner.keep_rule(settings.threshold, settings.rule, settings.floor)
        room, unscored = settings.pruner_sentences, 0
        for candidate in outputs:
            head = Candidate(candidate.index, candidate.text, candidate.spans[:room], False,
                             candidate.role)
            room -= len(head.spans)
            probabilities, keep = [], []
            if head.spans:
                scores = (await run_inference(_score_transcript, pruner, query, [head]))[head.index]
                probabilities, keep = list(scores.probabilities), keep_rule.decide(scores)
            tail = candidate.spans[len(head.spans):]
            if tail:  # past the call's pruner budget: the query's terms decide
                unscored += len(tail)
                lexical = _lexical_keep(candidate.text, tail, query)
                probabilities += lexical
                keep += [score > 0 for score in lexical]
            keep = expand(keep, settings.neighbours)
            withheld = context.channels.excluded_spans.get(candidate.index, set())
            keep = [k and span not in withheld for k, span in zip(keep, candidate.spans)]
            if all(keep):
                continue
            if not any(keep):
                keep[int(np.argmax(probabilities))] = True
            reason = "below the pruner's keep threshold for the query" + (
                " (past the pruner budget: no term of the query)" if tail else "")
            draft.replace_message(candidate.index, _shrink(
                draft.message_at(candidate.index), candidate, keep, probabilities,
                context.run, reason))
        if unscored:
            context.report.warnings.append(
                f"prune: {unscored:,} tool-output sentences past the pruner budget "
                f"({settings.pruner_sentences}); kept only where they share a term with the query")


def drop_runs(dropped: dict[int, float], reason: str) -> list[Decision]:
    """One decision per run of consecutive messages dropped for the same reason.

    A 2,000-turn session drops most of its turns on every call; one decision (and one stored
    report entry) per turn cost ~10 ms a call and ~0.5 MB of report. ``detail.unit`` lists
    every message the decision drops and ``detail.scores`` each one's best score.
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
            run, reason: str) -> dict[str, Any]:
    """The message with only its kept sentences; one decision lists every removed span."""
    text = candidate.text
    kept = [text[a:b] for (a, b), k in zip(candidate.spans, keep) if k]
    # A span without a finite score was withheld by quarantine, whose decision reports it.
    removed = [(span, score) for span, k, score in zip(candidate.spans, keep, scores)
               if not k and math.isfinite(score)]
    if removed:
        run.decisions.append(Decision.model_construct(  # trusted fields, built in bulk
            action=Action.PRUNE_SPANS, message_index=candidate.index, position=candidate.index,
            span=None, tool=None, detail={}, reason=reason, score=max(s for _, s in removed),
            spans=[span for span, _ in removed], span_scores=[float(s) for _, s in removed]))
    return {**original, "content": " ".join(kept)}


def _score_transcript(pruner, query: str, candidates: list[Candidate]) -> dict[int, Any]:
    """Score the candidates as one transcript ("role: text" per turn), the way the pruner
    reads chat history; blocks are cut at sentence boundaries. Returns per-turn scores."""
    from agentmem.models.pruner import SentenceScores

    sentences, owners = [], []
    for candidate in candidates:
        for number, (a, b) in enumerate(candidate.spans):
            text = candidate.text[a:b]
            sentences.append(f"{candidate.role}: {text}" if number == 0 else text)
            owners.append(candidate.index)
    if not sentences:
        return {}
    [score] = pruner.score_batch([(query, sentences)])
    out = {}
    for candidate in candidates:
        rows = [i for i, owner in enumerate(owners) if owner == candidate.index]
        out[candidate.index] = SentenceScores(
            probabilities=[score.probabilities[i] for i in rows],
            kept_fraction_by_threshold=[score.kept_fraction_by_threshold[i] for i in rows],
            ranking_score=score.ranking_score)
    return out


def _lexical_keep(text: str, spans: list[tuple[int, int]], query: str) -> list[float]:
    """Per sentence, the share of the query's terms it contains: the cheap stand-in for the
    pruner past its per-call budget (0: shares none, dropped)."""
    wanted = set(terms(query))
    if not wanted:
        return [0.0] * len(spans)
    return [len(wanted.intersection(terms(text[a:b]))) / len(wanted) for a, b in spans]


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
