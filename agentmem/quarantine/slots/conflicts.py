"""Comparing facts: which pairs conflict, which a guard explains, and how a conflict reads."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from agentmem.quarantine import places
from agentmem.quarantine.slots.extract import _cached_facts
from agentmem.quarantine.slots.facts import Conflict, Fact
from agentmem.quarantine.slots.instructions import recalled_pair
from agentmem.quarantine.slots.lexicons import _UNIQUE_RELATIONS
from agentmem.quarantine.slots.people import _possession_pair
from agentmem.quarantine.slots.quantities import quantity_pair


@dataclass(frozen=True)
class Relation:
    """How an older and a newer fact relate: ``conflict``, ``consistent`` or ``guarded``."""

    older: Fact
    newer: Fact
    status: str
    kind: str = ""
    score: float = 0.0
    guard: str = ""


# Slots that describe a standing state: a future or hypothetical mention of them commits to nothing.
_STATE_FAMILIES = frozenset({"age", "residence", "dwelling", "religion", "origin", "visited", "kids",
                             "siblings", "brothers", "sisters",
                             "marital", "pet", "has", "job", "school", "speaks", "speaks_only",
                             "native_language", "nationality", "name", "diet", "avoids", "fav"})
_EXISTENCE_FAMILIES = frozenset({"kids", "siblings", "brothers", "sisters", "pet", "has", "marital", "job"})
_SIDE_JOB = re.compile(r"\b(?:volunteer|part[- ]time|on weekends|side (?:job|gig|hustle)|moonlight\w*|"
                       r"also|too|"
                       r"as well|freelance|in summers?|on the side)\b")
_PERMANENT_FAMILIES = frozenset({"origin", "alma_mater", "handedness"})
_GENERIC_JOBS = frozenset({"student", "homemaker", "business", "working", "retired", "none", "childcare"})


# A booking's details: an assistant offers them again, changed, when the user declines or the
# booking fails (an offer is a "proposal", a change on purpose "rebooked": slots/context.py).
_BOOKING_FAMILIES = frozenset({"when", "party_size"})


def _family(slot: str) -> str:
    return slot.split(":", 1)[0]


def _guard(older: Fact, newer: Fact) -> str:
    """Why a would-be conflict is not one ('' when nothing excuses it)."""
    family = _family(newer.slot)
    if "hypothetical" in older.qualifiers or "hypothetical" in newer.qualifiers:
        return "hypothetical"
    if family == "recalled":  # "as I said" claims no change: the update and mood guards do not apply
        return ""
    for fact in (older, newer):
        if "modal" in fact.qualifiers and not {"possessive",
                                               "presupposed"} & fact.qualifiers and family != "instr":
            return "hypothetical"
    if "update" in newer.qualifiers:
        return "update announced"
    if family in _BOOKING_FAMILIES:
        if "proposal" in older.qualifiers | newer.qualifiers:
            return "proposal"
        if "rebooked" in newer.qualifiers:
            return "changed on request"
    if "new" in newer.qualifiers and family in _EXISTENCE_FAMILIES | {"residence", "diet", "avoids"}:
        return "newly changed"
    if family in _STATE_FAMILIES and any("future" in f.qualifiers and "possessive" not in f.qualifiers
                                         for f in (older, newer)):
        return "future"
    if family in _PERMANENT_FAMILIES:
        return ""
    old_past = bool({"past", "bounded"} & older.qualifiers)
    new_past = bool({"past", "bounded"} & newer.qualifiers)
    if old_past != new_past:
        present = newer if old_past else older
        if "lifetime" not in present.qualifiers:
            return "time-qualified"
    elif old_past and new_past:
        return "time-qualified"
    if ({"habitual"} & older.qualifiers and {"occasion"} & newer.qualifiers) or \
            ({"occasion"} & older.qualifiers and {"habitual"} & newer.qualifiers):
        return "habit vs exception"
    return ""


def relations(older: list[Fact], newer: list[Fact]) -> list[Relation]:
    """Every comparable (older, newer) fact pair with its status."""
    out = []
    for old in older:
        for new in newer:
            outcome = _compare(old, new)
            if outcome is None:
                continue
            status, kind, score = outcome
            if old.subject != new.subject:
                out.append(Relation(old, new, "guarded", kind, 0.0, "different subject"))
                continue
            if status == "conflict":
                guard = _guard(old, new)
                if guard:
                    out.append(Relation(old, new, "guarded", kind, 0.0, guard))
                    continue
                score *= min(old.strength, new.strength) ** 0.5
                if "presupposed" in new.qualifiers:
                    score *= 0.95
            out.append(Relation(old, new, status, kind, score))
    return out


def conflict(older: list[Fact], newer: list[Fact]) -> Conflict | None:
    """The most confident conflict between older and newer facts of one speaker, if any."""
    best: Relation | None = None
    found = relations(older, newer)
    # a date or time the older statement also names is a range's other end ("check in March 1st
    # and check out March 7th" then "check-out is March 7th"), not a change
    restated = {(r.newer.slot, r.newer.value) for r in found
                if r.status == "consistent" and _family(r.newer.slot) == "when"}
    for relation in found:
        if relation.status == "conflict" and (relation.newer.slot, relation.newer.value) not in restated and (
                best is None or relation.score > best.score):
            best = relation
    if best is None:
        return None
    older_value, newer_value = display(best.older), display(best.newer)
    slot = _slot_name(best.older, best.newer)
    reason = f'{slot}: "{older_value}" earlier, "{newer_value}" now'
    return Conflict(best.kind, slot, best.older, best.newer, round(min(best.score, 1.0), 3), reason)


def _slot_name(older: Fact, newer: Fact) -> str:
    if older.slot == newer.slot:
        return older.slot
    families = {_family(older.slot), _family(newer.slot)}
    if families == {"closed", "visit_on"}:
        return "opening:" + older.slot.split(":", 1)[1]
    if families == {"avoids", "consumes"} or "avoids" in families:
        tags = [q for q in older.qualifiers | newer.qualifiers if q.startswith(("diet:", "allergy:",
                                                                                  "abstain:"))]
        tag = tags[0] if tags else "diet:"
        return {"diet": "diet", "allergy": "allergies", "abstain": "abstention"}[tag.split(":")[0]]
    return f"{older.slot}/{newer.slot}"


def display(fact: Fact) -> str:
    """A short human form of a fact's value for reasons."""
    if fact.slot.startswith("recalled:"):
        return ("asked for " if fact.polarity else "refused ") + fact.slot.split(":", 1)[1]
    tags = {q.split(":", 1)[0]: q.split(":", 1)[1] for q in fact.qualifiers if ":" in q}
    for key in ("item", "diet", "allergy", "abstain", "occ"):
        if key in tags:
            value = tags[key]
            if key == "allergy":
                value = "allergic to " + value
            elif key == "abstain":
                value = "no " + value
            return value if fact.polarity else "not " + value
    value = fact.value
    if value.startswith(("0:", "some:")):
        state, head = value.split(":", 1)
        value = ("no " if state == "0" else "my ") + head
    elif fact.slot == "age":
        low, high = value.split("-")
        value = low if low == high else f"{low}-{high}"
    elif value == "0":
        value = "none"
    elif value.startswith("?"):
        value = value[1:]
    elif ":" in value:
        value = value.split(":", 1)[1]
    return value if fact.polarity else "not " + value


def comparable(older: str, newer: str) -> bool:
    """Whether any fact of ``older`` and any of ``newer`` are compared at all (the same slot,
    or families ``_ACROSS`` relates). False settles a pair without running the comparisons:
    the call path checks a new message against hundreds of earlier ones, most about other
    things."""
    have, _ = _fact_keys(older)
    _, want = _fact_keys(newer)
    return not have.isdisjoint(want)


@lru_cache(maxsize=8192)
def _fact_keys(text: str) -> tuple[frozenset[str], frozenset[str]]:
    """(what the text's facts are: slots and families; what they are compared with: the same
    slots and the partner families)."""
    have: set[str] = set()
    want: set[str] = set()
    for fact in _cached_facts(text):
        family = _family(fact.slot)
        have |= {"slot:" + fact.slot, "family:" + family}
        want |= {"slot:" + fact.slot, *("family:" + p for p in _PARTNERS.get(family, ()))}
    return frozenset(have), frozenset(want)


def _compare(old: Fact, new: Fact) -> tuple[str, str, float] | None:
    """(status, kind, score) for a comparable pair, None when unrelated: facts of one slot
    by that slot's checker, facts of two families by ``_ACROSS``'s."""
    if old.slot == new.slot:
        checker = _SAME_SLOT.get(_family(old.slot))
    else:
        checker = _ACROSS.get(frozenset((_family(old.slot), _family(new.slot))))
    return checker(old, new) if checker else None


def _closed_vs_visit(old: Fact, new: Fact) -> tuple[str, str, float] | None:
    if old.slot.split(":", 1)[1] != new.slot.split(":", 1)[1]:
        return None
    return ("conflict", "world_knowledge", 0.8) if old.value == new.value else ("consistent", "", 0.0)


def _budget_then_spend(old: Fact, new: Fact) -> tuple[str, str, float] | None:
    """A budget stated, then a spend: only in that order."""
    return _budget_pair(old, new) if _family(old.slot) == "budget" else None


def _ranges(value: str) -> tuple[int, int]:
    low, high = value.split("-")
    return int(low), int(high)


def _age(old: Fact, new: Fact) -> tuple[str, str, float]:
    (a_low, a_high), (b_low, b_high) = _ranges(old.value), _ranges(new.value)
    if a_high < b_low - 1 or b_high < a_low - 1:
        if old.subject.startswith("other:") and old.subject[6:] not in _UNIQUE_RELATIONS and \
                "only" not in old.qualifiers | new.qualifiers:
            return "consistent", "value", 0.0
        return "conflict", "value", 0.95 if old.subject == "self" else 0.8
    return "consistent", "value", 0.0


def _count(old: Fact, new: Fact) -> tuple[str, str, float]:
    """Counts and existence: '0', 'some' (>=1), 'several' (>=2) or an exact number."""
    a, b = old.value, new.value
    if old.polarity != new.polarity:
        return "consistent", "", 0.0
    zero_a, zero_b = a == "0", b == "0"
    if zero_a != zero_b:
        return "conflict", "negation", 0.92
    if a.isdigit() and b.isdigit() and a != b:
        pet = _family(old.slot) == "pet"
        return "conflict", "value", 0.8 if pet else 0.9
    if {a, b} == {"several", "1"}:
        return "conflict", "value", 0.8
    return "consistent", "value", 0.0


_MARITAL_CLASH = {
    frozenset({"single", "married"}): 0.88, frozenset({"married", "divorced"}): 0.8,
    frozenset({"married", "widowed"}): 0.7, frozenset({"single", "was_married"}): 0.0,
}


def _marital_pair(old: Fact, new: Fact) -> tuple[str, str, float]:
    if old.value == new.value:
        if old.polarity == new.polarity:
            return "consistent", "profile", 0.0
        return "conflict", "negation", 0.9
    if not old.polarity or not new.polarity:
        negated, other = (old, new) if not old.polarity else (new, old)
        if negated.value == "married" and "lifetime" in negated.qualifiers and other.polarity and \
                other.value in ("divorced", "widowed", "was_married", "married"):
            return "conflict", "profile", 0.88
        return "consistent", "profile", 0.0
    score = _MARITAL_CLASH.get(frozenset({old.value, new.value}), 0.0)
    return ("conflict", "profile", score) if score else ("consistent", "profile", 0.0)


def _name_pair(old: Fact, new: Fact) -> tuple[str, str, float]:
    if set(old.value.split(",")) & set(new.value.split(",")):
        return "consistent", "name_place", 0.0
    if "all" in old.qualifiers | new.qualifiers:
        return "conflict", "name_place", 0.8
    relation = old.slot.split(":", 1)[1]
    if relation == "self":
        return "conflict", "name_place", 0.9
    if relation in _UNIQUE_RELATIONS or relation == "partner":
        return "conflict", "name_place", 0.85
    if "only" in old.qualifiers | new.qualifiers:
        return "conflict", "name_place", 0.9
    return "consistent", "name_place", 0.0


def _place_pair(old: Fact, new: Fact) -> tuple[str, str, float] | None:
    a, b = _resolved(old.value), _resolved(new.value)
    family = _family(old.slot)
    if a is None or b is None:
        if old.value.startswith("?") and old.value == new.value and old.polarity != new.polarity:
            return "conflict", "negation", 0.85
        return None
    same_name = places.fold(a.name) == places.fold(b.name)
    kind = "name_place" if same_name or a.kind == b.kind else "world_knowledge"
    if family == "visited":
        if old.polarity == new.polarity:
            return "consistent", kind, 0.0
        negated, positive = (old, new) if not old.polarity else (new, old)
        outer, inner = (a, b) if negated is old else (b, a)
        if places.contains(outer, inner):
            return "conflict", "negation" if same_name else "world_knowledge", \
                0.9 if "implied" not in positive.qualifiers else 0.88
        return "consistent", kind, 0.0
    if old.polarity != new.polarity:
        if places.compatible(a, b):
            return "conflict", "negation" if same_name else "world_knowledge", 0.88
        return "consistent", kind, 0.0
    if places.compatible(a, b):
        return "consistent", kind, 0.0
    return "conflict", kind, 0.9 if family == "residence" else 0.85


def _resolved(value: str) -> places.Place | None:
    if not value or value.startswith("?"):
        return None
    return places.resolve(value)


def _items_overlap(avoid: Fact, use: Fact) -> bool:
    avoided = set(avoid.value.split())
    if _family(use.slot) == "pet":
        return "pet_" + use.slot.split(":", 1)[1] in avoided and use.value != "0"
    return bool(avoided & set(use.value.split()))


def _avoid_vs_use(old: Fact, new: Fact) -> tuple[str, str, float] | None:
    avoid, use = (old, new) if _family(old.slot) == "avoids" else (new, old)
    if not avoid.polarity or not use.polarity or not _items_overlap(avoid, use):
        return None
    score = 0.92 if avoid is old else 0.8
    if "prepared" in use.qualifiers:
        score = min(score, 0.78)
    if _family(use.slot) == "pet":
        score = 0.85
    return "conflict", "profile", score


def _avoids_pair(old: Fact, new: Fact) -> tuple[str, str, float]:
    return "consistent", "profile", 0.0


def _consumes_pair(old: Fact, new: Fact) -> tuple[str, str, float] | None:
    return None


def _diet_pair(old: Fact, new: Fact) -> tuple[str, str, float]:
    values = {old.value, new.value}
    if "omnivore" in values and len(values) == 2:
        return "conflict", "profile", 0.85
    return "consistent", "profile", 0.0


def _job_pair(old: Fact, new: Fact) -> tuple[str, str, float] | None:
    a, b = old.value, new.value
    if old.polarity != new.polarity:
        return ("conflict", "negation", 0.9) if a == b else None
    if a == b:
        old_tags = {q for q in old.qualifiers if q.startswith("occ:")}
        new_tags = {q for q in new.qualifiers if q.startswith("occ:")}
        return ("consistent", "profile", 0.0) if old_tags == new_tags or not (old_tags and new_tags) else None
    values = {a, b}
    if "none" in values:
        other = (values - {"none"}).pop()
        if other in ("student", "retired", "homemaker", "childcare"):
            return "consistent", "profile", 0.0
        return "conflict", "profile", 0.85 if other != "working" else 0.8
    if "retired" in values:
        other = (values - {"retired"}).pop()
        return ("conflict", "profile", 0.7) if other == "working" else None
    if values & _GENERIC_JOBS or _SIDE_JOB.search(old.evidence + " " + new.evidence):
        return None
    if {"lifetime", "only"} & (old.qualifiers | new.qualifiers):
        return "conflict", "profile", 0.88
    return "conflict", "profile", 0.62


def _job_vs_school(old: Fact, new: Fact) -> tuple[str, str, float] | None:
    """A high-school student does not teach, nurse or practise law."""
    job, school = (old, new) if old.slot == "job" else (new, old)
    if school.value != "school" or not job.polarity or job.value in _GENERIC_JOBS or job.value == "retail":
        return None
    return "conflict", "profile", 0.75


def _school_pair(old: Fact, new: Fact) -> tuple[str, str, float]:
    return ("consistent", "profile", 0.0) if old.value == new.value else ("conflict", "profile", 0.8)


def _polarity_pair(old: Fact, new: Fact) -> tuple[str, str, float]:
    if old.value != new.value:
        return "consistent", "", 0.0
    return ("consistent", "profile", 0.0) if old.polarity == new.polarity else ("conflict", "negation", 0.9)


def _value_pair(kind: str, score: float):
    def check(old: Fact, new: Fact) -> tuple[str, str, float] | None:
        if old.polarity != new.polarity:
            return None
        if old.value == new.value:
            return "consistent", kind, 0.0
        if ":" in old.value and old.value.split(":")[0] != new.value.split(":")[0]:
            return None
        return "conflict", kind, score
    return check


def _instruction_pair(old: Fact, new: Fact) -> tuple[str, str, float]:
    if old.value == new.value and old.polarity == new.polarity:
        return "consistent", "instruction_reversal", 0.0
    return "conflict", "instruction_reversal", 0.9


def _favourite_pair(old: Fact, new: Fact) -> tuple[str, str, float]:
    if set(old.value.split()) & set(new.value.split()):
        return "consistent", "value", 0.0
    return "conflict", "value", 0.75


def _only_language(old: Fact, new: Fact) -> tuple[str, str, float] | None:
    only, spoken = (old, new) if old.slot == "speaks_only" else (new, old)
    language = spoken.slot.split(":", 1)[1]
    if not spoken.polarity or language == only.value:
        return None
    return "conflict", "profile", 0.85


def _budget_pair(old: Fact, new: Fact) -> tuple[str, str, float] | None:
    if old.value[0] != new.value[0]:
        return None
    cap, amount = float(old.value[1:]), float(new.value[1:])
    if amount > cap * 1.1:
        return "conflict", "value", 0.85
    return "consistent", "value", 0.0


def _same_budget(old: Fact, new: Fact) -> tuple[str, str, float] | None:
    return _budget_pair(old, new)


def _when_pair(old: Fact, new: Fact) -> tuple[str, str, float] | None:
    kind_a, value_a = old.value.split(":", 1)
    kind_b, value_b = new.value.split(":", 1)
    if kind_a != kind_b:
        return None
    if kind_a == "weekday":
        same = bool(set(value_a.split(",")) & set(value_b.split(",")))
    else:
        same = value_a == value_b
    return ("consistent", "value", 0.0) if same else ("conflict", "value", 0.85)


def _ratio_pair(threshold: float, score: float):
    """Numeric values that clash when one is more than ``threshold`` times the other."""
    def check(old: Fact, new: Fact) -> tuple[str, str, float] | None:
        try:
            a, b = float(old.value.lstrip("$\u20ac\u00a3")), float(new.value.lstrip("$\u20ac\u00a3"))
        except ValueError:
            return None
        if old.value[:1] != new.value[:1] and not (old.value[:1].isdigit() and new.value[:1].isdigit()):
            return None
        if min(a, b) <= 0:
            return None
        if max(a, b) / min(a, b) > threshold:
            return "conflict", "value", score
        return "consistent", "value", 0.0
    return check


def _size_pair(old: Fact, new: Fact) -> tuple[str, str, float] | None:
    systems = {q for q in old.qualifiers | new.qualifiers if q.startswith("system:")}
    regions = {w for q in systems for w in q[7:].split() if w in ("us", "uk", "eu")}
    if len(regions) > 1:
        return None
    if abs(float(old.value) - float(new.value)) >= 1:
        return "conflict", "value", 0.8
    return "consistent", "value", 0.0


def _org_pair(old: Fact, new: Fact) -> tuple[str, str, float]:
    if old.value == new.value or old.value in new.value or new.value in old.value:
        return "consistent", "name_place", 0.0
    score = 0.85 if "only" in old.qualifiers | new.qualifiers or old.slot == "employer" else 0.7
    return "conflict", "name_place", score


_EU = frozenset("AT BE BG HR CY CZ DK EE FI FR DE GR HU IE IT LV LT LU MT NL PL PT RO SK SI ES SE".split())


def _nationality_pair(old: Fact, new: Fact) -> tuple[str, str, float]:
    if old.value == new.value:
        return "consistent", "profile", 0.0
    if "non-EU" in (old.value, new.value):
        other = new.value if old.value == "non-EU" else old.value
        return ("conflict", "world_knowledge", 0.85) if other in _EU else ("consistent", "profile", 0.0)
    return "conflict", "profile", 0.9 if "only" in old.qualifiers | new.qualifiers else 0.75


def _licence_vs_driving(old: Fact, new: Fact) -> tuple[str, str, float] | None:
    """No driving licence, then driving (either order)."""
    has = old if _family(old.slot) == "has" else new
    if has.slot not in ("has:licence", "has:license") or not has.value.startswith("0:"):
        return None
    return "conflict", "world_knowledge", 0.8


# Facts of two different families that are compared, and how; every other pair of facts is
# unrelated unless the two slots are equal. ``comparable`` reads the same table.
_ACROSS = {
    frozenset({"avoids", "consumes"}): _avoid_vs_use, frozenset({"avoids", "pet"}): _avoid_vs_use,
    frozenset({"closed", "visit_on"}): _closed_vs_visit,
    frozenset({"speaks_only", "speaks"}): _only_language,
    frozenset({"budget", "spend"}): _budget_then_spend,
    frozenset({"job", "school"}): _job_vs_school,
    frozenset({"has", "drives"}): _licence_vs_driving,
}
_PARTNERS: dict[str, frozenset[str]] = {
    family: frozenset(other for pair in _ACROSS if family in pair for other in pair - {family})
    for pair in _ACROSS for family in pair}

_SAME_SLOT = {
    "age": _age, "kids": _count, "siblings": _count, "brothers": _count, "sisters": _count, "pet": _count,
    "has": _possession_pair, "did": _count, "marital": _marital_pair, "name": _name_pair,
    "residence": _place_pair, "origin": _place_pair, "destination": _place_pair,
    "dwelling": _value_pair("profile", 0.8), "religion": _value_pair("profile", 0.8),
    "birthday_age": _value_pair("value", 0.85),
    "visited": _place_pair, "avoids": _avoids_pair, "consumes": _consumes_pair, "diet": _diet_pair,
    "job": _job_pair, "school": _school_pair, "speaks": _polarity_pair,
    "speaks_only": _value_pair("profile", 0.85), "native_language": _value_pair("profile", 0.85),
    "nationality": _nationality_pair, "instr": _instruction_pair, "when": _when_pair,
    "party_size": _value_pair("value", 0.8), "ago": _ratio_pair(2.5, 0.8), "lasting": _ratio_pair(3.0, 0.8),
    "term": _value_pair("value", 0.8), "income": _ratio_pair(1.15, 0.8), "area": _ratio_pair(1.2, 0.75),
    "size": _size_pair, "handedness": _value_pair("profile", 0.9), "housing": _value_pair("profile", 0.8),
    "employer": _org_pair, "alma_mater": _org_pair, "spouse": _value_pair("profile", 0.8),
    "carbs": _value_pair("profile", 0.85),
    "budget": _same_budget, "fav": _favourite_pair, "qty": quantity_pair, "height": quantity_pair,
    "recalled": recalled_pair,
}
