"""What changes what a statement commits to: hypotheticals, past states, time bounds,
habits, one-off occasions, and announced updates ("moved to", "now")."""

from __future__ import annotations

import re


_Q_HYPOTHETICAL = re.compile(r"\b(?:if|unless|wish|dream of|dreaming of|imagine|suppose|hypothetically|"
                             r"in theory|pretend|fantasi[sz]e|what if)\b")
# Weaker modal markers: they cancel a stated state ("I might be vegan") but not what a possessive
# presupposes ("maybe I'll leave my car at the airport" still says there is a car).
_Q_MODAL = re.compile(r"\b(?:would|could|might|hope to|hoping to|want to|wanna|would like|someday|one day|"
                      r"ideally|maybe|perhaps|probably|should)\b")
_Q_FUTURE = re.compile(r"\b(?:(?<!a )(?<!my )(?<!the )(?<!your )(?<!our )(?<!his )(?<!her )(?<!their )will|"
                       r"going to|gonna|plan(?:ning)? (?:to|on|my)|about to|next (?:week|month|year|fall|"
                       r"spring|summer|winter|season|semester)|tomorrow|soon|thinking (?:of|about)|"
                       r"considering|intend|intending|hope|aiming|moving to|move to|relocating|"
                       r"by the end of|eventually|in the future|later this)\b")
_Q_PAST = re.compile(r"\b(?:used to|use to|when i was|back when|back then|back in (?:the )?(?:\d|day|"
                     r"high school|"
                     r"college|school|uni)|growing up|as a (?:kid|"
                     r"child|teen|teenager)|years ago|in the past|previously|formerly|once upon|my old|"
                     r"my late|my ex|my former|before i|when we were|in my (?:twenties|teens|youth|"
                     r"younger days|student days)|in my 20s|at the time|those days|quit|gave up|stopped|"
                     r"got rid of|passed away|died|lost (?:him|her|my))\b")
_Q_BOUNDED = re.compile(r"\b(?:until|till|til|up until|through (?:january|february|march|april|may|june|"
                        r"july|august|september|october|november|december)|for now|temporarily|"
                        r"for the (?:time being|summer|winter|week|month|semester))\b")
_Q_HABITUAL = re.compile(r"\b(?:usually|normally|typically|generally|mostly|most (?:days|weeks|weekends|"
                         r"mornings|evenings|nights|of the time)|often|tend to|as a rule|on weekdays|"
                         r"most saturdays|most sundays)\b")
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_Q_OCCASION = re.compile(r"\b(?:this (?:week|weekend|time|morning|afternoon|evening|year|month|once|"
                         + "|".join(_WEEKDAYS) + r")|today|tonight|tomorrow|for once|just this once|except|"
                         r"this coming|on this occasion|right now|at the moment|for this one)\b")
_Q_NEW = re.compile(r"\b(?:new|newly|just (?:got (?!home|back|off|in\b|up\b)|bought|adopted|started|moved|"
                    r"married|had|welcomed|became|"
                    r"turned|found)|recently|finally got|since (?:last|yesterday)|got (?:married|engaged|"
                    r"divorced)|adopted|bought|started)\b")
_Q_LIFETIME = re.compile(r"\b(?:never|not ever|my whole (?:life|career)|all my life|entire life|ever since|"
                         r"since birth|since i was born|a day in my life)\b")

# Announced changes: the speaker tells us the old value no longer holds.
_UPDATE = re.compile(
    r"(?:^|\b)(?:update:|^\W*update\b|just (?:confirmed|found out|learned|got diagnosed)|diagnosed|(?:i|"
    r"we) went (?:vegetarian|vegan|pescatarian|plant-based|keto|gluten-free|dairy-free|sober|teetotal)|"
    r"quick update|small update|an update|(?:i|we) (?:have |just )?(?:moved|relocated)|"
    r"(?<!you )(?<!you have )(?:have|has) changed|(?:i|we) changed|changed my mind|change of plans?|"
    r"plans? (?:have |has )?changed|slight change|scratch that|forget (?:what i said|that|i said)|"
    r"correction:|i mean,|i misspoke|(?:got|been) (?:rescheduled|moved|postponed|pushed|cancell?ed|delayed|"
    r"bumped)|rescheduled|postponed|pushed (?:back|to)|moved (?:it |the \w+ )?(?:to|up|back)|no longer|"
    r"not anymore|anymore|turns out|it turns out|these days|nowadays|since then|switched|upgraded|(?:i|"
    r"we) (?:just|recently) (?:got|bought|adopted|had) (?:a|an|another|my|our|married|engaged|divorced)|"
    r"(?:i|we) (?:got|bought|adopted) (?:a|an|another) new|(?:i|we) got married|(?:i|we) separated|(?:i|"
    r"we) broke up|(?:i|we) divorced|became|(?:i|we) (?:have|am|are) now|(?:i|we) now|recently|new job|"
    r"started (?:a|my|working)|quit my|retired (?:last|this|in)|since (?:last|yesterday|january|february|"
    r"march|april|may|june|july|august|september|october|november|december))")
_NOW = re.compile(r"\bnow\b")
_NOW_IDIOMS = re.compile(r"\b(?:(?:book|do|go|start|buy|order|leave|call|stop|decide|apply|sign up|act|pay|"
                         r"answer|reply|help|come|eat) now|now\?|right now|from now on|for now|just now|"
                         r"by now|"
                         r"until now|now that|"
                         r"now and then|now or never|as of now|up to now|now,? (?:what|how|which|where|can|"
                         r"could|should|do|does|is|are))\b")
_ACTUALLY_START = re.compile(r"^\W*(?:oh,? )?actually\b")


def announces_update(text: str) -> bool:
    """True when the text announces that something changed ("moved to", "update:", "now")."""
    norm = _norm(text)
    if _UPDATE.search(norm) or _ACTUALLY_START.search(norm):
        return True
    stripped = _NOW_IDIOMS.sub(" ", norm)
    actually = re.search(r"\bactually,? (?:i|we|it|the|my|our) (?:got|have|am|are|moved|changed|decided|"
                         r"now)\b",
                         norm)
    return bool(_NOW.search(stripped)) or bool(actually)


def _norm(text: str) -> str:
    from agentmem.quarantine.claims import normalise
    return normalise(text)
