"""Two clash false positives of the NLI backstop, on the shipped model with the default policy
(audit 4, F2 and F3), and the catches that must stay.

- A question that asks for a fact states nothing that could contradict it: "What's my laptop
  budget again?" read as contradicting "My budget for a new laptop is $1200." (NLI 0.99), and
  newer wins, so the fact the user asked about was withheld from every later call. A question
  that states something in passing ("Since I eat steak every day, ...?", "I already fill up my
  Tesla with gas, so ...?") is still compared.
- A report qualified by a day ("I ran 5k today", "Yesterday it was 15 degrees") is not a
  standing fact: two such reports, or one and a standing fact, are not a contradiction.

Each conversation is replayed turn by turn as the quarantine stage checks it (the turn's
statements against the earlier ones of their voice: rules, then NLI).
"""

from __future__ import annotations

import numpy as np
import pytest

from agentmem.bench.clash import DialogueReader
from agentmem.quarantine.clash import Clash, candidate_pairs, find_clashes, load_nli
from agentmem.quarantine.rules import time_qualified
from agentmem.quarantine.settings import QuarantineSettings
from agentmem.quarantine.statements import only_asks, presupposes_about_self

SETTINGS = QuarantineSettings()  # the default policy's quarantine settings


@pytest.fixture(scope="module")
def reader() -> DialogueReader:
    return DialogueReader(SETTINGS)


def _history(turns: list[str]) -> list[dict]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(turns)]


async def _replay(reader: DialogueReader, turns: list[str]) -> list[tuple[str, str, str]]:
    """(withheld, newer, detector) of every clash found as the conversation grows a turn at a
    time; withheld is the statement the default resolution withholds ("" when both stay)."""
    history = _history(turns)
    nli = load_nli(SETTINGS)
    out = []
    for last in range(1, len(history)):
        statements = await reader.statements(history[:last + 1])
        rows = [int(r) for r in np.flatnonzero(statements.position == last)]
        clashes: list[Clash] = find_clashes(statements, rows, nli, SETTINGS)
        for c in clashes:
            loser = c.loser(statements, SETTINGS.resolution)
            out.append(("" if loser is None else statements.texts[loser],
                        statements.texts[c.newer], c.detector))
    return out


def _withheld(clashes: list[tuple[str, str, str]], words: str) -> list[tuple[str, str, str]]:
    return [c for c in clashes if words in c[0]]


LAPTOP = ["My budget for a new laptop is $1200. I need it for programming.",
          "With $1200: a MacBook Air M3 or a ThinkPad T14.",
          "I prefer Linux.", "Then the ThinkPad T14 or a Framework 13 are great for Linux."]
BOSTON = ["My flight to Boston is at 8:15 am on Friday and my hotel is the Omni Parker House.",
          "Noted: Friday 8:15 am flight, Omni Parker House.",
          "I need to pack for 3 days of meetings.",
          "Pack 3 business outfits, a charger, and a light jacket."]
LISBON = ["Hi! I'm planning a trip to Lisbon in May. My budget is $500 for the hotel.",
          "Lovely! For $500 you can stay central for a few nights."]

RECALL = [  # (conversation, the recall question, words of the fact asked about)
    (LAPTOP, "What's my laptop budget again, and which one do you recommend?",
     "My budget for a new laptop"),
    (BOSTON, "Remind me, what time is my flight and where am I staying?", "My flight to Boston"),
    (LISBON, "So what's my hotel budget again, and which area do you recommend?", "My budget is $500"),
    # paraphrases (not in the audit)
    (LAPTOP, "I forgot, what was my laptop budget again and which model fits it?",
     "My budget for a new laptop"),
    (BOSTON, "Quick question about my trip: when does my flight leave and which hotel did I book?",
     "My flight to Boston"),
    (LAPTOP, "Can you remind me what my budget for the laptop was and what you suggested?",
     "My budget for a new laptop"),
]


@pytest.mark.parametrize(("turns", "question", "fact"), RECALL,
                         ids=["laptop", "boston", "lisbon", "forgot", "quick-question", "remind-me"])
async def test_a_recall_question_never_withholds_the_fact_it_asks_about(reader, turns, question, fact):
    clashes = await _replay(reader, [*turns, question, "Here you go."])
    assert _withheld(clashes, fact) == []


@pytest.mark.parametrize("question", [q for _, q, _ in RECALL])
def test_a_question_that_only_asks_states_nothing_in_passing(question):
    assert only_asks(question)


@pytest.mark.parametrize("question", [
    "Since we'll be in Denmark, which traditions should we know?",
    "Since I eat steak every day, what wine goes best with it?",
    "I already spend like $90 a week filling up my Tesla with gas, so would the charger pay for itself?",
    "I'll just tick 'no allergies' on the form, right?",
    "When I email Ridgeview, since that's the school we're zoned for, should I ask about the bus?",
    "I'm vegetarian, so what should I cook for my parents on Sunday?",
])
def test_a_question_that_states_something_of_its_asker_is_still_compared(question):
    assert presupposes_about_self(question) and not only_asks(question)


async def test_a_question_whose_clause_states_a_conflicting_fact_still_clashes(reader):
    """Positive controls: the question's stated clause contradicts an earlier statement (the
    first two by a rule reading the clause, the third by NLI on the question)."""
    steak = await _replay(reader, ["I'm vegetarian and have been for ten years.",
                                   "Great, lots of options then.",
                                   "Since I eat steak every day, what wine goes best with it?",
                                   "A Cabernet."])
    assert _withheld(steak, "I'm vegetarian")
    denmark = await _replay(reader, ["We live in Oslo with our two kids.", "Lovely city.",
                                     "Since we live in Denmark, which traditions should the kids know?",
                                     "Hygge."])
    assert _withheld(denmark, "We live in Oslo")
    tesla = await _replay(reader, ["I drive a Tesla Model 3 and commute about 60 km a day.",
                                   "Nice car.",
                                   "I already spend like $90 a week filling up my Tesla with gas, "
                                   "so would the charger pay for itself?", "Let's see."])
    assert [c[2] for c in _withheld(tesla, "I drive a Tesla")] == ["nli"]


TIMED = [  # (earlier turns, later user turn, words of the earlier report)
    (["I ran 5k today in 31 minutes. Is that a good pace for a beginner?",
      "Yes! About 6:12 per km is a solid beginner pace."],
     "Today I ran 10k in 65 minutes. I'm getting better!", "I ran 5k today"),
    (["Yesterday it was 15 degrees and raining here in Seattle.", "Typical Seattle spring!"],
     "Today it's 22 degrees and sunny, finally.", "Yesterday it was 15"),
    # paraphrases (not in the audit)
    (["I swam 20 lengths this morning before work.", "Nice start to the day."],
     "Today I swam 40 lengths, a new record for me!", "I swam 20 lengths"),
    (["Last night I slept only four hours.", "That's rough, try to nap."],
     "I slept nine hours last night and feel great.", "I slept only four hours"),
    (["I work from home full time.", "Nice, no commute."],
     "I went into the office this morning for a team meeting.", "I work from home"),
]


@pytest.mark.parametrize(("turns", "later", "report"), TIMED,
                         ids=["running", "weather", "swimming", "sleep", "standing-fact"])
async def test_reports_of_different_days_are_not_a_contradiction(reader, turns, later, report):
    clashes = await _replay(reader, [*turns, later, "Good to hear.", "What should I do next?", "Rest."])
    assert _withheld(clashes, report) == []


def test_a_day_qualifies_a_report_not_a_booking_or_the_present():
    assert time_qualified("I ran 5k today in 31 minutes.")
    assert time_qualified("Yesterday it was 15 degrees and raining here in Seattle.")
    assert time_qualified("On Monday we hiked Mount Si.")
    assert time_qualified("I played tennis last weekend.")
    assert not time_qualified("My flight to Boston is at 8:15 am on Friday.")  # a booking: a standing fact
    assert not time_qualified("I have a dentist appointment on Tuesday.")
    assert not time_qualified("I'm unemployed right now.")  # the standing present
    assert not time_qualified("Last restock: 2 days ago.")  # a record's value


async def test_standing_facts_still_reach_nli(reader):
    """The guard takes only day-qualified reports out: two standing facts are still a candidate."""
    statements = await reader.statements(_history(["I work from home full time.", "Nice, no commute.",
                                                   "I work in the office five days a week."]))
    assert candidate_pairs(statements, [statements.size - 1], SETTINGS) == [(0, statements.size - 1)]
