"""The rule layer of the clash cascade: each clash kind fires, each hard negative stays silent.

Pure unit tests (no models, no Redis). The sentences are written for these tests; none is
taken from the benchmark files.
"""

from __future__ import annotations

import pytest

from agentmem.quarantine.claims import claim_clauses
from agentmem.quarantine.rules import RuleVerdict, rule_clash, rule_silent_ok
from agentmem.quarantine.slots import announces_update, conflict, extract_facts

# (older, newer, kind, slot prefix)
CLASHES = [
    # value: numbers, ages, counts, dates, times, amounts, durations, sizes, records
    ("I'm 29 and training for my first half marathon.",
     "Honestly, as a 47-year-old with bad ankles, is a half marathon realistic?", "value", "age"),
    ("I'm 61, retired, and learning watercolour.", "At 35, is it too late to start painting?", "value",
     "age"),
    ("We have three kids, all under ten.", "Any tips for road trips with my 2 children?", "value", "kids"),
    ("My two dogs sleep in the kitchen.", "I have 4 dogs and they all shed.", "value", "pet:dog"),
    ("Our anniversary is on March 3rd, can you suggest a restaurant?",
     "Great, since our anniversary is on March 19, should I book now?", "value", "when:anniversary"),
    ("My flight is at 6:15am on Thursday.", "Since my flight is at 9pm, can I still do a museum?", "value",
     "when:flight"),
    ("My dentist appointment is on May 5th at 5 pm.", "My dentist appointment is on May 5th at 1 pm.",
     "value", "when:dentist"),
    ("We are a party of 6 for Saturday.", "We'll be 9 in total on Saturday.", "value", "party_size"),
    ("Hard budget of $800 for a new phone, not a cent more.",
     "Ok, I can go up to $1,500 for the phone, what's best?", "value", "budget"),
    ("I bought this blender three days ago and it already leaks.",
     "It's been two years since I bought it, is it still under warranty?", "value", "ago:bought"),
    ("I wear a women's US 7 in running shoes.", "I wear a women's US 9, which trail shoe fits?", "value",
     "size"),
    ("item SKU-42 | warehouse: Leeds | on hand: 12 | status: active",
     "item SKU-42 | warehouse: Leeds | on hand: 3 | status: active", "value", "record"),
    # names and places
    ("My wife Maria loves gardening.", "My wife Sofia wants a greenhouse for her birthday.", "name_place",
     "name:wife"),
    ("My name is Daniel, nice to meet you.", "Hi again, my name is Peter.", "name_place", "name:self"),
    ("I live in Lisbon and cycle to work.", "The traffic here in Berlin makes cycling scary.", "name_place",
     "residence"),
    ("I grew up in Glasgow.", "Growing up in Sydney, we spent every weekend at the beach.", "name_place",
     "origin"),
    # world knowledge (gazetteer)
    ("I've never been to Italy, sadly.", "When I was in Florence last spring the food was amazing.",
     "world_knowledge", "visited"),
    ("I live in Canada and work remotely.", "Heating my flat in Madrid is expensive this winter.",
     "world_knowledge", "residence"),
    ("The museum is closed on Mondays.", "Go to the museum on Monday morning before the crowds.",
     "world_knowledge", "opening"),
    # negation / existence flips
    ("I don't have a car, I take the bus everywhere.", "My car broke down on the motorway yesterday.",
     "negation", "has:car"),
    ("I have no siblings.", "My sister is visiting next week, where should we eat?", "negation", "siblings"),
    ("I don't have any pets.", "My cat keeps scratching the sofa, how do I stop her?", "negation", "pet"),
    ("We don't have kids.", "I drop my kids at school at 8 every morning.", "negation", "kids"),
    ("I've never played tennis.", "I've been playing tennis every Sunday for years.", "negation", "did:play"),
    ("I'm not married.", "I'm married, so should we file jointly?", "negation", "marital"),
    ("I don't speak Spanish at all.", "I speak Spanish, so Mexico City should be easy.", "negation",
     "speaks:spanish"),
    # profile lexicons
    ("I'm vegetarian, so no meat please.", "Last night I had a huge steak at the pub.", "profile", "diet"),
    ("I'm vegan.", "I had scrambled eggs for breakfast.", "profile", "diet"),
    ("I'm severely allergic to shellfish.", "I ate a whole plate of prawns at dinner.", "profile",
     "allergies"),
    ("I'm lactose intolerant.", "I love a big bowl of ice cream after dinner.", "profile", "allergies"),
    ("I'm allergic to cats.", "Our cat Pepper sleeps on my bed.", "profile", "allergies"),
    ("I don't drink alcohol.", "I had a couple of cocktails at the party.", "profile", "abstention"),
    ("I'm a non-smoker.", "I smoke a pack a day, is that bad for running?", "profile", "abstention"),
    ("I'm single and live alone.", "My husband thinks we should repaint.", "profile", "marital"),
    ("I'm left-handed.", "As a righty, which scissors should I buy?", "profile", "handedness"),
    ("I'm a German citizen with no other citizenship.", "As an American, do I need a visa for Canada?",
     "profile", "nationality"),
    ("I've been a nurse my whole career.", "I've never worked in health care, how do I start?", "negation",
     "job"),
    ("I'm unemployed right now.", "I just got home from work, so tired.", "profile", "job"),
    # standing instructions
    ("From now on, never use emojis in your replies.", "Please add lots of emojis to every answer.",
     "instruction_reversal", "instr:emoji"),
    ("Always reply in French please.", "Reply in English from now on.", "instruction_reversal",
     "instr:language"),
    ("Keep every answer under two sentences.", "I want long, detailed answers with worked examples.",
     "instruction_reversal", "instr:length"),
    ("Please use metric units only.", "As I said, I want everything in miles and Fahrenheit.",
     "instruction_reversal", "instr:units"),
    # a recalled instruction that reverses the one given, on any aspect (stop 51)
    ("Please never mention my salary in these emails.", "As I asked, mention my salary in the opening line.",
     "instruction_reversal", "recalled:mention"),
    ("Always sort the list by price.", "Like I told you, never sort by price, sort by rating.",
     "instruction_reversal", "recalled:sort"),
    # counted and measured quantities of the speaker's own things (stop 51)
    ("We're expecting about 60 guests at the reunion.", "For our 140 guests, how many caterers do we need?",
     "value", "qty:guest"),
    ("My Corolla has 95,000 miles on it.", "Since it's at 210k miles now, should I sell it?", "value",
     "qty:odometer_mile"),
    ("The remaining balance on our mortgage is $180,000.",
     "With $420k still owed on the house, should we refinance?", "value", "qty:owed"),
    ("I'm 5'10\" and weigh about 160.", "Being 6'4\" myself, I struggle to find long jeans.",
     "value", "height"),
    ("We have five grandchildren.", "Since we only have three grandkids, is one 529 enough?", "value",
     "qty:grandchild"),
    ("I'm a single dad of twins.", "As a dad of one, how do I handle bedtime?", "value", "kids"),
    # foods, drinks, places and homes read in more phrasings (stop 51)
    ("I don't eat pork.", "I always wrap the figs in bacon for parties.", "profile", "diet"),
    ("I'm allergic to eggs.", "I put homemade mayo on every sandwich.", "profile", "allergies"),
    ("I only drink decaf.", "I drink two Red Bulls before every exam.", "profile", "abstention"),
    ("I'm originally from Portugal.", "Back home in Brazil we eat this at Christmas.", "name_place",
     "origin"),
    ("We're relocating to Lyon in May.", "Once we're settled in Marseille, where should the kids go?",
     "name_place", "destination"),
    ("I live in a tiny studio downtown.", "Since I live in a house with a garden, should I get chickens?",
     "profile", "dwelling"),
    ("Our parrot Kiwi is our only pet.", "Mango, our only parrot, keeps plucking feathers.", "name_place",
     "name:parrot"),
    ("My dad turns 70 in June, we're planning a party.", "What cake suits my dad's 65th birthday?", "value",
     "birthday_age:dad"),
    ("We cancelled Spotify last spring.", "Can I share our Spotify family plan with my niece?", "negation",
     "has:spotify"),
    ("I still don't have a driving licence.", "Last week I drove us to the coast in my mum's car.",
     "world_knowledge", "has:licen"),
    ("I've never repotted a plant in my life.", "When I repotted my spider plant it drooped.", "negation",
     "did:repot"),
]

# (older, newer, why) pairs that must not fire
HARD_NEGATIVES = [
    # announced updates
    ("I live in Dublin.", "Update: I moved to Cork last month, what's the bus like?", "update"),
    ("Our meeting is on Tuesday at 3pm.", "Change of plan, the meeting got moved to Thursday at 10am.",
     "update"),
    ("I'm a junior developer.", "Actually I got promoted, I'm now a team lead.", "update"),
    ("I live in Paris.", "I live in Rome now, so which museums should I see?", "update"),
    ("I have one dog.", "We just adopted a second dog, so now we have 2 dogs.", "update"),
    # another person
    ("I'm 34.", "My brother is 41 and runs marathons.", "other person"),
    ("I don't drink.", "My husband drinks a lot of wine, any pairing tips?", "other person"),
    ("I live in Boston.", "My parents live in Phoenix, so I fly there for the holidays.", "other person"),
    ("My son is allergic to peanuts.", "I eat peanut butter toast every morning.", "other person"),
    ("I wear a men's size 10.", "My wife wears a women's size 7.", "other person"),
    # hypotheticals
    ("I'm vegetarian.", "If I ate meat, what would pair with this wine?", "hypothetical"),
    ("I live in Denver.", "If I lived in Miami I'd surf every day.", "hypothetical"),
    ("I'm 40.", "Imagine I were 25 again, what would you study?", "hypothetical"),
    # time-qualified
    ("I don't smoke.", "I used to smoke when I was in college.", "past"),
    ("I live in Madrid.", "Until 2019 I lived in Bogota.", "bounded"),
    ("I usually work from home on Mondays.", "This Monday I'm in the office for a workshop.",
     "habit vs exception"),
    ("I'm 38.", "When I was 25 I ran a marathon.", "past"),
    ("I don't eat sugar anymore.", "As a kid I ate candy constantly.", "past"),
    # restatements and consistent elaborations
    ("I have two kids.", "My 2 children love the beach.", "restatement"),
    ("I'm 34.", "I'm in my thirties, is that too old to start climbing?", "restatement"),
    ("I'm vegetarian.", "I had eggs and toast for breakfast.", "consistent elaboration"),
    ("I'm vegan.", "I had a veggie burger with oat milk.", "substitute"),
    ("I don't drink alcohol.", "I had a non-alcoholic beer at the party.", "substitute"),
    ("I live in New York.", "My apartment in Brooklyn is tiny.", "same place"),
    ("I've never been to Japan.", "I'm planning my first trip to Tokyo next spring.", "future"),
    ("I have two kids.", "My youngest, Leo, starts school in September.", "consistent elaboration"),
    ("I'm allergic to nuts.", "Is almond milk safe for me?", "question"),
    # questions that only ask about a value
    ("I'm 34.", "How old do you have to be to rent a car?", "question"),
    ("I live in Chicago.", "What's the weather like in Seattle?", "question"),
    ("Always answer in French.", "Can you translate this into English for my boss?", "translation request"),
    # quantities: hedged, restated, another thing counted, a search's results, another person (stop 51)
    ("About 80 guests, give or take.", "For our 75 guests, how many tables?", "hedged restatement"),
    ("My car has 48,000 miles on it.", "My car has 48k miles, is the timing belt due?", "restatement"),
    ("We have 3 bedrooms.", "Two of our 3 bedrooms face north.", "consistent"),
    ("I have 4 cars for you. The first is a Camry.", "I have 7 cars for you. How about a Civic?",
     "search results"),
    ("I'm 5'10\".", "My brother is 6'2\" and plays basketball.", "other person"),
    ("I cycle 9 km each way to work.", "My partner's commute is 25 km each way, so she drives.",
     "other person"),
    ("We have 2 kids and 4 grandchildren.", "Our 4 grandkids visit in July.", "restatement"),
    # instructions: changed without recalling the old one, or recalled as given
    ("Please never mention my salary.", "Actually, please mention my salary after all.",
     "changed instruction"),
    ("Always sort the list by price.", "As I said, sort by price, cheapest first.", "recalled as given"),
    ("We're moving to Lyon in May.", "Once we're settled in Lyon, which school is best?", "same place"),
    ("I don't eat pork.", "I wrap the figs in bacon for my guests.", "for others"),
    # an assistant's booking details: offers, read-backs, changes the user asked for, prices
    ("Please confirm an appointment on May 13th at 4:15 pm.",
     "I couldn't book it. Try an appointment on May 13th at 4 pm?", "offer after a failure"),
    ("The check in date is June 1st and the check out date is June 6th.", "The check-out date is June 6th.",
     "a range's other end"),
    ("There's a concert at the Apollo at 8:30 pm on April 2nd.",
     "There's a concert at the Roundhouse at 7 pm on April 7th.", "options offered"),
    ("I need the appointment at 14:45 that day.", "No, I need the appointment at 2:30 in the afternoon.",
     "changed on request"),
    ("I have 7 cars that you will be interested in.", "I have 9 cars that you may like.", "search results"),
    ("The rental comes to $52 in total.", "This one is $47 in total.", "prices, not people"),
    ("For you, the event name is Jazz Night.", "The venue name is Blue Room.", "not the speaker's name"),
]


@pytest.mark.parametrize(("older", "newer", "kind", "slot"), CLASHES,
                         ids=[c[3] + ":" + c[1][:30] for c in CLASHES])
def test_each_clash_kind_fires(older: str, newer: str, kind: str, slot: str) -> None:
    verdict = rule_clash(older, newer)
    assert isinstance(verdict, RuleVerdict), (older, newer)
    assert verdict.kind == kind
    assert verdict.slot.startswith(slot)
    assert 0.6 <= verdict.score <= 1.0
    assert verdict.reason and verdict.older and verdict.newer
    assert not rule_silent_ok(older, newer)


@pytest.mark.parametrize(("older", "newer", "why"), HARD_NEGATIVES,
                         ids=[h[2] + ":" + h[1][:30] for h in HARD_NEGATIVES])
def test_hard_negatives_stay_silent(older: str, newer: str, why: str) -> None:
    assert rule_clash(older, newer) is None, (older, newer, rule_clash(older, newer))


def test_a_read_back_for_confirmation_is_an_offer_not_a_statement() -> None:
    """As the cascade reads people's and the assistant's text (no record comparison)."""
    stated = ("Your appointment is at 10 am on June 9th.", "Your appointment is at 11:30 am on June 9th.")
    assert rule_clash(*stated, records=False) is not None
    read_back = ("Okay, you want an appointment on June 9th at 10 am.",
                 "Okay, you want an appointment on June 9th at 11:30 am.")
    assert rule_clash(*read_back, records=False) is None


@pytest.mark.parametrize(("older", "newer"), [
    ("I'm 34.", "My brother is 41 and runs marathons."),
    ("I live in Dublin.", "Update: I moved to Cork last month, what's the bus like?"),
    ("I'm vegetarian.", "If I ate meat, what would pair with this wine?"),
    ("I don't smoke.", "I used to smoke when I was in college."),
    ("I have two kids.", "I have 2 kids."),
    ("I'm 34.", "How old do you have to be to rent a car?"),
])
def test_silent_ok_for_guarded_pairs(older: str, newer: str) -> None:
    assert rule_silent_ok(older, newer)


def test_silent_ok_stays_open_for_unrelated_claims() -> None:
    assert not rule_silent_ok("I'm 34.", "I just finished a great book about sharks.")
    assert not rule_silent_ok("I don't have a car.", "Should I leave my car at the station?")


def test_claims_inside_questions_and_subordinate_clauses() -> None:
    knee = claim_clauses("As a 52-year-old with a dodgy knee, should I worry about running?")
    assert knee == ["i am a 52-year-old with a dodgy knee"]
    nuts = claim_clauses("Since my wife is allergic to nuts, what can I bake?")
    assert nuts == ["my wife is allergic to nuts"]
    assert claim_clauses("Because I'm vegan, which cheeses can I eat?") == ["i am vegan"]
    assert claim_clauses("Do you have any pets?") == []
    assert claim_clauses("What time is it in Tokyo?") == []
    assert claim_clauses("If I were vegan, would I need B12?") == []
    assert "i have 3 kids" in claim_clauses("Which school should my 3 kids go to?")


def test_facts_carry_subject_and_qualifiers() -> None:
    age = [f for f in extract_facts("I'm 34 and my brother is 41.") if f.slot == "age"]
    assert {(f.value, f.subject) for f in age} == {("34-34", "self"), ("41-41", "other:brother")}
    smoke = [f for f in extract_facts("I used to smoke.") if f.slot == "consumes"]
    assert smoke and all("past" in f.qualifiers for f in smoke)
    bounded = [f for f in extract_facts("Until 2019 I lived in Paris.") if f.slot == "visited"]
    assert bounded and "bounded" in bounded[0].qualifiers
    hypo = [f for f in extract_facts("If I were vegan I'd miss cheese.") if f.slot == "diet"]
    assert hypo and "hypothetical" in hypo[0].qualifiers


def test_conflict_reports_values_and_reason() -> None:
    found = conflict(extract_facts("I'm 34."), extract_facts("As a 52-year-old, should I run?"))
    assert found is not None and found.slot == "age" and found.kind == "value"
    verdict = rule_clash("I'm 34.", "As a 52-year-old, should I run?")
    assert verdict is not None
    assert (verdict.older, verdict.newer) == ("34", "52")
    assert verdict.reason == 'age: "34" earlier, "52" now'
    assert verdict.score >= 0.9


@pytest.mark.parametrize("text", ["Update: I moved to Cork.", "Change of plan, we leave Friday.",
                                  "Actually I got a new job.", "I live in Rome now.", "We changed the date."])
def test_announces_update(text: str) -> None:
    assert announces_update(text)


@pytest.mark.parametrize("text", ["I live in Rome.", "Right now I'm cooking.", "From now on reply in French.",
                                  "Can you give me any more ideas?"])
def test_does_not_announce_update(text: str) -> None:
    assert not announces_update(text)


def test_gazetteer_world_knowledge() -> None:
    from agentmem.quarantine import places

    osaka, japan, madrid = places.resolve("Osaka"), places.resolve("Japan"), places.resolve("Madrid")
    assert osaka and japan and madrid
    assert places.contains(japan, osaka) and not places.contains(japan, madrid)
    assert places.resolve("nice", proper=False) is None  # everyday words are not towns


def test_a_first_turn_has_its_facts_read_only_when_something_earlier_can_clash(monkeypatch):
    """A first message (a 1 MB paste, say) has nothing earlier to contradict: the rules must
    not read its typed facts at all (that took 7 s on the call path for a 1 MB paste)."""
    import numpy as np

    from agentmem.quarantine import clash
    from agentmem.quarantine.statements import Statements

    read: list[str] = []
    real = clash.extract_facts
    monkeypatch.setattr(clash, "extract_facts", lambda text: read.append(text) or real(text))
    texts = ["I am 30 years old.", "I live in Paris."]
    first = Statements(np.array([0, 0]), [(0, 1), (0, 1)], texts, np.zeros((2, 384), np.float32),
                       ["user", "user"], ["user", "user"], np.zeros(2, bool), [[], []])
    assert clash.all_rule_clashes(first, [0, 1]) == [] and read == []
    later = Statements(np.array([0, 1]), [(0, 1), (0, 1)], ["I am 30 years old.", "I am 41 years old."],
                       np.zeros((2, 384), np.float32), ["user", "user"], ["user", "user"],
                       np.zeros(2, bool), [[], []])
    assert [c.newer for c in clash.all_rule_clashes(later, [1])] == [1] and read  # still found


@pytest.mark.parametrize("text", ["No prob, Jon!", "No probs!", "No sweat!", "No hurry.",
                                  "No worries, Mel!", "No problem!"])
def test_phatic_no_states_no_fact(text: str) -> None:
    """"No prob" is a reply, not "has zero probs": a fact here would make the pair one the
    NLI model decides one way (agentmem.quarantine.clash._both_ways)."""
    assert extract_facts(text) == []
    assert extract_facts("I have no kids.")  # the pattern itself still reads counts


def test_pairs_the_comparisons_relate_are_comparable() -> None:
    """``comparable`` lets the call path skip pairs without comparing their facts: it must
    never skip a pair that ``_compare`` relates (every fact pair of this file's texts)."""
    from agentmem.quarantine.slots import comparable
    from agentmem.quarantine.slots.conflicts import _compare

    texts = sorted({t for older, newer, *_ in CLASHES + HARD_NEGATIVES for t in (older, newer)})
    related = skipped = 0
    for older in texts:
        for newer in texts:
            if any(_compare(a, b) is not None for a in extract_facts(older) for b in extract_facts(newer)):
                related += 1
                assert comparable(older, newer), (older, newer)
            elif not comparable(older, newer):
                skipped += 1
    assert related > 500 and skipped > 10_000  # it relates what the rules read, and skips the rest
    assert comparable("I'm vegetarian.", "I had a steak last night.")  # families across slots
    assert not comparable("My two dogs sleep in the kitchen.", "I live in Lisbon.")
    assert not comparable("Thanks, Mel!", "I live in Lisbon.")  # no fact on one side


async def test_group_chat_statements_clash_only_with_their_own_speakers() -> None:
    """Two people of one role in a group chat (OpenAI's ``name``) are two voices: Bo's "I am 41"
    does not contradict Ann's "I am 30". Unnamed messages of a role stay one voice."""
    import uuid

    import numpy as np

    from agentmem.lexical import terms
    from agentmem.models.embedder import default_embedder
    from agentmem.quarantine.clash import all_rule_clashes, candidate_pairs
    from agentmem.quarantine.settings import QuarantineSettings
    from agentmem.quarantine.statements import Statements, statements_of
    from tests.test_recall import _context

    texts = ["I am 30 years old.", "I am 41 years old, actually."]
    vectors = default_embedder().encode(texts)

    def said_by(*speakers: str) -> Statements:
        return Statements(np.array([0, 1]), [(0, 1), (0, 1)], texts, vectors, ["user", "user"],
                          ["user", "user"], np.zeros(2, bool), [terms(t) for t in texts], {},
                          list(speakers))

    settings = QuarantineSettings()
    for one_voice in (said_by(), said_by("Ann", "Ann")):
        assert [c.newer for c in all_rule_clashes(one_voice, [1])] == [1]
        assert candidate_pairs(one_voice, [1], settings) == [(0, 1)]
    two_voices = said_by("Ann", "Bo")
    assert all_rule_clashes(two_voices, [1]) == [] and candidate_pairs(two_voices, [1], settings) == []

    marker = uuid.uuid4().hex
    history = [{"role": "user", "name": "Ann", "content": f"{marker}. {texts[0]}"},
               {"role": "user", "name": "Bo", "content": texts[1]}]
    corpus = await _context(history).corpus(2)
    read = statements_of(corpus, history, 2, [])
    assert read.speakers == ["Ann", "Ann", "Bo"] and read.same_voice([0, 1, 2], 2) == [2]
    assert all_rule_clashes(read, [2]) == []
