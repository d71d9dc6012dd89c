"""Claim clauses: sentences cut at punctuation and connectives (JSON into its string
values), each with its details and entities; who may make claims (self-descriptions,
address) and a listing's template words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from agentmem.models.runtime import pause_point
from agentmem.quarantine.poison.details import URL, GENERIC, detail_terms
from agentmem.quarantine.statements import Statements

# --------------------------------------------------------------------------- clauses

# Clause boundaries: strong punctuation, dashes, brackets, quotes, JSON syntax, and a comma
# or connective that opens a new clause. Pieces too small to state anything are merged back.
_BOUNDARY = re.compile(
    r"\s*(?:[;|\n{}\[\]()\"“”]|:(?=\s)|\s[—–-]\s|[—–]|,(?=\s)|"
    r"\s(?=(?:and|but|so|because|since|although|though|whereas|while|which|unless|until|"
    r"otherwise|then)\s))\s*",
    re.IGNORECASE)
MIN_CLAUSE_TERMS = 2
TEMPLATE_ROWS = 4  # an untrusted result of this many rows or more is read as a listing ...
TEMPLATE_SHARE = 0.5  # ... whose details repeated by this share of its rows are its template


@dataclass
class Clause:
    row: int
    position: int
    text: str
    details: frozenset[str]  # detail_terms minus GENERIC
    entities: frozenset[str] = frozenset()  # the details that are numbers or names


_NAME = re.compile(r"(?<![\w'’])(?:[A-Z][A-Za-z]*[A-Z0-9][\w-]*|[A-Z][a-z][\w-]*|[\w-]*\d[\w-]*)")


@lru_cache(maxsize=1 << 16)
def entities_of(text: str) -> frozenset[str]:
    """Numbers, codes and names (capitalised words past the first): details a paraphrase
    keeps verbatim, so a supporting statement must state them."""
    found = []
    for match in _NAME.finditer(text):
        word = match.group()
        if match.start() == 0 and word[1:].islower() and not any(ch.isdigit() for ch in word):
            continue  # a capital that only opens the clause
        found.append(word)
    return frozenset(detail_terms(" ".join(found))) - GENERIC


def _is_value(detail: str) -> bool:
    """Numbers, dates, days, months and times (``#12``, ``d3-2``, ``dd12``, ``m3``, ``t15:00``)."""
    if detail[:1] == "#":
        return True
    return detail[:1] in "dtm" and (detail[1:2].isdigit() or (detail[:2] == "dd" and detail[2:3].isdigit()))


_JSON_KEY = re.compile(r'"[\w .-]{1,40}"\s*:')


@lru_cache(maxsize=1 << 16)
def split_clauses(text: str) -> tuple[str, ...]:
    """The clauses of one sentence (or of a JSON blob: its string values), in order."""
    pieces = [p.strip(" ,.'") for p in _BOUNDARY.split(_JSON_KEY.sub(" | ", text))]
    pieces = [p for p in pieces if p and not URL.fullmatch(p)]  # a link states nothing
    out: list[str] = []
    pending = ""
    for piece in pieces:
        candidate = f"{pending} {piece}".strip() if pending else piece
        if len(_claim_details(candidate)) < MIN_CLAUSE_TERMS:
            pending = candidate
            continue
        out.append(candidate)
        pending = ""
    if pending:
        if out:
            out[-1] = f"{out[-1]} {pending}"
        else:
            out.append(pending)
    return tuple(out)


# A clause led by the speaker ("I", "my", "we" in its first three words), about no one
# addressed, reporting no look-up, action or record: what the speaker says of themselves.
_LEAD = r"^\W*(?:[\w'’-]+\W+){0,2}"  # the speaker within a clause's first three words
_SINGULAR = r"i|i['’](?:m|ve|d|ll)|me|my|myself"
_SELF_LED = re.compile(rf"{_LEAD}(?:{_SINGULAR}|we|we['’](?:re|ve|d|ll)|our|us)\b", re.IGNORECASE)
_SELF_LED_SINGULAR = re.compile(rf"{_LEAD}(?:{_SINGULAR})\b", re.IGNORECASE)
_ABOUT_THEM = re.compile(r"\byou(?:rs?|rself|['’](?:re|ve|d|ll))?\b", re.IGNORECASE)
_REPORTS = re.compile(
    r"\b(?:check|verif|confirm|found|look(?:ed|ing)? (?:up|into|at)|see\b|saw\b|records?\b|show|"
    r"accord|mention|said\b|told\b|not(?:ed|es)\b|remember|recall|search|book|reserv|cancel|"
    r"refund|process|sent\b|send\b|schedul|updat|escalat|submit|calculat|analy[sz])",
    re.IGNORECASE)


# A message's leading time stamp ("[1:56 pm on 8 May, 2023] ...") and a name after a greeting
# or an interjection ("Hey Tim", "Congrats Joanna!"): who and when, not what is claimed.
_STAMP = re.compile(r"^\s*\[[^\]\n]{1,60}\]\s*")
_VOCATIVE = re.compile(
    r"\b((?i:hey|hi|hello|bye|goodbye|thanks|thank you|cheers|congrats|congratulations|dear|"
    r"welcome back|nice to meet you|great to see you|good to see you|see you|take care)[,!]?)"
    r"\s+[A-Z][a-z]+\b(?![ -][A-Z])"
    r"|\b((?i:wow|yo|yeah|yes|cool|sorry|oh|morning|evening)),?\s+[A-Z][a-z]+(?=\s*(?:[,!.?]|$))")


@lru_cache(maxsize=1 << 16)
def without_address(text: str) -> str:
    """The sentence without its time stamp and the addressee's name after a greeting."""
    return _VOCATIVE.sub(lambda m: m.group(1) or m.group(2), _STAMP.sub("", text))


@lru_cache(maxsize=1 << 16)
def is_self_description(text: str, plural: bool = True) -> bool:
    """Whether a clause describes its speaker ("I'm training for a marathon", "my kids love
    the beach") rather than the world, the addressee or a look-up the speaker reports ("I
    checked: the refund went through" reports a fact; "as I mentioned, ..." repeats one).
    ``plural``: "we", "our" and "us" are the speaker too (a person and their family); not
    where the speaker is an organisation's assistant, whose "all our host families live
    within a 20-minute walk" states the organisation's terms."""
    led = _SELF_LED if plural else _SELF_LED_SINGULAR
    return bool(led.search(text)) and not _ABOUT_THEM.search(text) and not _REPORTS.search(text)


def _claim_details(text: str) -> frozenset[str]:
    return frozenset(d for d in detail_terms(text) if d[:1] != "@") - GENERIC


def clauses_of(statements: Statements, rows: list[int]) -> list[Clause]:
    """The claim clauses of these rows (clauses with at least two details), an untrusted
    listing's template words left out (``_template_words``)."""
    out = []
    template = _template_words(statements, rows)
    for number, row in enumerate(rows):
        if number % 64 == 0:
            pause_point()
        position = int(statements.position[row])
        shared = template.get(position)
        for text, details, entities in _text_clauses(statements.texts[row]):
            if shared:
                details, entities = details - shared, entities - shared
                if len(details) < MIN_CLAUSE_TERMS:
                    continue
            out.append(Clause(row, position, text, details, entities))
    return out


def _template_words(statements: Statements, rows: list[int]) -> dict[int, frozenset[str]]:
    """Per untrusted tool result cut into ``TEMPLATE_ROWS`` rows or more (a listing: search
    hits, catalogue records), the details that at least ``TEMPLATE_SHARE`` of its rows repeat.
    Those are the listing's format and topic ("A desk lamp with a steel frame, shipped from
    Oslo." in every record of a product search), not claims: across a shopping agent's
    searches they chained into a "recurring claim" that withheld every record."""
    by_position: dict[int, list[int]] = {}
    for row in rows:
        if statements.trust[row] == "untrusted":
            by_position.setdefault(int(statements.position[row]), []).append(row)
    out = {}
    for position, members in by_position.items():
        if len(members) < TEMPLATE_ROWS:
            continue
        counts: dict[str, int] = {}
        for row in members:
            for detail in {d for _, details, _ in _text_clauses(statements.texts[row]) for d in details}:
                counts[detail] = counts.get(detail, 0) + 1
        shared = frozenset(d for d, n in counts.items() if n >= TEMPLATE_SHARE * len(members))
        if shared:
            out[position] = shared
    return out


@lru_cache(maxsize=1 << 16)
def _text_clauses(text: str) -> tuple[tuple[str, frozenset[str], frozenset[str]], ...]:
    """(clause, details, entities) of each claim clause of a sentence. By content: every
    reply reads the clauses of the whole window again, and a sentence's never change."""
    out = []
    for clause in split_clauses(without_address(text)):
        details = _claim_details(clause)
        if len(details) >= MIN_CLAUSE_TERMS:
            entities = (entities_of(clause) & details) | {d for d in details if _is_value(d)}
            out.append((clause, details, frozenset(entities)))
    return tuple(out)
