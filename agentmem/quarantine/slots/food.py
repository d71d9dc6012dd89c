"""Extractors of diet, allergies, habits and what the speaker eats and drinks."""

from __future__ import annotations

import re

from agentmem.quarantine.slots.context import _Ctx
from agentmem.quarantine.slots.facts import Fact
from agentmem.quarantine.slots.lexicons import (
    _ALLERGENS, _CONSUME, _DIETS, _FOOD_GROUPS, _FOR_OTHERS, _ITEMS, _ITEM_RE, _MY_USUAL, _PREP_VERBS,
    _RELATIONS, _SUBSTITUTE_AFTER, _SUBSTITUTE_BEFORE,
)


_DIET_IS = re.compile(
    r"\b(?:i am|i were|i have been|i have become|i became|we are|i went|i have gone|i have always been|"
    r"i remain|"
    r"i stay|we have been|i have been a|i am still)(?: an?)?(?: (?:strict|strictly|lifelong|full[- ]time|"
    r"committed|proud|ethical|total|complete|100%|pretty strict|very strict|practicing|observant|devout|"
    r"also))? (vegetarian|vegan|pescatarian|pescetarian|veggie|plant[- ]based|halal|"
    r"kosher)\b(?! (?:restaurant|place|option|options|menu|dish|dishes|recipe|recipes|food|friend|friends|"
    r"cafe|spot|meal|meals|version|burger|sausage))")
_DIET_KEEP = re.compile(r"\bi (?:keep|eat (?:only )?|only eat) (halal|kosher)\b")
_GROUP_RE = r"(" + "|".join(sorted(map(re.escape, _FOOD_GROUPS), key=len, reverse=True)) + r")"
_DIET_NOT = re.compile(r"\b(?:i|we) (?:do not|never|no longer|cannot|can not|will not|refuse to|"
                       r"do not ever) (?:eat|touch|consume|drink|have)(?: any)? " + _GROUP_RE + r"\b")
_NO_GROUP = re.compile(r"(?:^|\b(?:and|so|remember|please|just|but|,)\s)no " + _GROUP_RE
                       + r"(?: (?:at all|whatsoever|for me|ever|of any kind|or \w+))?\b(?! (?:allowed|"
                       r"needed|required))")
_NOT_VEG = re.compile(r"\bi am not (?:an? )?(vegetarian|vegan|pescatarian)\b|\bi (?:eat|love) meat\b|"
                      r"\bi (?:eat|will eat) (?:pretty much )?(?:anything|everything)\b|\bi am a (?:big |"
                      r"huge )?(?:meat[- ]eater|carnivore|meat lover)\b|\bi prefer real meat\b")


_NO_CAFFEINE = re.compile(r"\b(?:i|we) (?:only|just) (?:drink|have|do|order) decaf\b|\bcaffeine (?:gives|makes|"
                          r"keeps|sets off|triggers) (?:me|my)\b|\b(?:i am|i have been) (?:off|cutting out|"
                          r"avoiding|off of) caffeine\b|\bi (?:cannot|can not|am not allowed to) have caffeine\b")


def _restriction_tag(group: str) -> str:
    """How a 'no X' restriction reads in reasons: drinks are abstentions, foods are diet."""
    drinks = {"alcohol": "alcohol", "booze": "alcohol", "coffee": "coffee", "caffeine": "coffee"}
    return "abstain:" + drinks[group] if group in drinks else "diet:no " + group


def _diet(ctx: _Ctx) -> list[Fact]:
    out = []
    for match in list(_DIET_IS.finditer(ctx.text)) + list(_DIET_KEEP.finditer(ctx.text)):
        diet = match.group(1).replace(" ", "-")
        out.append(ctx.fact("diet", diet, match.end()))
        out.append(ctx.fact("avoids", _DIETS[diet.replace("-", " ") if diet not in _DIETS else diet],
                            match.end(), extra=("diet:" + diet,)))
    for match in _DIET_NOT.finditer(ctx.text):
        out.append(ctx.fact("avoids", _FOOD_GROUPS[match.group(1)], match.end(),
                            extra=(_restriction_tag(match.group(1)),)))
    for match in _NO_GROUP.finditer(ctx.text):
        if not re.search(r"\b(?:you|he|she|they|them|him|her|guests|kids)\b", ctx.text[:match.start()]):
            out.append(ctx.fact("avoids", _FOOD_GROUPS[match.group(1)], match.end(),
                                extra=(_restriction_tag(match.group(1)),), strength=0.9))
    for match in _NOT_VEG.finditer(ctx.text):
        out.append(ctx.fact("diet", "omnivore", match.end()))
    for match in _NO_CAFFEINE.finditer(ctx.text):
        out.append(ctx.fact("avoids", "caffeine", match.end(), extra=("abstain:caffeine",), strength=0.9))
    return out


_HANDED = re.compile(r"\bi am (?:a )?(left-handed|right-handed|left handed|right handed|lefty|righty|"
                     r"southpaw|a lefty|a righty)\b")
_RENT = re.compile(r"\bi (?:rent|am renting|lease) (?:my|an|a|the|this) (?:apartment|flat|house|place|home|"
                   r"condo|unit|studio)\b|\bi am a (?:renter|tenant)\b|\bwe rent\b")
_OWN = re.compile(r"\b(?:i|we) own (?:my|our|the|a|an|this) (?:apartment|flat|house|place|home|condo|"
                  r"unit)\b|\bi am (?:a |the )?(?:homeowner|owner of (?:the|this|my) (?:unit|apartment|flat|"
                  r"house|condo|place))\b")
_CARB_DIET = re.compile(r"\b(?:i am|i have been|i eat|i follow|i do|eats|i am on) (?:an? )?(?:strict |"
                        r"pretty strict |strictly )?(keto|low-carb|low carb|high-carb|high carb|carnivore|"
                        r"paleo)(?: diet)?\b")


def _lifestyle(ctx: _Ctx) -> list[Fact]:
    out = []
    for match in _HANDED.finditer(ctx.text):
        side = "left" if re.search(r"left|lefty|southpaw", match.group(1)) else "right"
        out.append(ctx.fact("handedness", side,
                            match.end()))
    for match in _RENT.finditer(ctx.text):
        out.append(ctx.fact("housing", "rent", match.end()))
    if re.search(r"\bmy landlord\b", ctx.text):
        out.append(ctx.fact("housing", "rent", len(ctx.text), strength=0.85))
    for match in _OWN.finditer(ctx.text):
        out.append(ctx.fact("housing", "own", match.end()))
    for match in _CARB_DIET.finditer(ctx.text):
        value = match.group(1).replace(" ", "-")
        out.append(ctx.fact("carbs", "low" if value in ("keto", "low-carb", "carnivore", "paleo") else "high",
                            match.end()))
    return out


_ALLERGEN_RE = r"(" + "|".join(sorted(map(re.escape, _ALLERGENS), key=len, reverse=True)) + r")"
_ALLERGIC = re.compile(r"\b(i|we|my \w+|he|she)(?: \w+){0,3}? allergic to (?:all |any |most |tree )?"
                       + _ALLERGEN_RE + r"\b")
_ALLERGY = re.compile(r"\b(i have|my|i got)(?: \w+){0,2}? " + _ALLERGEN_RE + r" allerg(?:y|ies)\b")
_INTOLERANT = re.compile(r"\bi am (lactose|gluten|dairy) intolerant\b|\bi (?:am|have) (?:a )?(?:celiac|"
                         r"coeliac)\b|\bi have (?:celiac|coeliac) disease\b")


def _allergies(ctx: _Ctx) -> list[Fact]:
    out = []
    for match in _ALLERGIC.finditer(ctx.text):
        who, allergen = match.group(1), match.group(2)
        subject = _subject_of(who)
        if subject is None or re.search(r"\b(?:not|never|no longer)\b", match.group()):
            continue
        out.append(ctx.fact("avoids", _ALLERGENS[allergen], match.end(), subject=subject,
                            extra=("allergy:" + allergen,)))
    for match in _ALLERGY.finditer(ctx.text):
        if match.group(1) in ("i have", "my", "i got"):
            out.append(ctx.fact("avoids", _ALLERGENS[match.group(2)], match.end(),
                                extra=("allergy:" + match.group(2),)))
    bare = re.search(r"\bi am (?:\w+ )?allergic\b(?! to)", ctx.text)
    if bare:
        earlier = re.findall(r"\b" + _ALLERGEN_RE + r"\b", ctx.before + " " + ctx.text[:bare.start()])
        if earlier:
            out.append(ctx.fact("avoids", _ALLERGENS[earlier[-1]], bare.end(),
                                extra=("allergy:" + earlier[-1],)))
    for match in _INTOLERANT.finditer(ctx.text):
        kind = match.group(1) or "gluten"
        out.append(ctx.fact("avoids", "dairy" if kind in ("lactose", "dairy") else "gluten", match.end(),
                            extra=("allergy:" + kind,)))
    return out


def _subject_of(who: str) -> str | None:
    if who in ("i", "we"):
        return "self"
    if who.startswith("my "):
        relation = who[3:]
        return "other:" + relation if relation in _RELATIONS else None
    return "other:unknown"


_ABSTAIN = re.compile(r"\b(?:i|we) (?:do not|never|no longer|cannot|can not|will not|gave up|quit|stopped|"
                      r"have stopped|have quit|have given up|have never) (drink|drinking|drank|drunk|smoke|"
                      r"smoking|smoked)\b(?: (alcohol|booze|coffee|caffeine|at all|anymore|any more|"
                      r"socially|either|cigarettes|weed|pot|marijuana|soda|tea))?")
_TEETOTAL = re.compile(r"\bi am (?:a |an )?(?:completely |totally |strictly )?(teetotal|teetotaler|"
                       r"teetotaller|tee-total|tee-totaler|sober|non-drinker|nondrinker|straight edge|"
                       r"non-smoker|nonsmoker|non smoker)\b|\bi have never (?:had a drink|had a sip|"
                       r"touched alcohol|touched a drop|been drunk)\b|(?:^|, )(?:a )?(non-?smoker|nonsmoker|"
                       r"teetotal|sober)(?=,|$| and\b)")
_DRINKER = re.compile(r"\bi (?:used to |still )?(drink|smoke)(?= (?:with|socially|occasionally|a lot|every|"
                      r"on|at|when|too|"
                      r"sometimes|regularly|heavily|daily|a pack|like a|quite a bit|a bit|more|less)\b|"
                      r"\s*[,.!;]|$)|\bi am a (?:heavy |social |chain |big |casual |light |"
                      r"regular )?(drinker|smoker)\b|\bi (?:got|was|am) (?:so |really |pretty |"
                      r"very )?(drunk|hungover|tipsy|wasted)\b|\bmy (hangover)\b|\b(?:my|a) (smoke) break\b|"
                      r"\bmy (?:[\w-]+ ){0,3}(smoking|drinking) habit\b|\b(pack[- ]a[- ]day) (?:smoker|"
                      r"habit)\b")


def _habits(ctx: _Ctx) -> list[Fact]:
    out = []
    for match in _ABSTAIN.finditer(ctx.text):
        verb, obj = match.group(1), match.group(2) or ""
        if obj in ("soda", "tea", "weed", "pot", "marijuana"):
            continue
        group = "tobacco" if verb.startswith("smok") else "alcohol"
        group = "coffee" if obj in ("coffee", "caffeine") else group
        stopped = re.search(r"\b(?:gave up|quit|stopped|given up)\b", match.group())
        lifetime = ("lifetime",) if "never" in match.group() and "have never" in match.group() else ()
        out.append(ctx.fact("avoids", group, match.end(), extra=("abstain:" + group,) + lifetime))
        if stopped:
            out.append(ctx.fact("consumes", group, match.end(), extra=("past", "habit")))
    for match in _TEETOTAL.finditer(ctx.text):
        word = match.group(1) or match.group(2) or "never had a drink"
        group = "tobacco" if "smok" in word else "alcohol"
        extra = ("lifetime",) if "never" in match.group() else ()
        out.append(ctx.fact("avoids", group, match.end(), extra=("abstain:" + group,) + extra))
    for match in _DRINKER.finditer(ctx.text):
        word = next(g for g in match.groups() if g)
        group = "tobacco" if word.startswith(("smok", "pack")) else "alcohol"
        out.append(ctx.fact("consumes", group, match.end(), extra=("habit",), strength=0.9))
    return out


def _consumption(ctx: _Ctx) -> list[Fact]:
    """Self consumption of a lexicon item ("I had a great steak", "my usual shrimp scampi")."""
    out = []
    for match in _CONSUME.finditer(ctx.text):
        prefix = ctx.text[match.start():match.start(1)]
        if re.search(r"\b(?:not|never|no longer|cannot|can not|rarely|hardly|barely)\b", prefix):
            continue
        item = match.group(3)
        between = match.group(2) or ""
        fact = _item_fact(ctx, item, match.start(3), match.end(), between, match.group(1))
        if fact:
            out.append(fact)
    what = re.search(r"\b(?:that|this|it|those|these|which) (?:is|are) what i (?:eat|have|drink|cook|"
                     r"order)\b", ctx.text)
    if what:
        earlier = _ITEM_RE.findall(ctx.before + " " + ctx.text[:what.start()])
        if earlier:
            out.append(ctx.fact("consumes", " ".join(sorted(_ITEMS[earlier[-1]])), what.end(),
                                extra=("item:" + earlier[-1],)))
    for match in _MY_USUAL.finditer(ctx.text):
        fact = _item_fact(ctx, match.group(2), match.start(2), match.end(), match.group(1) or "", "usual")
        if fact:
            out.append(fact)
    return out


def _item_fact(ctx: _Ctx, item: str, item_start: int, end: int, between: str, verb: str) -> Fact | None:
    before = ctx.text[max(0, item_start - 30):item_start]
    after = ctx.text[end:end + 25]
    if _SUBSTITUTE_BEFORE.search(before) or _SUBSTITUTE_AFTER.search(after):
        return None
    if re.search(r"\b(?:no|not|without|instead of|never|zero|free|avoid|skip|except)\b", between):
        return None
    if item == "rose" and not re.search(r"\b(?:glass|bottle|drink|sip)", between + " " + verb):
        return None
    prepared = bool(re.fullmatch(_PREP_VERBS, verb))
    if prepared and _FOR_OTHERS.search(ctx.text):
        return None
    extra = ("prepared",) if prepared else ()
    groups = " ".join(sorted(_ITEMS[item]))
    return ctx.fact("consumes", groups, end, extra=extra + ("item:" + item,),
                    strength=0.8 if prepared else 1.0)
