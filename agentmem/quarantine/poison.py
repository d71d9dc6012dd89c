"""Context poisoning: a claim the assistant (or an untrusted source) keeps repeating, that no
authority ever supported.

An unsupported claim made once is a hallucination; made again and again, it feeds on itself,
because each repetition in the context makes the next one likelier. Detection works on
CLAUSES, not sentences: a long assistant sentence bundles several claims ("your order
shipped on May 3 with DHL, and it will arrive by Friday"), of which one may be backed by a
tool and the other invented. So:

1. Every claim sentence (assistant, untrusted tool, third-party text relayed by a trusted
   tool) is cut into clauses at punctuation and connectives; JSON from an untrusted tool
   falls apart into its string values the same way.
2. Each clause is checked for support on its own. A trusted source supports it when one of
   its statements states the same details: the clause's content words (normalised: plural
   and tense folded, month names and number words as numbers, ``NJ482`` as ``nj 482``)
   occur together in one authority unit (a trusted tool's whole result, or a sentence and
   its neighbour from the user or the system prompt), or the clause reads like one of its
   sentences (cosine above ``support_similarity``). Co-occurrence matters: "the pass covers
   the Nozomi" is not supported by a user who mentions a pass and a timetable listing a
   Nozomi. The user supports only what they said before the claim first appeared: a user
   echoing the assistant confirms nothing.
3. Unsupported clauses are grouped across turns: same meaning (cosine above
   ``recurrence_similarity``), or related meaning plus a shared specific word (a name, a
   number, a term few turns use), or several shared specific words (paraphrases share their
   details more reliably than their wording).
4. A group is poison when it spans ``min_occurrences`` turns and some specific detail
   recurs in it. What is withheld is every sentence holding one of its clauses.

Cost: clause splitting and term sets are string work; clauses that differ from their
sentence are embedded once (cached by text, so an incremental session embeds each new
clause once), grouping is one clause-by-clause matrix over the window.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from agentmem.lexical import terms
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
    "zero one two three four five six seven eight nine ten eleven twelve".split())}
_NUMBER_WORDS.update({"twenty": "20", "thirty": "30", "forty": "40", "fifty": "50",
                      "sixty": "60", "hundred": "100", "twice": "2", "half": "50"})

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
told too totally true try typical within may typically usual usually want way well whatever will would
yes yet sound absolutely course perfect wonderful awesome fair understand hi hello hey able
case recommend suggest worry problem don doesn didn isn aren wasn weren won can couldn
wouldn shouldn haven hasn hadn us
""".split())

_SPLIT_ALNUM = re.compile(r"[a-z]+|\d+")
_MONTH = (r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|"
          r"sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)")
_TEMPORAL = re.compile(
    r"(?P<iso>(?<!\d)(?P<iy>\d{4})-(?P<im>\d{1,2})-(?P<id>\d{1,2})(?!\d))"
    rf"|(?P<md>\b(?P<mdm>{_MONTH})\.?\s+(?P<mdd>\d{{1,2}})(?:st|nd|rd|th)?\b(?![:.]\d))"
    rf"|(?P<dm>\b(?P<dmd>\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?(?P<dmm>{_MONTH})\b)"
    r"|(?P<hm>(?<![\d.:])(?P<h>\d{1,2}):(?P<m>\d{2})(?!\d)(?:\s*(?P<ap>[ap])\.?m\b\.?)?)"
    r"|(?P<hap>(?<![\d.:])(?P<h2>\d{1,2})\s*(?P<ap2>[ap])\.?m\b\.?)",
    re.IGNORECASE)


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
            tokens.update({f"d{int(g['im'])}-{int(g['id'])}", str(int(g["iy"]))})
        elif g["md"]:
            tokens.add(f"d{_month(g['mdm'])}-{int(g['mdd'])}")
        elif g["dm"]:
            tokens.add(f"d{_month(g['dmm'])}-{int(g['dmd'])}")
        elif g["hm"]:
            tokens.add(f"t{_hour(g['h'], g['ap'])}:{g['m']}")
        else:
            tokens.add(f"t{_hour(g['h2'], g['ap2'])}:00")
        return " "

    return _TEMPORAL.sub(replace, text), tokens


def _normalise(word: str) -> str:
    if word.isdigit():
        return word.lstrip("0") or "0"
    if word in _MONTHS:
        return _MONTHS[word]
    if word in _NUMBER_WORDS:
        return _NUMBER_WORDS[word]
    if len(word) > 5 and word.endswith("ly"):
        word = word[:-2]
    if len(word) > 5 and word.endswith("y"):
        word = word[:-1]
    if len(word) > 4 and word.endswith("e"):
        word = word[:-1]
    if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "aeiousl":
        word = word[:-1]
    return word


GENERIC = frozenset(GENERIC | {_normalise(w) for w in GENERIC})


def detail_terms(text: str) -> frozenset[str]:
    """Normalised content words, dates and times: what must match for two texts to state the
    same detail."""
    rest, out = _temporal(text)
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


@dataclass
class Clause:
    row: int
    position: int
    text: str
    details: frozenset[str]  # detail_terms minus GENERIC
    entities: frozenset[str] = frozenset()  # the details that are numbers or names


_NAME = re.compile(r"(?<![\w'’])(?:[A-Z][A-Za-z]*[A-Z0-9][\w-]*|[A-Z][a-z][\w-]*|[\w-]*\d[\w-]*)")


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


def split_clauses(text: str) -> list[str]:
    """The clauses of one sentence (or of a JSON blob: its string values), in order."""
    pieces = [p.strip(" ,.'") for p in _BOUNDARY.split(text)]
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
        elif pending:
            out.append(pending)
    return out


def _claim_details(text: str) -> frozenset[str]:
    return detail_terms(text) - GENERIC


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
ENTITY_COVERAGE = 0.5  # ... or this share, when the unit states every number, date and name


@dataclass
class _Unit:
    """What one authority said in one place: a trusted tool's result, or a user/system
    sentence with its neighbour."""

    position: int
    trust: str
    words: frozenset[str]


def detect_poison(statements: Statements, settings, *, confirmed: np.ndarray | None = None,
                  since_position: int = 0, encode: Encoder | None = None) -> list[PoisonFinding]:
    """Unsupported recurring claims among the turns from ``since_position`` on (older records
    persist on their own). ``confirmed``: vectors of claims a human confirmed. ``encode``:
    the embedder for clause vectors (the one that made ``statements.vectors``; default: the
    shipped MiniLM)."""
    claimant = np.asarray([t in {"assistant", "untrusted"} or bool(r)
                           for t, r in zip(statements.trust, statements.relayed)], dtype=bool)
    claim_rows = [i for i in np.flatnonzero(claimant & (statements.position >= since_position)).tolist()
                  if not statements.texts[i].rstrip().endswith("?")]
    clauses = clauses_of(statements, claim_rows)
    if len({c.position for c in clauses}) < settings.min_occurrences:
        return []
    authority = [i for i in range(statements.size) if not claimant[i]
                 and statements.trust[i] in {"system", "user", "tool"}
                 and not statements.texts[i].rstrip().endswith("?")]
    units = authority_units(statements, authority)
    vectors = _vectors_for(statements, clauses, encode)
    # Support by meaning: a clause that reads like an authority's sentence.
    if authority:
        cosine = vectors @ statements.vectors[authority].T
        by_user = np.asarray([statements.trust[i] == "user" for i in authority])
        first_close_user = [int(statements.position[authority][(row >= settings.support_similarity) & by_user].min(initial=10**9))
                            for row in cosine]
        trusted_close = (cosine[:, ~by_user] >= settings.support_similarity).any(axis=1)
    else:
        first_close_user = [10**9] * len(clauses)
        trusted_close = np.zeros(len(clauses), dtype=bool)
    user_from: list[int] = []  # the earliest user statement backing the clause (10**9: none)
    open_: list[int] = []  # clauses that no system prompt or trusted tool backs
    for k, clause in enumerate(clauses):
        trusted, first_user = clause_support(clause, units)
        if trusted or trusted_close[k]:
            user_from.append(-1)
            continue
        user_from.append(min(first_user, first_close_user[k]))
        open_.append(k)
    if len({clauses[k].position for k in open_}) < settings.min_occurrences:
        return []
    frequency = _turn_frequency(statements)
    total_turns = len({int(p) for p in statements.position})
    found: list[tuple[list[int], set[str], frozenset[str]]] = []
    taken: set[int] = set()
    for group in group_clauses([clauses[k] for k in open_], vectors[open_], settings,
                               frequency, total_turns):
        members = [open_[i] for i in group]
        first = min(clauses[k].position for k in members)
        members = [k for k in members if user_from[k] >= first]  # an echo supports nothing
        if len({clauses[k].position for k in members}) < settings.min_occurrences:
            continue
        usable = [u for u in units if u.trust != "user" or u.position < first]
        gaps = {k: unsupported_details(clauses[k], usable) for k in members}
        anchors = recurring(members, clauses, gaps)
        flagged = _anchored(members, anchors, gaps, vectors, settings.recurrence_similarity)
        if len({clauses[k].position for k in flagged}) < settings.min_occurrences:
            continue
        vocabulary = frozenset().union(*(u.words for u in usable))
        found.append((flagged, anchors, vocabulary))
        taken.update(flagged)
    out = []
    for flagged, anchors, vocabulary in found:
        # The claim's novel details in clauses the grouping left out (a sentence that also
        # states a supported detail, a loose paraphrase): the same claim again.
        novel = anchors - vocabulary
        extra = [k for k in range(len(clauses)) if k not in taken and clauses[k].details & novel
                 and float((vectors[flagged] @ vectors[k]).max()) >= settings.recurrence_similarity / 2]
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
                    f"recurring details ({', '.join(sorted(anchors)[:5])}) come from no user, "
                    f"system prompt or trusted tool")))
    return out


def clauses_of(statements: Statements, rows: list[int]) -> list[Clause]:
    """The claim clauses of these rows (clauses with at least two details)."""
    out = []
    for row in rows:
        position = int(statements.position[row])
        for text in split_clauses(statements.texts[row]):
            details = _claim_details(text)
            if len(details) >= MIN_CLAUSE_TERMS:
                out.append(Clause(row, position, text, details, entities_of(text) & details))
    return out


def _vectors_for(statements: Statements, clauses: list[Clause], encode: Encoder | None) -> np.ndarray:
    """A clause that is its whole sentence reuses the sentence's vector; others are embedded."""
    vectors = statements.vectors[[c.row for c in clauses]].astype(np.float32, copy=True)
    counts: dict[int, int] = {}
    for clause in clauses:
        counts[clause.row] = counts.get(clause.row, 0) + 1
    own = [k for k, c in enumerate(clauses)
           if counts[c.row] > 1 or len(c.text) < 0.8 * len(statements.texts[c.row])]
    if own:
        fresh = _clause_vectors([clauses[k].text for k in own], encode)
        if fresh is not None and fresh.shape[1] == vectors.shape[1]:
            vectors[own] = fresh
    return vectors


def authority_units(statements: Statements, rows: list[int]) -> list[_Unit]:
    """A trusted tool's result is one unit (a record's fields belong together); a user or
    system sentence is a unit with its neighbour in the same message."""
    by_position: dict[int, list[int]] = {}
    for row in rows:
        by_position.setdefault(int(statements.position[row]), []).append(row)
    units = []
    for position, members in sorted(by_position.items()):
        trust = statements.trust[members[0]]
        words = [detail_terms(statements.texts[r]) for r in members]
        if trust == "tool":
            units.append(_Unit(position, trust, frozenset().union(*words)))
            continue
        for i, own in enumerate(words):
            units.append(_Unit(position, trust, own | (words[i + 1] if i + 1 < len(words) else frozenset())))
    return units


def supports(unit_words: frozenset[str], clause: Clause) -> bool:
    """Whether an authority unit states the clause: most of its details, or half of them
    including every number, date and name."""
    covered = len(clause.details & unit_words)
    return covered >= SUPPORT_COVERAGE * len(clause.details) or (
        bool(clause.entities) and clause.entities <= unit_words
        and covered >= ENTITY_COVERAGE * len(clause.details))


def clause_support(clause: Clause, units: list[_Unit]) -> tuple[bool, int]:
    """(backed by the system prompt or a trusted tool, position of the earliest user
    statement that backs it, 10**9 if none)."""
    first_user = 10**9
    for unit in units:
        if supports(unit.words, clause):
            if unit.trust != "user":
                return True, first_user
            first_user = min(first_user, unit.position)
    return False, first_user


def unsupported_details(clause: Clause, units: list[_Unit]) -> frozenset[str]:
    """The clause's details that the authority unit closest to it does not state: what the
    claim adds to what is known."""
    best = max(units, key=lambda u: len(clause.details & u.words), default=None)
    return clause.details - best.words if best is not None else clause.details


def recurring(members: list[int], clauses: list[Clause], gaps: dict[int, frozenset[str]]) -> set[str]:
    """Unsupported details that occur in at least two different turns of the group."""
    seen: dict[str, set[int]] = {}
    for k in members:
        for word in gaps[k]:
            seen.setdefault(word, set()).add(clauses[k].position)
    return {w for w, positions in seen.items() if len(positions) >= 2}


def _anchored(members: list[int], anchors: set[str], gaps: dict[int, frozenset[str]],
              vectors: np.ndarray, bar: float) -> list[int]:
    """The members whose unsupported part is the recurring one, and paraphrases of those
    (same meaning, other words)."""
    anchored = [k for k in members if gaps[k] & anchors]
    rest = [k for k in members if k not in anchored]
    if anchored and rest:
        close = (vectors[rest] @ vectors[anchored].T).max(axis=1) >= bar
        anchored += [k for k, ok in zip(rest, close) if ok]
    return anchored


def _turn_frequency(statements: Statements) -> dict[str, int]:
    seen: dict[str, set[int]] = {}
    for row in range(statements.size):
        position = int(statements.position[row])
        for word in detail_terms(statements.texts[row]):
            seen.setdefault(word, set()).add(position)
    return {w: len(p) for w, p in seen.items()}


def _specific(word: str, frequency: dict[str, int], total_turns: int) -> bool:
    return word not in GENERIC and (any(ch.isdigit() for ch in word) or
                                     frequency.get(word, 0) <= max(4, total_turns // 3))


def group_clauses(clauses: list[Clause], vectors: np.ndarray, settings,
                  frequency: dict[str, int], total_turns: int) -> list[list[int]]:
    """Connected clauses of different turns: same meaning (cosine above the recurrence bar),
    related meaning (above half of it) and a shared specific word, or two shared specific
    words."""
    n = len(clauses)
    similarity = vectors @ vectors.T
    positions = np.asarray([c.position for c in clauses])
    bar = settings.recurrence_similarity
    specific = [{w for w in c.details if _specific(w, frequency, total_turns)} for c in clauses]
    parent = list(range(n))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    candidate = np.triu(positions[:, None] != positions[None, :], k=1)
    for i, j in zip(*np.nonzero(candidate)):
        shared = len(specific[i] & specific[j])
        if similarity[i, j] >= bar or (shared and similarity[i, j] >= bar / 2) or shared >= 2:
            parent[root(int(j))] = root(int(i))
    groups: dict[int, list[int]] = {}
    for i in range(n):
        groups.setdefault(root(i), []).append(i)
    return list(groups.values())


def _who(statements: Statements, rows: list[int]) -> str:
    sources = sorted({statements.sources[r] for r in rows})
    return " and ".join(sources)
