"""Recurrence: clauses grouped across turns by meaning and shared specific words, and
the chains of members that repeat one claim.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agentmem.models.runtime import pause_point
from agentmem.quarantine.poison.clauses import Clause, _is_value
from agentmem.quarantine.poison.cosines import close_pairs
from agentmem.quarantine.poison.details import GENERIC, detail_terms
from agentmem.quarantine.poison.kept import _extended, _keep
from agentmem.quarantine.statements import Statements


def _words(clauses: list[Clause]) -> set[str]:
    """Every detail of the clauses, once: a word is judged once, not once per clause using it
    (a 2,000-clause window holds ~13,000 details of ~3,000 words)."""
    out: set[str] = set()
    for clause in clauses:
        out |= clause.details
    return out


def _same_stems(clauses: list[Clause]) -> list[Clause]:
    """The clauses with each word replaced by the shortest word of the session that begins
    it (at least 4 letters): what support matching does by prefix, grouping does by name."""
    words = sorted((w for w in _words(clauses) if not _is_value(w)), key=len)
    known: set[str] = set()
    canon: dict[str, str] = {}
    for word in words:
        for k in range(4, len(word)):
            if word[:k] in known:
                canon[word] = canon.get(word[:k], word[:k])
                break
        known.add(word)
    if not canon:
        return clauses
    renamed = frozenset(canon)  # a set: ``isdisjoint`` of a dict walks all of it, every clause
    out = []
    for c in clauses:
        if c.details.isdisjoint(renamed):
            out.append(c)
            continue
        out.append(Clause(c.row, c.position, c.text, frozenset(canon.get(w, w) for w in c.details),
                          frozenset(canon.get(w, w) for w in c.entities)))
    return out


def _repeated_details(clauses: list[Clause], flagged: list[int]) -> set[str]:
    """The details two or more of a chain's clauses give."""
    seen: set[str] = set()
    twice: set[str] = set()
    for k in flagged:
        twice |= seen & clauses[k].details
        seen |= clauses[k].details
    return twice


def recurring(members: list[int], clauses: list[Clause], gaps: dict[int, frozenset[str]]) -> set[str]:
    """Unsupported details that occur in at least two different turns of the group."""
    seen: dict[str, set[int]] = {}
    for k in members:
        for word in gaps[k]:
            seen.setdefault(word, set()).add(clauses[k].position)
    return {w for w, positions in seen.items() if len(positions) >= 2}


# A paraphrased claim spreads its details ("one free 23 kg bag" ... "the free suitcase
# allowance"), so a short chain needs no detail common to most of its turns; past this many
# turns, one that has none is links of links across a chatty conversation, not one claim.
LOOSE_CHAIN_TURNS = 6
LINK_SIMILARITY = 0.35  # two statements of one unsupported detail: related meaning, at least
CLOSE_PARAPHRASE = 0.6  # ... with no unsupported word in common, only this close
PARAPHRASE_SIMILARITY = 0.5  # ... or the same meaning in other words


def claim_chains(members: list[int], gaps: dict[int, frozenset[str]], anchors: set[str],
                 clauses: list[Clause], similarity: np.ndarray, settings,
                 close: np.ndarray | None = None) -> list[list[int]]:
    """The members that repeat one claim: linked when they share an unsupported detail and a
    related meaning, or say the same thing in other words. A candidate group chains loosely
    (a shared name, a shared number); a claim must hold together pairwise. ``members``
    ascending; ``close``: the pairs of ``clauses`` at or above the recurrence bar
    (``close_pairs``), when the caller has them."""
    m = len(members)
    if m < 2:
        return []
    # Pairs as lists, not m x m matrices (a chatty window's group holds ~2,000 clauses): the
    # pairs sharing an anchor, and the close ones that may be paraphrases, checked each. The
    # similarities are read in place and the close pairs are the grouping's own: a copy of
    # the group's block and a scan of it cost ~50-100 ms a detection at 2,000 clauses.
    index = np.asarray(members)
    positions = np.asarray([clauses[k].position for k in members])
    para = max(PARAPHRASE_SIMILARITY, settings.recurrence_similarity)
    by_anchor, _ = _shared_counts([gaps[k] & anchors for k in members])
    by_anchor = by_anchor[similarity[index[by_anchor[:, 0]], index[by_anchor[:, 1]]] >= LINK_SIMILARITY]
    if close is None:
        close = close_pairs(similarity, para)
    close = pairs_among(close, index, len(similarity))
    left, right = close[:, 0], close[:, 1]
    between = similarity[index[left], index[right]]
    close, left, right, between = (a[between >= para] for a in (close, left, right, between))
    amounts = [{d for d in clauses[k].entities if d[:1] == "#"} for k in members]
    gapped = [gaps[k] for k in members]
    # Per close pair (these only: a common unsupported word is in thousands), read in Python
    # only where it decides: amounts where both give some, a shared gap word below the
    # paraphrase bar (~20,000 pairs at 2,000 clauses, ~10 ms read in full).
    has_amounts = np.asarray([bool(a) for a in amounts], dtype=bool)
    same_values = np.ones(len(close), dtype=bool)
    both = np.flatnonzero(has_amounts[left] & has_amounts[right])
    same_values[both] = [not amounts[i].isdisjoint(amounts[j]) for i, j in close[both].tolist()]
    loose = np.flatnonzero(same_values & (between < CLOSE_PARAPHRASE))
    shares_gap = np.zeros(len(close), dtype=bool)
    shares_gap[loose] = [not gapped[i].isdisjoint(gapped[j]) for i, j in close[loose].tolist()]
    paraphrase = close[same_values & (shares_gap | (between >= CLOSE_PARAPHRASE))]
    pairs = np.concatenate((by_anchor, paraphrase))
    pairs = pairs[positions[pairs[:, 0]] != positions[pairs[:, 1]]]
    return [[members[i] for i in component] for component in _components(m, pairs)
            if len(component) > 1]


def pairs_among(pairs: np.ndarray, members: np.ndarray, size: int) -> np.ndarray:
    """The pairs between two of ``members`` (ascending indices out of ``size``), renumbered
    by their place among the members; ascending members keep each pair's order."""
    local = np.full(size, -1)
    local[members] = np.arange(len(members))
    inside = local[pairs]
    return inside[(inside[:, 0] >= 0) & (inside[:, 1] >= 0)]


def _other_amounts(clause: Clause, gap: frozenset[str], amounts: set[str]) -> bool:
    """Whether the clause gives amounts, all of them supported and none the claim's."""
    own = {d for d in clause.entities if d[:1] == "#"}
    return bool(own) and not own & gap and not own & amounts


@dataclass(frozen=True, eq=False)  # kept by identity: its arrays have no truth value
class _CountEntry:
    texts: list[str]  # the rows counted (the input) ...
    positions: np.ndarray  # ... and their positions, non-decreasing
    counts: dict[str, int]  # word -> turns that use it
    last_words: frozenset[str]  # the words of the last position (a later row may share it)


_counts_kept: list[_CountEntry] = []


def _turn_frequency(statements: Statements) -> dict[str, int]:
    """Per word, how many turns use it (read-only: shared with later replies). The whole
    session's: counted once and extended by the rows each reply adds (see ``_unit_index``)."""
    texts, positions = statements.texts, statements.position
    if not bool(np.all(positions[1:] >= positions[:-1])):  # rows out of turn order: count afresh
        seen: dict[str, set[int]] = {}
        for row in range(statements.size):
            if row % 64 == 0:
                pause_point()
            for word in detail_terms(texts[row]):
                seen.setdefault(word, set()).add(int(positions[row]))
        return {w: len(p) for w, p in seen.items()}
    base = _extended(_counts_kept, lambda e: (e.texts, e.positions), texts, positions)
    counts = dict(base.counts) if base is not None else {}
    start = len(base.texts) if base is not None else 0
    last = int(positions[start - 1]) if start else None
    seen_last = set(base.last_words) if base is not None else set()  # words the turn counted
    for row in range(start, statements.size):
        if row % 64 == 0:
            pause_point()
        position = int(positions[row])
        if position != last:
            last, seen_last = position, set()
        for word in detail_terms(texts[row]):
            if word not in seen_last:
                seen_last.add(word)
                counts[word] = counts.get(word, 0) + 1
    _keep(_counts_kept, _CountEntry(list(texts), positions.copy(), counts, frozenset(seen_last)), base)
    return counts


SPECIFIC_TURNS = (4, 10)  # a specific word: in at most max(4, turns / 10) turns


def _specific(word: str, frequency: dict[str, int], total_turns: int) -> bool:
    """A name, a number, a term few turns use (a claim's details, not the session's topic)."""
    low, share = SPECIFIC_TURNS
    return word not in GENERIC and (any(ch.isdigit() for ch in word) or
                                     frequency.get(word, 0) <= max(low, total_turns // share))


def _components(n: int, pairs: np.ndarray) -> list[list[int]]:
    """Connected components of n nodes under the given (i, j) pairs, in node order.

    Vectorised (each node takes the least label of its neighbours, then of its label, until
    nothing changes): a chatty session's candidate group links ~2,000 clauses by hundreds of
    thousands of pairs, which a union-find loop in Python walked for ~20 ms a reply."""
    labels = np.arange(n)
    if len(pairs):
        left, right = pairs[:, 0], pairs[:, 1]
        while True:
            pause_point()
            least = np.minimum(labels[left], labels[right])
            merged = labels.copy()
            np.minimum.at(merged, left, least)
            np.minimum.at(merged, right, least)
            merged = merged[merged]  # a label is a node of the same component: jump through it
            if np.array_equal(merged, labels):
                break
            labels = merged
    order = np.argsort(labels, kind="stable")  # by component (its least node), nodes ascending
    cuts = np.flatnonzero(np.diff(labels[order])) + 1
    return [part.tolist() for part in np.split(order, cuts)] if n else []


def group_clauses(clauses: list[Clause], similarity: np.ndarray, settings,
                  frequency: dict[str, int], total_turns: int,
                  same_meaning: np.ndarray | None = None) -> list[list[int]]:
    """Candidate groups: connected clauses of different turns with the same meaning (cosine
    above the recurrence bar), a related meaning (above half of it) and a shared specific
    word, or two shared specific words. ``same_meaning``: the first kind of pairs
    (``close_pairs`` at the recurrence bar), when the caller has them."""
    n = len(clauses)
    if not n:
        return []
    positions = np.asarray([c.position for c in clauses])
    bar = settings.recurrence_similarity
    specific = frozenset(w for w in _words(clauses) if _specific(w, frequency, total_turns))
    # The pairs as lists, not n x n matrices: a chatty session's window has ~2,000 clauses,
    # and counting shared words into a matrix cost more than the rest of the grouping.
    if same_meaning is None:
        same_meaning = close_pairs(similarity, bar)
    word_pairs, shared = _shared_counts([c.details & specific for c in clauses])
    related = (shared >= 2) | (similarity[word_pairs[:, 0], word_pairs[:, 1]] >= bar / 2)
    pairs = np.concatenate((same_meaning, word_pairs[related]))
    pairs = pairs[positions[pairs[:, 0]] != positions[pairs[:, 1]]]
    return _components(n, pairs)


def _shared_counts(sets: list[set[str]] | list[frozenset[str]]) -> tuple[np.ndarray, np.ndarray]:
    """The pairs (i, j), i < j, of the sets that share an element, and how many they share.
    From who holds each element: the sets are sparse, so a few thousand pairs come from a
    few hundred elements, where an incidence-matrix product cost ~100 ms for 2,000 sets. When
    the elements' pairs would outnumber an n x n table's cells (many sets holding the same
    elements), they are counted in the table instead, so memory stays within n x n."""
    n = len(sets)
    holders: dict[str, list[int]] = {}
    for i, held in enumerate(sets):
        for name in held:
            holders.setdefault(name, []).append(i)  # ascending
    sizes = np.asarray([len(h) for h in holders.values()], dtype=np.int64)
    total = int((sizes * (sizes - 1) // 2).sum())
    if not total:
        return np.zeros((0, 2), dtype=np.int64), np.zeros(0, dtype=np.int64)
    if total > n * n // 2:
        table = np.zeros((n, n), dtype=np.int32)
        for members in holders.values():
            if len(members) > 1:
                index = np.asarray(members)
                table[np.ix_(index, index)] += 1
        pairs = np.argwhere(np.triu(table, k=1) > 0)
        return pairs.astype(np.int64), table[pairs[:, 0], pairs[:, 1]].astype(np.int64)
    item = np.fromiter((i for held in holders.values() for i in held), dtype=np.int64,
                       count=int(sizes.sum()))
    end = np.repeat(np.cumsum(sizes), sizes)  # each entry pairs with the later holders of its element
    later = end - np.arange(len(item)) - 1
    first = np.repeat(np.arange(len(item)), later)
    second = np.arange(total) - np.repeat(np.cumsum(later) - later, later) + first + 1
    unique, counts = np.unique(item[first] * n + item[second], return_counts=True)
    return np.stack((unique // n, unique % n), axis=1), counts
