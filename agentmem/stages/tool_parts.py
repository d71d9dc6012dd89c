"""The parts of a multi-part request, each scored against the tools on its own.

"Please file a claim with the carrier and send me a replacement with the same items" asks for
two tools. Scored as one text, the strong match of one clause ("file a claim") sets the keep
floor (its score minus the margin) above every tool of the other clause (audit 10: 1 of 44
tools kept, the replacement's ``orders_reorder`` ranked 23rd). So the tools stage also scores
each part of the request on its own, and keeps, for each part, the tools within the margin of
that part's own best (a per-part floor). The cap stays: the whole request keeps its best half
of it, then the whole request and each part take turns (``with_parts``).

The splitter is deterministic and cheap (regular expressions and word lists, no model, ~0.01
ms). A request splits at sentences, at ``;``, and at ``and`` / ``then`` / ``also`` / a comma /
a colon when what follows is a new imperative ("..., and send me ...", "...; page the team",
"... then book it"). A part counts only when it asks for something: an imperative (a known
verb first, after "please", "can you" and the like), a question, or "I need / I want / I'd
like ...", with at least ``MIN_WORDS`` content words. Statements ("It looks lost.") and bare
words ("Investigate.") add nothing, nor do noun phrases joined by "and" ("accounting
principles and investment strategies"). At most ``most`` parts (the shortest adjacent pair is
merged while more), and only a request of two parts or more is scored per part: one part is
the request itself. Each part costs one query embedding (~4 ms on two cores, a short text).
"""

from __future__ import annotations

import re

import numpy as np

from agentmem.lexical import terms
from agentmem.text import sentences

MIN_WORDS = 2
MAX_SENTENCES = 12

# Verbs a request to a tool-using assistant starts a clause with. Words that are as often
# nouns ("book", "file", "page", "order") count only before a determiner, a pronoun, a
# particle or a name (``_OBJECT``): "book the TAP one", not "book reviews".
_VERBS = frozenset("""
add analyse analyze apply approve archive assign attach block browse build buy calculate cancel
charge choose clean clear click close collect compare compile compose compute configure confirm
connect contact convert copy count create debug decline delete deploy describe determine
diagnose disable dispatch download draft edit enable enroll escalate estimate evaluate explain
export extract fetch fill find forward generate get give grab grant identify import inform
inspect install investigate invite let locate make merge monitor move notify obtain open
patch pause pick prepare provide publish pull purchase push put rebook recommend redeem refund
refresh register reject reload remind remove rename renew reopen reorder repair replace reply
request reschedule reserve reset resolve restart restore resume retrieve revert revoke roll
save see select sell send share show silence submit subscribe suggest summarise summarize switch
sync take teach tell translate troubleshoot unlock unsubscribe update upgrade validate
verify write
""".split())
_NOUN_VERBS = frozenset("""
alert book call change check email file fix flag help issue list lock log look message order
page pay plan play post print process query rank record release rent report return review run
scan schedule search set ship sign sort start stop tag test text track trigger turn upload view
visit watch
""".split())
_OBJECT = frozenset("""
a an the this that these those my our your his her their its some any all every each another
me us him them it everyone everything something anything someone nobody one two three four five
up out down back off on in over into to for with about from whether if what how which where
when why who
""".split())
# Openings before the verb: "please", "can you", "and then also", "I need you to".
_LEAD = re.compile(
    r"^(?:(?:and|then|also|please|kindly|plus|finally|lastly|next|additionally|now|so|but|"
    r"after that|afterwards|as well|too)\b[\s,]*"
    r"|(?:can|could|would|will) you\b\s*(?:please\b\s*)?(?:also\b\s*)?"
    r"|i(?:'d| would) like you to\b\s*|i need you to\b\s*|i want you to\b\s*)+",
    re.IGNORECASE)
_WISH = re.compile(r"\b(?:i|we) (?:need|want|would like|'d like|wish)\b|\bi'd like\b|\bhelp me\b",
                   re.IGNORECASE)
# Where a sentence may split: ";" always (a clause follows), "," / "and" / "then" / "also"
# only before an imperative (checked on what follows).
_JOINT = re.compile(r"\s*[;:]\s*"  # ";" (and ":" before an imperative)
                    r"|\s*,\s*(?:(?:and|then|also)\s+)*"  # ", " ", and then "
                    r"|\s+(?:and|then|also)\s+(?:(?:then|also)\s+)*", re.IGNORECASE)
_WORD = re.compile(r"[#@~/\w][\w'#@./~-]*")


def _words(text: str) -> list[str]:
    return _WORD.findall(text)


def imperative(clause: str) -> bool:
    """Whether ``clause`` opens with a verb (after "please", "can you", "and then" ...)."""
    words = _words(_LEAD.sub("", clause.strip()))
    if not words:
        return False
    verb = words[0].lower()
    if verb in _VERBS:
        return True
    if verb in _NOUN_VERBS and len(words) > 1:
        following = words[1]
        return (following.lower() in _OBJECT or following[0] in "#@~/\"'" or following[0].isdigit()
                or following[0].isupper())
    return False


_QUESTION = frozenset("""
what which who whom whose where when why how is are was were do does did can could would will
should shall may might has have had am
""".split())


def _asking(clause: str) -> bool:
    """Whether a clause of a question opens like one ("can you ...", "what ...", "is it ...")."""
    words = _words(_LEAD.sub("", clause.strip()))
    return bool(words) and words[0].lower() in _QUESTION


def _asks(part: str, question: bool) -> bool:
    """A part asks for something: a question, an imperative or a wish, with content words."""
    if len(terms(part)) < MIN_WORDS:
        return False
    return question or imperative(part) or bool(_WISH.search(part))


def _clauses(sentence: str) -> list[str]:
    """The sentence cut at ";" and before each imperative that a comma, "and", "then" or
    "also" introduces."""
    out: list[str] = []
    start = 0
    for joint in _JOINT.finditer(sentence):
        if joint.start() <= start:
            continue
        if joint.group().strip() != ";" and not imperative(sentence[joint.end():]):
            continue
        out.append(sentence[start:joint.start()])
        start = joint.end()
    out.append(sentence[start:])
    return [clause.strip(" ,;") for clause in out if clause.strip(" ,;")]


def request_parts(text: str, most: int = 3) -> list[str]:
    """The parts of ``text`` that each ask for something, at most ``most`` (the shortest
    adjacent pair merged while more): an empty list when fewer than two parts ask."""
    parts: list[str] = []
    for sentence in sentences(text)[:MAX_SENTENCES]:
        question = sentence.rstrip("\"')]” ").endswith("?")
        clauses = _clauses(sentence)
        parts.extend(c for i, c in enumerate(clauses) if _asks(c, question and (
            i == len(clauses) - 1 or _asking(c))))
    if len(parts) < 2:
        return []
    while len(parts) > most:
        pair = min(range(len(parts) - 1), key=lambda i: len(parts[i]) + len(parts[i + 1]))
        parts[pair:pair + 2] = [f"{parts[pair]}; {parts[pair + 1]}"]
    return parts if len(parts) > 1 else []


def part_floors(scores: list[np.ndarray], settings) -> list[float]:
    """Each part's keep floor: its own best minus the margin (and not below the threshold)."""
    floors = []
    for part in scores:
        floor = -np.inf if settings.threshold is None else float(settings.threshold)
        if settings.margin is not None and len(part):
            floor = max(floor, float(part.max()) - settings.margin)
        floors.append(floor)
    return floors


def with_parts(keep: np.ndarray, pinned: np.ndarray, whole: np.ndarray, scores: list[np.ndarray],
               floors: list[float], most: int, least: int) -> list[list[int]]:
    """Share the places under the cap between the whole request and its parts. ``keep``, the
    whole request's selection by its ``whole`` scores, changed in place, keeps its pinned tools
    and the ``least`` best of its others; then the rest of the whole request's selection and
    each part's tools above its floor, each list best first, take turns (the whole request's
    next, each part's next, ...) while fewer than ``most`` are kept besides the pinned. A part's
    best tools get in even when the whole request's crowd would fill the list, and while there
    is room nothing the whole request kept is dropped. Returns the rows each part brought in."""
    order = np.argsort(-whole, kind="stable")
    ranked = order[keep[order] & ~pinned[order]]
    keep[:] = pinned
    keep[ranked[:least]] = True
    lists = [ranked[least:]]
    for part, floor in zip(scores, floors):
        order = np.argsort(-part, kind="stable")
        lists.append(order[part[order] >= floor])
    added: list[list[int]] = [[] for _ in scores]
    room = most - int((keep & ~pinned).sum())
    rank = 0
    while room > 0 and any(rank < len(rows) for rows in lists):
        for which, rows in enumerate(lists):
            if room > 0 and rank < len(rows) and not keep[rows[rank]]:
                keep[rows[rank]] = True
                room -= 1
                if which:
                    added[which - 1].append(int(rows[rank]))
        rank += 1
    return added
