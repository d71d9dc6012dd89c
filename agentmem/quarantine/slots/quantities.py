"""Extractors of counted and measured quantities of the speaker's own things: "80 guests",
"we have four grandchildren", "it has 48,000 miles on it", "$212,000 still owed", "I'm 5'2"".

The typed slots elsewhere name each thing people count (kids, siblings, pets, a party); this
module reads the rest by their shape: a number, at most one modifier, and the plural noun it
counts, where the clause ties the count to the speaker ("our 150 guests", "we only have two
grandkids", or a bare answer "80 guests, maybe a few less"). The noun is the slot, so two
counts clash only when they count the same thing. What makes a count the speaker's standing
fact rather than a passing number is checked by shape too: rates ("3 times a week"),
increments ("2 more guests"), ordinals and shares ("the first 3", "3 of the") give nothing,
and hedged values ("about 80") clash only when they are far apart (``quantity_pair``).
"""

from __future__ import annotations

import re
from dataclasses import replace

from agentmem.quarantine.slots.context import _Ctx, clause_guard
from agentmem.quarantine.slots.facts import Fact
from agentmem.quarantine.slots.numbers import NUM, parse_number
from agentmem.quarantine.slots.values import _MONEY, _money_value

_AMOUNT = (r"(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)? ?k\b|\d+(?:\.\d+)?|" + NUM + r")")
_HEDGE = re.compile(r"\b(?:about|around|roughly|approximately|approx|almost|nearly|over|under|more than|"
                    r"less than|at least|at most|up to|maybe|perhaps|or so|give or take|a few (?:more|less|"
                    r"fewer)|ish|some|close to|just over|just under|ballpark)\b|~|\+|-ish")
# Counted nouns that are not a standing fact of the speaker (time, rates, text, money), or that
# a typed slot already reads (kids, siblings, pets, a party's people).
_NOT_HEADS = frozenset((
    "second minute hour day week month year decade night weekend morning evening time times percent "
    "point step rep set calorie dollar buck cent euro pound quid grand thing way option idea question tip "
    "answer example item reason page word sentence line paragraph bullet mile km kilometer kilometre "
    "kid child son daughter brother sister sibling dog cat pet puppy kitten people person folk other "
    "one ones dozen hundred thousand million billion degree inch foot feet meter metre cm mm kg lb ounce "
    "cup gram liter litre tablespoon teaspoon serving slice piece bite sip shot round lap game match "
    "episode chapter season part stage level floor story row seat spot place name number digit letter "
    "character unit share stock version edition year-old month-old week-old possibility result option "
    "choice suggestion recommendation listing hit entry record match alternative "
    # what a search answers with ("I have 10 movies. What about ...?"), not what the speaker owns
    "movie film show song track flight hotel restaurant event showing slot appointment ticket bus train "
    "ride").split())
_HEAD_SYNONYMS = {"grandkid": "grandchild", "grandchildren": "grandchild", "attendee": "guest",
                  "invitee": "guest", "staffer": "employee", "worker": "employee", "bedroom": "bedroom",
                  "bed": "bedroom", "br": "bedroom"}
_IE_WORDS = frozenset("movie cookie rookie selfie hoodie veggie zombie brownie calorie smoothie pie tie "
                      "goalie aussie".split())
_NOT_MODIFIERS = frozenset(
    "more extra additional other another new fewer less first last next top few couple of the per each "
    "every than and or to".split())
_HAVE = (r"(?:i|we) (?:only |just |still |now |already |currently |also |actually )?(?:have|own|have got|"
         r"got|are expecting|expect|are inviting|invited|are hosting|employ|manage|look after|care for|"
         r"raise|keep|teach|coach|supervise|run)")
_COUNTED = re.compile(
    r"\b(?:(?:my|our) |" + _HAVE + r" (?:(?:about|around|roughly|almost|nearly|over|just|only|exactly|"
    r"like) )?)" + _AMOUNT + r" (?:([a-z][a-z-]+) )?([a-z][a-z-]+)\b")
_BARE = re.compile(r"^(?:(?:about|around|roughly|maybe|like|just|only) )?" + _AMOUNT
                   + r" (?:([a-z][a-z-]+) )?([a-z][a-z-]+)\b")
_AFTER_RATE = re.compile(r"^(?:,? )?(?:each|apiece|per|a (?:day|week|month|year|night|session|time)|every|"
                         r"an (?:hour|evening)|at a time|in total per|for you|for your|to (?:choose|pick|"
                         r"show|offer)|available|that (?:match|fit|meet)|matching|left|remaining|in stock|"
                         # a search's results offered: "7 cars that you will like", "5 cars you might like"
                         r"(?:that|which) you|you (?:might|may|will|would|could|can|should)|you'd|"
                         r"are (?:ready|there|available|free))\b")
_BEFORE_SHARE = re.compile(r"\b(?:another|more|extra|additional|first|last|next|top|every|each|per|"
                           r"out of|of the|only about)\s*$")
_ODOMETER = re.compile(r"\b(?:my|our|the|it|this|that)\b(?: [\w-]+){0,3}? (?:has|is at|has got|with|"
                       r"shows|reads|is just over|is over|is nearly|is almost|is about) (?:about |around |"
                       r"roughly |almost |nearly |just over |over |under )?" + _AMOUNT
                       + r" (miles|mi|km|kilometers|kilometres)\b(?! (?:a|per|each|every|away|from|to|"
                       r"round|each way|one way|an hour))")
_EACH_WAY = re.compile(r"\b(\d+(?:\.\d+)?) ?(km|kilomet(?:er|re)s?|miles?|mi) (?:each way|one way)\b")
_OWED = re.compile(r"\b(?:(?:remaining|outstanding|loan|mortgage|principal|card) balance(?: on (?:the|my|our) "
                   r"(?:mortgage|loan|house|car|card))?|balance (?:left|remaining|owed|outstanding)|(?:i|we) (?:still )?owe|(?:left|remaining|outstanding) on "
                   r"(?:the|my|our) (?:mortgage|loan|house|car|card))\b(?: is| of| at|:| about| around| "
                   r"roughly| still)*\s*" + _MONEY + r"|" + _MONEY + r" (?:still |left )?(?:owed|owing|"
                   r"outstanding|left on (?:the|my|our) (?:mortgage|loan|house|car|card)|remaining on "
                   r"(?:the|my|our) (?:mortgage|loan|house|car|card)|(?:still )?on the mortgage)\b")
_HEIGHT = re.compile(r"\b(?:i am|i stand|being|my height is|at) (?:only |just |about |around |almost |"
                     r"nearly |barely |a whole |a solid |like )?(?:(\d)'\s?(\d{1,2})?\"?|(\d) ?(?:foot|"
                     r"feet|ft)(?: (\d{1,2})(?: inches| in)?)?|(1\d\d) ?cm|(1)[.,](\d\d) ?m)(?![\w'])")


def _head(word: str) -> str:
    word = _HEAD_SYNONYMS.get(word, word)
    if word.endswith("ies") and len(word) > 4:
        word = word[:-1] if word[:-1] in _IE_WORDS else word[:-3] + "y"
    elif word.endswith("ren"):
        word = word[:-3]
    elif word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]
    return _HEAD_SYNONYMS.get(word, word)


def _value(amount: str) -> float | None:
    text = amount.replace(",", "").replace(" ", "")
    scale = 1000.0 if text.endswith("k") else 1.0
    text = text.rstrip("k")
    try:
        return float(text) * scale
    except ValueError:
        number = parse_number(amount)
        return float(number) if number is not None else None


def _number(value: float) -> str:
    return f"{value:.0f}" if value == int(value) else f"{value:g}"


def _hedged(ctx: _Ctx, start: int, end: int) -> tuple[str, ...]:
    window = ctx.text[max(0, start - 20):end + 25]
    return ("approx",) if _HEDGE.search(window) else ()


def _counted_noun(match: re.Match[str]) -> tuple[str, int] | None:
    """(head, end) of the plural noun a number counts: "150 wedding guests" -> guest; "3 bedrooms
    and" -> bedroom (the word after the number, when the one after it is not a noun)."""
    modifier, noun = match.group(2), match.group(3)
    for before, word, end in ((modifier, noun, match.end(3)), (None, modifier, match.end(2))):
        if not word or not word.endswith(("s", "ren")) or (before and before in _NOT_MODIFIERS):
            continue
        head = _head(word)
        if head in _NOT_HEADS or len(head) < 3 or (before and _head(before) in _NOT_HEADS):
            return None
        return head, end
    return None


def _count_fact(ctx: _Ctx, match: re.Match[str]) -> Fact | None:
    counted = _counted_noun(match)
    value = _value(match.group(1))
    if counted is None or value is None or value < 2 or re.fullmatch(r"(?:19|20)\d\d", match.group(1)):
        return None
    head, end = counted
    if _AFTER_RATE.search(ctx.text[end:]) or _BEFORE_SHARE.search(ctx.text[:match.start(1)]):
        return None
    return ctx.fact("qty:" + head, _number(value), end, extra=_hedged(ctx, match.start(1), end), strength=0.9)


def _quantities(ctx: _Ctx) -> list[Fact]:
    out: list[Fact] = []
    for match in _COUNTED.finditer(ctx.text):
        fact = _count_fact(ctx, match)
        if fact:
            out.append(fact)
    bare = _BARE.match(ctx.text)
    if bare and len(ctx.text.split()) <= 7 and ctx.mood != "question":
        fact = _count_fact(ctx, bare)
        if fact:
            out.append(fact)
    for match in _ODOMETER.finditer(ctx.text):
        value = _value(match.group(1))
        if value and value >= 1000:
            unit = "km" if match.group(2).startswith("k") else "mile"
            out.append(ctx.fact("qty:odometer_" + unit, _number(value), match.end(),
                                extra=_hedged(ctx, match.start(1), match.end()), strength=0.9))
    for match in _EACH_WAY.finditer(ctx.text):
        value = _value(match.group(1))
        if value and re.search(r"\b(?:i|my|we|our|it is|it's)\b", ctx.text):
            unit = "km" if match.group(2).startswith("k") else "mile"
            out.append(ctx.fact("qty:commute_" + unit, _number(value), match.end(),
                                extra=_hedged(ctx, match.start(1), match.end())))
    for match in _OWED.finditer(ctx.text):
        parsed = _money_value(match.group(1) or match.group(2))
        if parsed and parsed[1] >= 100:
            currency, value = parsed
            out.append(ctx.fact("qty:owed", currency + _number(value), match.end(),
                                extra=_hedged(ctx, match.start(), match.end())))
    if out and clause_guard(ctx.text) == "other person":  # "my partner's ride is 25 km each way"
        out = [replace(fact, subject="other") for fact in out]
    return out + _height(ctx)


def _height(ctx: _Ctx) -> list[Fact]:
    """The speaker's height in cm ("I'm 5'2"", "being 6 foot myself", "I'm 180 cm")."""
    out = []
    for match in _HEIGHT.finditer(ctx.text):
        said = match.group()
        mine = said.startswith(("i am", "i stand", "my height")) or re.search(r"\bmyself\b", ctx.text)
        if not mine:
            continue
        g = match.groups()
        if g[0] or g[2]:
            feet, inches = int(g[0] or g[2]), int(g[1] or g[3] or 0)
            if not 4 <= feet <= 7 or inches > 11:
                continue
            cm = feet * 30.48 + inches * 2.54
        elif g[4]:
            cm = float(g[4])
        else:
            cm = 100 + float(g[6])
        out.append(ctx.fact("height", f"{cm:.0f}", match.end(), extra=_hedged(ctx, match.start(), match.end())))
    return out


def quantity_pair(old: Fact, new: Fact) -> tuple[str, str, float] | None:
    """Two counts or measures of one thing: exact counts clash when they differ; large or hedged
    values only when they are far apart (48,000 vs 48k miles agree; "about 80" vs 75 agree)."""
    if old.polarity != new.polarity:
        return None
    currency = old.value[:1] if not old.value[:1].isdigit() else ""
    if currency != (new.value[:1] if not new.value[:1].isdigit() else ""):
        return None
    a, b = float(old.value.lstrip("$\u20ac\u00a3")), float(new.value.lstrip("$\u20ac\u00a3"))
    if min(a, b) <= 0:
        return None
    hedged = "approx" in old.qualifiers | new.qualifiers
    ratio = max(a, b) / min(a, b)
    if old.slot == "height":
        differs = abs(a - b) > (8 if hedged else 5)
    elif hedged:
        differs = ratio > 1.5
    elif max(a, b) < 20:
        differs = a != b
    else:
        differs = ratio > 1.1
    return ("conflict", "value", 0.85) if differs else ("consistent", "value", 0.0)
