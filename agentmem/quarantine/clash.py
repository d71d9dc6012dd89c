"""Context clash: a statement that contradicts an earlier one from the same source.

Candidates come from the cached sentence vectors (same speaker or same tool, about the same
subject: cosine above ``clash_similarity``); only those pairs reach the NLI cross-encoder, so
a long session costs a handful of NLI pairs per new turn, not a quadratic sweep. Resolution is
the policy's: the newer statement wins by default (people change their minds, facts get
updated), or the more trusted source wins, or both stay with a short factual note.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agentmem.quarantine.statements import TRUST_RANK, Statements, is_claim


@dataclass
class Clash:
    newer: int  # statement rows
    older: int
    probability: float  # NLI contradiction probability of (older, newer)

    def loser(self, statements: Statements, resolution: str) -> int | None:
        if resolution == "keep_both":
            return None
        if resolution == "trust_wins":
            newer_rank = TRUST_RANK[statements.trust[self.newer]]
            older_rank = TRUST_RANK[statements.trust[self.older]]
            if newer_rank != older_rank:
                return self.newer if newer_rank < older_rank else self.older
        return self.older


def load_nli(settings):
    """The policy's NLI model: the shipped one, a local folder, or (allow_hub) a hub name."""
    from agentmem.models.nli import cached_nli

    if settings.allow_hub and settings.nli_model:
        return _hub_model(settings.nli_model)
    return cached_nli(settings.nli_model)


_HUB: dict[str, object] = {}


def _hub_model(name: str):
    from agentmem.models.nli import NLIModel

    if name not in _HUB:
        _HUB[name] = NLIModel.load(name, allow_hub=True)
    return _HUB[name]


def candidate_pairs(statements: Statements, new_rows: list[int], settings) -> list[tuple[int, int]]:
    """(older, newer) pairs worth an NLI check: same source, similar enough, most similar first."""
    pairs = []
    for row in new_rows:
        text = statements.texts[row]
        if text.rstrip().endswith("?") or (not is_claim(text) and len(text.split()) < 3):
            continue  # a question asserts nothing; neither does "OK, thanks"
        position, source = int(statements.position[row]), statements.sources[row]
        earlier = [i for i in range(statements.size)
                   if statements.position[i] < position and statements.sources[i] == source
                   and not statements.texts[i].rstrip().endswith("?")]
        if not earlier:
            continue
        cosine = statements.vectors[earlier] @ statements.vectors[row]
        ranked = np.argsort(-cosine)[: settings.clash_candidates]
        pairs += [(earlier[i], row) for i in ranked if cosine[i] >= settings.clash_similarity]
    return pairs


def find_clashes(statements: Statements, new_rows: list[int], nli, settings) -> list[Clash]:
    """The strongest contradiction per new statement, if it clears the threshold."""
    pairs = candidate_pairs(statements, new_rows, settings)
    if not pairs:
        return []
    probabilities = nli.contradiction([(statements.texts[a], statements.texts[b]) for a, b in pairs])
    best: dict[int, Clash] = {}
    for (older, newer), probability in zip(pairs, probabilities):
        if probability >= settings.contradiction_threshold and (
                newer not in best or probability > best[newer].probability):
            best[newer] = Clash(newer, older, float(probability))
    return sorted(best.values(), key=lambda c: c.newer)
