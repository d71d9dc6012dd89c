"""Choosing sentences inside a token budget: the query-dependent core of history pruning.

Kept apart from the stage so the selection rules (turn context, spreading the budget over
turns, neighbours, what an earlier stage withheld) read on their own and can be tested
without a session.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from agentmem.text import MESSAGE_OVERHEAD_TOKENS


def excluded_rows(context, corpus) -> np.ndarray:
    """Corpus rows an earlier stage withheld (``excluded_spans``: position -> spans)."""
    excluded = context.channels.excluded_spans
    rows = [r for position, spans in excluded.items() if position < len(corpus.rows_of)
            for r in corpus.rows_of[position] if corpus.spans[r] in spans]
    return np.asarray(rows, dtype=np.int64)


def silence(score: np.ndarray, excluded: np.ndarray, rows: np.ndarray) -> None:
    """A sentence an earlier stage withheld says nothing to the query: it takes the least score
    among ``rows`` (the older turns' sentences), so the rules that lift a sentence by its
    neighbours' scores (turn, window, sitting) are not led by what the model will not see.
    The caller still shuts it out of the selection afterwards."""
    if len(excluded) and len(rows):
        score[excluded] = score[rows].min()


@dataclass(frozen=True)
class TurnRows:
    """The older turns' corpus rows, turn after turn: built once per call, read by each rule."""

    positions: np.ndarray  # per turn
    lengths: np.ndarray  # per turn: its sentence count (at least one)
    rows: np.ndarray  # all turns' rows, concatenated
    starts: np.ndarray  # per turn: where its rows begin in ``rows``

    @classmethod
    def of(cls, older: list) -> TurnRows:
        lengths = np.asarray([len(c.rows) for c in older])
        return cls(np.asarray([c.index for c in older]), lengths,
                   np.concatenate([c.rows for c in older]),
                   np.concatenate([[0], np.cumsum(lengths)[:-1]]))

    def best(self, score: np.ndarray) -> np.ndarray:
        """Per turn, its best sentence score."""
        return np.maximum.reduceat(score[self.rows], self.starts)

    def add(self, score: np.ndarray, per_turn: np.ndarray) -> None:
        """Every sentence of a turn gains that turn's value."""
        score[self.rows] += np.repeat(per_turn, self.lengths).astype(np.float32)


def lead_budget(turns: TurnRows, score: np.ndarray, tokens: np.ndarray, total: int,
                fraction: float, *, lead_turns: int, slope: float, pivot: float, least: float,
                most: float) -> int:
    """Tokens this query's budget gets for the older turns (``total`` tokens; ``tokens`` per
    corpus row). A question with one clear answer ("Who inspired Maria to start
    volunteering?") has a best turn far ahead of the rest; one whose evidence is spread ("What
    activities has Melanie done with her family?", "Would John be considered patriotic?") has
    many turns close together, and a fixed share cuts it where the first needed little. So the
    share moves with the best turn's lead over the ``lead_turns``-th best (scores as the rules
    left them): ``fraction x (1 + slope x (pivot - lead))``, kept within ``fraction x [least,
    most]``: a query-performance predictor in the IR sense, read off the scores the call
    computes anyway. However far it moves down, it holds the turns that lead (those of the
    ``lead_turns`` best above the midpoint of the lead), whole, up to ``most``: a clear answer
    in one large tool result is not cut for its clarity. ``slope`` 0, or fewer than twice
    ``lead_turns`` turns (the lead would be over the last ones): ``fraction`` of ``total``."""
    best = turns.best(score)
    shown = np.flatnonzero(np.isfinite(best))  # a turn withheld whole has no score
    if not slope or len(shown) < 2 * lead_turns:  # too few turns for a crowd to stand out of
        return int(fraction * total)
    top = shown[np.argpartition(-best[shown], lead_turns - 1)[:lead_turns]]
    high, low = float(best[top].max()), float(best[top].min())
    share = fraction * float(np.clip(1 + slope * (pivot - (high - low)), least, most))
    leading = top[best[top] >= (high + low) / 2]  # a few turns: only their tokens are summed
    held = sum(int(tokens[turns.rows[start:start + length]].sum()) + MESSAGE_OVERHEAD_TOKENS
               for start, length in zip(turns.starts[leading], turns.lengths[leading]))
    return int(min(max(share * total, held), min(fraction * most, 1.0) * total))


def add_exchange_similarity(turns: TurnRows, score: np.ndarray, turn_sums: np.ndarray,
                            query_vector: np.ndarray, weight: float, *,
                            withheld: tuple[np.ndarray, np.ndarray] | None = None) -> None:
    """A short reply ("Yes, last Tuesday") means something only with the turn it answers, and
    a turn can be about the query as a whole without any one sentence being so: each sentence
    gains ``weight`` times the cosine between the query and its exchange (the summed sentence
    vectors of its turn and the older turn before it; ``turn_sums`` per position).
    ``withheld``: the positions and vectors of sentences an earlier stage withheld, taken out
    of their turns' sums for this call (the sums are the session's, kept across calls)."""
    exchange = turn_sums[turns.positions]  # a copy: this call's changes stay in it
    if withheld is not None and len(withheld[0]):
        positions, vectors = withheld  # turns.positions ascend: the older turns in order
        at = np.minimum(np.searchsorted(turns.positions, positions), len(turns.positions) - 1)
        inside = turns.positions[at] == positions
        np.subtract.at(exchange, at[inside], vectors[inside])
    exchange[1:] += exchange[:-1].copy()
    similarity = exchange @ query_vector / np.maximum(np.linalg.norm(exchange, axis=1), 1e-6)
    turns.add(score, weight * similarity)


def add_sitting_context(turns: TurnRows, score: np.ndarray, dated: np.ndarray,
                        weight: float) -> None:
    """A question names a sitting of a long chat by something said anywhere in it ("the event at
    Forest Hills"), while the answer is another turn of it ("Yes, that one works."): each
    sentence gains ``weight`` times the best score of its sitting's older turns. ``dated``: per
    position of the corpus, whether that turn opens a sitting with a date stamp
    (``agentmem.episodes``); a conversation without stamps is left as it is."""
    if not dated.any():
        return
    sitting = np.cumsum(dated)[turns.positions]
    best = turns.best(score).astype(np.float64)
    top = np.full(int(sitting.max()) + 1, -np.inf)
    np.maximum.at(top, sitting, best)
    turns.add(score, weight * top[sitting])


def add_turn_context(turns: TurnRows, score: np.ndarray, weight: float, *, window: int = 1,
                     window_weight: float = 0.0, decay: float = 1.0) -> None:
    """A reply like "Wow, me too!" is only relevant through the turn before it: each sentence
    gains ``weight`` times the best score of the adjacent older turns. Then, with ``window`` >
    1, evidence spread over a stretch of the conversation stays together: each sentence gains
    ``window_weight`` times the best score of the turns 2..``window`` away, times ``decay`` per
    turn of distance past the first."""
    best = turns.best(score)
    around = np.maximum(np.concatenate([[0.0], best[:-1]]), np.concatenate([best[1:], [0.0]]))
    turns.add(score, weight * around)
    if window < 2 or not window_weight:
        return
    best = turns.best(score)
    around = np.zeros_like(best)
    for distance in range(2, window + 1):
        if distance >= len(best):
            break
        factor = decay ** (distance - 1)
        around[distance:] = np.maximum(around[distance:], factor * best[:-distance])
        around[:-distance] = np.maximum(around[:-distance], factor * best[distance:])
    turns.add(score, window_weight * around)


def fill(rows: np.ndarray, score: np.ndarray, corpus, budget: int, neighbours: int,
          spread: float) -> np.ndarray:
    """Greedy by score until the budget is full. A turn's first kept sentence pays the message
    overhead, and its other sentences rank ``spread`` lower, so the budget covers more turns
    before it deepens one. Each kept sentence brings ``neighbours`` on each side (same turn)."""
    if neighbours:
        return _fill_with_neighbours(rows, score, corpus, budget, neighbours, spread)
    positions = corpus.position[rows]
    adjusted = score[rows].copy()
    order = np.lexsort((-adjusted, positions))  # by turn, best sentence first
    first = np.ones(len(rows), dtype=bool)
    first[1:] = positions[order][1:] != positions[order][:-1]
    later_in_turn = np.ones(len(rows), dtype=bool)
    later_in_turn[order[first]] = False
    adjusted[later_in_turn] -= spread
    ranked = np.argsort(-adjusted, kind="stable")
    opens = np.zeros(len(rows), dtype=bool)  # the first ranked sentence of each turn pays overhead
    opens[np.unique(positions[ranked], return_index=True)[1]] = True
    cost = corpus.tokens[rows][ranked] + np.where(opens, MESSAGE_OVERHEAD_TOKENS, 0)
    fits = np.cumsum(cost) <= budget
    cut = int(fits.argmin()) if not fits.all() else len(ranked)
    chosen = list(ranked[:cut])
    used = int(cost[:cut].sum())
    opened = set(positions[ranked[:cut]].tolist())
    for item in ranked[cut:]:  # the tail: smaller sentences that still fit
        if budget - used < MESSAGE_OVERHEAD_TOKENS + 1:
            break
        extra = corpus.tokens[rows[item]] + (0 if positions[item] in opened else MESSAGE_OVERHEAD_TOKENS)
        if used + extra <= budget:
            chosen.append(item)
            used += int(extra)
            opened.add(positions[item])
    kept = np.zeros(len(corpus.spans), dtype=bool)
    kept[rows[chosen]] = True
    return kept


def _fill_with_neighbours(rows: np.ndarray, score: np.ndarray, corpus, budget: int,
                          neighbours: int, spread: float) -> np.ndarray:
    kept = np.zeros(len(corpus.spans), dtype=bool)
    opened: set[int] = set()
    used = 0
    tokens, positions = corpus.tokens, corpus.position
    heap = [(-float(score[row]), False, int(row)) for row in rows]
    heapq.heapify(heap)
    while heap and budget - used > MESSAGE_OVERHEAD_TOKENS:
        negative, demoted, row = heapq.heappop(heap)
        if kept[row]:
            continue
        turn_position = int(positions[row])
        if turn_position in opened and not demoted and spread:
            heapq.heappush(heap, (negative + spread, True, row))
            continue
        turn = corpus.rows_of[turn_position]
        group = [r for r in range(max(turn.start, row - neighbours), min(turn.stop, row + neighbours + 1))
                 if not kept[r]]
        cost = int(tokens[group].sum()) + (MESSAGE_OVERHEAD_TOKENS if turn_position not in opened else 0)
        if used + cost > budget:
            continue
        kept[group] = True
        opened.add(turn_position)
        used += cost
    return kept


def diversified(mode: str, rows: np.ndarray, score: np.ndarray, vectors: np.ndarray, *,
                redundancy_weight: float, pool: int, cluster_spread: float,
                cluster_similarity: float) -> np.ndarray:
    """Scores that ``fill`` ranks by, for the ``mmr`` and ``cluster`` selection modes (``greedy``
    ranks by relevance alone). Only the ``pool`` best candidates are reordered: diversity
    among sentences that would never be chosen costs time and changes nothing. Rows outside
    the pool keep their score, lowered by the largest handicap, so they stay behind it.

    ``mmr``: each pick's gain is its relevance minus ``redundancy_weight`` times its largest
    cosine to the sentences picked before it (maximal marginal relevance); the gain replaces
    the score. ``cluster``: the pool is clustered by embedding (``_leaders``) and every
    sentence but the best of its cluster ranks ``cluster_spread`` lower, so one of each topic
    comes before a second of any.
    """
    adjusted = score.copy()
    candidates = rows[np.isfinite(score[rows])]
    if len(candidates) < 2:
        return adjusted
    top = candidates[np.argsort(-score[candidates], kind="stable")[:pool]]
    rest = np.setdiff1d(candidates, top)
    if mode == "mmr":
        adjusted[top] = _mmr_gains(score[top], vectors[top], redundancy_weight)
        adjusted[rest] -= redundancy_weight
    elif mode == "cluster":
        adjusted[top] -= cluster_spread * ~_leaders(score[top], vectors[top], cluster_similarity)
        adjusted[rest] -= cluster_spread
    else:
        raise ValueError(f"unknown selection mode {mode!r}")
    return adjusted


def _mmr_gains(relevance: np.ndarray, vectors: np.ndarray, weight: float) -> np.ndarray:
    """Each candidate's gain at the moment MMR picks it (picks are in order of gain)."""
    gains = np.empty(len(relevance), dtype=np.float32)
    redundancy = np.zeros(len(relevance), dtype=np.float32)
    open_ = np.ones(len(relevance), dtype=bool)
    for _ in range(len(relevance)):
        gain = np.where(open_, relevance - weight * redundancy, -np.inf)
        best = int(np.argmax(gain))
        gains[best], open_[best] = gain[best], False
        redundancy = np.maximum(redundancy, vectors @ vectors[best])
    return gains


def _leaders(relevance: np.ndarray, vectors: np.ndarray, similarity: float) -> np.ndarray:
    """Leader clustering in order of relevance: a candidate within ``similarity`` (cosine) of
    a more relevant leader joins that leader's cluster, any other starts a cluster of its
    own. Per candidate, whether it leads (is the most relevant of its cluster). One pass, no
    cluster count to guess, deterministic; k-means was tried first and cost ~0.5 s a call."""
    order = np.argsort(-relevance, kind="stable")
    close = (vectors[order] @ vectors[order].T) >= similarity
    leads = np.zeros(len(order), dtype=bool)
    for i in range(len(order)):
        leads[i] = not close[i, :i][leads[:i]].any()
    out = np.zeros(len(order), dtype=bool)
    out[order[leads]] = True
    return out
