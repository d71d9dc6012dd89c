"""Which sentences of a scored passage are kept: the calibrated threshold, and a floor.

A threshold alone is calibrated on text like the training data. On text unlike it (ten
Wikipedia paragraphs of a multi-hop question, chat, tool output) the model's probabilities
shrink, and the same threshold keeps almost nothing: the shipped checkpoint kept 8% of
HotpotQA's sentences at F1 0.30, below plain embeddings. The floor makes the rule
budget-aware: whatever the threshold says, a passage keeps at least ``floor`` of its tokens,
its best-scored sentences first, so a confident model still prunes hard where its
probabilities are high while an unsure one never cuts a passage to a sliver. The floor asks
for at most ``floor_tokens`` tokens, however long the passage: a question's evidence is a few
sentences, and on ten paragraphs a share of the whole asked for four times the answer (SQuAD's
answer paragraph among nine others: F1 0.334 -> 0.610 with the cap). And the floor bridges
(``bridge``): a multi-hop question's second hop shares little with the question but much with
the first hop, so the floor ranks a sentence by its query cosine plus ``bridge`` times its best
cosine to a sentence already kept (multi-hop F1 0.690 -> 0.705, 16 distractor groups 0.662 ->
0.686). The stage, the bench and ``/v1/highlight`` all decide through this one rule.

The query's cosine, where the caller can embed the sentences (MiniLM), plays two parts.
A sentence the threshold keeps must also be loosely related to the query (``min_similarity``):
on the many paragraphs of a multi-hop question the model confidently keeps sentences of the
wrong paragraph (precision 0.66), and these have almost no cosine to the question. And the floor adds
sentences in the query's cosine order, not the model's: the floor acts where the model is
unsure, which is where its own ranking is weakest (on both dev domains the cosine order beat
the model's and a reciprocal-rank fusion of the two). Calibrated on the SQuAD and multi-hop dev
files (``agentmem train calibrate``): multi-hop F1 0.570 -> 0.740, SQuAD 0.848 -> 0.853. Where no
similarities are given (no embedder) the rule is the model's alone, as before.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from agentmem.names import name_links

# How a sentence's token probabilities become one decision (see ``SentenceScores.keep``).
SentenceRule = Literal["paper", "hf_code", "mean_prob"]

if TYPE_CHECKING:
    from agentmem.models.pruner import SentenceScores


NAME_ANCHORS = 2  # the best fused sentences whose names ``name_bridge`` follows

# Where a checkpoint's config.json keeps each field of its calibrated rule: read by
# ``KeepRule.from_config``, written by ``KeepRule.config_entries`` (calibration, training).
CONFIG_KEYS = {
    "threshold": "agentmem_threshold", "rule": "agentmem_sentence_rule",
    "floor": "agentmem_keep_floor", "min_similarity": "agentmem_min_similarity",
    "floor_tokens": "agentmem_keep_floor_tokens", "bridge": "agentmem_keep_bridge",
    "fuse_cosine": "agentmem_fuse_cosine", "fuse_lexical": "agentmem_fuse_lexical",
    "margin": "agentmem_keep_margin", "name_bridge": "agentmem_keep_name_bridge",
}


@dataclass(frozen=True)
class KeepRule:
    """The threshold rule of a checkpoint, plus the share of tokens it never goes below and
    the least query cosine a kept sentence must have (where similarities are given)."""

    threshold: float
    rule: SentenceRule
    floor: float = 0.0  # share of the passage's tokens always kept, best sentences first
    min_similarity: float | None = None  # a sentence the threshold keeps needs this cosine
    floor_tokens: int | None = None  # most tokens the floor asks for (None: no cap)
    bridge: float = 0.0  # floor order: + bridge x a sentence's best cosine to an anchor
    fuse_cosine: float = 0.0  # fused score: + this x the sentence's query cosine
    fuse_lexical: float = 0.0  # fused score: + this x its BM25 relative to the passage's best
    margin: float | None = None  # fused: also keep what is within this of the passage's best
    name_bridge: float = 0.0  # fused: + this for a sentence defining a name the best two mention

    @classmethod
    def from_config(cls, config: Any) -> KeepRule:
        """A checkpoint's calibrated rule from its config (``CONFIG_KEYS``); a key it lacks
        means the Provence default: the ``paper`` rule at 0.1, nothing else."""
        def value(field: str) -> Any:
            return getattr(config, CONFIG_KEYS[field], None)

        def number(field: str, default: float = 0.0) -> float:
            found = value(field)
            return default if found is None else float(found)

        least, most, margin = value("min_similarity"), value("floor_tokens"), value("margin")
        return cls(number("threshold", 0.1), value("rule") or "paper", number("floor"),
                   None if least is None else float(least), None if most is None else int(most),
                   number("bridge"), number("fuse_cosine"), number("fuse_lexical"),
                   None if margin is None else float(margin), number("name_bridge"))

    @staticmethod
    def config_entries(settings: dict[str, Any]) -> dict[str, Any]:
        """The config.json entries of a rule's settings (``asdict`` of a ``KeepRule``, or a
        calibration result holding them)."""
        return {key: settings[field] for field, key in CONFIG_KEYS.items()}

    @property
    def fused(self) -> bool:
        """Whether sentences are judged by the fused score (model + cosine + BM25) rather than
        the model's probabilities alone (see ``fused_keep``)."""
        return bool(self.fuse_cosine or self.fuse_lexical or self.margin is not None)

    def decide(self, scores: SentenceScores, eligible: Sequence[int] | None = None,
               similarities: Sequence[float] | None = None,
               vectors: np.ndarray | None = None,
               lexical: Sequence[float] | None = None,
               texts: Sequence[str] | None = None, question: str | None = None) -> list[bool]:
        """Keep decisions for one passage. ``eligible``: the sentences the floor may add and
        whose tokens it counts (e.g. all but a title the caller drops anyway); default all.
        ``similarities``: each sentence's cosine to the query: it vetoes the threshold's
        unrelated keeps (``min_similarity``) and orders the floor's additions. ``vectors``:
        the sentences' unit vectors (row per sentence), for the floor's bridge term.
        ``lexical``: each sentence's BM25 to the query relative to the passage's best
        (``agentmem.lexical.relative_bm25``), for a fused rule. ``texts`` (the sentences) and
        ``question``: for a fused rule's ``name_bridge``."""
        indices = list(range(len(scores.probabilities)) if eligible is None else eligible)
        linked: set[int] = set()  # second hops a name leads to: not vetoed for their cosine
        if self.fused:
            keep, ranking, linked = self.fused_keep(scores, indices, similarities, lexical, texts,
                                                    question)
        else:
            keep = scores.keep(self.threshold, self.rule)
            ranking = list(scores.probabilities)
            if similarities is not None:
                for index in indices:
                    ranking[index] = similarities[index]
        sizes = [int(tokens.size) for tokens in scores.kept_fraction_by_threshold]
        if similarities is not None:
            for index in indices:
                if self.min_similarity is not None and similarities[index] < self.min_similarity \
                        and index not in linked:
                    keep[index] = False
            if self.bridge and vectors is not None and indices:
                add_bridge(ranking, keep, indices, vectors, self.bridge)
        return apply_floor(keep, ranking, sizes, self.floor, eligible, most=self.floor_tokens)

    def fused_keep(self, scores: SentenceScores, indices: Sequence[int],
                   similarities: Sequence[float] | None, lexical: Sequence[float] | None,
                   texts: Sequence[str] | None = None, question: str | None = None
                   ) -> tuple[list[bool], list[float], set[int]]:
        """The fused rule's keeps and floor order. Each signal misses what another catches:
        the model reads the passage jointly, the query cosine paraphrases, BM25 names and
        numbers; on the dev files the three together rank evidence better than any one
        (R-precision on ten HotpotQA paragraphs: model 0.37, cosine 0.42, BM25 0.46, a rank
        fusion 0.48). Fused score = the sentence's mean keep probability + ``fuse_cosine`` x
        its cosine + ``fuse_lexical`` x its relative BM25; kept above ``threshold``, or within
        ``margin`` of the passage's best (budget-aware: a passage the model is unsure of still
        keeps its best few sentences); the floor adds in fused order. With ``texts`` and
        ``question``, ``name_bridge`` first raises the second hop (``bridge_names``)."""
        fused = list(scores.probabilities)
        for index in indices:
            if similarities is not None:
                fused[index] += self.fuse_cosine * similarities[index]
            if lexical is not None:
                fused[index] += self.fuse_lexical * lexical[index]
        linked: set[int] = set()
        if self.name_bridge and texts is not None and question is not None and indices:
            linked = self.bridge_names(fused, indices, texts, question)
        keep = [False] * len(fused)
        best = max((fused[i] for i in indices), default=0.0)
        for index in indices:
            keep[index] = fused[index] > self.threshold or (
                self.margin is not None and fused[index] >= best - self.margin)
        return keep, fused, linked

    def bridge_names(self, fused: list[float], indices: Sequence[int], texts: Sequence[str],
                     question: str) -> set[int]:
        """A multi-hop question's second hop opens by defining the name its first hop
        mentions ("Cecelia Ahern (born 1981) is ...") and shares no word with the question.
        So a sentence that defines a name the passage's ``NAME_ANCHORS`` best fused sentences
        mention (and the question does not; ``agentmem.names.name_links``) gains
        ``name_bridge`` on its fused score (in place) and is judged by the threshold and
        margin like any other; the returned links are spared the ``min_similarity`` veto,
        whose premise (a keep unrelated to the question is a wrong paragraph's) is false for
        the one sentence that is related to the question only through the first hop."""
        anchors = sorted(indices, key=lambda i: -fused[i])[:NAME_ANCHORS]
        links = name_links(question, texts, anchors, indices)
        for index in links:
            fused[index] += self.name_bridge
        return set(links)

    def out_of_reach(self, similarities: Sequence[float]) -> bool:
        """Whether the model's read could not change what the rule keeps of a passage beyond
        the floor's few tokens: every sentence is under ``min_similarity``, which vetoes
        whatever the threshold or margin would keep, so only the floor keeps (in fused order,
        where the cosine and BM25 then rank). A name link would be spared the veto, but it
        follows a first hop, and a passage unrelated to the query has none. Then the caller
        need not read the passage (``Pruner.unread``): on the dev files every such passage
        (13 of 1,139 SQuAD records; none of the multi-hop ones) got the same decisions
        unread, and a recent tool output unrelated to the agent's next question is the
        common case, a pruner read of ~250 ms saved."""
        return self.min_similarity is not None and bool(similarities) and \
            max(similarities) < self.min_similarity

    def wants_similarities(self, scores: SentenceScores,
                           eligible: Sequence[int] | None = None) -> bool:
        """Whether the query's cosines would change this passage's decisions: the threshold
        keeps something they may veto, or keeps less than the floor, which they then order."""
        if self.fused:
            return True  # the cosine is part of every decision
        keep = scores.keep(self.threshold, self.rule)
        indices = range(len(keep)) if eligible is None else eligible
        if self.min_similarity is not None and any(keep[i] for i in indices):
            return True
        return self.short_of_floor(scores, eligible)

    def short_of_floor(self, scores: SentenceScores, eligible: Sequence[int] | None = None) -> bool:
        """Whether the threshold keeps less than the floor: the floor will add sentences."""
        if self.floor <= 0:
            return False
        keep = scores.keep(self.threshold, self.rule)
        sizes = [int(tokens.size) for tokens in scores.kept_fraction_by_threshold]
        indices = range(len(keep)) if eligible is None else eligible
        total = sum(sizes[i] for i in indices)
        return sum(sizes[i] for i in indices if keep[i]) < floor_need(total, self.floor,
                                                                       self.floor_tokens)


def add_bridge(ranking: list[float], keep: Sequence[bool], indices: Sequence[int],
               vectors: np.ndarray, weight: float) -> None:
    """The second hop of a multi-hop question rarely resembles the question, but it does
    resemble the first hop (they share the bridge entity). Anchors: the sentences the threshold
    keeps and the one closest to the query, which the floor takes first; every other sentence
    ranks by its query cosine plus ``weight`` times its best cosine to an anchor."""
    top = max(indices, key=lambda i: ranking[i])
    anchors = sorted({i for i in indices if keep[i]} | {top})
    best = (vectors[list(indices)] @ vectors[anchors].T).max(axis=1)
    for index, closest in zip(indices, best.tolist()):
        if index not in anchors:
            ranking[index] += weight * closest
    ranking[top] = math.inf


def query_similarities(encode: Callable[[list[str]], Any], question: str,
                       sentences: Sequence[str]) -> tuple[list[float], np.ndarray]:
    """Cosine of each sentence to the question, and the sentences' unit vectors, with an
    embedder's ``encode``."""
    if not sentences:
        return [], np.zeros((0, 0), np.float32)
    return split_query_row(encode([question, *sentences]))


def split_query_row(vectors: np.ndarray) -> tuple[list[float], np.ndarray]:
    """Unit vectors of a question (row 0) and its sentences as each sentence's cosine to the
    question and the sentences' rows: ``query_similarities`` once they are embedded."""
    return [float(v) for v in vectors[1:] @ vectors[0]], vectors[1:]


def floor_need(total: int, floor: float, most: int | None) -> float:
    """Tokens the floor asks for: ``floor`` of the passage, at most ``most``. A question's
    evidence is a few sentences however long the passage is: on ten paragraphs a share of the
    whole asks for far more than the answer (SQuAD's answer paragraph among nine others: 8%
    of the tokens is ~4 sentences against one gold sentence)."""
    need = floor * total
    return need if most is None else min(need, float(most))


def apply_floor(keep: Sequence[bool], ranking: Sequence[float], sizes: Sequence[int],
                floor: float, eligible: Sequence[int] | None = None, *,
                most: int | None = None) -> list[bool]:
    """``keep`` with the best-ranked eligible sentences added until the kept eligible tokens
    reach ``floor`` of all eligible tokens, or ``most`` tokens if that is less (the sentence
    that crosses the line is kept whole)."""
    out = list(keep)
    if floor <= 0:
        return out
    indices = list(range(len(out))) if eligible is None else list(eligible)
    total = sum(sizes[i] for i in indices)
    kept = sum(sizes[i] for i in indices if out[i])
    need = floor_need(total, floor, most)
    for index in sorted(indices, key=lambda i: -ranking[i]):
        if kept >= need:
            break
        if not out[index]:
            out[index] = True
            kept += sizes[index]
    return out
