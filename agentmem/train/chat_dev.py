"""A licence-clean conversational-memory dev set in the LoCoMo JSON layout (``bench history``).

Why: LoCoMo is CC BY-NC and evaluation only, so the history parameters of the prune stage
(context_weight, lexical_weight, turn_spread, ...) need another conversation set to be chosen
on. This one is built from the Schema-Guided Dialogue dataset (SGD, CC BY-SA 4.0; source and
commit in agentmem/train/DATA.md): its dialogues carry per-turn actions (INFORM, OFFER,
CONFIRM, AFFIRM, SELECT ...) with slot values, so the turn that states a fact is known
exactly, with no model and no hand labelling.

Layout: SGD dialogues, shuffled with a seed, become the sessions of long conversations between
two named speakers (the SGD user is ``speaker_a``, the SGD system ``speaker_b``), each session
dated as LoCoMo dates them ("1:56 pm on 8 May, 2023"). Questions, each with the ``dia_id`` of
its evidence turns, are of four kinds (``category`` 1-4, ``kind`` names it):

1. ``user_value``: the first user turn that informs a slot ("For three people." -> the party
   size); many are short turns that share no word with the question.
2. ``chosen_offer``: the system turn that offers a value and the user turn that takes it
   ("Yes, that one works."): a context-dependent turn, LoCoMo's main miss.
3. ``confirmed``: the system turn that reads the details back and the user's "Yes, that's
   right".
4. ``system_value``: the system turn that answers a user's request (a phone number, an
   address).
5. ``across_sessions``: the same user value asked for in every session of one service ("Which
   cities did Alex want restaurants in?"): two to five evidence turns in as many sessions,
   LoCoMo's list questions (its category 1, the largest share of its misses). Drawn with their
   own seed after the other kinds, so adding them left those questions unchanged.

Every question names its session by an *anchor*: another value of the same dialogue that
occurs in no other session of the conversation, preferably stated in a turn other than the
evidence (so the question is unambiguous, but the evidence must be found through its
neighbours as often as through its own words).
"""

from __future__ import annotations

import datetime as dt
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SPEAKERS: tuple[tuple[str, str], ...] = (
    ("Alex", "Sam"), ("Priya", "Jordan"), ("Marco", "Lena"), ("Grace", "Tomas"),
    ("Noah", "Aisha"), ("Yuki", "Daniel"), ("Olivia", "Kwame"), ("Ivan", "Sofia"))

# What a service's dialogue is about, as a noun a question can use (SGD service prefix).
NOUNS: dict[str, str] = {
    "Banks": "bank transfer", "Buses": "bus trip", "Calendar": "calendar event",
    "Events": "event", "Flights": "flight", "Homes": "apartment visit", "Hotels": "hotel stay",
    "Media": "movie", "Movies": "movie outing", "Music": "music", "RentalCars": "rental car",
    "Restaurants": "restaurant", "RideSharing": "ride", "Services": "appointment",
    "Travel": "sightseeing", "Weather": "weather check"}

KINDS: dict[str, int] = {"user_value": 1, "chosen_offer": 2, "confirmed": 3, "system_value": 4}
ACROSS_SESSIONS = 5  # the category of the list questions (``across_sessions``)
MAX_LIST_EVIDENCE = 5  # a list question's sessions: LoCoMo's list questions name 2-5 turns
ACCEPTING_ACTS = frozenset({"SELECT", "INFORM_INTENT", "AFFIRM_INTENT", "AFFIRM"})
# Offers a user "takes" are of items (a restaurant, a film, a car), not of their attributes.
OFFERED_ITEMS = frozenset({"title", "venue", "airlines", "artist", "album", "category", "type"})
UNASKABLE = frozenset({"true", "false", "dontcare"})  # flags read as awkward questions


@dataclass(frozen=True)
class Fact:
    """One question's material: what is asked, its answer and the turns that hold it."""

    kind: str
    service: str
    slot: str
    value: str
    evidence: tuple[int, ...]  # turn indices in the dialogue


def slot_phrase(slot: str) -> str:
    """An SGD slot name as words: ``restaurant_name`` -> "restaurant", ``number_of_seats`` ->
    "number of seats" (the names are readable English already)."""
    words = slot.replace("_", " ")
    return words[: -len(" name")] if words.endswith(" name") and " " in words else words


def noun(service: str) -> str:
    return NOUNS.get(service.split("_")[0], service.split("_")[0].lower())


def _actions(turn: dict[str, Any]) -> list[tuple[str, str, str, list[str]]]:
    """(service, act, slot, values) of every action of a turn."""
    return [(frame["service"], action["act"], action["slot"], list(action["values"]))
            for frame in turn["frames"] for action in frame["actions"]]


def _next_user(turns: list[dict[str, Any]], index: int) -> int | None:
    following = index + 1
    return following if following < len(turns) and turns[following]["speaker"] == "USER" else None


def _taken(actions: list[tuple[str, str, str, list[str]]], service: str, slot: str,
           reply: str) -> str:
    """Which of a turn's offered values for ``slot`` the reply takes: the one it names, else
    the only one offered; "" when several were offered and the reply names none of them."""
    offered = [value for s, act, name, values in actions
               if (s, act, name) == (service, "OFFER", slot) for value in values]
    named = [v for v in offered if v.lower() in reply.lower()]
    if len(named) == 1:
        return named[0]
    return offered[0] if len(offered) == 1 else ""


def dialogue_facts(turns: list[dict[str, Any]]) -> list[Fact]:
    """Every askable fact of one SGD dialogue, each (kind, service, slot) once, first mention."""
    facts: dict[tuple[str, str, str], Fact] = {}

    def add(fact: Fact) -> None:
        facts.setdefault((fact.kind, fact.service, fact.slot), fact)

    for index, turn in enumerate(turns):
        actions = _actions(turn)
        answered = _next_user(turns, index)
        for service, act, slot, values in actions:
            if not values or slot in {"", "intent", "count"} or values[0].lower() in UNASKABLE:
                continue
            value = values[0]
            if turn["speaker"] == "USER" and act == "INFORM":
                add(Fact("user_value", service, slot, value, (index,)))
            elif turn["speaker"] == "SYSTEM" and act == "INFORM":
                add(Fact("system_value", service, slot, value, (index,)))
            elif act in {"OFFER", "CONFIRM"} and answered is not None:
                reply = {a for s, a, _, _ in _actions(turns[answered]) if s == service}
                item = slot.endswith("_name") or slot in OFFERED_ITEMS
                taken = _taken(actions, service, slot, turns[answered]["utterance"])
                if (act == "OFFER" and item and taken and reply & ACCEPTING_ACTS
                        and taken in turn["utterance"]):
                    add(Fact("chosen_offer", service, slot, taken, (index, answered)))
                elif act == "CONFIRM" and "AFFIRM" in reply:
                    add(Fact("confirmed", service, slot, value, (index, answered)))
    return list(facts.values())


@dataclass(frozen=True)
class Anchor:
    text: str  # as said in the turn
    turn: int
    service: str


def anchors(turns: list[dict[str, Any]]) -> list[Anchor]:
    """Values a question can name its session by: the span-annotated values (names, places,
    titles) of at least four characters, not dates or times (which recur across sessions and
    read as a second question)."""
    out: list[Anchor] = []
    for index, turn in enumerate(turns):
        for frame in turn["frames"]:
            for span in frame["slots"]:
                text = turn["utterance"][span["start"]: span["exclusive_end"]].strip()
                if (len(text) >= 4 and not re.search(r"date|time|day", span["slot"])
                        and not re.search(r"\d|\b(am|pm|o'?clock)\b", text, re.I)):
                    out.append(Anchor(text, index, frame["service"]))
    return out


def best_anchor(fact: Fact, unique: list[Anchor], rng: random.Random) -> str | None:
    """An anchor for ``fact``: of its own service and outside its evidence turns if any is,
    then of its service, then outside the evidence, then any; never the answer itself."""
    usable = [a for a in unique if fact.value.lower() not in a.text.lower()
              and a.text.lower() not in fact.value.lower()]
    tiers = ([a for a in usable if a.service == fact.service and a.turn not in fact.evidence],
             [a for a in usable if a.service == fact.service],
             [a for a in usable if a.turn not in fact.evidence], usable)
    for tier in tiers:
        if tier:
            return rng.choice(tier).text
    return None


def question(fact: Fact, anchor: str, a: str, b: str, rng: random.Random) -> str:
    """The question, in one of a few phrasings per kind (LoCoMo's are free-form too)."""
    what, topic = slot_phrase(fact.slot), noun(fact.service)
    forms = {
        "user_value": [f"What {what} did {a} ask for about the {topic} involving {anchor}?",
                       f"When {a} planned the {topic} with {anchor}, what {what} did {a} want?"],
        "chosen_offer": [f"Which {what} did {a} go with for the {topic} involving {anchor}?",
                         f"For the {topic} with {anchor}, which {what} did {a} pick?"],
        "confirmed": [f"What {what} did {a} confirm for the {topic} involving {anchor}?",
                      f"For the {topic} with {anchor}, what {what} did {a} agree to?"],
        "system_value": [f"What {what} did {b} tell {a} about the {topic} involving {anchor}?",
                         f"For the {topic} with {anchor}, what {what} did {b} give {a}?"],
    }[fact.kind]
    return rng.choice(forms)


def session_date(start: dt.datetime, rng: random.Random) -> tuple[dt.datetime, str]:
    """The next session's time (1 to 20 days later), and its text as LoCoMo writes it."""
    when = start + dt.timedelta(days=rng.randint(1, 20), minutes=rng.randint(-240, 240))
    hour = when.hour % 12 or 12
    text = f"{hour}:{when.minute:02d} {'am' if when.hour < 12 else 'pm'} on {when.day} {when:%B, %Y}"
    return when, text


def conversation_sample(dialogues: list[dict[str, Any]], names: tuple[str, str], number: int,
                        rng: random.Random, *, per_session: int, lists: int = 0) -> dict[str, Any]:
    """One LoCoMo-layout sample: the dialogues as dated sessions, and their questions (with up to
    ``lists`` list questions, drawn from their own seed)."""
    a, b = names
    conversation: dict[str, Any] = {"speaker_a": a, "speaker_b": b}
    when = dt.datetime(2023, 1, 1, 12) + dt.timedelta(days=rng.randint(0, 300))
    texts = [" ".join(t["utterance"] for t in d["turns"]).lower() for d in dialogues]
    qa: list[dict[str, Any]] = []
    for session, dialogue in enumerate(dialogues, start=1):
        when, date = session_date(when, rng)
        turns = dialogue["turns"]
        conversation[f"session_{session}_date_time"] = date
        conversation[f"session_{session}"] = [
            {"speaker": a if t["speaker"] == "USER" else b, "dia_id": f"D{session}:{i + 1}",
             "text": t["utterance"]} for i, t in enumerate(turns)]
        qa += session_questions(dialogue, session, texts, names, rng, per_session=per_session)
    if lists:
        qa += list_questions(dialogues, names, random.Random(f"lists-{number}"), lists)
    return {"sample_id": f"sgd-chat-{number}", "conversation": conversation, "qa": qa}


def list_questions(dialogues: list[dict[str, Any]], names: tuple[str, str], rng: random.Random,
                   count: int) -> list[dict[str, Any]]:
    """Up to ``count`` questions whose answer is a list: one slot the user gave in two to five
    sessions of the same kind of service, each session's first such turn an evidence turn.
    Only slots whose values differ between sessions, so no one turn answers the question."""
    said: dict[tuple[str, str], list[tuple[int, Fact]]] = {}
    for session, dialogue in enumerate(dialogues, start=1):
        for fact in dialogue_facts(dialogue["turns"]):
            if fact.kind == "user_value":
                said.setdefault((noun(fact.service), fact.slot), []).append((session, fact))
    groups = sorted((key, facts) for key, facts in said.items()
                    if 2 <= len({s for s, _ in facts}) <= MAX_LIST_EVIDENCE
                    and len({f.value.lower() for _, f in facts}) > 1)
    rng.shuffle(groups)
    a, _ = names
    out = []
    for (topic, slot), facts in groups[:count]:
        first: dict[int, Fact] = {}
        for session, fact in facts:
            first.setdefault(session, fact)
        what = slot_phrase(slot)
        article = "an" if topic[0] in "aeiou" else "a"
        form = rng.choice([f"Which {what} did {a} ask for each time {a} planned {article} {topic}?",
                           f"Across all of {a}'s {topic} plans, what {what} did {a} want?"])
        out.append({"question": form, "answer": ", ".join(f.value for f in first.values()),
                    "evidence": [f"D{s}:{f.evidence[0] + 1}" for s, f in first.items()],
                    "category": ACROSS_SESSIONS, "kind": "across_sessions",
                    "short_evidence": min(len(dialogues[s - 1]["turns"][f.evidence[0]]["utterance"]
                                              .split()) for s, f in first.items()) <= 6})
    return out


def session_questions(dialogue: dict[str, Any], session: int, texts: list[str],
                      names: tuple[str, str], rng: random.Random, *, per_session: int
                      ) -> list[dict[str, Any]]:
    """Up to ``per_session`` questions about one session, at most one per kind first (so the
    context-dependent kinds are not crowded out by the many user values)."""
    turns = dialogue["turns"]
    unique = [a for a in anchors(turns) if sum(a.text.lower() in other for other in texts) == 1]
    by_kind: dict[str, list[Fact]] = {}
    for fact in dialogue_facts(turns):
        by_kind.setdefault(fact.kind, []).append(fact)
    picked: list[Fact] = []
    for kind in KINDS:
        if by_kind.get(kind):
            picked.append(rng.choice(by_kind[kind]))
    rng.shuffle(picked)
    out = []
    for fact in picked[:per_session]:
        anchor = best_anchor(fact, unique, rng)
        if anchor is None:
            continue
        out.append({"question": question(fact, anchor, *names, rng), "answer": fact.value,
                    "evidence": [f"D{session}:{i + 1}" for i in fact.evidence],
                    "category": KINDS[fact.kind], "kind": fact.kind,
                    "short_evidence": min(len(turns[i]["utterance"].split()) for i in fact.evidence) <= 6})
    return out


def read_dialogues(source: Path) -> list[dict[str, Any]]:
    """Every dialogue of the SGD ``dialogues_*.json`` files in ``source``, in file order."""
    rows: list[dict[str, Any]] = []
    for path in sorted(source.glob("dialogues_*.json")):
        rows += json.loads(path.read_text(encoding="utf-8"))
    return rows


def chat_samples(dialogues: list[dict[str, Any]], *, seed: int = 13, conversations: int = 4,
                 sessions: int = 55, per_session: int = 3, lists: int = 12) -> list[dict[str, Any]]:
    """``conversations`` samples of ``sessions`` distinct dialogues each (none used twice)."""
    rng = random.Random(seed)
    pool = list(dialogues)
    rng.shuffle(pool)
    if len(pool) < conversations * sessions:
        raise ValueError(f"{len(pool)} dialogues, {conversations * sessions} needed")
    return [conversation_sample(pool[n * sessions: (n + 1) * sessions], SPEAKERS[n % len(SPEAKERS)],
                                n, rng, per_session=per_session, lists=lists)
            for n in range(conversations)]


def chat(source: Path, out: Path, *, seed: int = 13, conversations: int = 4,
         sessions: int = 55) -> int:
    """Write the dev file; returns the number of questions."""
    samples = chat_samples(read_dialogues(source), seed=seed, conversations=conversations,
                           sessions=sessions)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(samples, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return sum(len(s["qa"]) for s in samples)
