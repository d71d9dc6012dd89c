"""Extractors of facts about the speaker as a person: age, names, organisations, places,
family, partner, pets and possessions."""

from __future__ import annotations

import re

from agentmem.quarantine import places
from agentmem.quarantine.slots.context import _Ctx
from agentmem.quarantine.slots.facts import Fact
from agentmem.quarantine.slots.lexicons import _DEMONYMS, _LANGUAGES, _PETS, _PET_RE, _RELATIONS, _RELATION_RE
from agentmem.quarantine.slots.numbers import COUNT, NUM, parse_number


_AGE_PATTERNS = (
    re.compile(r"\bi am (?:now |almost |nearly |about |only |just |currently |turning )?(" + NUM + r")(?:[- "
               r"]years?[- ]old| yrs? old| y/?o\b)?(?=\s*(?:[,.;!?)]|$|and\b|but\b|so\b|with\b|myself\b|"
               r"too\b|years\b|by the way\b|btw\b|if\b|which\b|who\b|now\b|this year\b|going on\b))"),
    re.compile(r"\bi am an? (" + NUM + r")[- ]?(?:years?|yrs?)[- ]?old\b"),
    re.compile(r"\bi (?:just )?turned (" + NUM + r")\b"),
    re.compile(r"\bmy age is (" + NUM + r")\b"),
)
_AGE_DECADE = re.compile(r"\bi am in my (early |mid |mid-|late )?(twenties|thirties|forties|fifties|sixties|"
                         r"seventies|eighties|20s|30s|40s|50s|60s|70s|80s)\b")
_DECADES = {"twenties": 20, "thirties": 30, "forties": 40, "fifties": 50, "sixties": 60, "seventies": 70,
            "eighties": 80}
_OTHER_AGE = re.compile(r"\bmy (?:(only|oldest|eldest|youngest|older|younger|little|big) )?" + _RELATION_RE
                        + r"(?:,? [a-z]+,?)? (?:is|just turned|turned) (" + NUM + r")(?: years "
                        r"old)?(?=\s*(?:[,.;!?]|$|and\b|but\b|years\b))")


_AGE_AT = re.compile(r"(?:^|,\s|\b(?:honestly|but|and|so|even|me|like)\s)at (\d{2}),? (?=(?:is|am|should|do|"
                     r"does|can|will|would|i|it|that|are|how|what|with|my)\b)|\bat (?:my age|age) (\d{2})\b|"
                     r"^at (\d{2})$")


# The age a relative turns at the birthday being discussed: "grandma turns 90 next Saturday" and
# "a banner for grandma's 85th" are one birthday, so two ages clash whoever the relative is.
_TURNS = re.compile(r"\b(?:my |our )?" + _RELATION_RE + r" (?:turns|is turning|will turn|will be turning) (\d{1,3})\b|"
                    r"\b(?:my |our )?" + _RELATION_RE + r"'s (\d{1,3})(?:st|nd|rd|th)\b")


def _birthday_ages(ctx: _Ctx) -> list[Fact]:
    out = []
    for match in _TURNS.finditer(ctx.text):
        relation, age = (match.group(1), match.group(2)) if match.group(1) else (match.group(3), match.group(4))
        out.append(ctx.fact("birthday_age:" + relation, age, match.end(), subject="other:" + relation))
    return out


def _ages(ctx: _Ctx) -> list[Fact]:
    out = []
    for match in _AGE_AT.finditer(ctx.text):
        age = int(match.group(1) or match.group(2) or match.group(3))
        if 14 <= age <= 99:
            out.append(ctx.fact("age", f"{age}-{age}", match.end(), strength=0.9))
    for number, pattern in enumerate(_AGE_PATTERNS):
        for match in pattern.finditer(ctx.text):
            stated = parse_number(match.group(1))
            if stated is not None and 10 <= stated <= 110:
                high = stated + 1 if number == 2 else stated
                out.append(ctx.fact("age", f"{stated}-{high}", match.end()))
    for match in _AGE_DECADE.finditer(ctx.text):
        base = _DECADES.get(match.group(2)) or int(match.group(2)[:2])
        spans = {"early ": (0, 3), "mid ": (3, 7), "mid-": (3, 7), "late ": (6, 9)}
        low, high = spans.get(match.group(1) or "", (0, 9))
        out.append(ctx.fact("age", f"{base + low}-{base + high}", match.end()))
    for match in _OTHER_AGE.finditer(ctx.text):
        theirs = parse_number(match.group(3))
        if theirs is not None:
            extra = ("only",) if match.group(1) == "only" else ()
            out.append(ctx.fact("age", f"{theirs}-{theirs}", match.end(), subject="other:" + match.group(2),
                                extra=extra))
    return out


_NAME_STOP = frozenset("""fine good great ok okay well here back done sorry glad happy sure tired
new single married so not the a an in at on just very really still also from into busy ready home sick
excited""".split())
# "the name is" / "name is" open a clause: "the event name is Cubs Vs Giants" names an event
_SELF_NAME = re.compile(r"\b(?:my name is|my name's|call me|i go by|(?<![a-z] )the name is|(?<![a-z] )name is) "
                        r"([a-z][a-z'-]+)\b")
_GREETING_NAME = re.compile(r"\b(?:I am|I'm|Im) ([A-Z][a-z]+)\s*[.!,]?\s*$")
_REL_NAME = re.compile(r"\b(?:my|our) (?:(only|older|younger|little|big|twin|eldest|oldest|youngest) )?(wife|"
                       r"husband|partner|brother|sister|son|daughter|boyfriend|girlfriend|fiance|fiancee|"
                       r"dog|cat|puppy|kitten|horse|rabbit|bunny|hamster|parrot|guinea pig|ferret|tortoise|"
                       r"turtle|mom|mum|mother|dad|father|manager|boss)(?:'s name is|"
                       r" is called| is named| called| named|,| is| -)? ([a-z][a-z'-]+)\b")
_EXPLICIT_NAMING = re.compile(r"(?:'s name is|called|named)$")


_NAMED_PETS = frozenset({"rabbit", "bunny", "hamster", "parrot", "ferret", "tortoise", "turtle"})
_NAME_BEFORE = re.compile(r"\b([A-Z][a-z]+), (?:my|our) (one and only |only |beloved |dear |sweet |little |"
                          r"old )?([a-z]+)")
_NAMED = re.compile(r"\b(?:a|an|my|our|(" + NUM + r")) (?:[\w-]+ ){0,2}?([a-z]+) (?:named|called) "
                    r"([a-z][a-z'-]+(?:(?:,| and|, and) [a-z][a-z'-]+)*)\b")


_ORG = r"([A-Z][\w&'-]+(?: (?:[A-Z][\w&'-]+|of|&|and))*)"
_EMPLOYER = (re.compile(r"\b(?i:i work (?:at|for)|i am employed (?:at|by)|my employer,? (?:is )?|"
                        r"i have worked (?:at|for)) " + _ORG),
             re.compile(_ORG + r",? (?i:the (?:company|firm|place|employer) (?:i|we) work (?:for|at))\b"))
_SCHOOLED = (re.compile(r"\b(?i:(?:degree|graduated|studied|my (?:entire |whole )?(?:degree|studies|"
                        r"bachelor's|master's)) (?:\w+ ){0,3}?(?:at|from)) " + _ORG),
             re.compile(_ORG + r",? (?i:where i (?:got|did|earned|finished) my (?:degree|bachelor's|"
                        r"master's|phd))\b"))
_ORG_STOP = frozenset({"I", "The", "A", "My", "Our", "It", "And"})


def _organisations(ctx: _Ctx) -> list[Fact]:
    if ctx.lowercase:
        return []
    out = []
    for slot, patterns in (("employer", _EMPLOYER), ("alma_mater", _SCHOOLED)):
        for pattern in patterns:
            for match in pattern.finditer(ctx.sentence):
                name = match.group(1)
                if name.split()[0] in _ORG_STOP or name.lower() in _PLACE_STOP:
                    continue
                whole = ("only",) if re.search(r"\b(?:entire|whole|only)\b", ctx.text) else ()
                out.append(ctx.fact(slot, name.lower(), len(ctx.text), extra=whole))
    return out


def _names_before(ctx: _Ctx) -> list[Fact]:
    """'Alex, my partner of five years' and 'a beagle named Biscuit'."""
    out = []
    for match in _NAME_BEFORE.finditer(ctx.sentence):
        noun = match.group(3).lower()
        relation = "dog" if _PETS.get(noun) == "dog" else "cat" if _PETS.get(noun) == "cat" else noun
        if relation in _RELATIONS or relation in ("dog", "cat", "manager", "boss") or noun in _NAMED_PETS:
            extra = ("only",) if match.group(2) and "only" in match.group(2) else ()
            out.append(ctx.fact("name:" + _base_relation(relation), match.group(1).lower(), len(ctx.text),
                                extra=extra + ("possessive",)))
    for match in _NAMED.finditer(ctx.text):
        noun = match.group(2)
        relation = "dog" if _PETS.get(noun) == "dog" else "cat" if _PETS.get(noun) == "cat" else noun
        if relation not in _RELATIONS and relation not in ("dog", "cat"):
            continue
        names = [n for n in re.split(r",? and |, ", match.group(3)) if n not in _NAME_STOP]
        count = parse_number(match.group(1)) if match.group(1) else None
        only = re.search(r"\b(?:one|only one|a single|just one|my only) " + re.escape(noun)
                         + r"\b|\b(?:one|only one|a single|just one) (?:dog|cat|pet)\b", ctx.text)
        extra = ("only",) if only else ("all",) if count and count == len(names) and count > 1 else ()
        if names:
            out.append(ctx.fact("name:" + _base_relation(relation), ",".join(names), match.end(),
                                extra=extra))
    return out


def _names(ctx: _Ctx) -> list[Fact]:
    out = _names_before(ctx)
    for match in _SELF_NAME.finditer(ctx.text):
        if match.group(1) not in _NAME_STOP:
            out.append(ctx.fact("name:self", match.group(1), match.end()))
    greeting = _GREETING_NAME.search(ctx.original.strip())
    greeted = greeting.group(1).lower() if greeting else ""
    if greeted and greeted not in _NAME_STOP and greeted not in _DEMONYMS and greeted not in _LANGUAGES:
        out.append(ctx.fact("name:self", greeted, len(ctx.text)))
    for match in _REL_NAME.finditer(ctx.text):
        name = match.group(3)
        connector = ctx.text[match.end(2):match.start(3)].strip()
        explicit = bool(_EXPLICIT_NAMING.search(connector))
        if name in _NAME_STOP or name in _RELATIONS or not (explicit or _is_capitalised(ctx, name)):
            continue
        only = match.group(1) == "only" or re.search(r"\b(?:my one and only|the only (?:person|one)|(?:my|our) "
                                                     r"only (?:pet|" + re.escape(match.group(2)) + r"))\b",
                                                     ctx.text)
        out.append(ctx.fact("name:" + _base_relation(match.group(2)), name, match.end(),
                            extra=("only", "possessive") if only else ("possessive",)))
    return out


def _base_relation(word: str) -> str:
    return {"puppy": "dog", "kitten": "cat", "bunny": "rabbit", "mum": "mom", "mother": "mom", "father": "dad",
            "fiancee": "fiance"}.get(word, word)


def _is_capitalised(ctx: _Ctx, word: str) -> bool:
    """Was ``word`` written with a capital (and not just at the start of the sentence)?"""
    if ctx.lowercase:
        return False
    pattern = re.compile(r"(?<![.!?]\s)(?<!^)\b" + re.escape(word.capitalize()) + r"\b")
    return bool(pattern.search(ctx.original))


_PLACE_STOP = frozenset("""a an the my our his her their this that some for since with and but so because
when where which who now too also right near by at on in to from last next this year years ago month week
summer winter spring fall weekend for until till back every""".split())


def _place_after(ctx: _Ctx, start: int) -> tuple[str, places.Place | None, int]:
    """(name, resolved place, end offset) of the place phrase starting at ``start``."""
    rest = ctx.text[start:]
    words: list[str] = []
    offset = start
    for token in re.finditer(r"[a-z][a-z.'-]*", rest):
        word = token.group().rstrip(".")
        if rest[:token.start()].strip(" ") and re.search(r"[,;!?()]", rest[:token.start()]):
            break
        if word in _PLACE_STOP and words:
            break
        if word in ("the",) and not words:
            continue
        words.append(word)
        offset = start + token.end()
        if len(words) == 4:
            break
    flags = [(not ctx.lowercase) and _is_capitalised(ctx, w) for w in words] if not ctx.lowercase else []
    place, used = places.resolve_prefix(words, flags if flags else [False] * len(words))
    if place is None and not ctx.lowercase and words and all(flags[:1]):
        name = " ".join(w for w, f in zip(words, flags) if f) or words[0]
        return "?" + name, None, offset
    if place is None:
        return "", None, offset
    end = start + sum(len(w) + 1 for w in words[:used])
    return places.fold(place.name), place, end


_RESIDENCE = re.compile(r"\b(?:i|we) (?:currently |still |also |actually |now )?(?:live|am living|"
                        r"are living|reside|am based|are based|am located|are located|have lived|"
                        r"have been living|am settled|are settled|call home)(?: here)? in ")
_MY_HOME = re.compile(r"\b(?:my|our) (?:home|house|flat|apartment|condo|place|hometown|home town|"
                      r"town)(?: is| here)? in |\bhere in |\bsomeone (?:who lives|living|"
                      r"based) in (?=[\w ]+ like me\b)")
_ORIGIN = re.compile(r"\b(?:i am|we are) (?:originally |actually )?from |\b(?:i|we) (?:grew up|"
                     r"was born(?: and raised)?|were born|was raised|were raised) in |\bborn and raised in |"
                     r"(?:^|, )growing up in |\bback home in |\bin my home country(?: of)?,? |\bmy home "
                     r"country(?: is)?,? ")
# Where the speaker is about to live: a plan, so not a residence, but two plans must agree.
_DESTINATION = re.compile(r"\b(?:i|we) (?:am|are) (?:relocating|moving|emigrating)(?: [\w-]+){0,3}? to |"
                          r"\bonce (?:i am|we are) (?:settled|moved|living) in |\bwhen (?:i|we) (?:move|"
                          r"relocate|emigrate) to |\bafter (?:i|we) (?:move|relocate|emigrate) to ")
_NOT_FROM = re.compile(r"\b(?:i am|we are) not (?:originally )?from ")
_VISITED = re.compile(r"\b(?:i|we) (?:was|were) (?:in|at|over in|out in) |\b(?:i|we) have (?:been|traveled|"
                      r"travelled|lived|stayed) (?:to|in) |\b(?:i|we) (?:went|traveled|travelled|flew|drove|"
                      r"got back|came back|returned|backpacked|toured) (?:to|from|around|through) |\b(?:i|"
                      r"we) visited |\bmy (?:trip|visit|holiday|vacation|honeymoon|stay|semester|"
                      r"year abroad) (?:to|in) |\b(?:i|we) spent (?:\w+ ){1,3}in |\b(?:i|we) (?:lived|"
                      r"stayed|studied|worked) in |\bwhen i was in ")
_NEVER_BEEN = re.compile(r"\b(?:i|we) (?:have )?never (?:been|traveled|travelled|gone|visited|set foot|"
                         r"stepped foot|flown)(?: to| in)? |\b(?:i|we) have not (?:ever )?been (?:to|in) |"
                         r"\b(?:i|we) have yet to (?:visit|go to) ")
_FOR_DURATION = re.compile(r"^\s*(?:for|since|my whole life|all my life)\b")


def _places(ctx: _Ctx) -> list[Fact]:
    out: list[Fact] = []
    for pattern, slot, polarity in ((_RESIDENCE, "residence", True), (_MY_HOME, "residence", True),
                                    (_ORIGIN, "origin", True), (_NOT_FROM, "origin", False),
                                    (_VISITED, "visited", True), (_NEVER_BEEN, "visited", False),
                                    (_DESTINATION, "destination", True)):
        for match in pattern.finditer(ctx.text):
            name, _place, end = _place_after(ctx, match.end())
            if not name:
                continue
            fact_slot = slot
            if slot == "residence" and "have lived" in match.group() + " " and not \
                    _FOR_DURATION.search(ctx.text[end:]):
                fact_slot = "visited"
            extra = ("lifetime",) if slot == "visited" and not polarity else ()
            out.append(ctx.fact(fact_slot, name, end, polarity, extra=extra,
                                strength=0.85 if "here in" in match.group() else 1.0))
            if fact_slot in ("residence", "origin") and polarity:
                out.append(ctx.fact("visited", name, end, True, extra=("implied",)))
    return out + _dwelling(ctx)


_DWELLING = re.compile(r"\b(?:i|we) (?:currently |still |now |actually |also )?(?:live|am living|are living|"
                       r"rent|am renting|are renting|share|am staying|are staying) (?:in )?(?:a|an|my|our|this|"
                       r"the) (?:[\w-]+ ){0,2}?(walk-up|walkup|apartment|flat|condo|studio|loft|dorm|house|"
                       r"bungalow|cottage|farmhouse|trailer|houseboat)\b")
_DWELLING_KIND = {"walk-up": "apartment", "walkup": "apartment", "flat": "apartment", "condo": "apartment",
                  "studio": "apartment", "loft": "apartment", "bungalow": "house", "cottage": "house",
                  "farmhouse": "house"}


def _dwelling(ctx: _Ctx) -> list[Fact]:
    """'I live in a third-floor walk-up' vs 'since I live in a house with a big yard'."""
    return [ctx.fact("dwelling", _DWELLING_KIND.get(m.group(1), m.group(1)), m.end())
            for m in _DWELLING.finditer(ctx.text)]


_KID_NOUNS = (r"(kids|children|child|sons?|daughters?|grandkids|grandchildren|stepkids|stepchildren|"
              r"little ones)")
_KIDS_HAVE = re.compile(r"\b(?:i|we) (?:also |both )?(?:have|have got|got|raised|am raising|are raising) ("
                        + COUNT + r") (?:(?:[\w-]+) ){0,2}?" + _KID_NOUNS + r"\b")
_KIDS_NONE = re.compile(r"\b(?:i|we) (?:do not|did not|never|have never|have not) (?:have|had|want|"
                        r"wanted)(?: any)? (?:kids|children|a child|a kid|a baby|babies)\b|"
                        r"\bi am (?:childless|child-free|childfree|not a (?:mom|mother|dad|father|"
                        r"parent))\b|^(?:and )?no (?:kids|children)\b(?! (?:allowed|menu|under|zone|section|"
                        r"policy|please))|(?:single|divorced|married), no (?:kids|children)\b")
_PARENT_OF = re.compile(r"\ban? (?:[\w-]+ ){0,2}?(?:mother|mom|mum|father|dad|parent) of (" + NUM
                        + r"|twins|triplets)\b")
_MY_KIDS = re.compile(r"\b(?:my|our) ((?:[\w-]+ ){0,2}?)(kids|children|son|sons|daughter|daughters|toddler|"
                      r"grandkids|grandchildren|stepson|stepdaughter|stepkids|little ones)\b")
_MY_YOUNGEST = re.compile(r"\b(?:my|our) (youngest|eldest|oldest)(?=,| [A-Za-z]+,| is\b| just\b| starts\b|"
                          r" turned\b| turns\b| goes\b)")
_STAY_HOME = re.compile(r"\bstay[- ]at[- ]home (?:mom|dad|mum|mother|father|parent)\b")
_TEACHING = re.compile(r"\b(?:class|classroom|students|pupils|teach|teaching|coach|coaching|daycare|camp)\b")


def _kids(ctx: _Ctx) -> list[Fact]:
    out = []
    for match in _KIDS_HAVE.finditer(ctx.text):
        count = parse_number(match.group(1))
        noun = match.group(2)
        if count is None or "'" in match.group():
            continue
        if noun.startswith(("son", "daughter")):
            out.append(ctx.fact("kids", "some" if count else "0", match.end(), strength=0.95))
            continue
        if noun.startswith("grand"):
            out.append(ctx.fact("kids", "some", match.end(), strength=0.9))
            continue
        value = str(count) if count != 1 or match.group(1) in ("one", "1") else "some"
        out.append(ctx.fact("kids", value, match.end()))
    for match in _KIDS_NONE.finditer(ctx.text):
        lifetime = ("lifetime",) if "never" in match.group() else ()
        out.append(ctx.fact("kids", "0", match.end(), extra=lifetime))
    for match in _PARENT_OF.finditer(ctx.text):
        count = {"twins": 2, "triplets": 3}.get(match.group(1)) or parse_number(match.group(1))
        if count:
            out.append(ctx.fact("kids", str(count), match.end()))
    bare = re.match(r"^(" + NUM + r") (?:kids|children)\b", ctx.text)
    if bare and (parse_number(bare.group(1)) or 0) >= 1:
        out.append(ctx.fact("kids", str(parse_number(bare.group(1))), bare.end(), strength=0.85))
    only = re.search(r"\b(?:our|my) only (?:one|child|kid)\b|\bwe have (?:one|a single|only one|"
                     r"just one) (?:child|kid)\b|\bi have (?:one|a single|only one|just one) (?:child|"
                     r"kid)\b", ctx.text)
    if only:
        out.append(ctx.fact("kids", "1", only.end()))
    out += _my_kids(ctx)
    for match in _STAY_HOME.finditer(ctx.text):
        if re.search(r"\bi am (?:an? )?(?:\w+ )?$", ctx.text[:match.start()]):
            out.append(ctx.fact("kids", "some", match.end(), strength=0.75))
    return out


_NOT_MY_KIDS = frozenset({"future", "dream", "friend", "sister", "brother", "partner", "husband", "wife",
                          "imaginary", "fur"})


def _my_kids(ctx: _Ctx) -> list[Fact]:
    if _TEACHING.search(ctx.text):
        return []
    out = []
    for match in _MY_KIDS.finditer(ctx.text):
        modifiers = match.group(1).split()
        if any("'" in m or m in _NOT_MY_KIDS for m in modifiers):
            continue
        count = next((parse_number(m) for m in modifiers if parse_number(m) not in (None, 1)), None)
        plural = match.group(2) in ("kids", "children", "stepkids", "little ones", "sons", "daughters")
        value = (str(count) if count else "several") if plural else "some"
        out.append(ctx.fact("kids", value, match.end(), extra=("possessive",), strength=0.95))
    for match in _MY_YOUNGEST.finditer(ctx.text):
        out.append(ctx.fact("kids", "several", match.end(), strength=0.9))
    return out


_SIB_NONE = re.compile(r"\bi (?:do not|never|did not) (?:have|had)(?: any)? (siblings|brothers or sisters|"
                       r"brothers|sisters|a brother|a sister)\b|\bi have no (siblings|brothers or sisters|"
                       r"brothers|sisters)\b|\b(?:i am|as|being) an only child\b")
_SIB_HAVE = re.compile(r"\bi (?:also )?have (" + COUNT + r") (?:(older|younger|little|big|twin|half|step|"
                       r"baby|kid|half-|step-)[ -]?)?(siblings|brothers|sisters|brother|sister)\b")
_MY_SIB = re.compile(r"\bmy (?:(only|older|younger|little|big|baby|twin|kid|eldest|oldest|"
                     r"youngest) )?(brother|sister|siblings|brothers|sisters|bro|sis)\b(?!-in-law| in law|"
                     r"'s? (?:husband|wife))")


_ONE_OF = re.compile(r"\bi am (?:the )?(?:\w+ )?one of (" + NUM + r") (?:kids|children|siblings)\b")


def _siblings(ctx: _Ctx) -> list[Fact]:
    out = []
    for match in _ONE_OF.finditer(ctx.text):
        count = parse_number(match.group(1))
        if count:
            out.append(ctx.fact("siblings", "some" if count >= 2 else "0", match.end()))
    for match in _SIB_NONE.finditer(ctx.text):
        noun = match.group(1) or match.group(2) or "siblings"
        kind = "brothers" if "brother" in noun and "sister" not in noun else \
            "sisters" if "sister" in noun and "brother" not in noun else "siblings"
        out.append(ctx.fact(kind, "0", match.end()))
    for match in _SIB_HAVE.finditer(ctx.text):
        count = parse_number(match.group(1))
        if count is None or match.group(2) in ("half", "step", "half-", "step-"):
            continue
        noun = match.group(3)
        kind = "siblings" if noun == "siblings" else "brothers" if noun.startswith("brother") else "sisters"
        value = str(count) if (count != 1 or match.group(1) in ("one", "1")) else "some"
        out.append(ctx.fact(kind, value, match.end()))
        if count:
            out.append(ctx.fact("siblings", "some", match.end()))
    for match in _MY_SIB.finditer(ctx.text):
        noun = match.group(2)
        kind = "brothers" if noun in ("brother", "brothers", "bro") else \
            "sisters" if noun in ("sister", "sisters", "sis") else "siblings"
        if match.group(1) == "only":
            out.append(ctx.fact(kind, "1", match.end(), extra=("only",)))
        else:
            out.append(ctx.fact(kind, "some", match.end(), extra=("possessive",), strength=0.95))
        out.append(ctx.fact("siblings", "some", match.end(), extra=("possessive",), strength=0.95))
    return out


_MARITAL = re.compile(r"\b(?:i am|we are) (?:currently |still |happily |recently |newly |"
                      r"now )?(not )?(single|married|divorced|widowed|engaged|separated|a widow|a widower|"
                      r"a bachelor|a single (?:mom|mum|dad|mother|father|parent))\b")
_NEVER_MARRIED = re.compile(r"\b(?:i have )?never (?:been )?married\b|\bi have never had a (?:wife|"
                            r"husband)\b")
_MY_SPOUSE = re.compile(r"\b(?:my|our) ex-(?:wife|husband|spouse)\b|\b(?<!ex-)(?<!ex )(?:my|our) (?:(late|"
                        r"ex|former|future|first|second|dead|deceased|soon-to-be|new|dear|lovely) )?(wife|"
                        r"husband|spouse)\b(?![- ]to[- ]be)|\b(?:my (?:wife|husband) and i)\b|"
                        r"\bmarried for (?:\w+ ){1,2}years\b")


def _marital(ctx: _Ctx) -> list[Fact]:
    out = []
    for match in _MARITAL.finditer(ctx.text):
        word = match.group(2)
        value = "widowed" if "wid" in word else "single" if ("bachelor" in word or "single" in word) else word
        out.append(ctx.fact("marital", value, match.end(), polarity=not match.group(1)))
    for match in _NEVER_MARRIED.finditer(ctx.text):
        if re.search(r"\b(?:i|have)\b", ctx.text[max(0, match.start() - 12):match.end()]):
            out.append(ctx.fact("marital", "married", match.end(), polarity=False, extra=("lifetime",)))
    for match in _MY_SPOUSE.finditer(ctx.text):
        modifier = (match.group(1) if match.lastindex else None) or ("ex" if "ex-" in match.group() else None)
        if modifier in ("late", "dead", "deceased"):
            out.append(ctx.fact("marital", "widowed", match.end(), strength=0.8))
        elif modifier in ("ex", "former", "first"):
            out.append(ctx.fact("marital", "was_married", match.end(), strength=0.85))
        elif modifier in ("future", "soon-to-be"):
            continue
        else:
            spouse = re.search(r"\b(wife|husband)\b", match.group())
            if spouse:
                out.append(ctx.fact("spouse", spouse.group(1), match.end(), extra=("possessive",),
                                    strength=0.9))
            out.append(ctx.fact("marital", "married", match.end(), strength=0.9,
                                extra=("possessive", "new") if modifier == "new" else ("possessive",)))
    return out


_PET_HAVE = re.compile(r"\b(?:i|we) (?:also |both )?(?:have|have got|own|got|adopted|rescued|keep) (" + COUNT
                       + r") (?:(?:[\w-]+) ){0,2}?" + _PET_RE + r"\b")
_PET_NONE = re.compile(r"\b(?:i|we) (?:do not|did not|never|have never|have not ever|have not) (?:have|had|"
                       r"own|owned|got)(?: any| a| an)? " + _PET_RE + r"\b|\b(?:i|we) have no " + _PET_RE
                       + r"\b")
_PET_NONE_ANAPHOR = re.compile(r"\b(?:i|we) (?:have )?never (?:had|owned) (?:one|any|them)\b")
_MY_PET = re.compile(r"\b(?:my|our) ((?:[\w-]+ ){0,2}?)" + _PET_RE + r"\b")
_PET_MODIFIER_STOP = frozenset("hot corn top sea copy fat alley scaredy party lucky under big guard service "
                               "future dream next friend friend's neighbor neighbour's parents stuffed toy "
                               "old late previous childhood".split())


def _pets(ctx: _Ctx) -> list[Fact]:
    out = []
    for match in _PET_HAVE.finditer(ctx.text):
        count, kind = parse_number(match.group(1)), _PETS[match.group(2)]
        if count is None:
            continue
        value = str(count) if count >= 2 or count == 0 else "some"
        out.append(ctx.fact("pet:" + kind, value, match.end()))
        if count and kind != "pet":
            out.append(ctx.fact("pet:pet", "some", match.end()))
    for match in _PET_NONE.finditer(ctx.text):
        kind = _PETS[match.group(1) or match.group(2)]
        out.append(ctx.fact("pet:" + kind, "0", match.end(),
                            extra=("lifetime",) if "never" in match.group() else ()))
    for match in _PET_NONE_ANAPHOR.finditer(ctx.text):
        earlier = re.findall(_PET_RE, ctx.before + " " + ctx.text[:match.start()])
        if earlier:
            out.append(ctx.fact("pet:" + _PETS[earlier[-1]], "0", match.end(), extra=("lifetime",)))
    for match in _MY_PET.finditer(ctx.text):
        modifiers = match.group(1).split()
        if any(m in _PET_MODIFIER_STOP or "'" in m for m in modifiers) or match.group(2) == "animals":
            continue
        kind = _PETS[match.group(2)]
        extra = ("past",) if any(m in ("old", "late", "previous", "childhood") for m in modifiers) else ()
        count = next((parse_number(m) for m in modifiers if (parse_number(m) or 0) >= 2), None)
        value = str(count) if count and match.group(2).endswith("s") else "some"
        out.append(ctx.fact("pet:" + kind, value, match.end(), extra=extra + ("possessive",), strength=0.95))
        if kind != "pet":
            out.append(ctx.fact("pet:pet", "some", match.end(), extra=extra + ("possessive",), strength=0.95))
    return out


_NP = r"((?:[\w-]+ ){0,2}?[\w-]+)"
_NP_END = (r"(?= *(?:[,.;!?)\u2014-]|$| and | but | so | at all| yet| either| anymore| or | because| since|"
           r" in | on | at | for | to | with | right now| now| here| there))")
_POS_NONE = (
    re.compile(r"(?:\b(?:i|we) |^|, )(?:do not|did not|never|have never|have not|no longer|"
               r"still do not) (?:have|own|drive|had|owned|got|buy|bought|take|use|play|keep|get)(?: a| an|"
               r" any| my own| a single| our own)? (?!to )" + _NP
               + _NP_END),
    re.compile(r"\b(?:i|we) have (?:no|zero) " + _NP + _NP_END),
    re.compile(r"(?:^|, )no " + _NP + r"(?=,|$| or | and )"),
)
# "We cancelled Netflix back in January": the service (its first word) is gone.
_CANCELLED = re.compile(r"\b(?:i|we) (?:cancell?ed|unsubscribed from|ditched) (?:my |our |the )?([a-z][\w+-]*)")
_POS_SOME = (
    re.compile(r"\b(?:my|our) ((?:[\w-]+ ){0,2})([\w-]+)\b"),
    re.compile(r"\bthe ((?:[\w-]+ ){0,2})([\w-]+) (?:i|we) (?:had|have|take|took|bought|own|use|play|got)\b"),
    re.compile(r"\b(?:i|we) (?:take|use|play|drive|own) (?:my |our |a |an |"
               r"the )?((?:[\w-]+ ){0,2}?)([\w-]+)\b"),
    re.compile(r"\b(?:i|we) (?:have|have got|also have|still have) (?!to\b|been\b|had\b|never\b|no\b|"
               r"not\b)(?:a |an |one |two |three |some |my own |our own )?((?:[\w-]+ ){0,1}?)([\w-]+)\b"),
)
_HYPERNYMS = {
    "instrument": "guitar piano cello violin drums drum bass flute saxophone sax trumpet ukulele clarinet "
    "harp keyboard viola banjo trombone accordion harmonica",
    "smartphone": "iphone android pixel galaxy smartphone",
    "medication": "pill meds medication medicine inhaler insulin prescription antidepressant statin tablet",
    "debt": "loan mortgage debt",
    "car": "car vehicle suv sedan hatchback minivan",
    "allergy": "allergy",
}
_MEMBER_OF = {member: category for category, members in _HYPERNYMS.items() for member in members.split()}
_ABSTRACT = frozenset("""time idea clue problem plan issue choice chance energy patience reason interest
experience luck opinion preference desire way need doubt worry complaint regret excuse word sense say
control access power right life memory appetite motivation space room help support money cash budget
intention thing stuff one anything anyone everything something nothing someone friend family kid child
hour day week favorite favourite answer question reply concern feeling strength voice option limit rule
restriction pet sibling brother sister job biggie offense rush pressure matter kidding thanks worries
problem way sugar meat fish dairy gluten alcohol caffeine coffee kids children pets siblings plans idea
ideas point points news luck clue doubt fun prob probs sweat hassle hurry""".split())


def _head(phrase: str) -> str:
    word = phrase.split()[-1] if phrase.split() else ""
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")) and len(word) > 3:
        word = word[:-1]
    return {"licence": "license"}.get(word, word)


_WISH_HAD = re.compile(r"\bi wish i (?:had|owned|could have) (?:a |an |any |"
                       r"some )?((?:[\w-]+ ){0,1}?)([\w-]+)\b|\bi would (?:love|like) to (?:have|own|"
                       r"get) (?:a |an |some )?((?:[\w-]+ ){0,1}?)([\w-]+)\b")


def _wished(ctx: _Ctx) -> list[Fact]:
    """'I wish I had a sibling' / 'I'd love to have a dog one day' say the speaker has none now."""
    out: list[Fact] = []
    if re.search(r"\b(?:another|too|more|also|second|other|again|back)\b", ctx.text):
        return out
    for match in _WISH_HAD.finditer(ctx.text):
        head = _head(match.group(2) or match.group(4))
        if not head or head in _ABSTRACT - {"pet", "sibling", "brother", "sister", "kid", "child"} or \
                head in _STOP_HEADS:
            continue
        slot, value = _absence_slot(head)
        fact = ctx.fact(slot, value, match.end(), strength=0.85)
        quals = fact.qualifiers - {"hypothetical", "modal"}
        out.append(Fact(fact.slot, fact.value, True, fact.subject, quals,
                        fact.evidence, fact.strength))
    return out


def _absence_slot(head: str) -> tuple[str, str]:
    if head in ("sibling", "brother", "sister"):
        return ("siblings" if head == "sibling" else head + "s"), "0"
    if head in ("kid", "child", "baby"):
        return "kids", "0"
    if head in _PETS:
        return "pet:" + _PETS[head], "0"
    return "has:" + _MEMBER_OF.get(head, head), "0:" + head


def _possessions(ctx: _Ctx) -> list[Fact]:
    out = _wished(ctx)
    for pattern in _POS_NONE:
        for match in pattern.finditer(ctx.text):
            head = _head(match.group(1))
            if not head or head in _ABSTRACT or head in _STOP_HEADS:
                continue
            extra = ("lifetime",) if "never" in match.group() else ()
            out.append(ctx.fact("has:" + _MEMBER_OF.get(head, head), "0:" + head, match.end(), extra=extra))
    for match in _CANCELLED.finditer(ctx.text):
        head = _head(match.group(1))
        if head and head not in _ABSTRACT and head not in _STOP_HEADS:
            out.append(ctx.fact("has:" + _MEMBER_OF.get(head, head), "0:" + head, match.end()))
    for pattern in _POS_SOME:
        for match in pattern.finditer(ctx.text):
            words = match.group(1).split() + [match.group(2)]
            if "'" in match.group() or any(w in _POSSESSION_MODIFIER_STOP for w in words):
                continue
            extra = ("past",) if any(w in ("old", "former", "previous", "last", "ex") for w in words) else ()
            for word in words:
                head = _head(word)
                if head and head not in _ABSTRACT and head not in _STOP_HEADS:
                    out.append(ctx.fact("has:" + _MEMBER_OF.get(head, head), "some:" + head, match.end(),
                                        extra=extra + ("possessive",), strength=0.95))
    if re.search(r"\b(?:i|we) (?:am|are) (?:\w+ )?allergic to\b|\bmy (?:\w+ )?allerg(?:y|ies)\b", ctx.text):
        out.append(ctx.fact("has:allergy", "some:allergy", len(ctx.text), extra=("possessive",)))
    if re.search(r"\bi live (?:alone|by myself|on my own)\b", ctx.text):
        out.append(ctx.fact("has:roommate", "0:roommate", len(ctx.text)))
    for match in _CONDITION.finditer(ctx.text):
        out.append(ctx.fact("has:condition", "some:condition", match.end(), strength=0.9))
    for match in _NO_CONDITION.finditer(ctx.text):
        out.append(ctx.fact("has:condition", "0:condition", match.end()))
    return out


# A health condition the speaker has, and the statement that they have none ("no medical conditions
# to declare") that contradicts it.
_CONDITION = re.compile(r"\bi am (?:a )?(?:type [12] |type (?:one|two) )?diabetic\b|\bi have (?:type [12] |type "
                        r"(?:one|two) )?(?:diabetes|asthma|epilepsy|hypertension|high blood pressure|a heart "
                        r"condition|crohn's|coeliac disease|celiac disease|copd|multiple sclerosis|arthritis)\b")
_NO_CONDITION = re.compile(r"\b(?:i have )?no (?:medical|health|pre-existing|preexisting|underlying) conditions\b|"
                           r"\bi (?:do not|don't) have any (?:medical|health|pre-existing|preexisting|underlying) "
                           r"conditions\b|\bi am (?:perfectly |completely )?healthy,? no conditions\b")


_STOP_HEADS = frozenset("""a an the my our your his her their it this that these those own new old first
last next whole entire same other own mind head heart hand hands eye eyes way part bit lot kind sort type
be been being do doing did go going get getting make making take taking say said think know want like need
am is are was were will would can could should might must may have has had not no yes own best worst
favorite own""".split())
_POSSESSION_MODIFIER_STOP = frozenset("future dream next ideal rental hire loaner company work friend "
                                      "friend's parents mom dad brother sister wife husband neighbor "
                                      "neighbour imaginary fake hypothetical".split())


def _possession_pair(old: Fact, new: Fact) -> tuple[str, str, float] | None:
    """'I don't have a car' vs 'my car'; 'no instruments' vs 'my cello' (category vs member)."""
    (old_state, old_head), (new_state, new_head) = old.value.split(":", 1), new.value.split(":", 1)
    if old_state == new_state:
        return "consistent", "negation", 0.0
    negative, positive = (old_head, new_head) if old_state == "0" else (new_head, old_head)
    if negative == positive or negative == _MEMBER_OF.get(positive) == negative:
        return "conflict", "negation", 0.88
    return None
