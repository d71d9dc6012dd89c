"""Extractors of the speaker's standing instructions to the assistant."""

from __future__ import annotations

import re

from agentmem.quarantine.claims import normalise
from agentmem.quarantine.slots.context import _Ctx
from agentmem.quarantine.slots.facts import Fact
from agentmem.quarantine.slots.lexicons import _LANG_RE


_INSTRUCTION_START = re.compile(
    r"^(?:please |pls |kindly |always |never |from now on,? |going forward,? |for this chat,? |"
    r"for the rest of (?:this|the) (?:chat|conversation),? |remember(?: to)?,? |make sure (?:to |you )?|"
    r"i want you to |i would like you to |i need you to |i would prefer (?:you to |it if you )?|can you |"
    r"could you |you should |you must |do not |no |keep |use |give |answer |reply |respond |write |talk |"
    r"speak |be |stop |avoid |switch |add |include |put |format |only |just |limit |rule |quick rule|"
    r"one rule|ditch |skip |drop |lose |less |more |important|all code |cite |address me )")
_INSTRUCTION_ANYWHERE = re.compile(
    r"\b(?:from now on|going forward|for this chat|for the rest of (?:this|the) (?:chat|conversation)|"
    r"every answer|each answer|all answers|every reply|every response|your (?:answers|replies|responses)|"
    r"in this chat|from here on|i (?:only )?want(?:ed)? (?:answers|replies|everything|all|it|them|you)|"
    r"i prefer answers|as i (?:said|asked|told you|mentioned|requested|wrote)|like i (?:said|asked|"
    r"told you)|i (?:asked|told you)\b|i asked for|(?:remember|you know),? (?:that )?i (?:only )?(?:wanted|"
    r"want|asked|said)|you know my rule|my (?:original |standing |first )?(?:instruction|rule|request)|"
    r"per my|i (?:only )?want|i told you|i said|throughout|for me\b)")
_NEGATOR = re.compile(r"(?:\b(?:no|not|never|without|stop|avoid|instead of|rather than|ditch|drop|skip|"
                      r"lose)\b(?: [\w-]+){0,2} ?$)")
_ASPECTS: dict[str, tuple[tuple[str, str], ...]] = {
    "emoji": (("emoji", r"\bemojis?\b"),),
    "citations": (("citations", r"\b(?:cite|citations?|sources|links|references)\b"),),
    "bullets": (("bullets", r"\bbullet(?:ed)?(?: points?| lists?)?\b|\bbulleted\b"),
                ("prose", r"\b(?:normal |plain |full |flowing )(?:prose|paragraphs)\b|\bprose only\b")),
    "units": (("metric", r"\b(?:metric|grams|celsius|millilit(?:re|er)s|kilograms|kilomet(?:re|er)s)\b"),
              ("imperial", r"\b(?:imperial|cups|ounces|fahrenheit|pounds|inches|miles|feet)\b")),
    "time_format": (("24h", r"\b24[- ]?h(?:ou)?r\b|\b24[- ]hour\b|\bmilitary time\b"),
                    ("12h", r"\b12[- ]?h(?:ou)?r\b|\b12[- ]hour\b")),
    "spelling": (("british", r"\b(?:british|uk|english|australian) spelling\b"),
                 ("american", r"\b(?:american|us) spelling\b")),
    "person": (("first", r"\bfirst[- ]person\b"), ("second", r"\bsecond[- ]person\b"),
               ("third", r"\bthird[- ]person\b")),
    "code": tuple((lang, r"\b" + re.escape(lang) + r"\b") for lang in (
        "typescript", "javascript", "python", "rust",
                                                                       "golang", "kotlin", "swift", "ruby",
                                                                       "php")),
    "solutions": (("hints", r"\bhints?\b"),
                  ("full", r"\b(?:complete|full|entire|whole) (?:solutions?|answers?|code)\b")),
    "currency": tuple((code, r"\b(?:in|into|to|want|wanted|quote|quoting) (?:us |american |british )?(?:"
                       + words + r")\b") for code, words in (
        ("usd", "dollars|usd"), ("gbp", "pounds sterling|sterling|gbp"), ("eur", "euros|euro|eur"),
        ("chf", "chf|swiss francs"), ("jpy", "yen|jpy"))) + (
        ("gbp", r"\b(?:prices?|costs?|amounts?|money|budgets?|figures?|salar(?:y|ies)|fees?)\b[^.;]{0,30}? in "
                r"(?:british )?pounds\b"),),
    "tone": (("formal", r"\b(?:formal|professional)\b"),
             ("casual", r"\b(?:casual|informal|chill|relaxed)\b")),
}
_POLAR_ASPECTS = frozenset({"emoji", "citations"})
_SHORT = re.compile(r"\b(?:keep|make)\b(?: \w+){0,4} (?:short|brief|concise|succinct|tight|"
                    r"under \w+ (?:sentences|words|lines|paragraphs)|to \w+ (?:sentences?|lines?|words))\b|"
                    r"\b(?:short|brief|concise|one-line|one-sentence|shorter|quick) (?:answers|replies|"
                    r"responses)\b|\bno more than \w+ (?:sentences|words|lines)\b|\bbe (?:brief|concise|"
                    r"succinct)\b|\btl;?dr\b|\bunder \w+ (?:sentences|words)\b")
_LONG = re.compile(r"\b(?:long|detailed|in-depth|thorough|comprehensive|lengthy|extensive|longer|"
                   r"more detailed|exhaustive) (?:answers|replies|responses|explanations)\b|\bin (?:great |"
                   r"full |more )?detail\b|\bas detailed as possible\b|\bnever want short\b|\bno (?:short|"
                   r"brief) (?:answers|replies)\b|\belaborate\b|\bat least \w+ paragraphs\b|"
                   r"\bworked examples\b|\b\d,?\d00\+? words\b")
_REPLY_LANG = re.compile(r"\b(?:answer|reply|respond|write|talk|speak|communicate|answers|replies|responses|"
                         r"everything|text)\b(?: \w+){0,3}? (?:in|using) " + _LANG_RE + r"\b|\b(?:only "
                         r")?in " + _LANG_RE
                         + r" (?:only|please|from now on|going forward)\b|\bswitch (?:back )?to " + _LANG_RE
                         + r"\b|\b(?:asked for|want|wanted) " + _LANG_RE + r"\b|\b" + _LANG_RE + r" only\b")


_RECALL = re.compile(
    r"\b(?:as i (?:said|asked|told you|mentioned|requested|wrote|specified|explained|instructed)|like i "
    r"(?:said|asked|told you|mentioned|wrote)|(?:you know|remember)(?: that)?,? i (?:told you|asked|said|"
    r"wanted|want|only want)|i (?:already |clearly )?(?:told you|asked you|said)(?: (?:before|earlier|"
    r"already|up front|from the (?:start|beginning)|at the (?:start|beginning)|in my first message))?,? "
    r"(?:to |that |i )|per my (?:\w+ )?(?:instructions?|requests?|rules?)|as (?:per )?my (?:\w+ )?"
    r"(?:instructions?|requests?|rules?)|i told you (?:at|in) the (?:start|beginning))")
_TERM_NEGATOR = re.compile(r"\b(?:no|not|never|without|stop|avoid|instead of|rather than|skip|ditch|drop|"
                           r"nothing|none)\b(?: [\w-]+){0,3} $")
_TERM_STOP = frozenset("""please always never only just want wanted need like told said asked answer answers
reply replies response responses thing things everything anything something nothing everywhere anywhere
make keep give write tell show send tried trying also would could should will them they this that these
those with from your yours mine what when where which while because since again still even time times
really actually very much more less same other another then than there here about into over after before
some every each instead rather whole clearly going know remember start beginning earlier
said asked mentioned requested wrote specified explained instructed instruction instructions rule rules
request requests""".split())


# An instruction as the recalled-term check reads it: an imperative ("never mention ...", "keep two
# decimals", "always write ...") or an explicit standing rule; not a statement that happens to start
# with "never" ("never had a broken heart") or mention "for me".
_DIRECTIVE_VERBS = (
    r"(?:mention|write|keep|use|give|answer|reply|respond|include|put|format|list|sort|order|round|show|add|"
    r"skip|drop|avoid|stop|leave|call|address|sign|say|send|cite|explain|limit|make|group|spell|translate|"
    r"number|label|mark|copy|cc|email|text|remind|recommend|suggest|book|pick|choose|schedule|set|plan|"
    r"convert|quote|refer)\b")
_IMPERATIVE = re.compile(
    r"^(?:please |pls |kindly |from now on,? |going forward,? |for this chat,? |remember to |make sure "
    r"(?:to |you )?|i want you to |i need you to |you should |you must |do not |don't |also |and )*(?:(?:always|"
    r"never|only|just) )?" + _DIRECTIVE_VERBS + r"|\bplease (?:always |never |just |only |do not )?"
    + _DIRECTIVE_VERBS + r"|^(?:and |but |just )?(?:never|not) (?:the|a|an|any|my|his|her|their)\b|"
    r"\b(?:from now on|going forward|for the rest of (?:this|the) (?:chat|conversation)|"
    r"every (?:answer|reply|response)|all (?:answers|replies|responses))\b")


_SHORT_STOP = frozenset("""the and for you are but not all any can her him his how its may now our out own she
too was way who why yes yet per via off got get let set say see ask did one two has had have lot bit
new old big far few etc ago""".split())


def _stem(word: str) -> str:
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            return word[: -len(suffix)]
    return word


def _recalled_terms(ctx: _Ctx) -> list[Fact]:
    """Each content word of an instruction with its polarity: "never mention my diagnosis" gives
    mention and diagnosis, refused. When the speaker later says "as I asked, please mention my
    diagnosis", the recalled instruction must agree with the one given (``recalled_pair``); an
    instruction changed without recalling the old one is a new instruction, not a clash."""
    recall = bool(_RECALL.search(normalise(ctx.sentence or ctx.text)))
    if not recall and not _IMPERATIVE.search(ctx.text):
        return []
    out = []
    for match in re.finditer(r"[a-z][a-z'-]{2,}", ctx.text):
        word = match.group()
        if word in _TERM_STOP or word in _SHORT_STOP or "'" in word:
            continue
        refused = bool(_TERM_NEGATOR.search(ctx.text[max(0, match.start() - 40):match.start()]))
        out.append(ctx.fact("recalled:" + _stem(word), "said", match.end(), polarity=not refused,
                            extra=("recall",) if recall else ()))
    return out


def recalled_pair(old: Fact, new: Fact) -> tuple[str, str, float] | None:
    """A recalled instruction that reverses the instruction given ("as I said, round everything"
    after "don't round anything")."""
    if "recall" not in new.qualifiers:
        return None
    if old.polarity == new.polarity:
        return "consistent", "instruction_reversal", 0.0
    return "conflict", "instruction_reversal", 0.85


def _aspect_values(text: str, options: tuple[tuple[str, str], ...]) -> tuple[set[str], set[str]]:
    """(asked-for values, refused values) of one instruction aspect, negation-aware."""
    wanted: set[str] = set()
    refused: set[str] = set()
    for value, pattern in options:
        for match in re.finditer(pattern, text):
            before = text[max(0, match.start() - 30):match.start()]
            (refused if _NEGATOR.search(before) else wanted).add(value)
    return wanted, refused


def _instructions(ctx: _Ctx) -> list[Fact]:
    text = ctx.text
    if ctx.mood == "question":
        return []
    out = _recalled_terms(ctx)
    if not (_INSTRUCTION_START.search(text) or _INSTRUCTION_ANYWHERE.search(text)):
        return out
    for aspect, options in _ASPECTS.items():
        wanted, refused = _aspect_values(text, options)
        if aspect in _POLAR_ASPECTS:
            value = options[0][0]
            if wanted and not refused:
                out.append(ctx.fact("instr:" + aspect, value, len(text)))
            elif refused and not wanted:
                out.append(ctx.fact("instr:" + aspect, value, len(text), polarity=False))
        elif len(wanted) == 1:
            out.append(ctx.fact("instr:" + aspect, wanted.pop(), len(text)))
        elif not wanted and len(refused) == 1 and len(options) == 2:
            other = next(v for v, _ in options if v not in refused)
            out.append(ctx.fact("instr:" + aspect, other, len(text), strength=0.9))
    lang = _REPLY_LANG.search(text)
    if lang and not re.search(r"\btranslat", text):
        out.append(ctx.fact("instr:language", next(g for g in lang.groups() if g), len(text)))
    short, long_ = _SHORT.search(text), _LONG.search(text)
    if short and not long_:
        out.append(ctx.fact("instr:length", "short", len(text)))
    elif long_ and not short:
        out.append(ctx.fact("instr:length", "long", len(text)))
    return out
