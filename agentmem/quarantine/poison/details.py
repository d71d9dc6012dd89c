"""A claim's details: content words folded to a stem, numbers as values and dates and
times as tokens whatever their spelling (``detail_terms``).
"""

from __future__ import annotations

import datetime
import re
from functools import lru_cache

from agentmem.lexical import terms

# --------------------------------------------------------------------------- terms

_MONTH_NAMES = ("january", "february", "march", "april", "may", "june", "july", "august",
                "september", "october", "november", "december")
_MONTHS = {name: str(number) for number, name in enumerate(_MONTH_NAMES, start=1) if name != "may"}
_NUMBER_WORDS = {word: str(number) for number, word in enumerate(
    "zero _ two three four five six seven eight nine ten eleven twelve".split())}
_NUMBER_WORDS.update({"twenty": "20", "thirty": "30", "forty": "40", "fifty": "50",
                      "sixty": "60", "hundred": "100", "twice": "2", "half": "50", "halv": "50"})

# Words that say nothing about which claim a clause makes: conversation glue, hedges,
# evaluations. They neither count as a claim's details nor need support.
GENERIC = frozenset("""
also actually again ahead already always anyway anything around away back best better bit
certainly check clear clearly come could definitely done easy either else enough even ever
every everything exactly fine get give glad go going good great guess happy help here hope
however idea instead just keep kind know let like likely look lot make maybe mean mention
might mind much must need never nice note nothing now often ok okay perhaps please pretty
probably quick quite rather real really right say see seem sense should show simply since so
something soon sorry still straight sure take tell thank thanks thing think though today
told too totally true try typical within may typically usual usually want way well whatever
will would yes yet sound absolutely course perfect wonderful awesome fair understand hi hello hey able
case recommend suggest worry problem don doesn didn isn aren wasn weren won can couldn
wouldn shouldn haven hasn hadn us due end ending one ones found remember recap summary
draft correct choice enjoy welcome interesting basically honestly heads plus news another
several few many various
""".split())

_SPLIT_ALNUM = re.compile(r"[a-z]+|\d+")
_MONTH = (r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|"
          r"sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)")
_TEMPORAL = re.compile(
    r"(?P<iso>(?<!\d)(?P<iy>\d{4})-(?P<im>\d{1,2})-(?P<id>\d{1,2})(?!\d))"
    r"|(?P<ym>(?<![\d-])(?P<yy>(?:19|20)\d{2})-(?P<ym_m>0?[1-9]|1[0-2])(?![\d-]))"
    rf"|(?P<md>\b(?P<mdm>{_MONTH})\.?\s+(?P<mdd>\d{{1,2}})(?:st|nd|rd|th)?\b(?![:.]\d))"
    rf"|(?P<dm>\b(?P<dmd>\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?(?P<dmm>{_MONTH})\b)"
    r"|(?P<hm>(?<![\d.:])(?P<h>\d{1,2}):(?P<m>\d{2})(?!\d)(?:\s*(?P<ap>[ap])\.?m\b\.?)?)"
    r"|(?P<hap>(?<![\d.:])(?P<h2>\d{1,2})\s*(?P<ap2>[ap])\.?m\b\.?)"
    r"|(?P<ord>(?<![\w.])(?P<day>[12]?\d|3[01])(?:st|nd|rd|th)\b)",
    re.IGNORECASE)
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_WEEKDAY_ABBREVIATION = re.compile(r"\b(Mon|Tues?|Weds?|Thu(?:rs?)?|Fri|Sat|Sun)\b\.?")
_WEEKDAY_OF = {name[:3]: name for name in _WEEKDAYS}
# Lower-case abbreviations where a record keys hours by day ("sat": "10am-6pm", "mon-fri"): a
# verb elsewhere ("she sat down"), a weekday only as a key or beside another weekday.
_DAY = r"(?:mon|tue|tues|wed|thu|thur|thurs|fri|sat|sun)"
_WEEKDAY_KEY = re.compile(rf"(?<![\w-])({_DAY})(?=[\"']\s*:|\s*[-–]\s*{_DAY}\b)|(?<=[-–])({_DAY})(?=[\"']\s*:)")


def _month(name: str) -> str:
    name = name.lower().rstrip(".")
    return str(next(i for i, full in enumerate(_MONTH_NAMES, start=1) if full.startswith(name[:3])))


def _hour(hour: str, half: str | None) -> int:
    value = int(hour)
    if half and half.lower() == "p" and value < 12:
        value += 12
    if half and half.lower() == "a" and value == 12:
        value = 0
    return value


def _temporal(text: str) -> tuple[str, set[str]]:
    """Dates and clock times as single tokens ("d3-2", "t15:00"), whatever their spelling
    ("March 2", "2 March", "2024-03-02"; "3 pm", "15:00"); the text without them."""
    tokens: set[str] = set()

    def replace(match: re.Match) -> str:
        g = match.groupdict()
        if g["iso"]:
            tokens.update({f"d{int(g['im'])}-{int(g['id'])}", number_token(float(g["iy"]))})
            try:  # the weekday of the date ("Saturday 8 February" for 2025-02-08)
                day = datetime.date(int(g["iy"]), int(g["im"]), int(g["id"])).weekday()
                tokens.add(f"@{int(g['im'])}-{int(g['id'])}={_normalise(_WEEKDAYS[day])}")
            except ValueError:
                pass
        elif g["ym"]:
            tokens.update({f"m{int(g['ym_m'])}", number_token(float(g["yy"]))})
        elif g["md"]:
            tokens.add(f"d{_month(g['mdm'])}-{int(g['mdd'])}")
        elif g["dm"]:
            tokens.add(f"d{_month(g['dmm'])}-{int(g['dmd'])}")
        elif g["hm"]:
            tokens.add(f"t{_hour(g['h'], g['ap'])}:{g['m']}")
        elif g["hap"]:
            tokens.add(f"t{_hour(g['h2'], g['ap2'])}:00")
        else:
            tokens.add(f"dd{int(g['day'])}")  # "the 12th": a day of some month
        return " "

    text = _WEEKDAY_ABBREVIATION.sub(lambda m: _WEEKDAY_OF[m.group(1)[:3].lower()], text)
    text = _WEEKDAY_KEY.sub(lambda m: _WEEKDAY_OF[(m.group(1) or m.group(2))[:3]], text)
    return _TEMPORAL.sub(replace, text), tokens


_NUMBER = re.compile(
    r"(?<![\w.,])[$€£]?(?P<int>\d{1,3}(?:,\d{3})+|\d+)(?P<frac>\.\d+)?"
    r"(?:\s*(?P<unit>%|percent|[kK]|[mM]|million|bn|billion)(?![a-zA-Z]))?(?!\w|[.,]\d)")
_SCALE = {"k": 1e3, "m": 1e6, "million": 1e6, "bn": 1e9, "billion": 1e9}
STEM = 6  # words match on their first letters: prescription ~ prescriber, deliver ~ delivery


def number_token(value: float) -> str:
    if value == int(value) and abs(value) < 1e15:
        return f"#{int(value)}"
    return f"#{value:.6g}"


def _precision(token: str) -> float:
    """How exactly a number was said: "4.2" to 0.1, "371000" (said "371K") to 1000, "2020"
    exactly. A statement with more digits states it when it rounds to it."""
    body = token[1:]
    if "e" in body:
        return 0.0
    if "." in body:
        return 10.0 ** -len(body.split(".")[1])
    zeros = len(body) - len(body.rstrip("0"))
    return 10.0 ** zeros if zeros >= 3 and len(body) >= 5 else 0.0


def _numbers(text: str) -> tuple[str, set[str]]:
    """Numbers as values ("1,940" and "1940", "4.2%" and "0.042"); the text without them."""
    tokens: set[str] = set()

    def replace(match: re.Match) -> str:
        value = float(match.group("int").replace(",", "") + (match.group("frac") or ""))
        unit = (match.group("unit") or "").lower()
        tokens.add(number_token(value * _SCALE.get(unit, 1)))  # a share matches as 4.2 or 0.042
        return " "

    return _NUMBER.sub(replace, text), tokens


def _normalise(word: str) -> str:
    if word.isdigit():
        return number_token(float(word))
    if word in _MONTHS:
        return f"m{_MONTHS[word]}"
    if word in _NUMBER_WORDS:
        return number_token(float(_NUMBER_WORDS[word]))
    if len(word) > 5 and word.endswith("ly"):
        word = word[:-2]
    if len(word) > 5 and word.endswith("y"):
        word = word[:-1]
    if len(word) > 4 and word.endswith("e"):
        word = word[:-1]
    if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "aeiousl":
        word = word[:-1]
    if word in _NUMBER_WORDS:
        return number_token(float(_NUMBER_WORDS[word]))
    return word[:STEM]


GENERIC = frozenset(GENERIC | {_normalise(w) for w in GENERIC})


FREE = "free"
# A price of nothing, however it is said: one detail (FREE), so "included at no charge", "costs
# nothing extra" and "comes free" are the same claim, as "$25" and "25 dollars" are one number.
_FREE = re.compile(r"\b(?:free of charge|at no (?:extra |additional )?(?:charge|cost)|no (?:extra |additional )?"
                   r"(?:charge|cost|fee)s?|costs? nothing(?: extra)?|for nothing|complimentary|(?:is|are|comes?|"
                   r"come) included at no (?:charge|cost)|without (?:any )?(?:charge|cost)|for free|free)\b",
                   re.IGNORECASE)


# A URL (scheme, host, path) is where a statement was found, not what it claims: a search
# API's links recur in every answer ("en.wikipedia.org", "https"), and one record chained a
# research agent's four true searches through them (audit F1).
URL = re.compile(r"(?:\b[a-z][a-z0-9+.-]*://|\bwww\.)[^\s\"'<>()\[\]{}]*", re.IGNORECASE)
# A currency word after an amount is the currency sign: "eight dollars" and "8 USD" are "$8".
_CURRENCY = re.compile(
    r"(?P<amount>\d|\b(?:" + "|".join(w for w in _NUMBER_WORDS if w != "_") + r"))"
    r"\s*(?:us\s+)?(?:dollars?|usd|euros?|eur|gbp|bucks|sek|nok|dkk|chf|cad|aud)\b", re.IGNORECASE)
# ... and a currency code before one: "EUR 405" is "€405" ("405", the code no detail).
_CODE_BEFORE = re.compile(r"\b(?:USD|EUR|GBP|SEK|NOK|DKK|CHF|CAD|AUD|JPY|INR)\s?(?=\d)")


# Units as records abbreviate them ("time_min": 35, "3 hrs"): the words a reply spells out.
_ABBREVIATED = {"min": "minutes", "mins": "minutes", "hr": "hours", "hrs": "hours", "h": "hours",
                "sec": "seconds", "secs": "seconds", "wk": "weeks", "wks": "weeks", "yr": "years",
                "yrs": "years"}
_UNIT_ABBREVIATION = re.compile(r"(?:(?<=\d)\s?|(?<=[a-z]_))(min|mins|hrs?|h|secs?|wks?|yrs?)\b")


@lru_cache(maxsize=1 << 16)
def detail_terms(text: str) -> frozenset[str]:
    """Normalised content words, dates and times: what must match for two texts to state the
    same detail. URLs say none; a currency word after an amount is its sign."""
    text = URL.sub(" ", text)
    text = _UNIT_ABBREVIATION.sub(lambda m: " " + _ABBREVIATED[m.group(1)], text)
    text = _CURRENCY.sub(r"\g<amount> ", text)
    text = _CODE_BEFORE.sub("", text)
    text = _FREE.sub(f" {FREE} ", text)
    rest, out = _temporal(text)
    rest, numbers = _numbers(rest)
    out |= numbers
    for word in terms(rest):
        for part in _SPLIT_ALNUM.findall(word):
            if len(part) > 1 or part.isdigit() or word == part:
                out.add(_normalise(part))
    return frozenset(out)
