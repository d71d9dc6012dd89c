"""Context poisoning: a claim the assistant (or an untrusted source) keeps repeating, that no
authority ever supported.

An unsupported claim made once is a hallucination; made again and again, it feeds on itself,
because each repetition in the context makes the next one likelier. Detection works on
CLAUSES: a long assistant sentence bundles several claims ("your order shipped on May 3 with
DHL, and it will arrive by Friday"), of which one may come from a tool and the other be
invented. What is withheld is still a whole sentence (a corpus row); clauses decide which.

1. Claims. Every sentence of the assistant, of an untrusted tool, or of third-party text a
   trusted tool relays is cut into clauses at punctuation and connectives (JSON falls apart
   into its string values; an untrusted tool's JSON frame, the keys and short fields around
   its records, is no claim: a search API's keys and URL pattern recur in every answer). A
   clause keeps its *details*: content words folded to a stem,
   numbers as values ("1,940", "$1.28M"), dates and times as tokens whatever their spelling
   ("March 2" = "2024-03-02", "3 pm" = "15:00"), generic conversation words dropped.
2. Support, per clause. An authority unit (a trusted tool's whole result; a user or
   system-prompt sentence with its neighbour) supports a clause when it states most of its
   details *together* (strong), or states every number, date and name and half of the rest,
   or answers a tool call that asked about the rest (weak). A clause that reads like an
   authority sentence (cosine above ``support_similarity``) and repeats its values is
   supported too. "The pass covers the Nozomi" is not supported by a user who mentions a
   pass and a timetable that lists a Nozomi. The user supports only what they said before
   the claim first appeared: an echo confirms nothing.
3. Candidate groups. Clauses without strong support are joined across turns by meaning
   (cosine above ``recurrence_similarity``), by related meaning and a shared specific word,
   or by two shared specific words.
4. Claims that recur. Within a group, a clause's *gap* is what the authority unit closest
   to it does not state; gap words in two turns are the claim's anchors. Members chain when
   they share an anchor and a related meaning, or say the same thing in other words (with the
   same amounts). A chain over ``min_occurrences`` turns, made at least twice without even
   weak support, is poison, if the assistant (or third-party text a trusted tool relays)
   made it in two of those turns at least, or an untrusted source said the same statement
   each time (cosine ``SAME_CLAIM_SIMILARITY``): a search tool's results about one topic
   share its names and words from result to result ("the Jews constituted ..." in four
   passages about Warsaw, each with its own year and share), which is the source's subject,
   not a claim feeding on itself; the assistant repeating one of them is (every poisoned
   claim of the poison dev sets is the assistant's, twice or more). The same call (name and
   arguments) returning the same clause again counts once: an agent re-running a search
   reads one page twice, the page does not say it twice. A mostly supported clause joins it
   only through a detail the chain states most times, never when it gives other, supported
   amounts; clauses elsewhere
   that repeat the chain's novel details (said by no authority) join it too. A chain of more
   than ``LOOSE_CHAIN_TURNS`` turns with no detail said in most of them is links of links
   across a chatty conversation, not one claim.
5. Whose claim. With no tool in the conversation, nothing but the speaker can vouch for the
   speaker's own life: a self-description ("my kids love the beach"; not "I checked: your
   refund went through") is not a claim about the world. Between peers (no tool, no system
   prompt: two people chatting, a persona chat) a claim must also repeat a name, number or
   date of its own; greetings' names and message time stamps are not details.

Cost: term sets, clause splits and clause vectors are cached by text (a clause is embedded
once per process; a clause that is its whole sentence reuses the stored sentence vector), and
what a unit states by its words; repeated authority statements are one unit; support uses an
index from details to units (arrays: a long session's common words hold thousands) and
skips user units later than the earliest that already backs the clause; grouping is one
clause-by-clause similarity matrix over the window, carried over with its close pairs from the
previous detection for the clauses the two windows share (``agentmem.quarantine.cosines``). What a unit states of a clause is cached
by content (the next reply re-checks almost the same pairs), and the session-wide tables
(the units' index, words' turn counts) are extended by each reply's new rows, not rebuilt
(LoCoMo text, 600+ turns: ~28 -> ~15 ms a detection). The claims are the window's, the
authorities the whole session's (a fact the user gave at turn 5 still backs turn 1,900): on
a 2,000-turn session (window 200) one detection takes ~60 ms on a quiet 2-core box (211 ms
before the index arrays and the skips), ~11 ms at 200 turns.
"""

from __future__ import annotations

import datetime
import math
import re
import threading
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, TypeVar

import numpy as np

from agentmem.lexical import terms
from agentmem.models.runtime import pause_point
from agentmem.quarantine.cosines import clause_cosines, close_pairs
from agentmem.quarantine.statements import Statements, canonical_claim

Encoder = Callable[[list[str]], np.ndarray]


@dataclass
class PoisonFinding:
    claim: str  # canonical text of the first occurrence
    rows: list[int]  # statement rows of every occurrence
    positions: list[int]
    score: float  # mean similarity of the occurrences to the first one
    reason: str
    support: float = 0.0  # the best support found (below the bar)
    members: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- terms

_MONTH_NAMES = ("january", "february", "march", "april", "may", "june", "july", "august",
                "september", "october", "november", "december")
_MONTHS = {name: str(number) for number, name in enumerate(_MONTH_NAMES, start=1) if name != "may"}
_NUMBER_WORDS = {word: str(number) for number, word in enumerate(
    "zero _ two three four five six seven eight nine ten eleven twelve".split())}
_NUMBER_WORDS.update({"twenty": "20", "thirty": "30", "forty": "40", "fifty": "50",
                      "sixty": "60", "hundred": "100", "twice": "2", "half": "50", "halv": "50"})

# Words that say nothing about which claim a clause makes: conversation glue, hedges,
# evaluations. They neither count as a claim's details nor need support.
GENERIC = frozenset("""
also actually again ahead already always anyway anything around away back best better bit
certainly check clear clearly come could definitely done easy either else enough even ever
every everything exactly fine get give glad go going good great guess happy help here hope
however idea instead just keep kind know let like likely look lot make maybe mean mention
might mind much must need never nice note nothing now often ok okay perhaps please pretty
probably quick quite rather real really right say see seem sense should show simply since so
something soon sorry still straight sure take tell thank thanks thing think though today
told too totally true try typical within may typically usual usually want way well whatever
will would yes yet sound absolutely course perfect wonderful awesome fair understand hi hello hey able
case recommend suggest worry problem don doesn didn isn aren wasn weren won can couldn
wouldn shouldn haven hasn hadn us due end ending one ones found remember recap summary
draft correct choice enjoy welcome interesting basically honestly heads plus news another
several few many various
""".split())

_SPLIT_ALNUM = re.compile(r"[a-z]+|\d+")
_MONTH = (r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|"
          r"sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)")
_TEMPORAL = re.compile(
    r"(?P<iso>(?<!\d)(?P<iy>\d{4})-(?P<im>\d{1,2})-(?P<id>\d{1,2})(?!\d))"
    r"|(?P<ym>(?<![\d-])(?P<yy>(?:19|20)\d{2})-(?P<ym_m>0?[1-9]|1[0-2])(?![\d-]))"
    rf"|(?P<md>\b(?P<mdm>{_MONTH})\.?\s+(?P<mdd>\d{{1,2}})(?:st|nd|rd|th)?\b(?![:.]\d))"
    rf"|(?P<dm>\b(?P<dmd>\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?(?P<dmm>{_MONTH})\b)"
    r"|(?P<hm>(?<![\d.:])(?P<h>\d{1,2}):(?P<m>\d{2})(?!\d)(?:\s*(?P<ap>[ap])\.?m\b\.?)?)"
    r"|(?P<hap>(?<![\d.:])(?P<h2>\d{1,2})\s*(?P<ap2>[ap])\.?m\b\.?)"
    r"|(?P<ord>(?<![\w.])(?P<day>[12]?\d|3[01])(?:st|nd|rd|th)\b)",
    re.IGNORECASE)
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_WEEKDAY_ABBREVIATION = re.compile(r"\b(Mon|Tues?|Weds?|Thu(?:rs?)?|Fri|Sat|Sun)\b\.?")
_WEEKDAY_OF = {name[:3]: name for name in _WEEKDAYS}


def _month(name: str) -> str:
    name = name.lower().rstrip(".")
    return str(next(i for i, full in enumerate(_MONTH_NAMES, start=1) if full.startswith(name[:3])))


def _hour(hour: str, half: str | None) -> int:
    value = int(hour)
    if half and half.lower() == "p" and value < 12:
        value += 12
    if half and half.lower() == "a" and value == 12:
        value = 0
    return value


def _temporal(text: str) -> tuple[str, set[str]]:
    """Dates and clock times as single tokens ("d3-2", "t15:00"), whatever their spelling
    ("March 2", "2 March", "2024-03-02"; "3 pm", "15:00"); the text without them."""
    tokens: set[str] = set()

    def replace(match: re.Match) -> str:
        g = match.groupdict()
        if g["iso"]:
            tokens.update({f"d{int(g['im'])}-{int(g['id'])}", number_token(float(g["iy"]))})
            try:  # the weekday of the date ("Saturday 8 February" for 2025-02-08)
                day = datetime.date(int(g["iy"]), int(g["im"]), int(g["id"])).weekday()
                tokens.add(f"@{int(g['im'])}-{int(g['id'])}={_normalise(_WEEKDAYS[day])}")
            except ValueError:
                pass
        elif g["ym"]:
            tokens.update({f"m{int(g['ym_m'])}", number_token(float(g["yy"]))})
        elif g["md"]:
            tokens.add(f"d{_month(g['mdm'])}-{int(g['mdd'])}")
        elif g["dm"]:
            tokens.add(f"d{_month(g['dmm'])}-{int(g['dmd'])}")
        elif g["hm"]:
            tokens.add(f"t{_hour(g['h'], g['ap'])}:{g['m']}")
        elif g["hap"]:
            tokens.add(f"t{_hour(g['h2'], g['ap2'])}:00")
        else:
            tokens.add(f"dd{int(g['day'])}")  # "the 12th": a day of some month
        return " "

    text = _WEEKDAY_ABBREVIATION.sub(lambda m: _WEEKDAY_OF[m.group(1)[:3].lower()], text)
    return _TEMPORAL.sub(replace, text), tokens


_NUMBER = re.compile(
    r"(?<![\w.,])[$€£]?(?P<int>\d{1,3}(?:,\d{3})+|\d+)(?P<frac>\.\d+)?"
    r"(?:\s*(?P<unit>%|percent|[kK]|[mM]|million|bn|billion)(?![a-zA-Z]))?(?!\w|[.,]\d)")
_SCALE = {"k": 1e3, "m": 1e6, "million": 1e6, "bn": 1e9, "billion": 1e9}
STEM = 6  # words match on their first letters: prescription ~ prescriber, deliver ~ delivery


def number_token(value: float) -> str:
    if value == int(value) and abs(value) < 1e15:
        return f"#{int(value)}"
    return f"#{value:.6g}"


def _precision(token: str) -> float:
    """How exactly a number was said: "4.2" to 0.1, "371000" (said "371K") to 1000, "2020"
    exactly. A statement with more digits states it when it rounds to it."""
    body = token[1:]
    if "e" in body:
        return 0.0
    if "." in body:
        return 10.0 ** -len(body.split(".")[1])
    zeros = len(body) - len(body.rstrip("0"))
    return 10.0 ** zeros if zeros >= 3 and len(body) >= 5 else 0.0


def _numbers(text: str) -> tuple[str, set[str]]:
    """Numbers as values ("1,940" and "1940", "4.2%" and "0.042"); the text without them."""
    tokens: set[str] = set()

    def replace(match: re.Match) -> str:
        value = float(match.group("int").replace(",", "") + (match.group("frac") or ""))
        unit = (match.group("unit") or "").lower()
        tokens.add(number_token(value * _SCALE.get(unit, 1)))  # a share matches as 4.2 or 0.042
        return " "

    return _NUMBER.sub(replace, text), tokens


def _normalise(word: str) -> str:
    if word.isdigit():
        return number_token(float(word))
    if word in _MONTHS:
        return f"m{_MONTHS[word]}"
    if word in _NUMBER_WORDS:
        return number_token(float(_NUMBER_WORDS[word]))
    if len(word) > 5 and word.endswith("ly"):
        word = word[:-2]
    if len(word) > 5 and word.endswith("y"):
        word = word[:-1]
    if len(word) > 4 and word.endswith("e"):
        word = word[:-1]
    if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "aeiousl":
        word = word[:-1]
    if word in _NUMBER_WORDS:
        return number_token(float(_NUMBER_WORDS[word]))
    return word[:STEM]


GENERIC = frozenset(GENERIC | {_normalise(w) for w in GENERIC})


@lru_cache(maxsize=1 << 16)
def detail_terms(text: str) -> frozenset[str]:
    """Normalised content words, dates and times: what must match for two texts to state the
    same detail."""
    rest, out = _temporal(text)
    rest, numbers = _numbers(rest)
    out |= numbers
    for word in terms(rest):
        for part in _SPLIT_ALNUM.findall(word):
            if len(part) > 1 or part.isdigit() or word == part:
                out.add(_normalise(part))
    return frozenset(out)


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
    pieces = [p for p in pieces if p]
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
_SELF_LED = re.compile(
    r"^\W*(?:[\w'’-]+\W+){0,2}(?:i|i['’](?:m|ve|d|ll)|me|my|myself|we|we['’](?:re|ve|d|ll)|our|us)\b",
    re.IGNORECASE)
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
def is_self_description(text: str) -> bool:
    """Whether a clause describes its speaker ("I'm training for a marathon", "my kids love
    the beach") rather than the world, the addressee or a look-up the speaker reports ("I
    checked: the refund went through" reports a fact; "as I mentioned, ..." repeats one)."""
    return bool(_SELF_LED.search(text)) and not _ABOUT_THEM.search(text) and not _REPORTS.search(text)


def _claim_details(text: str) -> frozenset[str]:
    return frozenset(d for d in detail_terms(text) if d[:1] != "@") - GENERIC


# --------------------------------------------------------------------------- vectors

_CACHE_SIZE = 50_000
_cache: OrderedDict[str, np.ndarray] = OrderedDict()
_cache_lock = threading.Lock()


def _default_encoder() -> Encoder:
    from agentmem.models.embedder import default_embedder

    return default_embedder().encode


def _clause_vectors(texts: list[str], encode: Encoder | None) -> np.ndarray | None:
    """Vectors of clause texts, each embedded once per process (LRU by text)."""
    with _cache_lock:
        missing = [t for t in dict.fromkeys(texts) if t not in _cache]
    if missing:
        try:
            fresh = (encode or _default_encoder())(missing)
        except Exception:  # noqa: BLE001 - no embedder: sentence vectors stand in
            return None
        with _cache_lock:
            for text, vector in zip(missing, fresh):
                _cache[text] = np.asarray(vector, dtype=np.float32)
            while len(_cache) > _CACHE_SIZE:
                _cache.popitem(last=False)
    with _cache_lock:
        for text in texts:
            _cache.move_to_end(text)
        return np.vstack([_cache[t] for t in texts]) if texts else None


# --------------------------------------------------------------------------- detection

SUPPORT_COVERAGE = 0.75  # share of a clause's details one authority unit must state
ENTITY_COVERAGE = 0.5  # weak support: this share, with every number, date and name
MIN_BARE_TURNS = 1  # turns where the claim is made without weak support, at least
MIN_VOICED_TURNS = 2  # turns where the assistant (or relayed text) makes the claim, at least
SAME_CLAIM_SIMILARITY = 0.9  # ... unless every occurrence is the same statement (least cosine)
NEVER = 10**9
UNITS_EXAMINED = 8  # candidates whose coverage is computed exactly, per clause


@dataclass
class _Unit:
    """What one authority said in one place: a trusted tool's result, or a user/system
    sentence with its neighbour. ``asked``: the words of the tool call a result answers
    (its subject, never its values), which back a claim only weakly."""

    position: int
    trust: str
    words: frozenset[str]
    asked: frozenset[str] = frozenset()
    rows: tuple[int, ...] = ()  # the authority sentences it speaks for (for support by meaning)

    def __post_init__(self) -> None:
        # Derived once per distinct content: every call rebuilds the session's units, and a
        # long session's units are mostly the same as on the previous call.
        (self.numbers, self.weekdays, self.exact, self.with_asked, self.prefixes,
         self._keys) = _stated(self.words, self.asked)

    def index_keys(self) -> frozenset[str]:
        """Index keys: a clause detail can only be stated by a unit sharing one of them."""
        return self._keys

    def states(self, detail: str, asked: bool = False) -> bool:
        words = self.with_asked if asked else self.exact
        if detail in words:
            return True
        head = detail[:1]
        if head == "#":
            value, step = float(detail[1:]), _precision(detail)
            tolerance = step / 2 + 1e-9 * max(1.0, abs(value))
            i = bisect_left(self.numbers, value - tolerance)
            return i < len(self.numbers) and self.numbers[i] <= value + tolerance
        if len(detail) < 4 or _is_value(detail):
            return False
        # one word a prefix of the other: conversion ~ conv, shipment ~ ship
        return detail in self.prefixes or any(p in words for p in _word_prefixes(detail))

    def covered(self, details: frozenset[str], asked: bool = False) -> frozenset[str]:
        """The details this unit states (``asked``: counting its call's words)."""
        return _covered(self.words, self.asked, details, asked)


@lru_cache(maxsize=1 << 15)  # ~3,000 pairs a reply; ~350 bytes an entry
def _covered(words: frozenset[str], asked_words: frozenset[str], details: frozenset[str],
             asked: bool) -> frozenset[str]:
    """``_Unit.covered`` by content. Every reply re-checks the window's clauses against the
    session's units, and from one reply to the next almost all of those pairs are the same:
    cached, a reply pays only for its new clauses and units."""
    unit = _Unit(-1, "", words, asked_words)
    out = frozenset(d for d in details if unit.states(d, asked))
    if unit.weekdays and len(out) < len(details):  # "Saturday", said with a date it falls on
        out |= {d for d in details - out if unit.weekdays.get(d, set()) & details}
    return out


@lru_cache(maxsize=1 << 15)
def _stated(words: frozenset[str], asked: frozenset[str]) -> tuple[
        list[float], dict[str, set[str]], frozenset[str], frozenset[str], frozenset[str], frozenset[str]]:
    """What a unit with these words states: its numbers (sorted), weekdays (weekday -> the
    date tokens that fall on it), exact words with the dates' implied months, days and years,
    the same with the call's words, word prefixes, and its index keys. Read-only."""
    values = [float(w[1:]) for w in words if w[:1] == "#"]
    shares = [v * 100 for v in values if 0 < abs(v) < 1]  # 0.042 is said "4.2%"
    numbers = sorted(values + shares)
    weekdays: dict[str, set[str]] = {}
    for word in words:
        if word[:1] == "@":
            date, weekday = word[1:].split("=")
            weekdays.setdefault(weekday, set()).update({f"d{date}", f"dd{date.split('-')[1]}"})
    dates = [w[1:].split("-") for w in words if w[:1] == "d" and w[1:2].isdigit()]
    implied = {f"m{m}" for m, _ in dates} | {f"dd{d}" for _, d in dates}  # "in March", "the 12th"
    exact = words | implied | {f"#{d}" for _, d in dates}  # "9 through 12 September"
    with_asked = exact | asked
    prefixes = frozenset(w[:k] for w in words | asked if len(w) > 4 for k in range(4, len(w)))
    keys = with_asked | prefixes | {_magnitude(v) for v in numbers}
    return numbers, weekdays, frozenset(exact), frozenset(with_asked), prefixes, frozenset(keys)


def _magnitude(value: float) -> str:
    """Index bucket of a number: its order of magnitude and leading digit."""
    value = abs(value)
    if value == 0:
        return "~0"
    exponent = math.floor(math.log10(value))
    return f"~{exponent}:{int(value / 10 ** exponent + 1e-9)}"


@lru_cache(maxsize=1 << 16)
def _word_prefixes(word: str) -> tuple[str, ...]:
    return tuple(word[:k] for k in range(4, len(word)))


@lru_cache(maxsize=1 << 16)
def _lookup_keys(detail: str) -> tuple[str, ...]:
    """The index keys under which a unit that could state this detail is filed."""
    if detail[:1] == "#":
        value = float(detail[1:])
        half = _precision(detail) / 2 + 1e-9 * max(1.0, abs(value))
        return tuple({_magnitude(value - half), _magnitude(value), _magnitude(value + half)})
    return (detail, *_word_prefixes(detail))


class _Units:
    """The authority units of a session with an index from detail keys to units."""

    def __init__(self, units: list[_Unit]) -> None:
        self.all = units
        self.index = _unit_index([unit.index_keys() for unit in units])
        self._none = np.zeros(0, dtype=np.int32)
        # per unit, whether a user said it and where: candidates filter on these in numpy
        self._user = np.asarray([u.trust == "user" for u in units], dtype=bool)
        self._position = np.asarray([u.position for u in units], dtype=np.int64)
        self._held: dict[str, np.ndarray] = {}  # detail -> holders; clauses share words

    def _holders(self, detail: str) -> np.ndarray:
        """The units that may state the detail (distinct, ascending)."""
        held = self._held.get(detail)
        if held is None:
            found = [self.index[key] for key in _lookup_keys(detail) if key in self.index]
            held = (self._none if not found else
                    found[0] if len(found) == 1 else np.unique(np.concatenate(found)))
            self._held[detail] = held
        return held

    def states(self, detail: str, *, before: int) -> bool:
        """Whether any unit states the detail (user units only before ``before``)."""
        return any(self.all[i].states(detail) for i in self._holders(detail).tolist()
                   if self.all[i].trust != "user" or self.all[i].position < before)

    def candidates(self, clause: Clause, *, before: int | None = None, share: float = 0.0,
                   most: int | None = None, start: int = 0) -> list[_Unit]:
        """Units that may state at least ``share`` of the clause's details, most promising
        first (user units only before ``before`` when given; the first ``most`` only; units
        from number ``start`` on)."""
        held = [h for h in (self._holders(detail) for detail in clause.details) if len(h)]
        if not held:
            return []
        hits = np.bincount(np.concatenate(held), minlength=len(self.all))
        need = max(1, share * len(clause.details) - 1e-9)
        chosen = np.flatnonzero(hits[start:] >= need) + start
        if before is not None:
            chosen = chosen[~self._user[chosen] | (self._position[chosen] < before)]
        order = chosen[np.lexsort((chosen, -hits[chosen]))]  # most hits, then earliest
        return [self.all[i] for i in order[:most].tolist()]


# Session-wide tables, extended reply by reply. A session's statements grow at the end, so
# the tables of the previous reply's statements are a prefix of this reply's: each is kept
# with the input it was computed from, and a call whose input extends a kept one computes
# only the rows past it (a different or edited input computes from scratch). Entries are
# never changed once stored, so concurrent callers can share them.
_GROWN_KEPT = 8  # inputs kept per table: a few sessions' worth
_grown_lock = threading.Lock()


@dataclass(frozen=True, eq=False)  # kept by identity: its arrays have no truth value
class _IndexEntry:
    keys: list[frozenset[str]]  # per unit, its index keys (the input)
    index: dict[str, np.ndarray]  # key -> the units filed under it, ascending


_index_kept: list[_IndexEntry] = []


def _unit_index(keys: list[frozenset[str]]) -> dict[str, np.ndarray]:
    """Index key -> the units (ascending) filed under it. Arrays: a long session's common
    words are keys to thousands of units. Rebuilding it every reply cost more than the
    detection over the window on long sessions; units only ever append (a repeated statement
    joins its first unit), so the previous reply's index is extended by the new units."""
    base = _extended(_index_kept, lambda e: (e.keys,), keys)
    start = len(base.keys) if base is not None else 0
    grown: dict[str, list[int]] = {}
    for i in range(start, len(keys)):
        for key in keys[i]:
            grown.setdefault(key, []).append(i)
    index = dict(base.index) if base is not None else {}
    for key, found in grown.items():
        fresh = np.asarray(found, dtype=np.int32)
        old = index.get(key)
        array = fresh if old is None else np.concatenate((old, fresh))
        array.flags.writeable = False  # shared with later replies' indexes
        index[key] = array
    _keep(_index_kept, _IndexEntry(list(keys), index), base)
    return index


_Entry = TypeVar("_Entry")


def _extended(kept: list[_Entry], inputs: Callable[[_Entry], tuple[Any, ...]],
              *current: Any) -> _Entry | None:
    """The kept entry this call extends: each of its inputs (lists or arrays) a prefix of the
    current input in the same place, the longest such entry; None: compute from scratch."""
    def extends(entry: _Entry) -> bool:
        return all(len(old) <= len(new) and (np.array_equal(new[:len(old)], old)
                                             if isinstance(old, np.ndarray) else new[:len(old)] == old)
                   for old, new in zip(inputs(entry), current))

    with _grown_lock:
        return max((e for e in kept if extends(e)),
                   key=lambda e: sum(len(old) for old in inputs(e)), default=None)


def _keep(kept: list[_Entry], entry: _Entry, replaced: _Entry | None) -> None:
    """Store a table's new entry in place of the one it extended (the session moved on)."""
    with _grown_lock:
        if replaced is not None and replaced in kept:
            kept.remove(replaced)
        kept.append(entry)
        del kept[:-_GROWN_KEPT]


@dataclass(frozen=True)
class ClaimScan:
    """The window's claim clauses, read once per detection (``scan_claims``)."""

    since_position: int  # the window's first position
    clauses: list[Clause]  # the claim clauses of the window
    claimant: np.ndarray  # per row: a claim's source (assistant, untrusted, relayed text)
    framed: np.ndarray  # per row: a JSON answer's frame (keys, URL pattern)
    peers: bool  # no tool and no system prompt: people talking


def scan_claims(statements: Statements, since_position: int) -> ClaimScan:
    """The claim clauses of the turns from ``since_position`` on, and who may make claims."""
    claimant = np.asarray([t in {"assistant", "untrusted"} or bool(r)
                           for t, r in zip(statements.trust, statements.relayed)], dtype=bool)
    framed = claimant & statements.frame if len(statements.frame) else np.zeros_like(claimant)
    claimant &= ~framed  # a JSON answer's keys and URL pattern recur by nature: never claims
    # Questions count: "How about 'The Tower Barcelona Didn't Want'?" repeats a claim too.
    claim_rows = np.flatnonzero(claimant & (statements.position >= since_position)).tolist()
    clauses = clauses_of(statements, claim_rows)
    # With no tool in the conversation nothing but the speaker can vouch for the speaker's own
    # life ("my kids love the beach"): a self-description is not a claim about the world.
    # With no system prompt either (two people talking), only a checkable detail (a name, a
    # number, a date) can anchor a claim; chit-chat recurs by nature ("keep going!").
    tools = any(t in {"tool", "untrusted"} for t in statements.trust)
    if not tools:
        clauses = [c for c in clauses
                   if statements.trust[c.row] != "assistant" or not is_self_description(c.text)]
    return ClaimScan(since_position, clauses, claimant, framed,
                     not tools and "system" not in statements.trust)


def unembedded_clauses(statements: Statements, settings, scan: ClaimScan) -> list[str]:
    """The clause texts ``detect_poison`` would embed that no earlier run has: a caller with
    the inference pool embeds them in parallel chunks (``remember_clause_vectors``) first,
    where the detection, one job, would embed them in one serial batch (an agent's new search
    result: ~35 clauses, 160-300 ms on the call path)."""
    clauses = scan.clauses
    if len({c.position for c in clauses}) < settings.min_occurrences:
        return []
    texts = dict.fromkeys(clauses[k].text for k in _own_vectors(statements, clauses))
    with _cache_lock:
        return [text for text in texts if text not in _cache]


def remember_clause_vectors(texts: list[str], vectors: list[np.ndarray | None]) -> None:
    """Clause vectors computed outside the detection (None: shed; embedded when needed)."""
    with _cache_lock:
        for text, vector in zip(texts, vectors):
            if vector is not None:
                _cache[text] = np.asarray(vector, dtype=np.float32)
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)


def detect_poison(statements: Statements, settings, *, confirmed: np.ndarray | None = None,
                  since_position: int = 0, encode: Encoder | None = None,
                  scan: ClaimScan | None = None) -> list[PoisonFinding]:
    """Unsupported recurring claims among the turns from ``since_position`` on (older records
    persist on their own). ``confirmed``: vectors of claims a human confirmed. ``encode``:
    the embedder for clause vectors (the one that made ``statements.vectors``; default: the
    shipped MiniLM). ``scan``: these statements' ``scan_claims``, when the caller has it."""
    if scan is None or scan.since_position != since_position:
        scan = scan_claims(statements, since_position)
    clauses, claimant, framed, peers = scan.clauses, scan.claimant, scan.framed, scan.peers
    if len({c.position for c in clauses}) < settings.min_occurrences:
        return []
    authority = [i for i in range(statements.size) if not claimant[i] and not framed[i]
                 and statements.trust[i] in {"system", "user", "tool"}
                 and not statements.texts[i].rstrip().endswith("?")]
    units = authority_units(statements, authority)
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
    found: list[tuple[list[int], set[str], set[str], set[str]]] = []
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
        gaps = {k: unsupported_details(clauses[k], index.candidates(
                    clauses[k], before=first, most=UNITS_EXAMINED))
                for k in members}
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
            found.append((flagged, own, novel, amounts))
            taken.update(flagged)
    out = []
    for flagged, anchors, novel, amounts in found:
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
                    f"recurring details ({', '.join(_surface(anchors, [clauses[k].text for k in members]))}) "
                    f"come from no user, system prompt or trusted tool")))
    return out


@dataclass(frozen=True, eq=False)
class _SupportEntry:
    authority: list[int]  # the input: authority rows,
    units: list[tuple[int, str, frozenset[str], frozenset[str]]]  # their units' content,
    bar: float  # and support_similarity
    found: dict[tuple[int, str], tuple[bool, bool, int]]  # (row, clause) -> strong, weak, user


_support_kept: list[_SupportEntry] = []


def _support(statements: Statements, clauses: list[Clause], authority: list[int],
             units: list[_Unit], index: _Units, vectors: np.ndarray, bar: float
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per clause: stated by the system prompt or a trusted tool (strong); its values and
    names are, and most of the rest (weak); the earliest user statement of the same (user).

    By words first (one unit states the clause's details together), then by meaning for what
    the words left open (the clause reads like an authority's sentence and states the same
    values and names). Each is an OR or a minimum over units, so a clause seen on the previous
    reply keeps its result and is checked against the new units and sentences only (kept like
    the other session tables): every reply re-examined the whole window against every unit,
    the pass's cost at 2,000 turns."""
    content = [(u.position, u.trust, u.words, u.asked) for u in units]
    base = _extended(_support_kept, lambda e: ((e.bar,), e.authority, e.units), (bar,), authority,
                     content)
    old_units = len(base.units) if base is not None else 0
    old_rows = len(base.authority) if base is not None else 0
    strong = np.zeros(len(clauses), dtype=bool)
    weak = np.zeros(len(clauses), dtype=bool)
    user_strong = np.full(len(clauses), NEVER)
    known = np.zeros(len(clauses), dtype=bool)
    for k, clause in enumerate(clauses):
        got = base.found.get((clause.row, clause.text)) if base is not None else None
        if got is not None:
            strong[k], weak[k], user_strong[k] = got
            known[k] = True
    for k, clause in enumerate(clauses):  # by words
        if strong[k]:
            continue
        pause_point()
        for unit in index.candidates(clause, share=ENTITY_COVERAGE,
                                     start=old_units if known[k] else 0):
            if unit.trust == "user" and unit.position >= user_strong[k]:
                continue  # a later user statement cannot back it earlier
            level = support_level(unit, clause)
            if level and unit.trust != "user":
                strong[k] |= level == 2
                weak[k] = True
            elif level == 2:  # what a user said about themselves backs only the same statement
                user_strong[k] = min(user_strong[k], unit.position)
            if strong[k]:
                break
    for seen in (False, True):  # by meaning: new clauses against every sentence, seen ones new
        pending = [k for k in range(len(clauses)) if not strong[k] and known[k] == seen]
        rows = authority[old_rows:] if seen else authority
        close = _close_units(statements, rows, units, vectors[pending], bar)
        for i, k in enumerate(pending):
            clause = clauses[k]
            for unit in close(i):
                if unit.trust == "user" and unit.position >= user_strong[k]:
                    continue
                if clause.entities <= unit.covered(clause.entities):
                    if unit.trust != "user":
                        strong[k] = True
                        break
                    user_strong[k] = min(user_strong[k], unit.position)
    # only this reply's clauses: one that left the window was not checked against the units
    # added since, so if it came back (a wider window) it is checked afresh
    found = {(c.row, c.text): (bool(strong[k]), bool(weak[k]), int(user_strong[k]))
             for k, c in enumerate(clauses)}
    _keep(_support_kept, _SupportEntry(list(authority), content, bar, found), base)
    return strong, weak, user_strong


def _close_units(statements: Statements, authority: list[int], units: list[_Unit],
                 vectors: np.ndarray, bar: float) -> Callable[[int], list[_Unit]]:
    """Per clause (by index), the units of the authority sentences it reads like (cosine >=
    bar), in position order. Lazy: a long session with repetitive turns has thousands of
    close pairs per clause, and the caller stops at the first that supports it."""
    if not authority:
        return lambda i: []
    number_of = {row: k for k, unit in enumerate(units) for row in unit.rows}
    unit_number = np.asarray([number_of.get(row, -1) for row in authority], dtype=np.int64)
    close = vectors @ statements.vectors[authority].T >= bar

    def units_for(i: int) -> list[_Unit]:
        # numpy, not a dict per close sentence: at 2,000 turns a clause reads like ~200
        # authority sentences, and every pending clause asked on every reply
        found = unit_number[close[i]]
        found = found[found >= 0]
        _, first = np.unique(found, return_index=True)
        return [units[k] for k in found[np.sort(first)].tolist()]

    return units_for


def _same_stems(clauses: list[Clause]) -> list[Clause]:
    """The clauses with each word replaced by the shortest word of the session that begins
    it (at least 4 letters): what support matching does by prefix, grouping does by name."""
    words = sorted({w for c in clauses for w in c.details if not _is_value(w)}, key=len)
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
    out = []
    for c in clauses:
        if c.details.isdisjoint(canon):
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


def _vectors_for(statements: Statements, clauses: list[Clause], encode: Encoder | None) -> np.ndarray:
    """A clause that is its whole sentence reuses the sentence's vector; others are embedded."""
    vectors = statements.vectors[[c.row for c in clauses]].astype(np.float32, copy=True)
    own = _own_vectors(statements, clauses)
    if own:
        fresh = _clause_vectors([clauses[k].text for k in own], encode)
        if fresh is not None and fresh.shape[1] == vectors.shape[1]:
            vectors[own] = fresh
    return vectors


def _own_vectors(statements: Statements, clauses: list[Clause]) -> list[int]:
    """The clauses that need a vector of their own: not their whole sentence."""
    counts: dict[int, int] = {}
    for clause in clauses:
        counts[clause.row] = counts.get(clause.row, 0) + 1
    return [k for k, c in enumerate(clauses)
            if counts[c.row] > 1 or len(c.text) < 0.8 * len(statements.texts[c.row])]


def authority_units(statements: Statements, rows: list[int]) -> list[_Unit]:
    """A trusted tool's result is one unit (a record's fields belong together); a user or
    system sentence is a unit with its neighbour in the same message. One unit per distinct
    statement of one trust class: the earliest, speaking for the rows of every repetition.
    Support asks what was stated and how early, so a repeated status line or a user saying
    the same again adds nothing but cost (an agent polling a tool for 2,000 turns made every
    clause check thousands of identical units).

    Extended reply by reply (see ``_keep``): building a 2,000-turn session's units again on
    every reply was half of the poison pass."""
    by_position: dict[int, list[int]] = {}
    for row, position in zip(rows, statements.position[rows].tolist()):
        by_position.setdefault(position, []).append(row)
    calls = getattr(statements, "calls", {})
    messages = []
    for position, members in sorted(by_position.items()):
        trust = statements.trust[members[0]]
        messages.append((position, trust, tuple(statements.texts[r] for r in members),
                         calls.get(position, "") if trust == "tool" else "", tuple(members)))
    base = _extended(_units_kept, lambda e: (e.messages,), messages)
    units = list(base.units) if base is not None else []
    first = dict(base.first) if base is not None else {}
    for position, trust, texts, call, message_rows in messages[len(base.messages) if base else 0:]:
        pause_point()
        for words, asked, which in _message_units(trust, texts, call):
            rows_of = tuple(message_rows[i] for i in which)
            key = (trust, words, asked)
            if key not in first:
                first[key] = len(units)
                units.append(_Unit(position, trust, words, asked, rows_of))
            else:  # a repetition: a new unit object, the kept table's stays as it was
                earlier = units[first[key]]
                units[first[key]] = replace(earlier, rows=earlier.rows + rows_of)
    _keep(_units_kept, _UnitsEntry(messages, units, first), base)
    return list(units)


@dataclass(frozen=True, eq=False)
class _UnitsEntry:
    messages: list[tuple[int, str, tuple[str, ...], str, tuple[int, ...]]]  # the input
    units: list[_Unit]
    first: dict[tuple[str, frozenset[str], frozenset[str]], int]  # unit key -> index


_units_kept: list[_UnitsEntry] = []


@lru_cache(maxsize=1 << 14)
def _message_units(trust: str, texts: tuple[str, ...], call: str) -> tuple[
        tuple[frozenset[str], frozenset[str], tuple[int, ...]], ...]:
    """The units of one authority message's sentences: (words, asked, which sentences). By
    content: every reply rebuilds the whole session's units and a message's never change;
    the same word sets each time also keep ``_stated``'s look-ups cheap (hashes kept)."""
    words = [detail_terms(text) for text in texts]
    if trust == "tool":
        asked = detail_terms(call) - entities_of(call) if call else frozenset()
        asked = frozenset(w for w in asked if w[:1] != "#")  # a period, a subject; no amounts
        return ((frozenset().union(*words), asked, tuple(range(len(texts)))),)
    return tuple((own | (words[i + 1] if i + 1 < len(words) else frozenset()), frozenset(), (i,))
                 for i, own in enumerate(words))


def support_level(unit: _Unit, clause: Clause) -> int:
    """2: the unit states the clause (most of its details); 1: it states its numbers, dates
    and names and half of the rest, or it is the answer to a call that asked about the rest;
    0: neither."""
    need = len(clause.details)
    covered = unit.covered(clause.details)
    if len(covered) >= SUPPORT_COVERAGE * need:
        return 2
    if unit.asked:
        covered = unit.covered(clause.details, asked=True)
        if len(covered) >= SUPPORT_COVERAGE * need and clause.entities <= covered:
            return 1
    if clause.entities and clause.entities <= covered and len(covered) >= ENTITY_COVERAGE * need:
        return 1
    return 0


def unsupported_details(clause: Clause, units: list[_Unit]) -> frozenset[str]:
    """The clause's details that the authority unit closest to it does not state: what the
    claim adds to what is known. ``units``: candidates, most shared details first."""
    best: frozenset[str] = frozenset()
    for unit in units[:UNITS_EXAMINED]:
        covered = unit.covered(clause.details)
        if len(covered) > len(best):
            best = covered
    if len(best) < 2:
        return clause.details  # one shared word is a coincidence, not the clause's source
    return clause.details - best


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
    near = close.tolist()  # these only: a common unsupported word is in thousands
    same_values = np.asarray([not (amounts[i] and amounts[j]) or not amounts[i].isdisjoint(amounts[j])
                              for i, j in near], dtype=bool)
    shares_gap = np.asarray([not gapped[i].isdisjoint(gapped[j]) for i, j in near], dtype=bool)
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
    specific: dict[str, bool] = {}
    for clause in clauses:
        for word in clause.details:
            if word not in specific:
                specific[word] = _specific(word, frequency, total_turns)
    # The pairs as lists, not n x n matrices: a chatty session's window has ~2,000 clauses,
    # and counting shared words into a matrix cost more than the rest of the grouping.
    if same_meaning is None:
        same_meaning = close_pairs(similarity, bar)
    word_pairs, shared = _shared_counts([{w for w in c.details if specific[w]} for c in clauses])
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
