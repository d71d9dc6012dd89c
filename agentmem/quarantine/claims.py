"""Clause-level claims: what a sentence asserts, including what hides inside a question.

Contradiction rules compare claims, not turns. A chat turn mixes greetings, questions and
statements, and people often state facts about themselves *inside* a question ("As a
52-year-old with a dodgy knee, should I worry?") or in a subordinate clause ("Since my wife
is allergic to nuts, what can I bake?"). Dropping every question (what the NLI path does)
loses those claims; keeping whole turns drowns them. This module splits a sentence into
clauses, labels each one (assertive, hypothetical, interrogative) and rewrites the two
common embedded forms ("as a X, ..." and "since/because ... , ...") into plain claims.

Everything here is lowercase-insensitive regular-expression work: no model, microseconds
per sentence, so the rule layer can run on every new turn.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Contractions are expanded so patterns only need one spelling ("i am", "do not").
_CONTRACTIONS: tuple[tuple[str, str], ...] = (
    (r"\bcan't\b", "cannot"), (r"\bwon't\b", "will not"), (r"\bshan't\b", "shall not"),
    (r"\bain't\b", "am not"), (r"\bi'm\b", "i am"),
    (r"\bim\b(?=\s+(?:a|an|the|\d|not|from|in|so|very|really|just|still|also|only|[a-z]+(?:ing|ed)\b))",
     "i am"),
    (r"\b(\w+)n't\b", r"\1 not"), (r"\b(i|we|you|they)'ve\b", r"\1 have"),
    (r"\b(i|we|you|they|he|she|it)'ll\b", r"\1 will"), (r"\b(i|we|you|they|he|she)'d\b", r"\1 would"),
    (r"\b(we|you|they)'re\b", r"\1 are"), (r"\b(he|she|it|that|there|what|who|where|here)'s\b", r"\1 is"),
    (r"\bive\b", "i have"), (r"\bdont\b", "do not"), (r"\bdoesnt\b", "does not"),
    (r"\bdidnt\b", "did not"), (r"\bhavent\b", "have not"), (r"\bcant\b", "cannot"),
)
_CONTRACTION_RES = tuple((re.compile(p), r) for p, r in _CONTRACTIONS)


def normalise(text: str) -> str:
    """Lowercase, straight quotes, expanded contractions, single spaces."""
    text = text.replace("\u2019", "'").replace("\u2018", "'").replace("\u201c", '"').replace("\u201d", '"')
    text = text.lower()
    for pattern, replacement in _CONTRACTION_RES:
        text = pattern.sub(replacement, text)
    text = text.replace("do not not", "do not")
    return re.sub(r"\s+", " ", text).strip()


_ABBREVIATIONS = frozenset({"mr", "mrs", "ms", "dr", "st", "mt", "vs", "etc", "jr", "sr", "no", "approx",
                            "e.g",
                            "i.e", "ft", "u.s", "u.k", "a.m", "p.m"})
_SENTENCE_END = re.compile(r"[.!?]+[\"')\]]*\s+|\n+|[.!?]+$")


def split_sentences(text: str) -> list[str]:
    """Sentence split that also works on lowercase chat ("i am a nurse . i love it")."""
    out: list[str] = []
    start = 0
    for match in _SENTENCE_END.finditer(text):
        piece = text[start:match.end()]
        words = text[start:match.start()].split()
        last = words[-1].lower().rstrip(".") if words else ""
        if match.group().startswith(".") and last in _ABBREVIATIONS and match.end() < len(text):
            continue
        if piece.strip():
            out.append(piece.strip())
        start = match.end()
    if text[start:].strip():
        out.append(text[start:].strip())
    return out


@dataclass(frozen=True)
class Clause:
    """One clause of a sentence.

    ``text`` is normalised (see :func:`normalise`); ``original`` keeps the writer's casing,
    which tells proper names from common words. ``mood`` is ``assert``, ``hypothetical`` or
    ``question``; ``lead`` is the subordinator that opened it ("since", "when", ...).
    """

    text: str
    original: str
    mood: str
    lead: str = ""
    sentence_index: int = 0


_HYPOTHETICAL_LEADS = frozenset({"if", "unless", "suppose", "supposing", "imagine", "even if", "in case",
                                 "what if", "assuming", "pretend", "let's say", "say"})
_SUBORDINATORS = ("given that", "now that", "even though", "even if", "in case", "what if", "seeing that",
                  "considering that", "since", "because", "as", "when", "whenever", "while", "after",
                  "before", "although", "though", "if", "unless", "assuming", "once", "until")
_INTERROGATIVE_STARTS = frozenset({
    "do", "does", "did", "is", "are", "was", "were", "can", "could", "should", "would", "will", "shall",
    "have", "has", "had", "may", "might", "must", "what", "which", "who", "whom", "whose", "where",
    "why", "how", "any", "anything", "am", "is there", "are there", "isn't", "aren't", "right", "ok",
    "okay", "yes", "no", "really", "huh", "eh"})
_PRONOUNS = frozenset({"i", "you", "we", "they", "he", "she", "it", "my", "your", "our", "their"})
_DISCOURSE = re.compile(r"^(?:(?:and|but|so|also|then|oh|ok|okay|well|hey|hi|hello|yeah|great|thanks|nice|"
                        r"cool|sure|hmm|um|one more thing|btw|by the way|plus|anyway|lol|haha|wow|honestly|"
                        r"basically)\b[,!.]?\s*|(?:yes|no|nope|yep|still|now|just)[,!.]+\s*)+")
# Break points between clauses. Conjunctions only split when a new subject follows, so lists
# ("shrimp, crab or lobster") stay whole.
_SUBJECT = r"(?:i|we|my|our|he|she|they|it|you|your|that|this|there|his|her|their|the)\b"
_CLAUSE_BREAK = re.compile(
    r"\s*(?:;|\s[\u2014\u2013]\s?|\s-\s|\u2014|:(?!\d)(?=\s))\s*|,\s+(?=(?:but|so|and then|because|although|"
    r"though|whereas|however)\b)|,?\s+(?=(?:but|so|because|cause|cuz|although|though|whereas|however|"
    r"and then|and|or|yet)\s+"
    + _SUBJECT + r")|,\s*(?=(?:" + _SUBJECT[3:-3] + r"|what|which|who|where|when|why|how|should|could|can|"
    r"would|will|do|does|did|is|are|am|was|were|since|because|as|if|unless|although|though|while|after|"
    r"before|once|until|even|given|now that|right|ok|okay)\b)")
_AS_A = re.compile(r"^as (?:an?|the) ([^,]+?)(?:,\s*|$|\s+(?=(?:should|can|could|would|will|do|does|is|am|"
                   r"what|how|which|where|i|my)\b))(.*)$")
_LIFE_STAGES = re.compile(r"^(?:kid|child|boy|girl|teen|teenager|baby|youngster|toddler|little one)\b")


def _strip_discourse(text: str) -> str:
    return _DISCOURSE.sub("", text).strip(" ,.!?;:\"'")


# Leads whose clause still needs the word itself to be read right ("until 2019 ...", "when I was ...").
_KEPT_LEADS = frozenset({"until", "before", "after", "once", "when", "whenever", "while"})


def _lead_of(text: str) -> tuple[str, str]:
    for lead in _SUBORDINATORS:
        if text.startswith(lead + " "):
            return lead, text if lead in _KEPT_LEADS else text[len(lead) + 1:]
    for lead in ("let's say", "say", "suppose", "imagine", "pretend"):
        if text.startswith(lead + " "):
            return lead, text[len(lead) + 1:]
    return "", text


def is_interrogative(text: str) -> bool:
    """True when a clause is phrased as a question (aux/wh-word first)."""
    text = _strip_discourse(text)
    words = text.split()
    if words[:2] == ["do", "not"] and (len(words) < 3 or words[2] not in _PRONOUNS):
        return False  # "don't give me full solutions, okay?" is an imperative with a tag
    return bool(words) and (words[0] in _INTERROGATIVE_STARTS or " ".join(words[:2]) in _INTERROGATIVE_STARTS)


def _split_pieces(sentence: str) -> list[tuple[str, str]]:
    """(normalised, original) pieces; the break regex runs on the normalised text and the
    original is cut at the same word counts, which is good enough to read casing."""
    norm = normalise(sentence)
    pieces = [p for p in _CLAUSE_BREAK.split(norm) if p and p.strip(" ,.")]
    originals = _align_originals(sentence, pieces)
    return list(zip(pieces, originals))


def _align_originals(sentence: str, pieces: list[str]) -> list[str]:
    """Best-effort original-cased text for each normalised piece (casing only matters for names)."""
    out: list[str] = []
    lowered = sentence.replace("\u2019", "'").lower()
    cursor = 0
    for piece in pieces:
        head = piece.split()[0] if piece.split() else piece
        found = lowered.find(head, cursor)
        if found < 0:
            out.append(piece)
            continue
        end = found + len(piece) + 8  # contractions grow when expanded; a little slack is fine
        out.append(sentence[found:end])
        cursor = found + 1
    return out


def clauses(sentence: str, sentence_index: int = 0) -> list[Clause]:
    """All clauses of one sentence with their mood (assert / hypothetical / question)."""
    question = sentence.rstrip().rstrip("\"')").endswith("?")
    out: list[Clause] = []
    hypothetical_sentence = False
    for norm, original in _split_pieces(sentence):
        text = _strip_discourse(norm)
        if not text:
            continue
        for clause_text, lead in _expand_as_a(text):
            mood = _mood(clause_text, lead, question, hypothetical_sentence)
            if lead in _HYPOTHETICAL_LEADS:
                hypothetical_sentence = True  # the main clause of a conditional is hypothetical too
            out.append(Clause(clause_text, original, mood, lead, sentence_index))
    return out


def _expand_as_a(text: str) -> list[tuple[str, str]]:
    """'as a 52-year-old, should i ...' -> ('i am a 52-year-old', 'as') + the rest."""
    lead, body = _lead_of(text)
    if lead == "as":
        match = _AS_A.match(text)
        if match and not _LIFE_STAGES.match(match.group(1)) and len(match.group(1).split()) <= 8:
            article = text.split()[1]
            rest = match.group(2).strip()
            pieces = [("i am " + article + " " + match.group(1).strip(), "as")]
            if rest:
                pieces.append((rest, ""))
            return pieces
        if match and _LIFE_STAGES.match(match.group(1)):
            return [("back when i was a " + match.group(1) + " " + match.group(2), "when")]
    return [(body if lead else text, lead)]


def _mood(text: str, lead: str, question: bool, hypothetical_sentence: bool) -> str:
    if lead in _HYPOTHETICAL_LEADS or text.startswith(("what if ", "if ")):
        return "hypothetical"
    if hypothetical_sentence and re.search(r"\b(would|could|might)\b", text):
        return "hypothetical"
    if lead:  # since / because / when / as-a clauses assert their content even inside questions
        return "assert"
    if question and is_interrogative(text):
        return "question"
    return "assert"


# Possessive noun phrases that presuppose a fact even inside a question.
_PRESUPPOSING = re.compile(
    r"\bmy (?:(\d+|two|three|four|five|six|seven|eight|nine|ten) )?(kids|children|sons|daughters|son|"
    r"daughter|wife|husband|partner|dog|dogs|cat|cats|brother|brothers|sister|sisters|car|house|flat|"
    r"apartment|boyfriend|girlfriend)\b")


def claim_clauses(sentence: str) -> list[str]:
    """The assertive clauses of a sentence, with claims inside questions kept.

    Hypothetical clauses are dropped; interrogative clauses contribute only what their
    possessive phrases presuppose ("should my 3 kids ..." -> "i have 3 kids").
    """
    claims: list[str] = []
    for clause in clauses(sentence):
        if clause.mood == "assert":
            claims.append(clause.text)
        elif clause.mood == "question":
            claims += [_presupposition(m) for m in _PRESUPPOSING.finditer(clause.text)]
    return claims


def _presupposition(match: re.Match[str]) -> str:
    count, noun = match.group(1), match.group(2)
    return f"i have {count} {noun}" if count else f"i have my {noun}"


def text_clauses(text: str) -> list[Clause]:
    """Clauses of a whole turn, sentence by sentence."""
    out: list[Clause] = []
    for index, sentence in enumerate(split_sentences(text)):
        out += clauses(sentence, index)
    return out
