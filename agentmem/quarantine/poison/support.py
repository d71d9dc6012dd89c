"""Support: which authority unit (a trusted tool's result, a user or system sentence)
states a clause's details, strongly or weakly, and what it leaves unsupported.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from agentmem.models.runtime import pause_point
from agentmem.quarantine.poison.clauses import Clause, _is_value, entities_of
from agentmem.quarantine.poison.details import FREE, _precision, detail_terms
from agentmem.quarantine.poison.kept import _extended, _keep
from agentmem.quarantine.statements import Statements

# --------------------------------------------------------------------------- detection

SUPPORT_COVERAGE = 0.75  # share of a clause's details one authority unit must state
ENTITY_COVERAGE = 0.5  # weak support: this share, with every number, date and name
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
    parts: tuple[frozenset[str], ...] = ()  # the words of each of its sentences (records), apart

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

    def user_stated(self, detail: str, *, before: int) -> bool:
        """Whether the user stated the detail before ``before``: their name, their party's
        size, the time they asked for. Theirs to give, whatever else a clause says with it."""
        return any(self._user[i] and self._position[i] < before and self.all[i].states(detail)
                   for i in self._holders(detail).tolist())

    def numbers_before(self, before: int, most: int = 64) -> np.ndarray:
        """The distinct numbers the authority stated before ``before``, the latest ``most``."""
        seen: dict[float, None] = {}
        for i in np.flatnonzero(self._position < before)[::-1].tolist():
            for value in self.all[i].numbers:
                seen.setdefault(value)
            if len(seen) >= most:
                break
        return np.asarray(list(seen)[:most], dtype=float)

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
        if strong[k] or known[k] and old_units == len(units):
            continue  # a seen clause is checked against new units only (an agent's tool result adds none)
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
                if clause.entities <= unit.covered(clause.entities) and values_in_context(unit, clause):
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
        for words, asked, which, parts in _message_units(trust, texts, call):
            rows_of = tuple(message_rows[i] for i in which)
            key = (trust, words, asked)
            if key not in first:
                first[key] = len(units)
                units.append(_Unit(position, trust, words, asked, rows_of, parts))
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


# A line of a plain-text document that opens with a label ("Warranty: panels 25-year ...") is
# a record of its own, though no full stop ends the line before it.
_FIELD_LINE = re.compile(r"\n(?=[ \t]*[A-Za-z][\w .'/&()-]{0,40}:[ \t])")


def _fields(text: str) -> list[str]:
    """A tool sentence's records: its labelled lines apart. The sentence splitter keeps a
    document's lines together when none ends in a full stop ("Inverter: Veltra SE6000" and
    "Warranty: panels 25-year" one sentence), and a value must be read with its own line's
    subject (``values_in_context``)."""
    return [field for field in _FIELD_LINE.split(text) if field.strip()]


@lru_cache(maxsize=1 << 14)
def _message_units(trust: str, texts: tuple[str, ...], call: str) -> tuple[
        tuple[frozenset[str], frozenset[str], tuple[int, ...], tuple[frozenset[str], ...]], ...]:
    """The units of one authority message's sentences: (words, asked, which sentences, the
    words of each apart). By
    content: every reply rebuilds the whole session's units and a message's never change;
    the same word sets each time also keep ``_stated``'s look-ups cheap (hashes kept)."""
    words = [detail_terms(text) for text in texts]
    if trust == "tool":
        asked = detail_terms(call) - entities_of(call) if call else frozenset()
        asked = frozenset(w for w in asked if w[:1] != "#")  # a period, a subject; no amounts
        parts = tuple(detail_terms(field) for text in texts for field in _fields(text))
        return ((frozenset().union(*words), asked, tuple(range(len(texts))), parts),)
    return tuple((own | (words[i + 1] if i + 1 < len(words) else frozenset()), frozenset(), (i,),
                  (own,) + ((words[i + 1],) if i + 1 < len(words) else ()))
                 for i, own in enumerate(words))


def support_level(unit: _Unit, clause: Clause) -> int:
    """2: the unit states the clause (most of its details, and every number, date and time
    of it: "within 60 days of delivery" is not the prompt's "within 30 days of delivery");
    1: it states its numbers, dates and names and half of the rest, or it is the answer to a
    call that asked about the rest;
    0: neither. Either way each value the clause gives must be stated where the unit speaks of
    the clause's subject (``values_in_context``)."""
    need = len(clause.details)
    covered = unit.covered(clause.details)
    if not values_in_context(unit, clause):
        return 0
    if FREE in clause.details and FREE not in covered:
        return 0  # "Northway will assemble it at no charge": the price is the claim
    if len(covered) >= SUPPORT_COVERAGE * need and all(
            d in covered for d in clause.entities if _is_value(d)):
        return 2
    if unit.asked:
        covered = unit.covered(clause.details, asked=True)
        if len(covered) >= SUPPORT_COVERAGE * need and clause.entities <= covered:
            return 1
    if clause.entities and clause.entities <= covered and len(covered) >= ENTITY_COVERAGE * need:
        return 1
    return 0


# Words that measure a value rather than say what it is about: "25 years" is about the panels
# or the inverter, not about years.
_UNIT_WORDS = detail_terms("year years month months week weeks day days hour hours minute minutes "
                           "second seconds night nights time times dollar dollars euro euros pound "
                           "pounds cent cents percent kg km mile miles gb mb per each total")


def values_in_context(unit: _Unit, clause: Clause) -> bool:
    """Whether every value the clause gives (a number, a date, a time) is stated by one of the
    unit's sentences (records) that also speaks of the clause's subject, when the unit speaks of
    it at all. A quote that lists "Inverter: Veltra SE6000" and "Warranty: panels 25-year" states
    25 years and the inverter, not that the inverter is covered for 25 years."""
    return not values_out_of_context(unit, clause)


def values_out_of_context(unit: _Unit, clause: Clause) -> frozenset[str]:
    """The clause's values the unit states only apart from the clause's subject."""
    return _out_of_context(unit.parts, unit.words, clause.entities, clause.details)


@lru_cache(maxsize=1 << 15)
def _out_of_context(parts: tuple[frozenset[str], ...], words: frozenset[str], entities: frozenset[str],
                    details: frozenset[str]) -> frozenset[str]:
    values = [d for d in entities if _is_value(d)]
    if not values or len(parts) < 2:
        return frozenset()
    subject = _covered(words, frozenset(), frozenset(d for d in details if not _is_value(d)
                                                     and d not in _UNIT_WORDS), False)
    if not subject:
        return frozenset()
    apart = set()
    for value in values:
        wanted = subject | {value}
        if not any(value in found and found & subject
                   for found in (_covered(part, frozenset(), wanted, False) for part in parts)):
            apart.add(value)
    return frozenset(apart)


def unsupported_details(clause: Clause, units: list[_Unit]) -> frozenset[str]:
    """The clause's details that the authority unit closest to it does not state: what the
    claim adds to what is known. ``units``: candidates, most shared details first."""
    best: frozenset[str] = frozenset()
    for unit in units[:UNITS_EXAMINED]:
        covered = unit.covered(clause.details) - values_out_of_context(unit, clause)
        if len(covered) > len(best):
            best = covered
    if len(best) < 2:
        return clause.details  # one shared word is a coincidence, not the clause's source
    return clause.details - best


def derived(detail: str, sources: list[_Unit], numbers: np.ndarray, percents: list[float],
            reply: frozenset[float] = frozenset()) -> bool:
    """Whether a number the clause gives is worked out from numbers its sources or its own
    reply give: with a stated percentage off or on ($1,299 with the prompt's 10% code is
    $1,169.10), or scaled by a ratio of two stated numbers whose first the reply names (a
    recipe for 2, "For 6: ... 450 g rice" from 150 g). Not sums: a total that leaves out a
    fee ("EUR 2,460", the enrolment fee "waived") is the arithmetic of an invented waiver.
    ``sources``: the units the clause restates; ``numbers``: the authority's numbers stated
    before it; ``reply``: the numbers of the clause's reply. Any ratio of stated numbers would
    make most two-digit numbers "derived" by chance; the one the reply names is the reply's
    own arithmetic."""
    value = float(detail[1:])
    if not len(numbers):
        return False
    tolerance = _precision(detail) / 2 + 1e-6 * max(1.0, abs(value))
    if np.any(np.abs(numbers - value) <= tolerance):
        return False  # stated as it is: whether in this clause's context is support's to say
    own = {n for unit in sources for n in unit.numbers if n}
    bases = np.asarray(sorted(own | (reply - {value})), dtype=float)
    for share in percents:
        for factor in (1 - share / 100, 1 + share / 100):
            if np.any(np.abs(bases * factor - value) <= tolerance):
                return True
    tops = np.asarray(sorted(reply & set(numbers.tolist())), dtype=float)
    ratios = tops[:, None] / np.where(numbers == 0, np.nan, numbers)[None, :]
    ratios = ratios[np.isfinite(ratios) & (ratios != 1) & (ratios > 0)]
    if not own or not len(ratios):
        return False
    scaled = np.asarray(sorted(own), dtype=float)[:, None] * np.unique(ratios)[None, :]
    return bool(np.any(np.abs(scaled - value) <= tolerance))
