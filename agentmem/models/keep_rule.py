"""Which sentences of a scored passage are kept: the calibrated threshold, and a floor.

A threshold alone is calibrated on text like the training data. On text unlike it (ten
Wikipedia paragraphs of a multi-hop question, chat, tool output) the model's probabilities
shrink, and the same threshold keeps almost nothing: the shipped checkpoint kept 8% of
HotpotQA's sentences at F1 0.30, below plain embeddings. The floor makes the rule
budget-aware: whatever the threshold says, a passage keeps at least ``floor`` of its tokens,
its best-scored sentences first, so a confident model still prunes hard where its
probabilities are high while an unsure one never cuts a passage to a sliver. The stage, the
bench and ``/v1/highlight`` all decide through this one rule.

Which sentences the floor adds: where the caller can embed them, the model's ranking fused with
the query-sentence cosine (reciprocal-rank fusion, the usual k = 60). The floor acts exactly
where the model is unsure, and there its ranking is weakest: on a multi-hop dev file (ten
paragraphs) the fused order took F1 from 0.500 to 0.570 at the same share kept, and on SQuAD
dev from 0.844 to 0.848. Embedding happens only when the floor has sentences to add.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

# How a sentence's token probabilities become one decision (see ``SentenceScores.keep``).
SentenceRule = Literal["paper", "hf_code", "mean_prob"]

if TYPE_CHECKING:
    from agentmem.models.pruner import SentenceScores


@dataclass(frozen=True)
class KeepRule:
    """The threshold rule of a checkpoint, plus the share of tokens it never goes below."""

    threshold: float
    rule: SentenceRule
    floor: float = 0.0  # share of the passage's tokens always kept, best sentences first

    def decide(self, scores: SentenceScores, eligible: Sequence[int] | None = None,
               similarities: Sequence[float] | None = None) -> list[bool]:
        """Keep decisions for one passage. ``eligible``: the sentences the floor may add and
        whose tokens it counts (e.g. all but a title the caller drops anyway); default all.
        ``similarities``: each sentence's cosine to the query, fused into the floor's order."""
        keep = scores.keep(self.threshold, self.rule)
        sizes = [int(tokens.size) for tokens in scores.kept_fraction_by_threshold]
        ranking = list(scores.probabilities)
        if similarities is not None:  # ranked among the sentences the floor may add
            indices = list(range(len(ranking)) if eligible is None else eligible)
            fused = fused_ranking([ranking[i] for i in indices], [similarities[i] for i in indices])
            for index, value in zip(indices, fused):
                ranking[index] = value
        return apply_floor(keep, ranking, sizes, self.floor, eligible)

    def short_of_floor(self, scores: SentenceScores, eligible: Sequence[int] | None = None) -> bool:
        """Whether the threshold keeps less than the floor: the floor will add sentences, so
        similarities are worth computing for this passage."""
        if self.floor <= 0:
            return False
        keep = scores.keep(self.threshold, self.rule)
        sizes = [int(tokens.size) for tokens in scores.kept_fraction_by_threshold]
        indices = range(len(keep)) if eligible is None else eligible
        total = sum(sizes[i] for i in indices)
        return sum(sizes[i] for i in indices if keep[i]) < self.floor * total


RRF_K = 60  # reciprocal-rank fusion's usual constant: not tuned


def fused_ranking(probabilities: Sequence[float], similarities: Sequence[float]) -> list[float]:
    """One score per sentence from two rankings: the sum of 1 / (RRF_K + rank) in each."""
    def ranks(values: Sequence[float]) -> list[int]:
        order = sorted(range(len(values)), key=lambda i: -values[i])
        out = [0] * len(values)
        for rank, index in enumerate(order):
            out[index] = rank
        return out

    by_model, by_query = ranks(probabilities), ranks(similarities)
    return [1 / (RRF_K + a) + 1 / (RRF_K + b) for a, b in zip(by_model, by_query)]


def query_similarities(encode: Callable[[list[str]], Any], question: str,
                       sentences: Sequence[str]) -> list[float]:
    """Cosine of each sentence to the question, with an embedder's ``encode`` (unit vectors)."""
    if not sentences:
        return []
    vectors = encode([question, *sentences])
    return [float(v) for v in vectors[1:] @ vectors[0]]


def apply_floor(keep: Sequence[bool], ranking: Sequence[float], sizes: Sequence[int],
                floor: float, eligible: Sequence[int] | None = None) -> list[bool]:
    """``keep`` with the best-ranked eligible sentences added until the kept eligible tokens
    reach ``floor`` of all eligible tokens (the sentence that crosses the line is kept whole)."""
    out = list(keep)
    if floor <= 0:
        return out
    indices = list(range(len(out))) if eligible is None else list(eligible)
    total = sum(sizes[i] for i in indices)
    kept = sum(sizes[i] for i in indices if out[i])
    need = floor * total
    for index in sorted(indices, key=lambda i: -ranking[i]):
        if kept >= need:
            break
        if not out[index]:
            out[index] = True
            kept += sizes[index]
    return out
