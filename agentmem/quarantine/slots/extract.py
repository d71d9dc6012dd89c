"""``extract_facts``: every extractor over every clause of a text, cached."""

from __future__ import annotations

from functools import lru_cache

from agentmem.quarantine.slots.context import _contexts
from agentmem.quarantine.slots.facts import Fact
from agentmem.quarantine.slots.food import _allergies, _consumption, _diet, _habits, _lifestyle
from agentmem.quarantine.slots.instructions import _instructions
from agentmem.quarantine.slots.people import (
    _ages, _birthday_ages, _kids, _marital, _names, _organisations, _pets, _places, _possessions, _siblings,
)
from agentmem.quarantine.slots.quantities import _quantities
from agentmem.quarantine.slots.values import (
    _activities, _amounts, _budget, _drives, _durations, _events, _favourites, _job_presupposed, _opening,
    _party, _presupposed_habits,
)
from agentmem.quarantine.slots.work import _jobs, _languages, _religion


_EXTRACTORS = (_ages, _activities, _names, _organisations, _lifestyle, _amounts, _party, _durations, _places,
               _kids, _siblings, _marital, _pets, _possessions, _diet, _allergies, _habits,
               _consumption, _jobs, _languages, _instructions, _events, _budget, _favourites, _opening,
               _quantities, _drives, _birthday_ages, _religion)

_PRESUPPOSITION_EXTRACTORS = (_job_presupposed, _kids, _siblings, _pets, _possessions, _marital,
                              _presupposed_habits, _names,
                              _organisations, _party, _quantities, _birthday_ages)


def extract_facts(text: str) -> list[Fact]:
    """Typed facts of a turn or sentence (see the module docstring)."""
    return list(_cached_facts(text))


@lru_cache(maxsize=8192)
def _cached_facts(text: str) -> tuple[Fact, ...]:
    """Facts are immutable, and a session compares each turn with many others: extract once."""
    facts: list[Fact] = []
    for ctx in _contexts(text):
        extractors = _PRESUPPOSITION_EXTRACTORS if ctx.mood == "question" else _EXTRACTORS
        for extractor in extractors:
            facts += extractor(ctx)
    return tuple(_dedupe(facts))


def _dedupe(facts: list[Fact]) -> list[Fact]:
    seen: set[tuple[str, str, bool, str]] = set()
    out = []
    for fact in facts:
        key = (fact.slot, fact.value, fact.polarity, fact.subject)
        if key not in seen:
            seen.add(key)
            out.append(fact)
    return out
