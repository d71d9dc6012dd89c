"""Which sentences of a scored passage are kept: the calibrated threshold, and a floor.

A threshold alone is calibrated on text like the training data. On text unlike it (ten
Wikipedia paragraphs of a multi-hop question, chat, tool output) the model's probabilities
shrink, and the same threshold keeps almost nothing: the shipped checkpoint kept 8% of
HotpotQA's sentences at F1 0.30, below plain embeddings. The floor makes the rule
budget-aware: whatever the threshold says, a passage keeps at least ``floor`` of its tokens,
its best-scored sentences first, so a confident model still prunes hard where its
probabilities are high while an unsure one never cuts a passage to a sliver. The stage, the
bench and ``/v1/highlight`` all decide through this one rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

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

    def decide(self, scores: SentenceScores, eligible: Sequence[int] | None = None) -> list[bool]:
        """Keep decisions for one passage. ``eligible``: the sentences the floor may add and
        whose tokens it counts (e.g. all but a title the caller drops anyway); default all."""
        keep = scores.keep(self.threshold, self.rule)
        sizes = [int(tokens.size) for tokens in scores.kept_fraction_by_threshold]
        return apply_floor(keep, scores.probabilities, sizes, self.floor, eligible)


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
