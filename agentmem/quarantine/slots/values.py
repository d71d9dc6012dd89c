"""Extractors of dated and counted values: events, party sizes, durations, budgets,
amounts, favourites, opening hours and activities; and facts a question presupposes."""

from __future__ import annotations

import re
from typing import cast

from agentmem.quarantine.slots.context import _Ctx
from agentmem.quarantine.slots.facts import Fact
from agentmem.quarantine.slots.lexicons import (
    _DATE_RE, _MONTHS, _MONTH_ABBR, _OCCUPATIONS, _OCC_RE, _WEEKDAY_RE,
)
from agentmem.quarantine.slots.numbers import COUNT, NUM, parse_number
from agentmem.quarantine.slots.people import _PLACE_STOP, _STOP_HEADS, _head
from agentmem.quarantine.slots.qualifiers import _WEEKDAYS


_EVENT_NOUNS = ("wedding birthday flight surgery operation interview exam anniversary graduation dentist "
                "doctor's appointment dentist appointment doctor appointment standup stand-up recital "
                "concert closing due date check-in checkout rehearsal dinner party move").split()
_EVENT_PHRASES = set(_EVENT_NOUNS) | {"doctor's appointment", "dentist appointment", "rehearsal dinner",
                                      "due date"}
_EVENT_NOUN_RE = r"(" + "|".join(sorted(map(re.escape, _EVENT_PHRASES), key=len, reverse=True)) + r")"
_EVENT_VERBS = {"land": "arrival", "landing": "arrival", "arrive": "arrival", "arriving": "arrival",
                "fly out": "departure", "flying out": "departure", "fly home": "return",
                "flying home": "return",
                "fly back": "return", "flying back": "return", "getting married": "wedding",
                "get married": "wedding", "check in": "check-in", "checking in": "check-in",
                "check out": "checkout", "checking out": "checkout"}
_EVENT_MENTION = re.compile(
    r"\b(?:(my|our|the|his|her|their|[a-z]+'s) )?(?:(return|outbound|connecting|morning|evening|afternoon|"
    r"final|team|daily|weekly) )?" + _EVENT_NOUN_RE + r"\b|\b(?:i|we) (?:are |am |will )?("
    + "|".join(sorted(_EVENT_VERBS, key=len, reverse=True)) + r")\b")
_TIME_VALUE = re.compile(r"\b(?:at |@ )?(\d{1,2})(?::(\d{2}))? ?(am|pm|a\.m\.|p\.m\.|in the morning|"
                         r"in the afternoon|in the evening|at night|o'clock)\b|\bat (\d{1,2}):(\d{2})\b|"
                         r"\b(\d{1,2}):(\d{2})\b")
_DATE_VALUE = re.compile(_DATE_RE)
_WEEKDAY_VALUE = re.compile(r"\b" + _WEEKDAY_RE)
_EVENT_WINDOW_STOP = re.compile(r"[;!?]|\.(?!\d)|\b(?:and then|but|because|while|so)\b")


def _events(ctx: _Ctx) -> list[Fact]:
    out = []
    for match in _EVENT_MENTION.finditer(ctx.text):
        owner, modifier = match.group(1), match.group(2)
        event = match.group(3) or _EVENT_VERBS[match.group(4)]
        event = {"stand-up": "standup", "dentist appointment": "dentist", "doctor appointment": "doctor's "
                 "appointment"
                 }.get(event, event)
        subject = "self" if owner in (None, "my", "our", "the") else "other:" + owner
        window = ctx.text[match.end():match.end() + 60]
        stop = _EVENT_WINDOW_STOP.search(window)
        window = window[:stop.start()] if stop else window
        mention = _EVENT_MENTION.search(window)
        if mention:
            window = window[:mention.start()]
        key = ((modifier + " ") if modifier in ("return", "outbound", "connecting") else "") + event
        for value in _event_values(window):
            out.append(ctx.fact("when:" + key, value, match.end(), subject=subject))
    return out


def _event_values(window: str) -> list[str]:
    values = []
    date = _DATE_VALUE.search(window)
    if date:
        g = date.groups()
        month_word = g[0] or g[3]
        short = _MONTH_ABBR.get(month_word[:4].rstrip("."), _MONTH_ABBR.get(month_word[:3]))
        month = month_word if month_word in _MONTHS else short
        day = int(g[1] or g[2])
        if month and 1 <= day <= 31:
            values.append(f"date:{_MONTHS.index(month) + 1:02d}-{day:02d}")
    days = sorted({m.group(1) for m in _WEEKDAY_VALUE.finditer(window)})
    if days:
        values.append("weekday:" + ",".join(days))
    time = _TIME_VALUE.search(window)
    if time:
        values.append(_clock(time.groups()))
    return [v for v in values if v]


def _clock(g: tuple[str | None, ...]) -> str:
    if g[0]:
        hour, minute, half = int(g[0]), int(g[1] or 0), g[2]
        afternoon = half and (half.startswith("p") or half in ("in the afternoon", "in the evening",
                                                               "at night"))
        if afternoon and hour < 12:
            hour += 12
        elif half and (half.startswith("a") or half == "in the morning") and hour == 12:
            hour = 0
    else:
        hour, minute = int(cast(str, g[3] or g[5])), int(cast(str, g[4] or g[6]))  # the pattern sets one pair
    return f"time:{hour:02d}:{minute:02d}" if hour < 24 and minute < 60 else ""


_PARTY = re.compile(r"\b(" + NUM + r") (?:including me|of us|people total|people in total|in total|total)\b|"
                    r"\bthe ("
                    + NUM + r") of us\b|\b(?:a )?party of (" + NUM + r")\b|\b(?:a )?group of (" + NUM
                    + r")\b|"
                    r"\bwe are (?:a )?(?:family of )?(" + NUM + r")\b(?! (?:years|minutes|hours|days|weeks|"
                    r"months|"
                    r"miles))|\bthere (?:are|will be) (" + NUM + r") of us\b|\btable for (" + NUM + r")\b|"
                    r"\bfamily of ("
                    + NUM + r")\b")
_CURRENCY = frozenset("$€£¥₹")
_PARTY_CHANGE = re.compile(r"\b(?:more|extra|additional|joining|also coming|plus|another|dropped out|"
                           r"can not make it|cannot make it|now)\b")


def _party(ctx: _Ctx) -> list[Fact]:
    out = []
    for match in _PARTY.finditer(ctx.text):
        if ctx.text[max(0, match.start() - 1):match.start()] in _CURRENCY:
            continue  # "$48 in total" is a price, not 48 people
        count = parse_number(next(g for g in match.groups() if g))
        if count and count >= 2 and not _PARTY_CHANGE.search(ctx.text):
            out.append(ctx.fact("party_size", str(count), match.end(), strength=0.85))
    return out


_UNIT_DAYS = {"day": 1, "week": 7, "month": 30, "year": 365}
_AGO = re.compile(r"\b(?:i|we) (?:only |just )?(bought|got|started|moved|adopted|signed|joined|began|"
                  r"ordered|booked|met|married)\b(?: [\w']+){0,3}? (" + COUNT + r") (day|week|month|"
                  r"year)s? ago\b")
_SINCE = re.compile(r"\b(?:it has been|it is been|been|after) (?:about |almost |over |nearly )?(" + COUNT
                    + r") (day|week|month|year)s? since (?:i|we) (bought|got|started|moved|adopted|signed|"
                    r"joined|"
                    r"began|ordered|booked|met|married)\b")
_HAD_FOR = re.compile(r"\b(?:i|we) (?:have had|have been having|had|have been dealing with) (?:a |an |this |"
                      r"my |the )?((?:[\w-]+ ){0,2}?)(cough|fever|pain|rash|headache|headaches|symptoms|"
                      r"problem|issue|injury|infection|cold|flu|migraine|migraines|insomnia) for (?:about |"
                      r"almost |over |nearly |the (?:last|past) )?(" + COUNT + r") (day|week|month|year)s?\b")
_OF_THIS = re.compile(r"\b(?:after |for )?(?:about |almost |over |nearly )?(" + COUNT + r") (day|week|month|"
                      r"year)s? of (?:this|my|the) (cough|fever|pain|rash|headache|headaches|symptoms|"
                      r"problem|issue|injury|infection|cold|flu|migraine|migraines|insomnia)\b")
_TERM = re.compile(r"\b(" + NUM + r")[- ](month|year)s?[- ](lease|contract|mortgage|loan|warranty|"
                   r"subscription|membership|term)\b")


def _durations(ctx: _Ctx) -> list[Fact]:
    out = []
    for match in _AGO.finditer(ctx.text):
        days = _days(match.group(2), match.group(3))
        if days:
            out.append(ctx.fact("ago:" + match.group(1), str(days), match.end()))
    for match in _SINCE.finditer(ctx.text):
        days = _days(match.group(1), match.group(2))
        if days:
            out.append(ctx.fact("ago:" + match.group(3), str(days), match.end()))
    for match in _HAD_FOR.finditer(ctx.text):
        days = _days(match.group(3), match.group(4))
        if days:
            out.append(ctx.fact("lasting:" + _head(match.group(2)), str(days), match.end()))
    for match in _OF_THIS.finditer(ctx.text):
        days = _days(match.group(1), match.group(2))
        if days:
            out.append(ctx.fact("lasting:" + _head(match.group(3)), str(days), match.end()))
    for match in _TERM.finditer(ctx.text):
        count = parse_number(match.group(1))
        if count and re.search(r"\b(?:i|we|my|our)\b", ctx.text):
            months = count * (12 if match.group(2) == "year" else 1)
            out.append(ctx.fact("term:" + match.group(3), str(months), match.end()))
    return out


def _days(count: str, unit: str) -> int | None:
    number = parse_number(count)
    return number * _UNIT_DAYS[unit] if number else None


_MONEY = (r"([$€£]\s?\d[\d,]*(?:\.\d+)?\s?k?\b|\d[\d,]*(?:\.\d+)?\s?k?\s?(?:dollars|bucks|euros|pounds|"
          r"usd|eur|"
          r"gbp)\b)")
_BUDGET_CAP = re.compile(r"\b(?:(?:hard |strict |total |max(?:imum)? |overall |firm |tight )*budget(?: is|"
                         r" of|:| was| around| about| limit(?: is| of)?| at| to)?|max(?:imum)?(?: of| is)?|"
                         r"a cap of|cap(?: it)? at|up to|no more than|not more than|at most|"
                         r"can (?:only )?(?:afford|spend|go up to|stretch to)|willing to (?:spend|pay|"
                         r"go up to)|spend(?:ing)? (?:up to|at most|no more than))\s*" + _MONEY)
_SPEND = re.compile(r"\b(?:spend|pay|paying|spending|closer to)\s*(?:about |around |roughly )?" + _MONEY)


def _money_value(text: str) -> tuple[str, float] | None:
    currency = "$" if "$" in text or "dollar" in text or "usd" in text or "bucks" in text else \
        "€" if "€" in text or "euro" in text or "eur" in text else "£"
    number = re.search(r"\d[\d,]*(?:\.\d+)?", text)
    if not number:
        return None
    amount = float(number.group().replace(",", ""))
    if re.search(r"\d\s?k\b", text):
        amount *= 1000
    return currency, amount


def _budget(ctx: _Ctx) -> list[Fact]:
    out = []
    for pattern, slot in ((_BUDGET_CAP, "budget"), (_SPEND, "spend")):
        for match in pattern.finditer(ctx.text):
            parsed = _money_value(match.group(1))
            if parsed and parsed[1] > 0:
                out.append(ctx.fact(slot, f"{parsed[0]}{parsed[1]:.0f}", match.end()))
    return out


_INCOME = re.compile(r"\b(?:take home|take-home|net|earn|make|gross|salary(?: is)?|income(?: is)?|"
                     r"paycheck(?: is)?|bring home)\b[^.$\u20ac\u00a3\d]{0,20}" + _MONEY + r"(?:\s*(?:a|per|"
                     r"/|each|every)\s*(month|year|week|yr|mo)\b)?|" + _MONEY + r"\s*(?:a|per|/)\s*(month|"
                     r"year|week)\s*(?:after tax(?:es)?|take[- ]home|net|salary|income|before tax(?:es)?|"
                     r"gross)|" + _MONEY + r" (monthly|yearly|annual|weekly) (?:take[- ]home|income|salary|"
                     r"pay)")
_AREA = re.compile(r"\b(\d[\d,]*) ?(sq\.? ?ft|square feet|square foot|sqft|m2|m\u00b2|square met(?:er|re)s|"
                   r"sq m)\b")
_SIZE = re.compile(r"\bi (?:wear|take|am) (?:a |an )?((?:(?:men's|women's|mens|womens|us|uk|"
                   r"eu) ){0,2})(?:size )(\d{1,2}(?:\.5)?)\b|\bi (?:wear|take) (?:a |an )?((?:(?:men's|"
                   r"women's|mens|womens|us|uk|eu) ){1,2})(?:size )?(\d{1,2}(?:\.5)?)\b")


def _amounts(ctx: _Ctx) -> list[Fact]:
    out = []
    for match in _INCOME.finditer(ctx.text):
        money = match.group(1) or match.group(3) or match.group(5)
        period = match.group(2) or match.group(4) or match.group(6) or "month"
        period = {"yr": "year", "mo": "month", "monthly": "month", "yearly": "year", "annual": "year",
                  "weekly": "week"}.get(period, period)
        parsed = _money_value(money)
        net = "net" if re.search(r"take[- ]home|after tax|net\b|bring home", match.group()) else "gross" \
            if re.search(r"gross|before tax|salary", match.group()) else "any"
        if parsed and re.search(r"\b(?:i|my|we|our)\b", ctx.text):
            out.append(ctx.fact(f"income:{period}:{net}", f"{parsed[0]}{parsed[1]:.0f}", match.end()))
    for match in _AREA.finditer(ctx.text):
        if re.search(r"\b(?:our|my|it is|the (?:condo|house|apartment|flat|unit|place|home))\b", ctx.text):
            out.append(ctx.fact("area", match.group(1).replace(",", ""), match.end(), strength=0.85))
    for match in _SIZE.finditer(ctx.text):
        system = (match.group(1) or match.group(3) or "").strip()
        value = match.group(2) or match.group(4)
        out.append(ctx.fact("size", value, match.end(), extra=("system:" + system,) if system else ()))
    return out


_FAVOURITE = re.compile(r"(?<!one of )(?<!another )\bmy (?:absolute |all[- ]time |very |"
                        r"current )?(?:favou?rite|fave|fav) ([a-z]+)(?: [a-z]+){0,2}? (?:is|has to be|"
                        r"would be|would have to be|is probably|is definitely|of all time is) ([\w' -]+)")
_MINE_IS = re.compile(r"^mine (?:is|has to be|would be|would have to be) ([\w' -]+)")
_FAV_QUESTION = re.compile(r"\bfavou?rite ([a-z]+)\b")


def _favourites(ctx: _Ctx) -> list[Fact]:
    out = []
    for match in _FAVOURITE.finditer(ctx.text):
        value = _short_value(match.group(2))
        if value:
            out.append(ctx.fact("fav:" + _category(match.group(1)), value, match.end()))
    mine = _MINE_IS.search(ctx.text)
    asked = _FAV_QUESTION.findall(ctx.before)
    if mine and asked:
        value = _short_value(mine.group(1))
        if value:
            out.append(ctx.fact("fav:" + _category(asked[-1]), value, mine.end(), strength=0.9))
    return out


def _category(word: str) -> str:
    word = {"colour": "color", "films": "movie", "film": "movie", "movies": "movie"}.get(word, word)
    return word[:-1] if word.endswith("s") and not word.endswith("ss") else word


def _short_value(text: str) -> str:
    text = re.split(r"\b(?:and|but|because|since|though|which|who|so|too|also|i|it|at|by|from|for)\b|"
                    r"[,.!?;]", text)[0]
    words = [w for w in text.split() if w not in ("the", "a", "an", "probably", "definitely", "either")]
    return " ".join(words[:4])


_CLOSED = re.compile(r"^(?:the )?([a-z][\w'-]*)\b[^,;]*?\b(?:(?:is|are) (?:always |usually )?closed|(?:does|"
                     r"do) not (?:run|operate|open|sail|fly|go)|(?:is|are) not (?:open|running|"
                     r"operating)) (?:on )?(?:" + _WEEKDAY_RE + ")")
_VISIT_ON = re.compile(r"\b(?:the )?([a-z][\w'-]*) (?:on|this|next) (?:a )?" + _WEEKDAY_RE
                       + r"|\b(?:the|a) " + _WEEKDAY_RE + r" (?:\d{1,2}:\d{2} |morning |afternoon |evening |"
                       r"early )?([a-z][\w'-]*)")


def _opening(ctx: _Ctx) -> list[Fact]:
    """'The Louvre is closed on Tuesdays' vs 'the Louvre on Tuesday morning' (same place, same day)."""
    out = []
    for match in _CLOSED.finditer(ctx.text):
        out.append(ctx.fact("closed:" + match.group(1), match.group(2), match.end(), subject="generic"))
    if "closed" in ctx.text or re.search(r"\bnot\b", ctx.text):
        return out
    for match in _VISIT_ON.finditer(ctx.text):
        entity, day = (match.group(1), match.group(2)) if match.group(1) else (match.group(4), match.group(3))
        if entity not in _PLACE_STOP and entity not in _WEEKDAYS and entity not in _STOP_HEADS:
            out.append(ctx.fact("visit_on:" + entity, day, match.end(), subject="generic"))
    return out


_VERB_FORMS = {
    "play": "play played playing plays", "read": "read reading reads", "watch": "watch watched watching "
    "watches",
    "see": "see seen saw seeing", "ride": "ride ridden rode riding rides", "try": "try tried trying",
    "drive": "drive driven drove driving", "fly": "fly flown flew flying", "swim": "swim swam swum swimming",
    "ski": "ski skied skiing", "surf": "surf surfed surfing", "hike": "hike hiked hiking",
    "cook": "cook cooked cooking",
    "bake": "bake baked baking", "paint": "paint painted painting", "knit": "knit knitted knitting",
    "sing": "sing sang sung singing", "dance": "dance danced dancing", "write": "write wrote written writing",
    "climb": "climb climbed climbing", "camp": "camp camped camping", "fish": "fish fished fishing",
    "learn": "learn learned learnt learning", "study": "study studied studying", "use": "use used using",
    "listen": "listen listened listening", "meet": "meet met meeting", "run": "run ran running",
    "smoke": "smoke smoked smoking", "golf": "golf golfed golfing", "skate": "skate skated skating",
    "repot": "repot repotted repotting", "book": "book booked booking",
    "garden": "garden gardened gardening", "sail": "sail sailed sailing", "row": "row rowed rowing",
}
_VERB_LEMMA = {form: lemma for lemma, forms in _VERB_FORMS.items() for form in forms.split()}
_VERB_ALT = r"(" + "|".join(sorted(_VERB_LEMMA, key=len, reverse=True)) + r")"
_INTRANSITIVE = frozenset({"ski", "surf", "hike", "swim", "camp", "fish", "skate", "golf", "dance", "climb",
                           "knit",
                           "run"})
_NEVER_ACT = re.compile(r"\b(?:i|we) (?:have )?(?:never|not ever|never once) (?:been |gone |went )?"
                        + _VERB_ALT + r"\b(?: (?:a|an|any|the|to|in|on|with)\b)?((?: [\w&'-]+){0,3})")
_DID_ACT = re.compile(r"\b(?:i|we) (?:have been |am |was |used to |also |often |still |really |usually |"
                      r"always |love |like |enjoy |love to |like to |go |went |started |have |had )?"
                      + _VERB_ALT
                      + r"\b(?: (?:a|an|the|some|lots of|a lot of|with|on|in|to)\b)?((?: [\w&'-]+){0,3})")
_ACTIVITY_STOP = frozenset("it that this them one any anything much more again before lot often well very "
                           "all myself home there here too so for with and but".split())


def _activities(ctx: _Ctx) -> list[Fact]:
    """'I've never played a tabletop RPG' vs 'I've been playing D&D' (same verb, same object head)."""
    out = []
    negatives = list(_NEVER_ACT.finditer(ctx.text))
    for match in negatives:
        lemma, head = _VERB_LEMMA[match.group(1)], _activity_object(match.group(2))
        if head or lemma in _INTRANSITIVE:
            out.append(ctx.fact(f"did:{lemma}:{head}", "0", match.end(), extra=("lifetime",)))
    spans = [(m.start(), m.end()) for m in negatives]
    for match in _DID_ACT.finditer(ctx.text):
        if any(a <= match.start() < b for a, b in spans) or re.search(r"\b(?:not|never|no)\b", match.group()):
            continue
        lemma, head = _VERB_LEMMA[match.group(1)], _activity_object(match.group(2))
        if head or lemma in _INTRANSITIVE:
            out.append(ctx.fact(f"did:{lemma}:{head}", "some", match.end(), strength=0.9))
    return out


_DROVE = re.compile(r"\b(?:i|we) (?:drove|was driving|were driving|have driven|drive to work|drive every|"
                    r"usually drive|always drive)\b")


def _drives(ctx: _Ctx) -> list[Fact]:
    """'Last time I drove us up ...': driving, which a speaker without a licence does not do."""
    return [ctx.fact("drives", "some", m.end()) for m in _DROVE.finditer(ctx.text)]


def _activity_object(words: str) -> str:
    tokens = []
    split = words.split()
    while split and split[0] in ("my", "our"):  # "I repotted my snake plant": the plant is the object
        split = split[1:]
    for word in split:
        if word in _ACTIVITY_STOP or word in _PLACE_STOP or not re.match(r"^[a-z&]", word):
            break
        tokens.append(word)
    return _head(" ".join(tokens)) if tokens else ""


_HABIT_PRESUPPOSED = re.compile(r"\bmy (?:[\w-]+ ){0,3}(smoking|drinking) habit\b|\bmy (hangover)\b|"
                                r"\bmy (smoke) break\b")


def _presupposed_habits(ctx: _Ctx) -> list[Fact]:
    """'Will my pack-a-day smoking habit ...?' asks a question but presupposes the habit."""
    out = []
    for match in _HABIT_PRESUPPOSED.finditer(ctx.text):
        word = next(g for g in match.groups() if g)
        group = "tobacco" if word.startswith("smok") else "alcohol"
        out.append(ctx.fact("consumes", group, match.end(), extra=("habit", "possessive")))
    return out


def _job_presupposed(ctx: _Ctx) -> list[Fact]:
    """'Would it clash with my paramedic job?' presupposes the job."""
    return [ctx.fact("job", _OCCUPATIONS[m.group(1)], m.end(), extra=("occ:" + m.group(1), "possessive"))
            for m in re.finditer(r"\bmy (?:[\w-]+ )?" + _OCC_RE + r" (?:job|work|career|gig|shifts?)\b",
                                 ctx.text)]
