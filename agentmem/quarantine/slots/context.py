"""A clause as the extractors read it (``_Ctx``): its mood, whether an update was
announced before it, and the qualifiers of the words around a fact; and the clause guard."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from agentmem.quarantine.claims import split_sentences, text_clauses
from agentmem.quarantine.slots.facts import Fact
from agentmem.quarantine.slots.lexicons import _RELATIONS
from agentmem.quarantine.slots.qualifiers import (
    _Q_BOUNDED, _Q_FUTURE, _Q_HABITUAL, _Q_HYPOTHETICAL, _Q_LIFETIME, _Q_MODAL, _Q_NEW, _Q_OCCASION,
    _Q_PAST, announces_update,
)


# A booking's details put to the other side for a yes or no ("Please confirm an appointment on
# March 13th at 6:15 pm.", "..., is that correct?", a read-back "Okay, you want an appointment
# on March 2nd at 12 pm.") or offered among others: an offer, which the next offer replaces when
# the first is declined or fails, not a statement of the speaker's own facts.
_PROPOSAL = re.compile(
    r"\b(?:please confirm|(?:can|could) you confirm|confirm (?:that|the following)|let's confirm|"
    r"confirm(?:ation)? (?:the )?(?:following )?(?:details|specifics)|verify the following|"
    r"review the following|is (?:that|this) (?:correct|right|ok|okay)|does (?:that|this) (?:work|sound)|"
    r"shall i (?:book|reserve|make)|would you like (?:me )?to (?:book|reserve)|"
    r"you(?: would|'d)? (?:want|like) (?:a|an|the|to)|you (?:need|want) (?:me )?to book|"
    r"you(?:'re| are) booking)\b|"
    # an option offered ("There's a concert at ... on March 2nd.", "I found a flight ... at 7:05
    # am.", "They have a flight leaving at 3:05 pm", "Try 6 pm?") or a verbless read-back
    # ("An appointment at Happy Cuts at 2:15 pm on March 3rd.")
    r"^\W*(?:(?:okay|ok|sure|alright),? )?(?:try|how about|what about|there's|there is|i found|"
    r"i've found|i have found|they have|(?:an?|the) (?:appointment|reservation|booking|table) (?:at|for|"
    r"on|with))\b", re.IGNORECASE)
# A booking's detail changed on purpose ("Make it quarter past 6 instead.", "No, I need it at 1:30.")
_REBOOKED = re.compile(r"\binstead\b|^\W*no,? (?:i|we) (?:need|want|meant|said)\b", re.IGNORECASE)


@dataclass(frozen=True)
class _Ctx:
    text: str
    original: str
    mood: str
    updated: bool
    lowercase: bool
    before: str = ""  # earlier clauses of the same turn, for "never had one" and "mine is ..."
    sentence: str = ""  # the whole original sentence, for names the clause split cut off ("Alex, my partner")

    def fact(self, slot: str, value: str, end: int, polarity: bool = True, subject: str = "self",
             extra: Iterable[str] = (), strength: float = 1.0) -> Fact:
        """A fact whose qualifiers come from the clause up to ``end`` plus its short tail."""
        quals = _clause_qualifiers(self.text[:end]) | set(extra)
        quals |= _clause_qualifiers(_tail(self.text[end:])) & _TAIL_QUALIFIERS
        if self.updated:
            quals.add("update")
        if self.mood == "hypothetical":
            quals.add("hypothetical")
        if self.mood == "question":
            quals.add("presupposed")
        said = self.sentence or self.original
        if _PROPOSAL.search(said):
            quals.add("proposal")
        if _REBOOKED.search(said):
            quals.add("rebooked")
        return Fact(slot, value, polarity, subject, frozenset(quals), self.text, strength)


_TAIL_QUALIFIERS = frozenset({"past", "bounded", "occasion", "habitual", "lifetime"})
_TAIL_STOP = re.compile(r"[,;]|\b(?:and|but|so|because|although|though|while|which|who|whereas)\b")


def _tail(rest: str) -> str:
    """The words right after a fact that still modify it ("... until 2019", "... years ago")."""
    stop = _TAIL_STOP.search(rest)
    rest = rest[: stop.start()] if stop else rest
    return " ".join(rest.split()[:6])


_QUOTED = re.compile(r"\"[^\"]{3,}\"|(?:^|(?<=\s))'[^']*\s[^']*'(?=[\s,.!?;]|$)")


def _clause_qualifiers(text: str) -> set[str]:
    quals: set[str] = set()
    checks = ((_Q_HYPOTHETICAL, "hypothetical"), (_Q_MODAL, "modal"), (_Q_FUTURE, "future"),
              (_Q_PAST, "past"), (_Q_BOUNDED, "bounded"), (_Q_HABITUAL, "habitual"),
              (_Q_OCCASION, "occasion"),
              (_Q_NEW, "new"),
              (_Q_LIFETIME, "lifetime"))
    for pattern, name in checks:
        if pattern.search(text):
            quals.add(name)
    return quals


def _contexts(text: str) -> Iterator[_Ctx]:
    lowercase = text == text.lower()
    sentences = split_sentences(text)
    updated_from = len(sentences)
    for index, sentence in enumerate(sentences):
        if announces_update(sentence):
            updated_from = index
            break
    before: list[str] = []
    for clause in text_clauses(text):
        body = _QUOTED.sub(" ", clause.text).strip()
        sentence = sentences[clause.sentence_index] if clause.sentence_index < len(sentences) else ""
        yield _Ctx(body, clause.original, clause.mood, clause.sentence_index >= updated_from, lowercase,
                   " ".join(before[-4:]), sentence)
        before.append(body)


_OTHER_SUBJECT = re.compile(
    r"^(?:(?:my|our|his|her|their) (?:[\w'-]+ ){0,2}?(?:" + "|".join(_RELATIONS) + r"|guests|friends|"
    r"parents|family|team|client|clients|customers|colleagues|coworkers|neighbors|neighbours|kids|children|"
    r"sons|daughters|brothers|sisters)s?\b(?! and i\b)|(?:he|she|they) (?:is|are|was|were|has|have|had|does|"
    r"do|did|works|lives|makes|needs|wants|loves|says|said|can|will|would|just|also|still|never|always|"
    r"only)\b)")


def clause_guard(clause_text: str) -> str:
    """A clause-level reason its content cannot clash with the speaker's own earlier claims.

    'past' (used to / back in my twenties / until 2021), 'hypothetical' (if / would),
    'other person' (my wife works 9 to 5, he's a Brazilian citizen), or ''.
    """
    text = clause_text.strip()
    other = _OTHER_SUBJECT.search(text)
    if other and not re.search(r"\b(?:i|me|we|us|myself)\b", text[other.end():]):
        return "other person"
    quals = _clause_qualifiers(text)
    if quals & {"past", "bounded"}:
        return "past"
    if "hypothetical" in quals:
        return "hypothetical"
    return ""
