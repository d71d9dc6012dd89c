"""``detect_poison``: the window's claim clauses, their support, groups and chains, and
one finding per unsupported recurring claim.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentmem.episodes import opens_with_date
from agentmem.models.runtime import pause_point
from agentmem.quarantine.poison.clauses import Clause, _is_value, clauses_of, is_self_description
from agentmem.quarantine.poison.cosines import clause_cosines
from agentmem.quarantine.poison.details import detail_terms
from agentmem.quarantine.poison.recurrence import (
    LOOSE_CHAIN_TURNS,
    _other_amounts,
    _repeated_details,
    _same_stems,
    _specific,
    _turn_frequency,
    claim_chains,
    group_clauses,
    pairs_among,
    recurring,
)
from agentmem.quarantine.poison.scope import prompt_scope, speaks_of
from agentmem.quarantine.poison.support import (
    UNITS_EXAMINED,
    _support,
    _Units,
    authority_units,
    derived,
    unsupported_details,
)
from agentmem.quarantine.poison.vectors import Encoder, _own_vectors, _vectors_for, uncached
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
MIN_BARE_TURNS = 1  # turns where the claim is made without weak support, at least
MIN_VOICED_TURNS = 2  # turns where the assistant (or relayed text) makes the claim, at least
SAME_CLAIM_SIMILARITY = 0.9  # ... unless every occurrence is the same statement (least cosine)


@dataclass(frozen=True)
class ClaimScan:
    """The window's claim clauses, read once per detection (``scan_claims``)."""

    since_position: int  # the window's first position
    clauses: list[Clause]  # the claim clauses of the window
    claimant: np.ndarray  # per row: a claim's source (assistant, untrusted, relayed text)
    framed: np.ndarray  # per row: a JSON answer's frame (keys, URL pattern)
    peers: bool  # no tool and no system prompt: people talking
    # Under a prompt with facts and no tool: the replies that speak of those facts or of the
    # business's terms; a claim is judged only when most of its turns are among them (None:
    # every claim is).
    answerable: frozenset[int] | None = None


def scan_claims(statements: Statements, since_position: int, *,
                open_domain: bool = False) -> ClaimScan:
    """The claim clauses of the turns from ``since_position`` on, and who may make claims.
    ``open_domain``: judge a general assistant's statements too (``_general_assistant``)."""
    claimant = np.asarray([t in {"assistant", "untrusted"} or bool(r)
                           for t, r in zip(statements.trust, statements.relayed)], dtype=bool)
    framed = claimant & statements.frame if len(statements.frame) else np.zeros_like(claimant)
    claimant &= ~framed  # a JSON answer's keys and URL pattern recur by nature: never claims
    # Questions count: "How about 'The Tower Barcelona Didn't Want'?" repeats a claim too.
    claim_rows = np.flatnonzero(claimant & (statements.position >= since_position)).tolist()
    clauses = clauses_of(statements, claim_rows)
    # With no tool in the conversation nothing but the speaker can vouch for the speaker's own
    # life ("my kids love the beach"): a self-description is not a claim about the world.
    # Under a system prompt the assistant speaks for the organisation it describes, so its
    # "we" and "our" state the organisation's terms ("all our host families live within a
    # 20-minute walk"), which the prompt supports or not. With no system prompt either (two
    # people talking), only a checkable detail (a name, a number, a date) can anchor a
    # claim; chit-chat recurs by nature ("keep going!").
    if not statements.tools:
        clauses = [c for c in clauses if statements.trust[c.row] != "assistant"
                   or not is_self_description(c.text, plural=not statements.prompted)]
    answerable = None
    scope = (prompt_scope(t for t, trust in zip(statements.texts, statements.trust) if trust == "system")
             if statements.prompted and not statements.tools else None)
    if not open_domain and _general_assistant(statements, scope):
        clauses = [c for c in clauses if statements.trust[c.row] != "assistant"]
    elif not open_domain and scope is not None:
        # A prompt that states facts: the assistant answers for them and for the business's
        # terms, not for the knowledge it gives on request (a formula, a plan, care advice).
        # By reply: "the music has to finish by 11 pm" is the venue's rule when the reply
        # goes on to the couple's corkage; and by claim: a reply that repeats one in other
        # words ("worn boots can come back within 60 days too") repeats it all the same.
        answerable = frozenset(
            int(p) for p, text, trust in zip(statements.position, statements.texts, statements.trust)
            if trust == "assistant" and speaks_of(text, scope))
    return ClaimScan(since_position, clauses, claimant, framed,
                     not statements.tools and not statements.prompted, answerable)


def _general_assistant(statements: Statements, scope: frozenset[str] | None) -> bool:
    """A chat with no tool in which the assistant answers from its own knowledge: under a
    system prompt that gives a role but no facts (``scope.states_facts``: no number but dates,
    years and a lesson's or a version's: "You are a friendly travel assistant.", "You are a
    helpful assistant. Today is May 1, 2024.", "Chapter 7: quadratic equations."), or
    with no system prompt at all unless it reads as people talking (sittings that open with a
    date stamp, participants named: two friends, LoCoMo's layout). Nothing in the session
    could support what the assistant knows, and its answers recur with the topic the user
    asks about (a travel assistant's Alfama and tram 28, a coding assistant's pandas): read
    as claims, 92% of a general assistant's recurring answers were withheld on two files
    written for it, and no rule over its words told them from an invented fact ("your dentist
    opens at 7:30"), README, Benchmarks: Stop 65. A prompt that states facts (a price, an
    opening hour, a limit) makes the assistant their spokesman, and a tool a reporter of its
    results: both are judged (a prompt's, for its facts and the business's terms:
    ``ClaimScan.answerable``)."""
    if statements.tools:
        return False
    if not statements.prompted:
        return not statements.speakers and not any(map(opens_with_date, statements.texts))
    return scope is None  # the prompt's ``prompt_scope``, read once by ``scan_claims``


# A user's question that asks for something to be done states what they want ("And can we
# push it to 7:30pm?", "Could you make it 4?"); one that asks whether something is so ("Is the
# warranty 5 years?", "Can I return it after 60 days?") states nothing: the 60 days are the
# question, not a fact the user gives.
_REQUEST = re.compile(r"\W*(?:(?:and|so|also|ok|okay|actually|then|great|oh)\b\W*)*"
                      r"(?:(?:can|could|would|will)\s+(?:you|u)\b|please\b|"
                      r"(?:can|could)\s+we\s+(?:push|move|change|make|switch|book|add|bump|shift)\b)",
                      re.IGNORECASE)


_PERCENT = re.compile(r"(?<![\d.])(\d{1,2}(?:\.\d+)?)\s*(?:%|percent\b)", re.IGNORECASE)


def unembedded_clauses(statements: Statements, settings, scan: ClaimScan) -> list[str]:
    """The clause texts ``detect_poison`` would embed that no earlier run has: a caller with
    the inference pool embeds them in parallel chunks (``remember_clause_vectors``) first,
    where the detection, one job, would embed them in one serial batch (an agent's new search
    result: ~35 clauses, 160-300 ms on the call path)."""
    clauses = scan.clauses
    if len({c.position for c in clauses}) < settings.min_occurrences:
        return []
    return uncached(dict.fromkeys(clauses[k].text for k in _own_vectors(statements, clauses)))


def detect_poison(statements: Statements, settings, *, confirmed: np.ndarray | None = None,
                  since_position: int = 0, encode: Encoder | None = None,
                  scan: ClaimScan | None = None) -> list[PoisonFinding]:
    """Unsupported recurring claims among the turns from ``since_position`` on (older records
    persist on their own). ``confirmed``: vectors of claims a human confirmed. ``encode``:
    the embedder for clause vectors (the one that made ``statements.vectors``; default: the
    shipped MiniLM). ``scan``: these statements' ``scan_claims``, when the caller has it."""
    if scan is None or scan.since_position != since_position:
        scan = scan_claims(statements, since_position, open_domain=settings.poison_open_domain)
    clauses, claimant, framed, peers = scan.clauses, scan.claimant, scan.framed, scan.peers
    if len({c.position for c in clauses}) < settings.min_occurrences:
        return []
    authority = [i for i in range(statements.size) if not claimant[i] and not framed[i]
                 and statements.trust[i] in {"system", "user", "tool"}
                 and (not statements.texts[i].rstrip().endswith("?")
                      or statements.trust[i] == "user" and _REQUEST.match(statements.texts[i]))]
    units = authority_units(statements, authority)
    percents = [(int(statements.position[i]), float(m.group(1))) for i in authority
                for m in _PERCENT.finditer(statements.texts[i])]
    replies: dict[int, set[str]] = {}  # per claim turn, the numbers it gives
    for c in clauses:
        replies.setdefault(c.position, set()).update(d for d in c.details if d[:1] == "#")
    index = _Units(units)
    vectors = _vectors_for(statements, clauses, encode)
    strong, weak, user_strong = _support(statements, clauses, authority, units, index, vectors,
                                         settings.support_similarity)
    open_ = [k for k in range(len(clauses)) if not strong[k]]
    if len({clauses[k].position for k in open_}) < settings.min_occurrences:
        return []
    clauses = _same_stems(clauses)  # "sign" and "signature" are one detail from here on
    frequency = _turn_frequency(statements)
    total_turns = len({int(p) for p in statements.position})
    found: list[tuple[list[int], set[str], set[str], set[str], set[str]]] = []
    taken: set[int] = set()
    # Every clause's row, though only the open ones are read: one product, where filling the
    # open block of a full matrix cost a copy of it (~30 ms at 2,000 clauses); usually (a
    # session with few trusted sources) almost every clause is open. The previous
    # detection's product and close pairs are carried over for the clauses it shares.
    cosines = clause_cosines(vectors, settings.recurrence_similarity)
    similarity, close = cosines.similarity, cosines.pairs  # the grouping's and chains'
    if len(open_) == len(clauses):
        open_similarity, open_close = similarity, close
    else:
        open_similarity = similarity[np.ix_(open_, open_)]
        open_close = pairs_among(close, np.asarray(open_, dtype=np.int64), len(clauses))
    for group in group_clauses([clauses[k] for k in open_], open_similarity, settings, frequency,
                               total_turns, same_meaning=open_close):
        pause_point()
        members = [open_[i] for i in group]
        first = min(clauses[k].position for k in members)
        members = [k for k in members if user_strong[k] >= first]  # an echo supports nothing
        if len({clauses[k].position for k in members}) < settings.min_occurrences:
            continue
        # What the user said counts before the claim's details were first said in the group,
        # not before its first member: a group on one topic (an address) starts with the old
        # value, and the user's new one, said before anyone repeated it, was read as an echo.
        said_first: dict[str, int] = {}
        for k in members:
            for detail in clauses[k].details:
                said_first[detail] = min(said_first.get(detail, clauses[k].position),
                                         clauses[k].position)
        gaps: dict[int, frozenset[str]] = {}
        for k in members:
            before = min((said_first[d] for d in clauses[k].details), default=first)
            sources = index.candidates(clauses[k], before=before, most=UNITS_EXAMINED)
            gap = unsupported_details(clauses[k], sources)
            values = [d for d in gap if d[:1] == "#"]
            worked: set[str] = set()
            if values:  # "$1,169.10" with the 10% code, "450 g" of rice for 6: worked out
                reply = frozenset(float(d[1:]) for d in replies.get(clauses[k].position, ()))
                worked = {d for d in values if derived(
                    d, sources, index.numbers_before(said_first[d]),
                    [share for at, share in percents if at < said_first[d]], reply)}
                gap -= worked
            # Values and names the user gave are theirs: "Done: table for 4, Friday at 7:30pm,
            # under Okafor" restates four things they said in four turns. Not when the clause
            # ties them to one of another source: "Marco in London" (a time-zone tool's city).
            entities = clauses[k].entities
            if gap & entities and all(d in worked or index.user_stated(d, before=said_first.get(d, first))
                                      for d in entities):
                gap -= entities
            gaps[k] = gap
        members = [k for k in members if gaps[k]]  # all of it stated somewhere: nothing to repeat
        # A claim's recurring unsupported detail is specific (a name, a number, a rare term);
        # boilerplate every result repeats ("search_docs output for ...") is not a claim.
        anchors = {a for a in recurring(members, clauses, gaps) if _specific(a, frequency, total_turns)}
        if peers:
            anchors &= {e for k in members for e in clauses[k].entities}
        if not anchors:
            continue
        for flagged in claim_chains(members, gaps, anchors, clauses, similarity, settings, close):
            turns: dict[str, set[int]] = {}
            for k in flagged:
                for a in gaps[k] & anchors:
                    turns.setdefault(a, set()).add(clauses[k].position)
            chain_turns = len({clauses[k].position for k in flagged})
            core = {a for a, seen in turns.items() if 2 * len(seen) > chain_turns}  # said most times
            if not core and chain_turns > LOOSE_CHAIN_TURNS:
                continue  # a long chain with no detail said in most of its turns: a web of topics
            amounts = {a for a in core if a[:1] == "#"}
            # A mostly supported clause belongs to the claim only through its core detail; one
            # giving other, supported amounts than the claim's states another fact.
            flagged = [k for k in flagged
                       if not weak[k] or gaps[k] & core
                       and not (amounts and _other_amounts(clauses[k], gaps[k], amounts))]
            if len({clauses[k].position for k in flagged}) < settings.min_occurrences:
                continue
            said_in = {clauses[k].position for k in flagged}
            if scan.answerable is not None and 2 * len(scan.answerable & said_in) < len(said_in):
                continue  # advice, a formula, a plan: mostly not said of the business's terms
            bare = {clauses[k].position for k in flagged if not weak[k]}
            if len(bare) < MIN_BARE_TURNS:
                continue  # only ever said next to supported details: a paraphrase, not a claim
            # voiced: the assistant (or relayed text) saying a detail the chain repeats, not
            # joining it through its group with details of its own (any detail: the chain's
            # anchors alone lose two poisoned claims of the agentmem dev set, 0.981 -> 0.942)
            repeated = _repeated_details(clauses, flagged)
            voiced = {clauses[k].position for k in flagged
                      if statements.trust[clauses[k].row] != "untrusted"
                      and clauses[k].details & repeated}
            if len(voiced) < MIN_VOICED_TURNS and float(
                    (vectors[flagged] @ vectors[flagged].T).min()) < SAME_CLAIM_SIMILARITY:
                continue  # an untrusted source's topic recurring over its results, not taken up
            if len({_occurrence(statements, clauses[k]) for k in flagged}) < settings.min_occurrences:
                continue  # the same call read again (an agent re-running a search) says it once
            own = {a for k in flagged for a in gaps[k] & anchors}  # this chain's, not the group's
            if not own and peers:
                continue  # between peers, a claim must repeat a name, number or date of its own
            novel = {a for a in anchors if not index.states(a, before=first)}
            said: dict[str, set[int]] = {}
            for k in flagged:
                for a in gaps[k] & own:
                    said.setdefault(a, set()).add(clauses[k].position)
            named = {a for a, seen in said.items() if len(seen) >= 2} or own  # the reason's: recurring
            found.append((flagged, own, novel, amounts, named))
            taken.update(flagged)
    out = []
    for flagged, anchors, novel, amounts, named in found:
        # The claim's novel details in clauses the grouping left out (a sentence that also
        # states a supported detail, a loose paraphrase): the same claim again. A detail of the
        # chain itself admits a related meaning; one only its candidate group shares (a chatty
        # group shares hundreds) admits the same meaning only.
        extra = []
        for k in range(len(clauses)):
            shared = clauses[k].details & novel
            if k in taken or strong[k] or not shared \
                    or amounts and _other_amounts(clauses[k], shared, amounts):
                continue
            bar = settings.recurrence_similarity / (2 if shared & anchors else 1)
            if float((vectors[flagged] @ vectors[k]).max()) >= bar:
                extra.append(k)
        taken.update(extra)
        members = sorted(flagged + extra, key=lambda k: (clauses[k].position, clauses[k].row))
        rows = sorted({clauses[k].row for k in members})
        if confirmed is not None and len(confirmed) and \
                float((confirmed @ statements.vectors[rows].T).max()) >= settings.recurrence_similarity:
            continue
        positions = sorted({clauses[k].position for k in members})
        head = members[0]
        out.append(PoisonFinding(
            claim=canonical_claim(clauses[head].text), rows=rows, positions=positions,
            score=round(float((vectors[members] @ vectors[head]).mean()), 4),
            members=[clauses[k].text for k in members],
            reason=(f"claim made {len(positions)} times by {_who(statements, rows)}; its "
                    f"recurring details ({', '.join(_surface(named, [clauses[k].text for k in members]))}) "
                    f"come from no user, system prompt or trusted tool")))
    return out


_TOKEN = re.compile(r"[\w$€£][\w.,:'’-]*\w|\w")


def _occurrence(statements: Statements, clause: Clause) -> Any:
    """Where a clause counts as said: its turn, but one occurrence for an untrusted tool's
    clause that the same call (name and arguments) returned before: a page read again."""
    position = clause.position
    if statements.trust[clause.row] == "untrusted" and position in statements.calls:
        return statements.calls[position], clause.text
    return position


def _surface(anchors: set[str], texts: list[str], most: int = 5) -> list[str]:
    """The claim's recurring details as the texts spell them ("Maple", not "mapl")."""
    out: list[str] = []
    for anchor in sorted(anchors, key=lambda a: (_is_value(a), a)):
        word = next((token for text in texts for token in _TOKEN.findall(text)
                     if anchor in detail_terms(token)), anchor)
        if word.lower() not in out:
            out.append(word.lower())
        if len(out) == most:
            break
    return out


def _who(statements: Statements, rows: list[int]) -> str:
    sources = sorted({statements.sources[r] for r in rows})
    return " and ".join(sources)
