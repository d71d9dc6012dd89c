"""Context poisoning: a claim the assistant (or an untrusted source) keeps repeating, that no
authority ever supported.

An unsupported claim made once is a hallucination; made again and again, it feeds on itself,
because each repetition in the context makes the next one likelier. Claim sentences are
grouped across turns by meaning (cached MiniLM vectors) or by a related meaning plus a shared
specific word (a name, a number, a term few turns use): rephrasings of one claim share their
details more reliably than their wording. A group is poison when it spans ``min_occurrences``
turns, some detail recurs in it that no authority ever said (the system prompt, a trusted
tool, or the user *before* the claim first appeared; a user echoing the assistant confirms
nothing), and no authority statement says the same thing (cosine below
``support_similarity``). Structured tool output rarely reads like the sentence that cites it,
which is why support is looked for in words as well as in vectors.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from agentmem.quarantine.statements import Statements, canonical_claim


@dataclass
class PoisonFinding:
    claim: str  # canonical text of the first occurrence
    rows: list[int]  # statement rows of every occurrence
    positions: list[int]
    score: float  # mean similarity of the occurrences to the first one
    reason: str
    support: float = 0.0  # the best support found (below the bar)
    members: list[str] = field(default_factory=list)


def detect_poison(statements: Statements, settings, *, confirmed: np.ndarray | None = None,
                  since_position: int = 0) -> list[PoisonFinding]:
    """Unsupported recurring claims among the turns from ``since_position`` on (older records
    persist on their own). ``confirmed``: vectors of claims a human confirmed."""
    claimant = np.asarray([t in {"assistant", "untrusted"} or bool(r)
                           for t, r in zip(statements.trust, statements.relayed)], dtype=bool)
    claim_rows = [i for i in np.flatnonzero(claimant & (statements.position >= since_position)).tolist()
                  if len(statements.words[i]) >= 3 and not statements.texts[i].rstrip().endswith("?")]
    if len(claim_rows) < 2:
        return []
    authority = [i for i in range(statements.size) if not claimant[i]
                 and statements.trust[i] in {"system", "user", "tool"}
                 and not statements.texts[i].rstrip().endswith("?")]
    words = {row: set(statements.words[row]) for row in claim_rows}
    findings = []
    for group in _group(statements, claim_rows, words, settings):
        positions = sorted({int(statements.position[r]) for r in group})
        if len(positions) < settings.min_occurrences:
            continue
        vectors = statements.vectors[group]
        if confirmed is not None and len(confirmed) and \
                float((confirmed @ vectors.T).max()) >= settings.recurrence_similarity:
            continue
        usable = [i for i in authority if statements.trust[i] != "user"
                  or int(statements.position[i]) < positions[0]]
        vocabulary = set().union(*(statements.words[i] for i in usable)) if usable else set()
        anchors = _recurring(group, words, statements) - vocabulary
        if not anchors:
            continue  # every recurring detail is in an authority's own words: supported
        support = float((statements.vectors[usable] @ vectors.T).max()) if usable else 0.0
        if support >= settings.support_similarity:
            continue
        first = group[0]
        findings.append(PoisonFinding(
            claim=canonical_claim(statements.texts[first]), rows=group, positions=positions,
            score=round(float((vectors @ statements.vectors[first]).mean()), 4), support=support,
            members=[statements.texts[r] for r in group],
            reason=(f"claim made {len(positions)} times by {_who(statements, group)}; its "
                    f"recurring details ({', '.join(sorted(anchors)[:5])}) come from no user, "
                    f"system prompt or trusted tool")))
    return findings


def _group(statements: Statements, rows: list[int], words: dict[int, set[str]], settings
           ) -> list[list[int]]:
    """Connected claims, in conversation order: same meaning (cosine above the recurrence bar),
    or related meaning (above half of it) and a shared specific word (a name, a number, a
    rare term: used in few turns of the session)."""
    turns_with: dict[str, set[int]] = {}
    for row in range(statements.size):  # document frequency over the whole session
        for word in statements.words[row]:
            turns_with.setdefault(word, set()).add(int(statements.position[row]))
    total_turns = len({int(p) for p in statements.position})
    rare = {w for w, seen in turns_with.items() if len(seen) <= max(4, total_turns // 3)}
    similarity = statements.vectors[rows] @ statements.vectors[rows].T
    positions = statements.position[rows]
    bar = settings.recurrence_similarity
    candidate = np.triu(similarity >= bar / 2, k=1) & (positions[:, None] != positions[None, :])
    parent = list(range(len(rows)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    specific = [words[row] & rare for row in rows]
    for i, j in zip(*np.nonzero(candidate)):
        if similarity[i, j] >= bar or specific[i] & specific[j]:
            parent[root(int(j))] = root(int(i))
    groups: dict[int, list[int]] = {}
    for i, row in enumerate(rows):
        groups.setdefault(root(i), []).append(row)
    return list(groups.values())


def _recurring(group: list[int], words: dict[int, set[str]], statements: Statements) -> set[str]:
    """Words that occur in at least two different turns of the group."""
    seen: dict[str, set[int]] = {}
    for row in group:
        for word in words[row]:
            seen.setdefault(word, set()).add(int(statements.position[row]))
    return {w for w, positions in seen.items() if len(positions) >= 2}


def _who(statements: Statements, group: list[int]) -> str:
    sources = sorted({statements.sources[r] for r in group})
    return " and ".join(sources)
