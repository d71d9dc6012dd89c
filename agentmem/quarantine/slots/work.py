"""Extractors of jobs and languages."""

from __future__ import annotations

import re

from agentmem.quarantine.slots.context import _Ctx
from agentmem.quarantine.slots.facts import Fact
from agentmem.quarantine.slots.lexicons import (
    _ACTIVITY_FIELD, _DEMONYMS, _DEMONYM_RE, _LANG_RE, _OCCUPATIONS, _OCC_RE,
)


_SKILL_ADJECTIVES = frozenset("good great terrible bad decent amazing awesome fantastic big huge keen avid "
                              "passionate amateur aspiring wannabe hobby self-taught home natural better "
                              "lousy fair pretty fine horrible excellent wonderful fan lazy picky messy "
                              "budding would-be".split())
_JOB_IS = re.compile(r"\b(?:i am|i work as|i have been|i have worked as|i am working as|"
                     r"i have been working as|i am employed as|my job is|i make a living as|i am currently|"
                     r"i work full[- ]time as|i work part[- ]time as)(?: an?| the)? ((?:[\w-]+ ){0,3}?)"
                     + _OCC_RE + r"\b(?!'s| assistant| aide| friend| fan| show| game| program| course|"
                     r" degree|"
                     r" school| student)")
_WORKPLACES = {"grocery store": "retail", "supermarket": "retail", "book store": "retail",
               "bookstore": "retail",
               "retail store": "retail", "department store": "retail", "mall": "retail", "hospital": "health",
               "clinic": "health", "doctor's office": "health", "pharmacy": "health", "vet's office": "vet",
               "animal hospital": "vet", "school": "education", "high school": "education",
               "university": "education",
               "elementary school": "education", "bank": "finance", "credit union": "finance",
               "law firm": "law",
               "restaurant": "food", "cafe": "food", "coffee shop": "food", "bakery": "food", "bar": "food",
               "fast food place": "food", "construction site": "trades", "factory": "manufacturing",
               "warehouse": "logistics", "post office": "logistics", "fire station": "fire",
               "police station": "police", "library": "library", "farm": "farming", "gym": "sports"}
_WORKPLACE_RE = r"(" + "|".join(sorted(map(re.escape, _WORKPLACES), key=len, reverse=True)) + r")"
_WORK_AT = re.compile(r"\bi (?:work|have worked|am working) (?:at|in|for) (?:a|an|the|my local|our local|"
                      r"this|that)? ?(?:[\w-]+ )?" + _WORKPLACE_RE + r"\b(?: as (?:an? )?((?:[\w-]+ "
                      r"){0,2}?)" + _OCC_RE + r"\b)?")
_TEACH = re.compile(r"\bi teach(?:es)?\b(?! (?:myself|me)\b)")
_RETIRED = re.compile(r"\bi am (?:now |happily |semi-|semi )?retired\b|\bi retired\b")
_JOBLESS = re.compile(r"\bi (?:do not|did not) (?:have|hold) (?:a|any) (?:job|paid job|work)\b|"
                      r"\bi am (?:currently )?(?:unemployed|jobless|out of work|between jobs|not working|"
                      r"not employed|looking for (?:a )?(?:job|work))\b|\bi do not work\b(?! (?:on|at|for|"
                      r"in|with|weekends|fridays|mondays|here|there|much|that|late|well))|"
                      r"\bi have never (?:had a (?:real )?job|worked)\b(?! (?:in|at|as|with|for|on))")
_NEVER_DID = re.compile(r"\bi (?:have )?never (taught|nursed|practiced law|practised law|coded|"
                        r"worked in (?:health ?care|a hospital|education|a school|tech|finance|retail|"
                        r"construction|a restaurant))\b")
_NOT_OCC = re.compile(r"\bi am not an? (?:[\w-]+ )?" + _OCC_RE + r"\b")
_WORKING = re.compile(r"\b(?:got (?:home|back|off) from work|(?:i am|i was) (?:at|still at) work|(?:before|"
                      r"after|off) work\b|my (?:boss|coworkers?|co-workers?|colleagues?|shift|manager|"
                      r"workplace|job)\b|i (?:work|worked) (?:at|for|in|as|from home|full[- ]time|"
                      r"part[- ]time|nights|weekends|long hours|two jobs)\b|(?:i|we) have to work\b|"
                      r"i am working (?:at|for|today|tonight|late)\b|going to work\b|on my way to work\b|"
                      r"(?:at|from) the office\b)")
_SCHOOL = re.compile(r"\bi am (?:still |currently |now )?(?:in|at) (high school|middle school|college|"
                     r"university|uni|grad school|law school|med school|medical school|junior high|"
                     r"elementary school)\b|\bi am an? (high school|college|university|grad|"
                     r"graduate) (?:student|senior|junior|freshman|sophomore)\b|\bi am (?:currently |still )?"
                     r"an? "
                     r"(?:senior|junior|freshman|sophomore|student) (?:in|at) (high school|college|"
                     r"university)\b")
_SCHOOL_LEVEL = {"high school": "school", "middle school": "school", "junior high": "school",
                 "elementary school": "school", "college": "college", "university": "college",
                 "uni": "college",
                 "grad school": "grad", "graduate": "grad", "grad": "grad", "law school": "grad",
                 "med school": "grad", "medical school": "grad"}


def _jobs(ctx: _Ctx) -> list[Fact]:
    facts = _job_facts(ctx)
    if re.search(r"\bfull[- ]time\b", ctx.before + " " + ctx.text):
        facts = [Fact(f.slot, f.value, f.polarity, f.subject, f.qualifiers | {"fulltime"}, f.evidence,
                      f.strength)
                 if f.slot == "job" else f for f in facts]
    return facts


def _job_facts(ctx: _Ctx) -> list[Fact]:
    out = []
    for match in _JOB_IS.finditer(ctx.text):
        modifiers = match.group(1).split()
        if any(m in _SKILL_ADJECTIVES for m in modifiers) or re.search(r"\bnot\b", match.group()):
            continue
        occupation = match.group(2)
        out.append(ctx.fact("job", _OCCUPATIONS[occupation], match.end(), extra=("occ:" + occupation,)))
    for match in re.finditer(r"\bmy (?:[\w-]+ )?" + _OCC_RE + r" (?:job|work|career|gig|shifts?)\b",
                             ctx.text):
        occupation = match.group(1)
        tags = ("occ:" + occupation, "possessive")
        out.append(ctx.fact("job", _OCCUPATIONS[occupation], match.end(), extra=tags))
    for match in _TEACH.finditer(ctx.text):
        out.append(ctx.fact("job", "education", match.end(), extra=("occ:teacher",), strength=0.9))
    for match in _WORK_AT.finditer(ctx.text):
        occupation = match.group(3)
        field_ = _OCCUPATIONS[occupation] if occupation else _WORKPLACES[match.group(1)]
        tag = "occ:" + (occupation or match.group(1))
        out.append(ctx.fact("job", field_, match.end(), extra=(tag,), strength=1.0 if occupation else 0.9))
    for match in _RETIRED.finditer(ctx.text):
        out.append(ctx.fact("job", "retired", match.end()))
    for match in _JOBLESS.finditer(ctx.text):
        lifetime = ("lifetime",) if "never" in match.group() else ()
        out.append(ctx.fact("job", "none", match.end(), extra=lifetime))
    for match in _NEVER_DID.finditer(ctx.text):
        never_field = _ACTIVITY_FIELD.get(match.group(1).replace("healthcare", "health care"))
        if never_field:
            out.append(ctx.fact("job", never_field, match.end(), polarity=False, extra=("lifetime",)))
    for match in _NOT_OCC.finditer(ctx.text):
        out.append(ctx.fact("job", _OCCUPATIONS[match.group(1)], match.end(), polarity=False,
                            extra=("occ:" + match.group(1),)))
    for match in _WORKING.finditer(ctx.text):
        out.append(ctx.fact("job", "working", match.end(), strength=0.8))
    for match in _SCHOOL.finditer(ctx.text):
        level = _SCHOOL_LEVEL[match.group(1) or match.group(2) or match.group(3)]
        out.append(ctx.fact("school", level, match.end()))
    return out


_SPEAK = re.compile(r"\bi (?:also )?(?:speak|am fluent in|can speak|speak fluent|am learning to speak|"
                    r"grew up speaking) (?:some |a little |fluent |basic |decent |good |perfect )?" + _LANG_RE
                    + r"((?:,? (?:and |or )?" + _LANG_RE + r")*)\b")
_SPEAK_ONLY = re.compile(r"\bi (?:only|just) speak " + _LANG_RE + r"\b|\bi speak only " + _LANG_RE + r"\b|\b"
                         + _LANG_RE + r" is the only language i (?:speak|know)\b")
_NATIVE = re.compile(r"\bmy (?:native|first|mother) (?:language|tongue) is " + _LANG_RE + r"\b|\b" + _LANG_RE
                     + r" is my (?:native|first|mother) (?:language|tongue)\b|\bi am a native " + _LANG_RE
                     + r" speaker\b")
_NO_SPEAK = re.compile(r"\bi (?:do not|cannot|can not|never learned to|could never) speak (?:any |"
                       r"a word of )?"
                       + _LANG_RE + r"\b|\bi do not know (?:any |a word of )" + _LANG_RE + r"\b|\bmy " + _LANG_RE
                       + r" is (?:basically |pretty much |practically |literally )?(?:zero|nonexistent|"
                       r"non-existent|nil)\b")
_NON_EU = re.compile(r"\b(?:i am|as) an? non-eu (?:citizen|national|passport holder)\b|\bi am not an eu citizen\b")
_RELIGION = re.compile(r"\b(?:i am|we are|we are both|we are all|as) (?:an? )?(?:practising |practicing |devout |"
                       r"observant |lifelong |committed |proud )?(atheists?|agnostics?|catholics?|muslims?|jewish|"
                       r"jews|hindus?|buddhists?|christians?|protestants?|mormons?|sikhs?)\b")
_FAITHS = {"atheist": "none", "agnostic": "none", "catholic": "christian", "protestant": "christian",
           "mormon": "christian", "jew": "jewish"}
_CITIZEN = re.compile(r"\bi am (?:an? )?(us|u\.s\.|uk|u\.k\.|eu) (?:citizen|national)\b")
_NATIONALITY = re.compile(r"\bi am (?:an? )?(?:proud |born )?" + _DEMONYM_RE + r"(?: citizen| national|"
                          r" by birth)?(?=\s*(?:[,.;!?]|$|and\b|but\b|so\b|too\b|myself\b|born\b|by birth\b|"
                          r"citizen\b|with\b|living\b|who\b|here\b|currently\b))")


def _languages(ctx: _Ctx) -> list[Fact]:
    out = []
    for match in _SPEAK.finditer(ctx.text):
        if "learning" in match.group():
            continue
        for lang in [match.group(1)] + re.findall(_LANG_RE, match.group(2) or ""):
            out.append(ctx.fact("speaks:" + lang, "yes", match.end()))
    for match in _SPEAK_ONLY.finditer(ctx.text):
        lang = next(g for g in match.groups() if g)
        out.append(ctx.fact("speaks_only", lang, match.end()))
        out.append(ctx.fact("speaks:" + lang, "yes", match.end()))
    for match in _NATIVE.finditer(ctx.text):
        lang = next(g for g in match.groups() if g)
        out.append(ctx.fact("native_language", lang, match.end()))
        out.append(ctx.fact("speaks:" + lang, "yes", match.end()))
    for match in _NO_SPEAK.finditer(ctx.text):
        lang = next(g for g in match.groups() if g)
        out.append(ctx.fact("speaks:" + lang, "yes", match.end(), polarity=False))
    only = ("only",) if re.search(r"\bno other (?:citizenship|nationality|passport)|\bonly (?:citizenship|"
                                  r"passport|nationality)\b", ctx.text) else ()
    for match in _NATIONALITY.finditer(ctx.text):
        out.append(ctx.fact("nationality", _DEMONYMS[match.group(1)], match.end(), extra=only))
    for match in _NON_EU.finditer(ctx.text):
        out.append(ctx.fact("nationality", "non-EU", match.end(), extra=only))
    for match in _CITIZEN.finditer(ctx.text):
        code = {"us": "US", "u.s.": "US", "uk": "GB", "u.k.": "GB"}.get(match.group(1))
        if code:
            out.append(ctx.fact("nationality", code, match.end(), extra=only))
    return out


def _religion(ctx: _Ctx) -> list[Fact]:
    """'We're both atheists' vs 'as practising Catholics' (a Catholic is a Christian)."""
    out = []
    for match in _RELIGION.finditer(ctx.text):
        word = match.group(1)
        word = "jew" if word == "jews" else word[:-1] if word.endswith("s") else word
        out.append(ctx.fact("religion", _FAITHS.get(word, word), match.end(), extra=("faith:" + word,)))
    return out
