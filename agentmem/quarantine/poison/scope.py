"""What a system prompt makes the assistant answer for: the facts it states (``prompt_scope``)
and whether a reply speaks of them or of the business's terms (``speaks_of``).

A prompt that states facts ("Returns within 30 days. Orders over $150 ship free.") makes the
assistant its spokesman: a recurring claim about those terms that the prompt does not support
is what poison means (an invented "lifetime price-match refund", a "$19 overnight express"
the prompt rules out). The same assistant's care advice, a tutor's formula, a coach's plan or
a coder's snippet are its own knowledge, given because the user asked: nothing in the session
could support them, and read as claims every one of them was withheld once repeated (an audit
of twenty deployed bots: 31 of 76 confirmed claims, README, Benchmarks: Stop 72).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from agentmem.quarantine.poison.clauses import _is_value
from agentmem.quarantine.poison.details import _TEMPORAL, GENERIC, detail_terms

# Numbers that say where a lesson or a codebase stands or how to answer, not a fact a claim
# could state: "Chapter 7", "Lesson 12 of 40", "9th-grade", "level A2", "Python 3.11",
# "at most 8 new words per lesson", "in 3 sentences".
_NOT_FACTS = re.compile(
    r"\b(?:chapter|lesson|unit|module|grade|level|part|section|step|page|week|day|session|"
    r"class|year|stage|version|v)\s*\d+(?:\s*(?:of|/)\s*\d+)?\b"
    r"|\b\d+(?:st|nd|rd|th)?[- ](?:grade|graders?|year[- ]olds?)\b"
    r"|\b(?!(?:costs?|priced?|prices|fees?|at|for|only|just|is|are|was|of|per|from|over|under|"
    r"about|around|to|and|or|by|with)\b)[A-Za-z][\w+#-]*\s+v?\d+(?:\.\d+)+(?!\d|\.\d|\s*(?:%|[a-z]))"
    r"|\b\d+\s+(?:new\s+)?(?:words?|sentences?|paragraphs?|bullet(?:\s+points?)?|lines?|items?|"
    r"examples?|questions?|exercises?|emojis?|characters?|tokens?|options?|suggestions?|tips?)\b",
    re.IGNORECASE)
_YEAR = re.compile(r"(?<!\d)(?:19|20)\d{2}(?!\d)")
_NUMBER = re.compile(r"(?<![A-Za-z])\d")


def states_facts(text: str) -> bool:
    """Whether a system-prompt sentence states a fact: a number or a clock time ("Gym hours
    6am-10pm") that is not a date, a year, or a lesson's, version's or answer format's
    number ("Today is May 1, 2024.", "Chapter 7", "Python 3.11")."""
    if any(m.group("hm") or m.group("hap") for m in _TEMPORAL.finditer(text)):
        return True
    text = _NOT_FACTS.sub(" ", text)
    return bool(_NUMBER.search(_YEAR.sub(" ", _TEMPORAL.sub(" ", text))))


# Words that measure a value rather than name what it is about ("within 30 days", "$30/month").
_MEASURES = detail_terms("year years month months week weeks day days hour hours minute minutes "
                         "night nights time times dollar dollars euro euros pound pounds cent "
                         "cents percent per each total business working")
# The business's terms whatever the prompt says: a price, a fee, a refund, a policy.
_TERMS = detail_terms(
    "price prices priced cost costs charge charges charged fee fees refund refunds refunded "
    "discount discounts discounted rebate voucher coupon promo promotion sale deposit surcharge "
    "penalty payment pay paid free waive waived waives warranty guarantee guaranteed policy "
    "policies shipping delivery cancellation membership subscription insurance compensation "
    "reimbursement credit offer offers")
# The organisation speaking of itself: "all our host families live within a 20-minute walk".
_OURS = re.compile(r"\b(?:we|we're|we've|we'll|our|ours)\b", re.IGNORECASE)
_MONEY = re.compile(r"[$€£¥]\s?\d|\d\s?(?:%|percent\b|dollars?\b|euros?\b|pounds?\b|usd\b|eur\b|gbp\b)",
                    re.IGNORECASE)


def prompt_scope(texts: Iterable[str]) -> frozenset[str] | None:
    """The content words of the prompt's fact sentences (``states_facts``); None when it
    states none (a role: "You are a friendly travel assistant.")."""
    facts = [t for t in texts if states_facts(t)]
    if not facts:
        return None
    words = frozenset().union(*(detail_terms(t) for t in facts))
    return frozenset(w for w in words if not _is_value(w) and len(w) > 2) - GENERIC - _MEASURES


def speaks_of(text: str, scope: frozenset[str]) -> bool:
    """Whether a sentence speaks of the prompt's facts (a content word of them), of the
    business's terms (a price, a fee, a refund, a share) or of the organisation ("our")."""
    return (not detail_terms(text).isdisjoint(scope | _TERMS) or bool(_MONEY.search(text))
            or bool(_OURS.search(text)))
