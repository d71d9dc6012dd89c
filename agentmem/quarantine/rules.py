"""The rule layer of the clash cascade: cheap, precise verdicts before any model runs.

Two texts of one speaker go in (the older said first); out comes either a typed verdict
(age 34 vs 52, vegetarian vs "I had a steak", "reply in French" vs "reply in English",
"never been to Japan" vs "in Osaka last year") or nothing. :func:`rule_clash` fires only on
slot/value conflicts that survive every guard (another person, hypothetical, past or
time-bounded, habit vs exception, announced update); :func:`rule_silent_ok` says when a
guard or a restatement already explains the pair, so the NLI backstop need not be asked.

Besides the typed facts of :mod:`agentmem.quarantine.slots`, one structural rule lives
here: two renderings of the same record (a tool's stock line, a flight status, a calendar
day) that agree on their labels but disagree on a number, time or date, or list items on
one side and "no events" on the other.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from functools import lru_cache

from agentmem.quarantine.claims import split_sentences, text_clauses
from agentmem.quarantine.slots import announces_update, clause_guard, conflict, extract_facts, relations

MIN_SCORE = 0.6  # verdicts below this are not returned at all


@dataclass(frozen=True)
class RuleVerdict:
    kind: str  # "value" | "name_place" | "negation" | "world_knowledge" | "instruction_reversal" | "profile"
    slot: str  # e.g. "age", "diet", "residence", "kids", "name:dog"
    older: str  # the conflicting value/evidence in the older text
    newer: str
    score: float  # confidence in [0, 1]
    reason: str  # one human-readable line


def rule_clash(older: str, newer: str, *, records: bool = True) -> RuleVerdict | None:
    """The most confident rule-level contradiction of ``older`` by ``newer`` (same speaker).
    ``records``: also compare them as two reads of one record (tool outputs)."""
    record = _record_verdict(older, newer) if records else None
    candidates = [v for v in (_fact_verdict(older, newer), record) if v is not None]
    candidates = [v for v in candidates if v.score >= MIN_SCORE]
    return max(candidates, key=lambda v: v.score) if candidates else None


def _fact_verdict(older: str, newer: str) -> RuleVerdict | None:
    found = conflict(extract_facts(older), extract_facts(newer))
    if found is None:
        return None
    from agentmem.quarantine.slots import display
    return RuleVerdict(found.kind, found.slot, display(found.older), display(found.newer), found.score,
                       found.reason)


# --------------------------------------------------------------------------- silent guard

_STOPWORDS = frozenset("""the a an and or but so to of in on at for with from by is are was were be been
being am i me my we our you your he she it they them his her its their this that these those there here
have has had do does did not no yes just very really too also then than as if when what which who how why
where would could should will can may might must about into over after before out up down all any some
more most much many one two get got like love want need know think make made go going went come back well
good great nice thanks thank okay ok sense makes sounds perfect cool awesome right idea fair noted funny
timing wow yeah yep sure lol haha hmm""".split())


def rule_silent_ok(older: str, newer: str) -> bool:
    """True when a guard says the pair is definitely not a clash (skip the NLI backstop too).

    No rule fires, and either the newer text asserts nothing (a bare question or a pure
    hypothetical), or every newer clause that shares content with the older text is guarded:
    explained by a fact pair (another person, hypothetical, time-qualified, update announced,
    or a restatement of the same value) or marked at clause level (past / time-bounded,
    hypothetical, another person as subject, a sentence that announces an update).
    """
    if rule_clash(older, newer) is not None:
        return False
    assertive = [c for c in text_clauses(newer) if c.mood == "assert"]
    if not assertive:
        return not _PRESUPPOSES.search(newer)  # a bare question asserts nothing; "my X" in it still might
    pairs = relations(extract_facts(older), extract_facts(newer))
    explained = {r.newer.evidence for r in pairs if _explains(r)}
    updated = {i for i, sentence in enumerate(split_sentences(newer)) if announces_update(sentence)}
    older_words = _content_words(older)
    checks = [(clause, _clause_guarded(clause, explained, updated)) for clause in assertive]
    relevant = [guarded for clause, guarded in checks if _content_words(clause.text) & older_words]
    if relevant:
        return all(relevant)
    contentful = [guarded for clause, guarded in checks if _content_words(clause.text)]
    return bool(contentful) and all(contentful)


def _clause_guarded(clause, explained: set[str], updated: set[int]) -> bool:
    if any(clause.text in e or e in clause.text for e in explained):
        return True
    return clause.sentence_index in updated or bool(clause_guard(clause.text))


_PRESUPPOSES = re.compile(r"\b(?:my|our|mine|since|because|as i|given that|when i|after i|the \w+ (?:i|"
                          r"we) (?:had|have|got|bought|did|took))\b", re.IGNORECASE)
# Incidental mentions ("my boss", "my car") relate two texts without settling whether they agree.
_INCIDENTAL = ("has:", "did:", "pet:pet")


def _explains(relation) -> bool:
    """A guarded or restating pair on a substantive slot explains the newer clause it comes from."""
    if relation.status not in ("guarded", "consistent") or relation.newer.slot.startswith(_INCIDENTAL):
        return False
    if relation.newer.value in ("working", "some") and relation.status == "consistent":
        return False
    return relation.status == "guarded" or relation.older.value == relation.newer.value


def _content_words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z][a-z'-]{2,}", text.lower()) if w not in _STOPWORDS}


# --------------------------------------------------------------------------- time-qualified reports

_DAYS = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
# A named day or part of one, relative to when it was said: what it qualifies happened (or
# holds) then, and says nothing of another day. Not "now" / "at the moment" / "currently" (the
# standing present: "I'm unemployed right now" vs "I work too much" is a contradiction), not a
# duration or a count of days ("last restock: 2 days ago" is a record's value), not the future
# (a plan for a day is changed, and the change supersedes it).
_TIME_ANCHOR = re.compile(
    r"\b(?:today|tonight|yesterday|last night|earlier today|the other day|"
    r"this (?:morning|afternoon)|"
    r"(?:yesterday|last|this past) (?:morning|afternoon|evening|night|week|weekend|" + _DAYS + r"))\b",
    re.IGNORECASE)
# "On Monday", "this week" name a past day only in a report of it ("on Monday we hiked", "this
# evening I cooked"); "my flight is on Friday", "my interview is this Thursday" are bookings,
# standing facts until they change.
_ON_DAY = re.compile(r"\b(?:on (?:" + _DAYS + r")|this (?:evening|week|weekend|" + _DAYS + r"))\b",
                     re.IGNORECASE)
_PAST_TENSE = re.compile(r"\b(?:was|were|did|had|went|ran|got|came|saw|made|took|ate|drank|left|met|"
                         r"spent|felt|swam|rode|drove|bought|wrote|read it|[a-z]{2,}ed)\b", re.IGNORECASE)


@lru_cache(maxsize=65536)  # every earlier statement is asked again at each new one
def time_qualified(text: str) -> bool:
    """Whether a statement is qualified by a day named relative to when it was said ("I ran 5k
    today", "Yesterday it was 15 degrees", "on Monday we hiked"): a report of that day, not a
    standing fact. Two such reports, or one and a standing fact, are not a contradiction
    ("Today I ran 10k" after "I ran 5k today", said on another day; "I'm at work today" and
    "I work from home"), the guard the slot rules apply to time-qualified facts
    (``slots.conflicts``: "time-qualified", "habit vs exception"), for the NLI backstop,
    which reads no qualifiers."""
    return _TIME_ANCHOR.search(text) is not None or (_ON_DAY.search(text) is not None
                                                     and _PAST_TENSE.search(text) is not None)


# --------------------------------------------------------------------------- same record, different value

_TOKEN = re.compile(r"\d{1,2}:\d{2}|\d+(?:[.,]\d+)*|[A-Za-z]+(?:[-'][A-Za-z]+)*|[^\sA-Za-z\d]")
_VALUE_TOKEN = re.compile(r"^(?:\d{1,2}:\d{2}|\d+(?:[.,]\d+)*|[$€£%]|am|pm|AM|PM)$")
_PLACEHOLDER = re.compile(r"^(?:tba|tbd|tbc|pending|unknown|n/?a|none|null|-+|\?+)$", re.IGNORECASE)
_EXPLAINED = re.compile(r"\b(?:updated?|changed?|delayed|rescheduled|revised|corrected|correction|now|sold|"
                        r"reserved|moved|previously|was|were|instead|new|cancell?ed|postponed|adjusted|"
                        r"since|after|remaining|left)\b", re.IGNORECASE)
_EMPTY = re.compile(r"^\s*(?:no (?:\w+ )?(?:events|meetings|appointments|results|items|entries|records?|"
                    r"matches|bookings|orders|stock|warranty|coverage|policy|reservations?|data|history)\b|"
                    r"none\b|nothing(?: scheduled)?\b|empty\b|0 (?:results|items|events)\b|free all day\b|"
                    r"not found\b)",
                    re.IGNORECASE)
_MIN_TOKENS = 6


def _record_verdict(older: str, newer: str) -> RuleVerdict | None:
    """Two renderings of one record that disagree on a value (tool outputs, status lines)."""
    best: RuleVerdict | None = None
    for old_line in _lines(older):
        for new_line in _lines(newer):
            verdict = _differing_fields(old_line, new_line) or _empty_vs_listed(old_line, new_line) or \
                _differing_values(old_line, new_line)
            if verdict and (best is None or verdict.score > best.score):
                best = verdict
    return best


# Fields whose value is expected to move between two reads of the same record.
_VOLATILE_KEY = re.compile(r"status|state|result|scan|updated?|as of|eta|estimated|location|current|"
                           r"progress|position|queue|time|timestamp|checked|retrieved|fetched|last|next|"
                           r"remaining|balance|note",
                           re.IGNORECASE)
_ID_KEY = re.compile(r"(?:^|_)id$|^id|number|serial|sku|booking|order|tracking|policy|patient|ticket|"
                     r"account|reservation|invoice", re.IGNORECASE)
_RECORD_CHANGE = re.compile(r"\b(?:revised|updated|corrected|exception|delay(?:ed)?|cancell?ed|"
                            r"refund(?:ed)?|modified|changed|amended|rebooked|reissued)\b", re.IGNORECASE)


def _record(line: str) -> tuple[tuple[str, ...], dict[str, str]] | None:
    """(identity, fields) of a 'key: value | key: value' line or a flat JSON object."""
    if line.startswith("{") and line.endswith("}"):
        try:
            data = json.loads(line)
        except ValueError:
            return None
        if not isinstance(data, dict):
            return None
        scalars = {k: v for k, v in data.items() if not isinstance(v, (dict, list))}
        fields = {str(k).lower(): str(v).strip().lower() for k, v in scalars.items()}
        identity = tuple(f"{k}={v}" for k, v in fields.items() if _ID_KEY.search(k))
        return (identity, fields) if identity and len(fields) >= 3 else None
    if line.count(" | ") < 2:
        return None
    keyed: dict[str, str] = {}
    unkeyed: list[str] = []
    for segment in re.split(r"\s+\|\s+", line):
        match = re.match(r"^([A-Za-z][\w ./()-]{0,30}?):\s*(.+)$", segment.strip())
        if match:
            keyed[match.group(1).strip().lower()] = match.group(2).strip().lower()
        else:
            unkeyed.append(segment.strip().lower())
    return (tuple(unkeyed), keyed) if unkeyed and len(keyed) >= 2 else None


_NEGATED_VALUE = re.compile(r"\b(?:not|none|no)\b")


def _differing_fields(old: str, new: str) -> RuleVerdict | None:
    """The same record (same identity) read twice with a field that changed for no stated reason."""
    a, b = _record(old), _record(new)
    if a is None or b is None or a[0] != b[0] or _RECORD_CHANGE.search(new):
        return None
    for key, old_value in a[1].items():
        new_value = b[1].get(key)
        if new_value is None or new_value == old_value or _VOLATILE_KEY.search(key) or _ID_KEY.search(key):
            continue
        if _PLACEHOLDER.match(old_value) or _PLACEHOLDER.match(new_value):
            continue
        numeric = bool(re.search(r"\d", old_value) and re.search(r"\d", new_value))
        negated = bool(_NEGATED_VALUE.search(old_value)) != bool(_NEGATED_VALUE.search(new_value))
        kind = "value" if numeric else "negation" if negated else "name_place"
        return RuleVerdict(kind, "record:" + key, old_value[:60], new_value[:60], 0.85,
                           f'{key}: "{old_value[:40]}" earlier, "{new_value[:40]}" now')
    return None


def _lines(text: str) -> list[str]:
    return [line.strip() for line in re.split(r"\n+", text) if line.strip()]


def _empty_vs_listed(old: str, new: str) -> RuleVerdict | None:
    """'Tue Oct 8: 15:00 Dentist' vs 'Tue Oct 8: no events' (same key, items vs nothing)."""
    old_key, _, old_body = old.partition(": ")
    new_key, _, new_body = new.partition(": ")
    same_key = old_key.strip().lower() == new_key.strip().lower()
    if not old_body or not new_body or not same_key or len(old_key) > 40:
        return None
    old_empty, new_empty = bool(_EMPTY.match(old_body)), bool(_EMPTY.match(new_body))
    if old_empty == new_empty or _RECORD_CHANGE.search(new_body):
        return None
    return RuleVerdict("negation", "record:" + old_key.strip()[:30], old_body.strip()[:60],
                       new_body.strip()[:60],
                       0.85,
                       f'{old_key.strip()}: "{old_body.strip()[:40]}" earlier, "{new_body.strip()[:40]}" now')


def _differing_values(old: str, new: str) -> RuleVerdict | None:
    a, b = _TOKEN.findall(old), _TOKEN.findall(new)
    if min(len(a), len(b)) < _MIN_TOKENS or len(split_sentences(old)) > 3:
        return None
    matcher = difflib.SequenceMatcher(None, [t.lower() for t in a], [t.lower() for t in b], autojunk=False)
    if matcher.ratio() < 0.6:
        return None
    diffs: list[tuple[str, str, str]] = []
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op != "replace":
            continue
        left, right = a[i1:i2], b[j1:j2]
        if any(_PLACEHOLDER.match(t) for t in left + right):
            return None
        if not all(_VALUE_TOKEN.match(t) for t in left + right):
            if any(t.isalpha() for t in left + right):
                return None  # a different label or entity: not the same record
            continue
        context = " ".join(a[max(0, i1 - 3):i1])
        if not re.search(r"[A-Za-z]", context):
            continue
        diffs.append((context, " ".join(left), " ".join(right)))
    if not diffs or _EXPLAINED.search(_only_new_words(a, b)) or _delta_explained(diffs, b):
        return None
    label, older_value, newer_value = diffs[0]
    return RuleVerdict("value", "record:" + label[-30:], older_value, newer_value, 0.85,
                       f'{label[-30:]}: "{older_value}" earlier, "{newer_value}" now')


def _only_new_words(a: list[str], b: list[str]) -> str:
    old_words = {t.lower() for t in a}
    return " ".join(t for t in b if t.lower() not in old_words)


def _delta_explained(diffs: list[tuple[str, str, str]], new_tokens: list[str]) -> bool:
    """'23 units' -> '20 units (3 reserved)': the newer text carries the difference itself."""
    numbers = {float(t.replace(",", "")) for t in new_tokens if re.fullmatch(r"\d+(?:[.,]\d+)?", t)}
    for _, left, right in diffs:
        try:
            delta = abs(float(left.replace(",", "")) - float(right.replace(",", "")))
        except ValueError:
            continue
        if delta and delta in numbers - {float(right.replace(",", ""))}:
            return True
    return False
