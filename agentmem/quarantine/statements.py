"""Statements: every sentence of a session with its source and how far it is trusted.

Trust decides who may assert and who may confirm. The user, the system prompt and trusted
tools are authorities: their sentences can support a claim, and user text is never removed
as poison. The assistant and untrusted tools (web search, scraping, anything the policy's
patterns name) make claims that need support. A trusted tool that relays third-party text
(a forwarded e-mail, a quoted forum post) relays a claim, not a fact.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from functools import cached_property, lru_cache

import numpy as np

from agentmem.lexical import terms
from agentmem.quarantine.claims import text_clauses

# Lines that introduce someone else's words inside a trusted tool's output: forwarded and
# external mail (headers, or JSON with a sender address / an external flag), posts, comments,
# reviews, testimonials, quotes. Narrow on purpose: "systematic review", "claim_id" or a capstone
# "graded Pass by a reviewer" is not a relay; "reviewers praise ..." and "what our customers say:" are.
_THIRD_PARTY = re.compile(
    r"(forwarded message|^from:|\bwrote:|\bposted by\b|\bforum\b|\breddit\b|\bblog\b|"
    r"\bcomments?:|\bcommented\b|\b(?:customer|user|guest|buyer|product) (?:reviews?|comments?)\b|"
    r"\breviewers?:|\breviewers? (?:say|says|said|write|wrote|note|noted|mention|mentioned|report|reported|"
    r"love|loved|like|liked|praise|praised|complain|complained|describe|described|claim|claimed|agree)\b|"
    r"\breviews?:|\bscraped\b|\bsnippet\b|\bquoted?\b|\btestimonials?\b|"
    r"\b(?:customers|clients|users|guests|owners|members|residents|parents|tenants|buyers|patients|students) "
    r"(?:say|said|are saying|write|wrote|tell us)\b|"
    r"\bcustomer note\b|\bsays:|\bclaims? that\b|"
    r"\"(?:from|sender|author)\"\s*:\s*\"[^\"]*@|\"external\"\s*:\s*true|"
    r"\"source\":\s*\"(?:web|forum|email|user))",
    re.IGNORECASE | re.MULTILINE)

TRUST_RANK = {"system": 4, "user": 3, "tool": 2, "assistant": 1, "untrusted": 0}


def is_untrusted_tool(source: str, patterns: list[str]) -> bool:
    name = source.split(":", 1)[1] if source.startswith("tool:") else ""
    return source.startswith("tool:") and any(fnmatch.fnmatch(name.lower(), p.lower()) for p in patterns)


def trust_class(source: str, patterns: list[str]) -> str:
    """system | user | tool | assistant | untrusted."""
    if source.startswith("tool:"):
        return "untrusted" if is_untrusted_tool(source, patterns) else "tool"
    return source if source in {"system", "user", "assistant"} else "assistant"


def bears_claims(source: str, text: str, patterns: list[str]) -> bool:
    """Whether a turn's sentences are claims that need support (an assistant's, an untrusted
    tool's, or third-party text a trusted tool relays): what the poison check reads."""
    trust = trust_class(source, patterns)
    return trust in {"assistant", "untrusted"} or (trust == "tool" and bool(_THIRD_PARTY.search(text)))


@dataclass
class Statements:
    """Row-aligned views of a corpus: position, span, text, vector, source, trust per sentence."""

    position: np.ndarray
    spans: list[tuple[int, int]]
    texts: list[str]
    vectors: np.ndarray
    sources: list[str]
    trust: list[str]
    relayed: np.ndarray  # a trusted tool's sentence that carries third-party text
    words: list[list[str]]  # content words per sentence (computed once, in the corpus)
    calls: dict[int, str] = field(default_factory=dict)  # tool result position -> its call's "name arguments"
    speakers: list[str] = field(default_factory=list)  # per row: its participant's name or ""
    # (agentmem.speakers); empty: nobody named
    frame: np.ndarray = field(default_factory=lambda: np.zeros(0, np.bool_))  # per row: JSON
    # frame around a tool answer's records (agentmem.structured); empty: none

    @property
    def size(self) -> int:
        return len(self.texts)

    @cached_property
    def tools(self) -> bool:
        """Whether a tool's result (trusted or not) is among the statements."""
        return any(t in {"tool", "untrusted"} for t in self.trust)

    @cached_property
    def prompted(self) -> bool:
        """Whether a system prompt is among the statements."""
        return "system" in self.trust

    def same_voice(self, rows: list[int], row: int) -> list[int]:
        """Those of ``rows`` said in ``row``'s voice: its source and, in a group chat, its
        speaker. Statements contradict only their own voice's: Ann's "I am vegetarian" and
        Bo's later "I eat steak every day" are both user statements, and neither is wrong.
        (List lookups: the clash checks filter thousands of earlier rows per call.)"""
        sources, source = self.sources, self.sources[row]
        if not self.speakers:  # nobody named (the usual session): the source is the voice
            return [r for r in rows if sources[r] == source]
        speakers, speaker = self.speakers, self.speakers[row]
        return [r for r in rows if sources[r] == source and speakers[r] == speaker]


def statements_of(corpus, history: list[dict], upto: int, patterns: list[str]) -> Statements:
    """The statements of history[:upto], from a corpus that covers at least that much."""
    from agentmem.messages import text_of

    rows = np.flatnonzero(corpus.position < upto).tolist()
    sources_by_position = corpus.sources[:upto]  # computed once per turn when the corpus grew
    trust_of = {source: trust_class(source, patterns) for source in set(sources_by_position)}
    third_party_from: dict[int, int] = {}
    for position in range(upto):
        if trust_of[sources_by_position[position]] == "tool":
            match = _THIRD_PARTY.search(text_of(history[position]))
            if match:
                third_party_from[position] = match.start()
    calls = _calls(history, upto)
    positions = corpus.position[rows]
    sources = [sources_by_position[p] for p in positions.tolist()]
    relayed = np.zeros(len(rows), dtype=bool)
    if third_party_from:
        for i, (row, position) in enumerate(zip(rows, positions.tolist())):
            start = third_party_from.get(position)
            relayed[i] = start is not None and corpus.spans[row][1] > start
    trust = [trust_of[s] for s in sources]
    named = corpus.speakers[:upto]
    speakers = [named[p] for p in positions.tolist()] if any(named) else []
    if rows and rows[-1] == len(rows) - 1:  # the usual case, a prefix: C-level slices
        k = len(rows)
        return Statements(positions, corpus.spans[:k], corpus.texts[:k], corpus.vectors[:k],
                          sources, trust, relayed, corpus.words[:k], calls, speakers,
                          corpus.frame[:k])
    return Statements(positions, [corpus.spans[r] for r in rows], [corpus.texts[r] for r in rows],
                      corpus.vectors[rows], sources, trust, relayed,
                      [corpus.words[r] for r in rows], calls, speakers, corpus.frame[rows])


def _calls(history: list[dict], upto: int) -> dict[int, str]:
    """What each tool result answers: its call's name and arguments (a result such as
    ``{"is_unique": true}`` is about what the call asked)."""
    asked: dict[str, str] = {}
    out: dict[int, str] = {}
    for position in range(upto):
        message = history[position]
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            asked[call.get("id", "")] = f"{function.get('name', '')} {function.get('arguments', '')}"
        if message.get("role") == "tool" and message.get("tool_call_id") in asked:
            out[position] = asked[message["tool_call_id"]]
    return out


def canonical_claim(text: str) -> str:
    """Lower-cased content words in order: the claim's identity across rephrasings' noise."""
    return " ".join(terms(text))


# The speaker's own situation, said inside a question ("since we'll be in Denmark, what ...?",
# "I'll just tick 'no allergies', right?"): the clause a question presupposes about its asker.
_FIRST_PERSON = re.compile(r"\b(?:i|i'm|i'll|i've|i'd|my|me|mine|we|we're|we'll|we've|we'd|our|ours|us)\b",
                           re.IGNORECASE)


def presupposes_about_self(text: str) -> bool:
    """A question of six words or more that speaks of its asker (first person): it may state,
    in passing, something the asker said otherwise before. "do epipens survive heat?" does
    not; "When I email Ridgeview, since that's the school we're zoned for, should I ask ...?"
    does. (A question that only asks is compared too, for what its words presuppose, "Should we
    keep our gas furnace?", but never withholds what it is compared with: ``only_asks``.)"""
    stripped = text.strip()
    return (stripped.endswith("?") and len(stripped.split()) >= 6
            and _FIRST_PERSON.search(stripped.replace("\u2019", "'")) is not None)


@lru_cache(maxsize=65536)
def only_asks(text: str) -> bool:
    """A question with no clause that states anything: "What's my laptop budget again?",
    "Remind me, what time is my flight?". It may ask about the very fact it is compared with
    (to the NLI model "What's my X again?" reads as contradicting "My X is V": 0.99), so a
    clash it makes never withholds that fact: the earlier statement is noted beside it."""
    stripped = text.strip()
    return stripped.endswith("?") and not states_in_passing(stripped)


# Clauses that assert nothing about the world although they are not questions: a request to
# recall or tell ("remind me", "can you tell me"), a note on the asker's memory ("I forgot",
# "I can't remember"), a heading ("quick question about my trip"); and a wh-word read as a
# subordinator ("..., when does my flight leave").
_ASKING_CLAUSE = re.compile(
    r"^(?:please |(?:can|could|would) you |just )?(?:remind|tell|help|show|ask|let) (?:me|us)\b|"
    r"^i (?:forgot|forget|can't remember|cannot remember|don't remember|do not remember|can't recall|"
    r"don't recall|lost track|have a question|was wondering|wonder|wanted to (?:ask|check|confirm))\b|"
    r"^(?:(?:a |one |another |quick |small |one more |just a |just one )*(?:question|check|reminder)s?\b)|"
    r"^(?:just )?(?:checking|to check|double[- ]checking|confirming|to confirm)\b|^sorry\b|"
    r"^(?:when|where|what|which|who|how|why) (?:do|does|did|is|are|am|was|were|can|could|should|would|"
    r"will|have|has)\b")


def states_in_passing(text: str) -> bool:
    """Whether a question states something besides what it asks: a clause of its own that is
    not a question (a declarative lead or tail, a "since / because / now that / once ..." clause,
    a tag question's statement, an "if" clause, whose possessives still presuppose: "If I keep
    the car in my building's garage, ...?") and is not a request to recall or a heading."""
    return any(clause.mood in {"assert", "hypothetical"} and not _ASKING_CLAUSE.search(clause.text)
               for clause in text_clauses(text))


# The speaker in a statement ("I have two cats", "my shift starts at 9", "no pets live with
# me"): a persona's facts about itself. Not "let me check" or "want me to book it?" (offers),
# and not "we" (a business's assistant says "we" of the business).
_SELF = re.compile(r"\b(?:I|[Mm]y|[Mm]ine|[Mm]yself)\b|(?<![Ll]et )\b[Mm]e\b(?! to\b)")


def speaks_of_self(text: str) -> bool:
    """Whether a statement is about its speaker (first person singular, subject or owner)."""
    return _SELF.search(text) is not None


def is_claim(text: str) -> bool:
    """Assertions worth tracking: not questions, not greetings or one-word acknowledgements."""
    stripped = text.strip()
    return not stripped.endswith("?") and len(terms(stripped)) >= 3
