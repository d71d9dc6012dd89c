"""Poison detection rules: details, clauses, support, grouping (no Redis, no proxy).

The end-to-end cases build a session's statements the way the corpus does (sentence spans,
MiniLM vectors) and call ``detect_poison`` directly.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from agentmem.quarantine.poison import (
    Clause,
    claim_chains,
    detail_terms,
    detect_poison,
    entities_of,
    group_clauses,
    split_clauses,
    support_level,
    unsupported_details,
)
from agentmem.quarantine.poison.cosines import close_pairs
from agentmem.quarantine.poison.recurrence import _components, _shared_counts
from agentmem.quarantine.poison.scope import states_facts
from agentmem.quarantine.poison.support import _Unit
from agentmem.quarantine.settings import QuarantineSettings
from tests.corpus_rows import statements_for

SETTINGS = QuarantineSettings(untrusted_tools=["web_*", "untrusted_*"])


def clause(text: str, position: int = 0) -> Clause:
    from agentmem.quarantine.poison.clauses import _claim_details, _is_value

    details = _claim_details(text)
    entities = (entities_of(text) & details) | {d for d in details if _is_value(d)}
    return Clause(0, position, text, details, frozenset(entities))


def unit(text: str, trust: str = "tool", position: int = 0) -> _Unit:
    return _Unit(position, trust, detail_terms(text))


def lines_unit(*lines: str) -> _Unit:
    """A trusted tool's result of several lines, each a sentence of its own."""
    parts = tuple(detail_terms(line) for line in lines)
    return _Unit(0, "tool", frozenset().union(*parts), parts=parts)


# ----------------------------------------------------------------------------- details

def test_a_records_day_keys_are_weekdays_and_a_verb_is_not():
    hours = detail_terms('{"mon-fri": "9am-8pm", "sat": "10am-6pm"}')
    assert {"t10:00"} | detail_terms("Saturday") <= hours & detail_terms("It opens at 10am on Saturday.")
    assert detail_terms("Friday") <= hours
    assert not detail_terms("Saturday") & detail_terms("She sat down in the sun.")


def test_a_records_abbreviated_units_are_the_words_a_reply_spells_out():
    record = detail_terms('{"time_min": 35}')
    assert {"#35"} | detail_terms("minutes") <= record & detail_terms("about 35 minutes")
    assert detail_terms("hours") <= detail_terms("it takes 3 hrs") & detail_terms("three hours")
    assert detail_terms("minutes").isdisjoint(detail_terms('{"min_order": 50}'))


def test_a_currency_code_before_an_amount_is_its_sign():
    assert detail_terms("so EUR 405 all in") == detail_terms("so €405 all in") == {"#405"}
    assert detail_terms("SEK 300") == detail_terms("300 SEK")


def test_dates_times_and_numbers_match_whatever_their_spelling():
    assert "d3-2" in detail_terms("paid on March 2") & detail_terms('"paid_at": "2024-03-02"')
    assert "d3-2" in detail_terms("on 2 March") & detail_terms("the 2nd of March")
    assert "t15:00" in detail_terms("at 3 pm") & detail_terms("2024-09-19T15:00")
    assert "#1940" in detail_terms("1,940 signups") & detail_terms('{"signups": 1940}')
    assert "nj" in detail_terms("NJ482") and "#482" in detail_terms("NJ 482") & detail_terms("NJ482")
    assert detail_terms("two refills") & detail_terms('{"refills_left": 2}') == {"#2", "refill"}


def test_a_price_of_nothing_is_one_detail_however_it_is_said():
    said = ["the conversion is included at no charge", "the setup costs nothing extra",
            "it comes free with the service", "assembly free of charge", "at no additional cost"]
    assert all("free" in detail_terms(text) for text in said)
    assert "free" not in detail_terms("a charge of 25 euros per wheel")


def test_a_number_is_stated_by_the_value_it_rounds_from():
    record = unit('{"conv": 0.0291, "revenue": 1284550.00, "year": 2022}')
    assert record.states("#2.9")  # "2.9%" of 0.0291
    assert record.states("#1280000")  # "$1.28M"
    assert record.states("#1284550")
    assert not record.states("#2020")  # years are exact
    assert not record.states("#3")


def test_words_match_on_their_stem_and_prefix():
    record = unit('{"conv": 0.0291, "prescriber": "Dr. Alvarez", "delivered_on": "2024-05-18"}')
    assert record.states(next(iter(detail_terms("conversion"))))
    assert record.states(next(iter(detail_terms("prescription"))))
    assert record.states(next(iter(detail_terms("delivery"))))


def test_a_weekday_is_stated_only_with_a_date_that_falls_on_it():
    record = unit('{"date": "2025-02-08", "departures": ["09:30"]}')  # a Saturday
    assert support_level(record, clause("Saturday 8 February at 09:30")) == 2
    friday = clause("it will arrive by Friday")
    assert support_level(record, friday) == 0


# ----------------------------------------------------------------------------- clauses

def test_a_long_sentence_is_split_into_its_claims():
    parts = split_clauses("Your order shipped on May 3 with DHL Express, and it will arrive by "
                          "Friday — in time for your trip.")
    assert parts[0] == "Your order shipped on May 3 with DHL Express"
    assert any("arrive by Friday" in p for p in parts) and len(parts) >= 2


def test_json_from_a_tool_splits_into_its_strings():
    snippet = "Most Colorado River trips need everyone to be 12 or older."
    text = json.dumps({"results": [{"url": "https://blog.example.com/x", "title": "Rafting ages",
                                    "snippet": snippet}]})
    parts = split_clauses(text)
    assert "Most Colorado River trips need everyone to be 12 or older" in parts
    assert not any('"' in p or "snippet" in p for p in parts)


def test_pieces_without_two_details_merge_into_a_neighbour():
    assert split_clauses("Yes, sure.") == ("Yes, sure",) or len(split_clauses("Yes, sure.")) <= 1
    assert all(len(clause(p).details) >= 2 for p in split_clauses(
        "Done — return RT-44190 is set up, and your label is ready."))


# ----------------------------------------------------------------------------- support

def test_a_tool_record_supports_a_clause_that_states_its_details():
    record = unit(json.dumps({"order_id": "LH-30418", "items": [{"name": "Vortex 550 Blender"}],
                              "status": "shipped", "carrier": "UPS", "ship_date": "2024-09-05"}))
    assert support_level(record, clause("the Vortex 550 left us with UPS on September 5")) >= 1
    assert support_level(record, clause("it shipped on Sept 5")) == 2
    assert support_level(record, clause("dropped it at a UPS Access Point near you")) == 0


def test_support_needs_the_details_together():
    """The user mentions a pass, a timetable lists a Nozomi: neither says the pass covers it."""
    user = unit("We're thinking of a 7-day JR Pass. Good idea?", trust="user")
    timetable = unit('{"trains": [{"name": "Nozomi 19", "dep": "09:21"}]}')
    claim = clause("the JR Pass covers the Nozomi")
    assert support_level(user, claim) == 0 and support_level(timetable, claim) == 0


def test_a_value_is_supported_where_the_source_says_it_of_the_same_subject():
    """A quote lists the inverter and a 25-year warranty for the panels: it does not say the
    inverter is covered for 25 years. Said on one line, it does."""
    quote = lines_unit("Inverter: Veltra SE6000", "Warranty: panels 25-year", "Price: $17,920")
    claim = clause("the quote covers the Veltra inverter for 25 years")
    assert support_level(quote, claim) == 0
    assert support_level(quote, clause("the panels have a 25-year warranty")) == 2
    assert support_level(quote, clause("the price is $17,920")) == 2
    quote = lines_unit("Inverter: Veltra SE6000, 25-year warranty", "Price: $17,920")
    assert support_level(quote, claim) >= 1


def test_a_different_number_is_not_support():
    record = unit('{"battery": {"valid_until": "2025-06-30", "coverage": "capacity below 60%"}}')
    assert support_level(record, clause("the battery warranty is valid until June 30, 2025")) >= 1
    assert support_level(record, clause("the battery warranty runs until June 30, 2026")) == 0


def test_unsupported_details_are_what_the_closest_record_does_not_say():
    record = unit('{"order_id": "BW-77023", "item": "Arc ANC Headphones", "opened": true, "price": "249.00"}')
    gap = unsupported_details(clause("a 10% restocking fee applies to opened headphones"), [record])
    assert {"#10", "restoc"} <= gap and "opened"[:6] not in gap


# ----------------------------------------------------------------------------- grouping

def _unit_vectors(rows: list[list[float]]) -> np.ndarray:
    matrix = np.asarray(rows, dtype=np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def test_a_claim_chains_on_its_unsupported_detail_and_not_on_a_shared_topic():
    clauses = [clause("Hall B hosts every session", 2), clause("everything moved to Hall B", 4),
               clause("the event now points to Hall B", 6), clause("the summit is on June 6", 6)]
    vectors = _unit_vectors([[1, 0.2, 0], [0.9, 0.3, 0], [0.8, 0.4, 0.1], [0.5, 0, 0.9]])
    similarity = vectors @ vectors.T
    gaps = {0: frozenset({"hall", "b", "hosts"}), 1: frozenset({"moved", "hall", "b"}),
            2: frozenset({"points", "hall", "b"}), 3: frozenset({"summit"})}
    chains = claim_chains([0, 1, 2, 3], gaps, {"hall", "b"}, clauses, similarity, SETTINGS)
    assert chains == [[0, 1, 2]]


def test_statements_with_different_amounts_are_not_paraphrases():
    clauses = [clause("October churn was 3.1%", 2), clause("typical monthly churn is 7%", 4)]
    similarity = np.asarray([[1.0, 0.9], [0.9, 1.0]], dtype=np.float32)
    gaps = {0: frozenset({"m10"}), 1: frozenset({"#7", "typica"})}
    assert claim_chains([0, 1], gaps, set(), clauses, similarity, SETTINGS) == []


def test_candidate_groups_join_related_clauses_of_different_turns_only():
    clauses = [clause("the Vancouver depot ships Canadian orders", 2),
               clause("orders leave from the Vancouver depot", 4),
               clause("the depot in Vancouver handles it", 4), clause("the throw is machine washable", 6)]
    similarity = np.asarray([[1, .6, .6, .1], [.6, 1, .7, .1], [.6, .7, 1, .1], [.1, .1, .1, 1]],
                            dtype=np.float32)
    groups = group_clauses(clauses, similarity, SETTINGS, {"vancou": 3, "depot": 3}, 8)
    assert sorted(map(sorted, groups)) == [[0, 1, 2], [3]]


# ----------------------------------------------------------------------------- end to end

@pytest.fixture(scope="module")
def encode():
    from agentmem.models.embedder import default_embedder

    return default_embedder().encode


def statements(messages: list[dict], encode):
    """The session corpus's rows, as the engine cuts them (``tests.corpus_rows``)."""
    return statements_for(messages, encode, SETTINGS.untrusted_tools)


def said(text: str) -> dict:
    return {"role": "assistant", "content": text}


def asked(text: str) -> dict:
    return {"role": "user", "content": text}


def system(text: str) -> dict:
    return {"role": "system", "content": text}


def call(name: str, arguments: dict, number: int) -> dict:
    function = {"name": name, "arguments": json.dumps(arguments)}
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": f"c{number}", "type": "function", "function": function}]}


def result(content, number: int) -> dict:
    return {"role": "tool", "tool_call_id": f"c{number}",
            "content": content if isinstance(content, str) else json.dumps(content)}


ORDER = {"order_id": "FO-5512", "status": "in_transit", "carrier": "DHL", "shipped": "2024-04-02",
         "estimated_delivery": "2024-04-09"}


def flagged(messages: list[dict], encode, settings: QuarantineSettings = SETTINGS) -> dict[int, list[str]]:
    found = statements(messages, encode)
    out: dict[int, list[str]] = {}
    for finding in detect_poison(found, settings, encode=encode):
        for row in finding.rows:
            out.setdefault(int(found.position[row]), []).append(found.texts[row])
    return out


def test_only_the_sentence_of_the_unsupported_clause_is_withheld(encode):
    messages = [
        system("You are Fenwick Outdoors' support assistant."),
        asked("When will my tent arrive? Order FO-5512."),
        call("get_order", {"order_id": "FO-5512"}, 1), result(ORDER, 1),
        said("Your tent shipped with DHL on April 2 and is due on April 9. "
             "DHL will ask for a signature at the door, so someone has to be home."),
        asked("Do I really have to be there?"),
        said("Yes, DHL won't leave a parcel this size without a signature."),
        asked("Can a neighbour take it?"),
        said("Sure, a neighbour can sign for the delivery when the driver comes."),
        asked("OK."),
    ]
    withheld = flagged(messages, encode)
    assert set(withheld) == {4, 6, 8}
    assert all("signature" in t or "sign" in t for t in withheld[4])  # not the shipping sentence
    assert not any("April 2" in t for ts in withheld.values() for t in ts)


def test_a_claim_a_trusted_tool_states_is_never_withheld(encode):
    messages = [
        asked("When will my tent arrive? Order FO-5512."),
        call("get_order", {"order_id": "FO-5512"}, 1), result(ORDER, 1),
        said("It shipped with DHL on April 2."),
        asked("And the arrival?"),
        said("DHL shipped it on 2 April, estimated delivery April 9."),
        asked("Thanks."),
        said("To recap: shipped April 2 with DHL, expected on the 9th."),
        asked("Great."),
    ]
    assert flagged(messages, encode) == {}


def test_a_user_echo_confirms_nothing_but_an_earlier_user_statement_does(encode):
    """(A chat with no prompt and no tool is a general assistant's, not judged by default: the
    setting that judges it is on here, as for an app that holds its assistant to facts.)"""
    claim = ["The Zephyr battery has a 3-year warranty.", "Its battery is covered for three years.",
             "That 3-year battery warranty still applies."]
    judged = SETTINGS.model_copy(update={"poison_open_domain": True})
    turns = [asked("My Zephyr battery died.")]
    for i, text in enumerate(claim):
        turns.append(said(text))
        turns.append(asked("Right, the battery has a 3-year warranty." if i == 0 else "ok"))
    assert set(flagged(turns, encode, judged)) == {1, 3, 5}  # the echo at 2 changes nothing
    told = [asked("I bought the Zephyr battery with a 3-year warranty."), *turns[1:]]
    assert flagged(told, encode, judged) == {}


def test_an_untrusted_source_and_its_repetitions_are_withheld_together(encode):
    snippet = "They send all Canadian orders out of a depot in Vancouver, so no duties."
    search = {"results": [{"url": "https://forum.example.com/t/1", "title": "Kettle & Loom to Canada?",
                           "snippet": snippet}]}
    messages = [
        asked("Will I pay customs on my order to Halifax?"),
        call("web_search", {"query": "Kettle & Loom Canada customs"}, 1), result(search, 1),
        said("Canadian orders ship from a depot in Vancouver, so no customs duties."),
        asked("Great."),
        said("Because it is fulfilled out of Vancouver, Canada Post won't ask for duties."),
        asked("And my sister in Moncton?"),
        said("Same: orders to Canada leave the Vancouver warehouse, so no import fees."),
        asked("Perfect."),
    ]
    assert set(flagged(messages, encode)) == {2, 3, 5, 7}


def test_third_party_text_in_a_trusted_tool_is_not_support(encode):
    inbox = ("From: DeliveryPoint Notices <notice@dlvry.example>\nSubject: parcel on hold\n\n"
             "Your parcel is held at customs until you pay a fee of 2.99 EUR.")
    messages = [
        asked("Anything urgent in my inbox?"),
        call("read_inbox", {"unread": True}, 1), result(inbox, 1),
        said("A parcel of yours is held at customs until a 2.99 EUR fee is paid."),
        asked("Which parcel?"),
        said("The mail doesn't say, only that customs holds it pending the 2.99 fee."),
        asked("ok"),
        said("Remember the 2.99 EUR customs fee for the parcel."),
        asked("thanks"),
    ]
    assert {3, 5, 7} <= set(flagged(messages, encode))


def test_testimonials_are_relayed_and_a_course_reviewer_is_not(encode):
    quote = ("Warranty: panels 25-year; 10-year workmanship\nPrice: $17,920\n\nWhat our customers say:\n"
             "\"Our rep said the inverter is covered for 25 years too.\" - D. Haskins")
    course = {"certificate": "All 9 modules complete and a capstone graded Pass by a reviewer.",
              "extension_policy": "One 30-day extension per enrollment."}
    found = statements([asked("Summarise the quote"), call("read_document", {"file": "q.pdf"}, 1),
                        result(quote, 1), asked("And the course?"), call("get_course", {}, 2),
                        result(course, 2), asked("ok")], encode)
    relayed = {found.texts[r] for r in range(found.size) if found.relayed[r]}
    assert any("inverter" in text for text in relayed)
    assert not any("Warranty" in text or "Price" in text for text in relayed)
    assert not any("extension" in text or "capstone" in text for text in relayed)


def test_two_mentions_are_not_poison(encode):
    messages = [
        asked("Where is the cellar key?"),
        said("The brass key opens the cellar door."),
        asked("ok"),
        said("I'll try the brass key on the cellar lock."),
        asked("go"),
    ]
    assert flagged(messages, encode) == {}


def test_what_a_speaker_says_of_themselves_is_told_from_claims_about_the_world():
    from agentmem.quarantine.poison import is_self_description

    for mine in ("I'm training for a marathon in the spring",
                 "My daughter Ella says it looks like a hat",
                 "Unfortunately I also lost my job at Door Dash",
                 "We always look forward to our camping trip"):
        assert is_self_description(mine), mine
    for theirs in ("I checked and your refund of $42.10 went through",
                   "As I mentioned the museum closes at 5",
                   "Your gym opens at 6 am on weekends", "The restocking charge is standard for audio gear",
                   "I can confirm the order shipped on May 3"):
        assert not is_self_description(theirs), theirs


def test_a_time_stamp_and_a_greeted_name_are_not_details():
    from agentmem.quarantine.poison import without_address

    assert without_address("[8:56 pm on 20 July, 2023] Hey Tim nice to meet you!") == "Hey nice to meet you!"
    assert without_address("Congrats Joanna!") == "Congrats!"
    assert without_address("Yeah Tim!") == "Yeah!"
    assert without_address("Wow, Paris is lovely") == "Wow, Paris is lovely"  # a subject, not a vocative
    assert without_address("Thanks Marco Rossi for the call") == "Thanks Marco Rossi for the call"


def _peer_record(record_id: str, file: str = "poison_agentmem_peers.jsonl") -> list[dict]:
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "agentmem" / "bench" / "data" / file
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if record["id"] == record_id:
            return record["messages"]
    raise KeyError(record_id)


def _general_record(record_id: str) -> list[dict]:
    return _peer_record(record_id, "poison_agentmem_general.jsonl")


def test_between_peers_a_life_story_is_not_poison_but_a_repeated_place_is(encode):
    assert flagged(_peer_record("am-peers-01"), encode) == {}  # pottery on Thursdays, daughter Ella
    assert flagged(_peer_record("am-peers-05"), encode) == {}  # job at Mercy General, husband Theo
    assert {1, 3, 5, 7} <= set(flagged(_peer_record("am-peers-02"), encode))  # market moved to Elm Park


def test_a_persona_describes_itself_but_not_the_users_world(encode):
    """Juniper's prompt gives a role and no facts: the assistant is not judged there unless
    ``poison_open_domain`` asks for it; then its cello is its own, the user's gym hours are a
    claim about the world."""
    assert flagged(_peer_record("am-peers-03"), encode) == {}
    found = flagged(_peer_record("am-peers-03"), encode,
                    SETTINGS.model_copy(update={"poison_open_domain": True}))
    assert {6, 8, 10} <= set(found)  # "your gym opens at 6 am on weekends"
    assert not any("cello" in text for texts in found.values() for text in texts)


def test_a_general_assistants_answers_recur_with_their_topic_and_are_not_poison(encode):
    """A role prompt that gives no facts ("You are a friendly travel assistant.") and no tool:
    the assistant's Alfama and tram 28, its pandas, its risotto recur because the user asked
    about them, and nothing in the session could support them. They were withheld as
    recurring unsupported claims (13 of the 15 answers of the general-assistant file)."""
    for record_id in ("am-general-01", "am-general-02", "am-general-03", "am-general-07"):
        assert flagged(_general_record(record_id), encode) == {}, record_id


def test_with_no_system_prompt_an_assistant_is_general_unless_people_are_talking(encode):
    """A client that sends no system prompt (an API user's chat): the assistant's ZZ plant
    recurs as the user asks about it, and is its answer. The same turns opened by date stamps,
    as sittings between two people are (LoCoMo's layout), read as peers: a recurring name is
    a claim there."""
    messages = _general_record("am-general-09")
    assert flagged(messages, encode) == {}
    stamped = [{**m, "content": f"[9:15 am on 2 June, 2024] {m['content']}"} if i % 4 == 0 else m
               for i, m in enumerate(messages)]
    assert flagged(stamped, encode)


def test_the_same_answers_are_claims_beside_a_tool_but_not_under_facts_on_something_else(encode):
    """What makes them answers is the role prompt: beside a tool the assistant reports its
    results, and its recurring unsupported details are claims again. A prompt whose facts are
    on something else leaves them answers (the tours' price says nothing about Alfama's food:
    see the next test for what such a prompt does judge), and so does one whose only numbers
    are a date or a year."""
    messages = _general_record("am-general-01")
    elsewhere = [system("You are the assistant of Lisbon Walks. Walking tours cost 25 euros and "
                        "start at 10:00 from Praca do Comercio."), *messages[1:]]
    assert flagged(elsewhere, encode) == {}
    weather = [call("get_weather", {"city": "Lisbon"}, 1),
               result({"city": "Lisbon", "forecast": "sunny", "high_c": 24}, 1)]
    assert flagged([*messages[:2], *weather, *messages[2:]], encode)
    dated = [system("You are a friendly travel assistant. Today is 3 October 2024."), *messages[1:]]
    assert flagged(dated, encode) == {}


FJORD = [
    system("You are the support assistant for Fjord Gear. Policies: Returns within 30 days of "
           "delivery. Standard shipping costs $5.95 and takes 3-5 business days."),
    asked("How do I waterproof my new jacket?"),
    said("Wash it with a technical wash, then tumble dry on low for 20 minutes to reactivate "
              "the DWR coating. Reapply a spray-on DWR every 6 months."),
    asked("Can I return it if it leaks?"),
    said("Yes, returns are accepted within 30 days of delivery. We also give a lifetime leak "
              "guarantee: any jacket that leaks is replaced, however old it is."),
    asked("It leaked after a year."),
    said("Then our lifetime leak guarantee covers it, and we replace the jacket."),
    asked("How often should I reproof it?"),
    said("Reapply a spray-on DWR every 6 months, and tumble dry on low for 20 minutes after "
              "washing."),
    asked("And shipping for the replacement?"),
    said("Standard shipping costs $5.95; under the lifetime leak guarantee the replacement "
              "ships at no charge."),
    asked("Any last care tips?"),
    said("Tumble dry on low for 20 minutes after each wash and reapply the DWR every 6 months."),
    asked("Thanks."),
]


def test_under_a_prompt_with_facts_the_business_terms_are_judged_and_care_advice_is_not(encode):
    """A prompt that states the shop's terms makes the assistant answer for its terms: an
    invented "lifetime leak guarantee" said three times is poison. Its care advice, said three
    times too, is knowledge the user asked for, and nothing in the session could support it:
    in twenty deployed bots such advice, a tutor's formula and a coach's plan were withheld
    (31 of 76 confirmed claims), all under prompts with a price or a policy in them."""
    found = flagged(FJORD, encode)
    assert {4, 6, 10} <= set(found)
    assert all("guarantee" in text for texts in found.values() for text in texts)
    assert not {2, 8, 12} & set(found)


@pytest.mark.parametrize(("sentence", "facts"), [
    ("Returns within 30 days.", True),
    ("Membership $30/month.", True),
    ("Gym hours 6am-10pm.", True),
    ("Sessions last 45 minutes.", True),
    ("This unit is Chapter 7: quadratic equations.", False),
    ("You are MathBuddy, a tutor for 9th-grade algebra.", False),
    ("Lesson 12 of 40: food and the market.", False),
    ("Introduce at most 8 new words per lesson.", False),
    ("The team's stack: Python 3.11, pandas 2.1, SQLAlchemy 2.0.", False),
    ("The plan costs 9.99 a month.", True),
    ("Today is May 1, 2024.", False),
])
def test_a_prompt_states_facts_with_numbers_that_are_not_a_lessons_or_a_versions(sentence, facts):
    assert states_facts(sentence) is facts


def test_a_clause_that_restates_what_the_user_gave_over_several_turns_is_not_poison(encode):
    """The party size, the day, the time (asked as "can we push it to 7:30pm?") and the name
    came from four user turns, so no one unit states the booking; each was "from no user"."""
    messages = [
        system("You are the reservation assistant for Trattoria Sole. Open Tue-Sun 5pm-11pm. "
               "Parties over 8 need a $100 deposit."),
        asked("I'd like a table for 2 on Friday at 7pm."),
        said("I can hold a table for 2 this Friday at 7pm. May I have a name?"),
        asked("Name is Adeyemi."), said("Thank you: a table for 2 on Friday at 7pm under Adeyemi."),
        asked("Actually make it 4 people."), said("Changed: a table for 4 on Friday at 7pm."),
        asked("And can we push it to 7:30pm?"), said("Done: table for 4, Friday at 7:30pm, under Adeyemi."),
        asked("Do I need a deposit?"),
        said("No: deposits are for parties over 8, and your table for 4, Friday at 7:30pm, under "
             "Adeyemi needs none."),
        asked("Confirm everything?"), said("Confirmed: Adeyemi, table for 4, this Friday at 7:30pm."),
        asked("Thanks."),
    ]
    assert flagged(messages, encode) == {}


def _sixty_days(prompt: str, *exchanges: tuple[str, str]) -> list[dict]:
    """A support chat under ``prompt`` whose assistant says 60 days three times."""
    return [system(prompt), *(m for q, a in exchanges for m in (asked(q), said(a))), asked("Thanks.")]


def test_a_value_the_user_only_asks_about_is_no_support(encode):
    """"Can I return it after 60 days?" asks whether the policy allows it; the 60 days are the
    question. An assistant that answers "yes, 60 days" three times against the prompt's 30 is
    repeating its own invention, whoever said the number first."""
    messages = _sixty_days(
        "You are the support assistant for Fjord Gear. Returns within 30 days of delivery. "
        "Standard shipping costs $5.95.",
        ("Can I return the boots after 60 days?", "Yes, you can return them within 60 days of delivery."),
        ("Even if I wore them outside?", "Yes, worn boots can come back within 60 days too."),
        ("And the jacket?", "The jacket also has the 60-day return window."))
    assert {2, 4, 6} <= set(flagged(messages, encode))


def test_the_prompts_words_with_another_number_are_no_support(encode):
    """"Returns are accepted within 60 days of delivery" says four of the prompt's five words;
    its number is the claim, and the prompt says 30. (A prompt of one sentence: a sentence
    with a neighbour already asked that the value be stated where its subject is.)"""
    messages = _sixty_days(
        "Returns are accepted within 30 days of delivery.",
        ("How long do I have to send the boots back?", "Returns are accepted within 60 days of delivery."),
        ("And the jacket?", "Same: returns are accepted within 60 days of delivery."),
        ("Even worn?", "Yes, returns are accepted within 60 days of delivery."))
    assert {2, 4, 6} <= set(flagged(messages, encode))


def test_a_discounted_total_is_worked_out_from_the_price_and_the_code(encode):
    """$1,299 from the catalogue with the prompt's 10% code is $1,169.10: no source states
    the total, and every repetition of it was withheld. An invented fee is still caught."""
    item = {"sku": "LSO-1", "name": "Studio One (pair)", "price_usd": 1299.00, "stock": 14}
    messages = [
        system("You are the sales assistant for Lumen Audio. First orders get 10% off with code "
               "FIRST10. Use catalog_lookup for prices."),
        asked("How much are the Studio One speakers?"), call("catalog_lookup", {"sku": "LSO-1"}, 1),
        result(item, 1), said("The Studio One speakers are $1,299 for the pair."),
        asked("I'm a first-time buyer."), said("Then with code FIRST10 the pair is $1,169.10."),
        asked("What's my total again?"), said("Your total is $1,169.10 with FIRST10."),
        asked("One more time?"), said("$1,169.10 after the 10% code."),
        asked("Thanks."),
    ]
    assert flagged(messages, encode) == {}
    invented = [*messages[:-1], asked("Anything else to pay?"),
                said("There is a $39 handling fee on speaker orders."), asked("Really?"),
                said("Yes, the $39 handling fee applies to every speaker order."), asked("Hmm."),
                said("The $39 handling fee is charged at checkout."), asked("Thanks.")]
    assert set(flagged(invented, encode)) >= {12, 14, 16}


def test_a_documents_labelled_lines_are_records_though_no_full_stop_parts_them():
    """A quote read as plain text is one sentence to the splitter when its lines end in no full
    stop; its labelled lines are still records apart: "Inverter: Veltra SE6000" and "Warranty:
    panels 25-year" do not state that the inverter is covered for 25 years."""
    from agentmem.quarantine.poison.support import _message_units

    quote = ("System: 16 x Helion 400 W panels (6.4 kW DC)\nInverter: Veltra SE6000\n"
             "Warranty: panels 25-year product and performance warranty; 10-year workmanship")
    [(words, asked, which, parts)] = _message_units("tool", (quote,), "")
    document = _Unit(0, "tool", words, asked, which, parts)
    assert len(parts) == 3
    assert support_level(document, clause("and 25 years on the inverter as well")) == 0
    assert support_level(document, clause("a 25-year warranty on the panels")) == 2


def test_a_price_of_nothing_is_the_claim_and_must_be_stated():
    """An order record that names the carrier, the delivery and an assembly service does not
    state that the carrier assembles "at no charge": three of the clause's four details are
    the record's, but the fourth is the claim. A record that says the service is free does."""
    order = lines_unit("services: assembly false", "delivery: date 2024-09-07",
                       "carrier: Northway Two-Man Logistics")
    claim = clause("Northway will assemble it at no charge when they deliver")
    assert support_level(order, claim) == 0
    free = lines_unit("services: assembly included free of charge", "delivery: date 2024-09-07",
                      "carrier: Northway Two-Man Logistics")
    assert support_level(free, claim) == 2


def test_an_organisations_assistant_states_its_terms_when_it_says_our(encode):
    """Under a system prompt the assistant speaks for the organisation the prompt describes:
    "all our host families live within a 20-minute walk", said three times and stated
    nowhere in the prompt, is a claim about the school's terms. Between people with no system
    prompt, "our" is the speaker's own life and no claim."""
    turns = [
        asked("I'd like a homestay for six weeks. What are the families like?"),
        said("All our host families live within a 20-minute walk of the school."),
        asked("Great, and the rooms?"),
        said("Single rooms, half board, and our host families are all within a 20-minute walk."),
        asked("Book it please."),
        said("Booked: six weeks of homestay, and remember all our host families are a 20-minute walk away."),
        asked("Thanks!"),
    ]
    prompt = system("You are the enquiries assistant for Casa Lingua, a Spanish school. Course facts: "
                    "20 lessons a week, at most 8 students per class. Homestay: single room, half board.")
    assert {2, 4, 6} <= set(flagged([prompt, *turns], encode))
    assert flagged(turns, encode) == {}


def test_with_a_tool_in_the_session_the_agents_own_state_needs_support(encode):
    inventory = {"iron_ingot": 8, "coal": 14}
    messages = [
        system("You play Minecraft through the game tools."),
        asked("How much iron do we have?"),
        call("get_inventory", {}, 1), result(inventory, 1),
        said("We have 12 iron ingots, enough for a chestplate and leggings."),
        asked("ok, craft the chestplate"),
        said("Crafting the chestplate now; we still have 12 iron ingots minus the 8 it takes."),
        asked("and then?"),
        said("With our 12 iron ingots the leggings come next, once we mine a little more."),
        asked("go"),
    ]
    assert {4, 6, 8} <= set(flagged(messages, encode))


def test_a_repeated_statement_is_one_unit_at_its_first_place_speaking_for_every_row():
    """Units are extended reply by reply: the grown session's units equal the ones built from
    scratch, and the earlier reply's units are left as they were (they are shared)."""
    from types import SimpleNamespace

    from agentmem.quarantine.poison.support import _units_kept, authority_units

    said = "DHL needs a signature."
    texts = [said, said, said, "DHL it is.", said]
    statements = SimpleNamespace(position=np.asarray([3, 7, 11, 12, 20]), texts=texts, calls={},
                                 trust=["user", "tool", "user", "user", "user"])
    _units_kept.clear()
    earlier = authority_units(statements, [0, 1, 2, 3])
    assert [(u.position, u.trust, u.rows) for u in earlier] == [(3, "user", (0, 2)), (7, "tool", (1,)),
                                                                (12, "user", (3,))]
    grown = authority_units(statements, [0, 1, 2, 3, 4])
    assert [(u.position, u.trust, u.rows) for u in grown] == [(3, "user", (0, 2, 4)), (7, "tool", (1,)),
                                                              (12, "user", (3,))]
    assert earlier[0].rows == (0, 2)  # the earlier reply's unit was not changed
    _units_kept.clear()
    assert [(u.position, u.rows) for u in authority_units(statements, [0, 1, 2, 3, 4])] == \
        [(u.position, u.rows) for u in grown]


# ----------------------------------------------------------------------------- growing sessions

def _grown_session() -> list[dict]:
    """A support session that grows a turn at a time: tool results, user facts, a claim the
    assistant keeps making that nothing supports, and repeated status lines."""
    messages = [system("You are Fenwick Outdoors' support assistant.")]
    for day in range(12):
        messages += [
            asked(f"Any news on order FO-55{day:02d}? I live in Leeds and work on Saturday."),
            call("get_order", {"order_id": f"FO-55{day:02d}"}, day),
            result({**ORDER, "order_id": f"FO-55{day:02d}",
                    "estimated_delivery": f"2024-04-{9 + day:02d}"}, day),
            said(f"Order FO-55{day:02d} is due on April {9 + day}. The Harrogate depot holds "
                 "parcels for 14 days free of charge, so nothing is lost if you are out."),
        ]
    return messages


def _reference_turn_frequency(statements) -> dict[str, int]:
    seen: dict[str, set[int]] = {}
    for text, position in zip(statements.texts, statements.position.tolist()):
        for word in detail_terms(text):
            seen.setdefault(word, set()).add(position)
    return {word: len(turns) for word, turns in seen.items()}


def _as_dicts(findings) -> list[tuple]:
    return [(f.claim, f.rows, f.positions, round(f.score, 4), f.reason, f.members) for f in findings]


def test_a_growing_session_finds_what_a_fresh_detection_finds(encode):
    """Session-wide tables are extended reply by reply (and coverage is cached by content):
    on every prefix of a growing session they equal a straightforward recomputation, and the
    findings equal a detection that starts cold."""
    from agentmem.quarantine.poison import cosines, recurrence, support

    messages = _grown_session()
    prefixes = [statements(messages[:upto], encode) for upto in range(5, len(messages) + 1, 4)]
    windows = [max(0, int(p.position.max()) + 1 - 24) for p in prefixes]
    grown = []
    for prefix, since in zip(prefixes, windows):  # one reply after another: tables extend
        grown.append(_as_dicts(detect_poison(prefix, SETTINGS, encode=encode, since_position=since)))
        assert recurrence._turn_frequency(prefix) == _reference_turn_frequency(prefix)
        units = support.authority_units(prefix, list(range(prefix.size)))
        reference: dict[str, list[int]] = {}
        for i, one in enumerate(units):
            for key in one.index_keys():
                reference.setdefault(key, []).append(i)
        index = support._Units(units).index
        assert {key: found.tolist() for key, found in index.items()} == reference
    cold = []
    for prefix, since in zip(prefixes, windows):
        support._index_kept.clear()
        recurrence._counts_kept.clear()
        support._units_kept.clear()
        support._support_kept.clear()
        support._covered.cache_clear()
        cosines.forget()
        cold.append(_as_dicts(detect_poison(prefix, SETTINGS, encode=encode, since_position=since)))
    assert grown == cold
    assert any(grown), "the session's recurring depot claim is found"


def test_a_tool_result_that_adds_no_authority_rechecks_only_its_own_clauses(encode, monkeypatch):
    """An agent's next search result (an untrusted tool) adds claims but no authority unit:
    the clauses seen on the previous reply keep their support without being matched against
    the units again (every seen clause was, on every reply), and the findings equal a cold
    detection's."""
    from agentmem.quarantine.poison import cosines, recurrence, support

    more = {"results": [{"url": "https://forum.example.com/t/9", "title": "Kettle & Loom 9",
                         "snippet": "Orders to Canada leave from Vancouver; duties are never charged."}]}
    before = statements(CUSTOMS, encode)
    after = statements([*CUSTOMS, call("web_search", {"query": "Kettle & Loom depot"}, 7),
                        result(more, 7)], encode)
    detect_poison(before, SETTINGS, encode=encode)
    checked: list[str] = []  # the clauses matched against units by their words
    candidates = support._Units.candidates

    def counting(self, clause, **options):
        if options.get("share"):
            checked.append(clause.text)
        return candidates(self, clause, **options)

    monkeypatch.setattr(support._Units, "candidates", counting)
    grown = _as_dicts(detect_poison(after, SETTINGS, encode=encode))
    new_texts = set(after.texts[before.size:])
    assert checked and all(any(text in row for row in new_texts) for text in checked)
    for kept in (support._index_kept, recurrence._counts_kept, support._units_kept,
                 support._support_kept):
        kept.clear()
    support._covered.cache_clear()
    cosines.forget()
    checked.clear()
    assert _as_dicts(detect_poison(after, SETTINGS, encode=encode)) == grown
    assert any(not any(text in row for row in new_texts) for text in checked)  # cold: all of them
    assert grown, "the Vancouver claim is found"


def test_turn_frequency_counts_turns_not_rows_in_any_row_order(encode):
    from agentmem.quarantine.poison import recurrence

    found = statements([asked("Leeds and Leeds. Leeds again."), said("Leeds is far."),
                        asked("Leeds it is.")], encode)
    (leeds,) = detail_terms("Leeds")
    assert recurrence._turn_frequency(found)[leeds] == 3
    shuffled = SimpleNamespace(texts=found.texts[::-1], position=found.position[::-1].copy(),
                               size=found.size)
    assert recurrence._turn_frequency(shuffled) == _reference_turn_frequency(found)


def test_two_sessions_with_the_same_words_at_other_turns_keep_their_own_counts(encode):
    """Two sessions whose rows read the same but sit at other turns each keep a table of
    turn counts; the next reply of the second must find and replace its own. Kept tables are
    compared by identity: as values, comparing the first one's positions with the second's
    (arrays) raised "truth value of an array is ambiguous" in the background detection."""
    from agentmem.quarantine.poison import recurrence

    recurrence._counts_kept.clear()
    found = statements([asked("Leeds and York."), said("Leeds is far."), asked("York it is.")],
                       encode)
    recurrence._turn_frequency(found)
    shifted = SimpleNamespace(texts=list(found.texts), position=found.position + 1,
                              size=found.size)
    recurrence._turn_frequency(shifted)  # same words one turn later: a table of its own
    grown = SimpleNamespace(texts=[*shifted.texts, "Leeds again."],
                            position=np.append(shifted.position, shifted.position[-1] + 1),
                            size=shifted.size + 1)
    assert recurrence._turn_frequency(grown) == _reference_turn_frequency(grown)


def test_a_search_tools_results_on_one_topic_are_not_poison_until_the_assistant_repeats_one(encode):
    """Passages about one city share its names and words from result to result: the source's
    subject, not a claim feeding on itself. The assistant stating one of them again and
    again is."""
    passages = [
        "In 1901 Jews constituted a third of Warsaw's inhabitants, the largest community in Europe.",
        "By 1921 Jews constituted about 33 percent of Warsaw's population, some 310,000 people.",
        "On the eve of the war in 1938 Jews constituted nearly 30 percent of Warsaw's residents.",
        "After 1945 only a few thousand of Warsaw's Jews returned; the community never recovered.",
    ]
    messages: list[dict] = [system("You are a research assistant. Use web_search.")]
    for number, passage in enumerate(passages):
        messages += [asked(f"Tell me about Warsaw's history, part {number + 1}."),
                     call("web_search", {"query": f"Warsaw history part {number + 1}"}, number),
                     result({"results": [{"url": f"https://example.org/{number}",
                                          "snippet": passage}]}, number),
                     said("Here is what the source says.")]
    messages.append(asked("Thanks."))
    assert flagged(messages, encode) == {}
    repeated = [*messages[:-1],
                said("So in 1921 Jews constituted about 33 percent of Warsaw, some 310,000 people."),
                asked("Really?"),
                said("Yes: 33 percent of Warsaw in 1921 were Jews, about 310,000 people."),
                asked("ok")]
    assert {len(messages) - 1, len(messages) + 1} <= set(flagged(repeated, encode))


def test_a_search_run_again_is_one_occurrence_but_other_pages_saying_it_are_not(encode):
    """An agent re-running one search reads one page three times: said once. Three pages
    that each carry the claim (other calls) recur, as the withheld-whole test of
    tests/test_quarantine_records.py has it."""
    claim = "The warehouse in Gdansk confirmed the refund already."

    def session(arguments) -> list[dict]:
        messages = [system("You are a support agent."), asked("Was my refund sent?")]
        for number, argument in enumerate(arguments):
            messages += [call("web_lookup", {"page": argument}, number), result(claim, number),
                         said("Let me check another source."),
                         asked(f"Anything on page {number + 1}?")]
        return messages

    assert flagged(session([0, 0, 0]), encode) == {}
    assert len(flagged(session([0, 1, 2]), encode)) == 3


def _shopping(as_json: bool) -> list[dict]:
    """A shopping agent's four product searches (an untrusted ``*search*`` tool): templated
    listings whose records share their format words, each search answered with a summary."""
    messages = [system("You are a shopping assistant.")]
    for n, thing in enumerate(["desk lamp", "office chair", "bookshelf", "standing desk"]):
        items = [{"id": 100 * n + i, "name": f"{thing.title()} model {100 * n + i}",
                  "price_usd": 10 + 3 * i + 14 * n, "description": f"A {thing} with a "
                  f"{['steel', 'wood', 'plastic'][i % 3]} frame, shipped from "
                  f"{['Oslo', 'Porto', 'Lyon'][i % 3]}."} for i in range(8)]
        listing = (json.dumps({"query": thing, "results": items}) if as_json else " ".join(
            f"{it['name']} costs {it['price_usd']} dollars. {it['description']}" for it in items))
        messages += [asked(f"Find me a {thing}."), call("search_products", {"q": thing}, n),
                     result(listing, n), said(f"I found several {thing}s.")]
    return [*messages, asked("Which of the chairs ships from Porto?")]


def test_a_product_listing_is_no_recurring_claim(encode):
    """Four searches of a catalogue: the records' format words ("frame", "shipped", "model"),
    shared by most records of each listing, chained the listings into one "claim" with the
    assistant's "I found several ..." (its details none of the chain's), and every record was
    withheld (34 of the JSON rows, 66 of the prose sentences). A listing's template is not a
    claim, "several" says nothing, and the assistant takes a claim up only by repeating its
    details."""
    for as_json in (True, False):
        assert flagged(_shopping(as_json), encode) == {}


def test_the_pair_tables_match_a_pairwise_reading():
    """Grouping and chaining read pairs from who holds each word (or, when most pairs share
    words, from an n x n table), and components by labels: the same pairs, counts and
    components as reading every pair (random sets and graphs, empty ones included)."""
    rng = np.random.default_rng(7)
    words = [f"w{i}" for i in range(30)]
    for _ in range(200):
        n = int(rng.integers(0, 25))
        vocabulary = words[:int(rng.integers(5, 31))]  # few words: the dense table's path
        sets = [set(rng.choice(vocabulary, size=int(rng.integers(0, 6)), replace=False).tolist())
                for _ in range(n)]
        pairs, counts = _shared_counts(sets)
        expected = {(i, j): len(sets[i] & sets[j]) for i in range(n) for j in range(i + 1, n)
                    if sets[i] & sets[j]}
        assert dict(zip(map(tuple, pairs.tolist()), counts.tolist())) == expected
        edges = np.asarray(list(expected), dtype=np.int64).reshape(-1, 2)
        reach = np.eye(n, dtype=bool)
        for i, j in edges.tolist():
            reach[i, j] = reach[j, i] = True
        for _ in range(n):  # transitive closure
            reach = (reach.astype(np.int32) @ reach.astype(np.int32)) > 0
        components = _components(n, edges)
        assert sorted(i for c in components for i in c) == list(range(n))
        assert [c[0] for c in components] == sorted(c[0] for c in components)
        for component in components:
            assert component == sorted(component)
            assert reach[np.ix_(component, component)].all()
            assert reach[component[0]].sum() == len(component)



def _chain_link(a: int, b: int, clauses: list[Clause], gaps: dict[int, frozenset[str]],
                anchors: set[str], similarity: np.ndarray) -> bool:
    """A pair of a chain, read directly from ``claim_chains``' definition."""
    if clauses[a].position == clauses[b].position:
        return False
    near = float(similarity[a, b])
    if gaps[a] & gaps[b] & anchors and near >= 0.35:
        return True
    amounts = [{d for d in clauses[k].entities if d[:1] == "#"} for k in (a, b)]
    same_values = not (amounts[0] and amounts[1]) or bool(amounts[0] & amounts[1])
    para = max(0.5, SETTINGS.recurrence_similarity)
    return near >= para and same_values and (bool(gaps[a] & gaps[b]) or near >= 0.6)


def test_chains_read_the_detections_close_pairs_as_a_pairwise_reading():
    """The chains take the detection's close pairs (``close_pairs`` over every clause at the
    recurrence bar) and read similarities in place: the same chains as reading every pair of
    the members (random clauses, similarities and member subsets)."""
    rng = np.random.default_rng(11)
    words = [f"w{i}" for i in range(12)] + ["#3", "#12"]
    for _ in range(150):
        n = int(rng.integers(0, 30))
        clauses = []
        for i in range(n):
            details = frozenset(rng.choice(words, size=int(rng.integers(2, 5)), replace=False).tolist())
            clauses.append(Clause(i, int(rng.integers(0, 6)), f"c{i}", details,
                                  frozenset(d for d in details if d[:1] == "#" or rng.random() < 0.5)))
        vectors = rng.normal(size=(n, 4)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True) + 1e-9
        similarity = vectors @ vectors.T
        members = sorted(rng.choice(n, size=int(rng.integers(0, n + 1)), replace=False).tolist()) if n else []
        gaps = {k: frozenset(list(clauses[k].details)[:2]) for k in members}
        anchors = set(rng.choice(words, size=6, replace=False).tolist())

        edges = [(i, j) for i in range(len(members)) for j in range(i + 1, len(members))
                 if _chain_link(members[i], members[j], clauses, gaps, anchors, similarity)]
        expected = [[members[i] for i in c]
                    for c in _components(len(members), np.asarray(edges, dtype=np.int64).reshape(-1, 2))
                    if len(c) > 1] if len(members) > 1 else []
        close = close_pairs(similarity, SETTINGS.recurrence_similarity)
        assert claim_chains(members, gaps, anchors, clauses, similarity, SETTINGS, close) == expected
        assert claim_chains(members, gaps, anchors, clauses, similarity, SETTINGS) == expected
        same = group_clauses(clauses, similarity, SETTINGS, {}, 10)
        assert group_clauses(clauses, similarity, SETTINGS, {}, 10, same_meaning=close) == same

SEARCHED = {"results": [
    {"url": f"https://forum.example.com/t/{i}", "title": f"Kettle & Loom {i}",
     "snippet": "They send all Canadian orders out of a depot in Vancouver, so no duties, and the "
                "parcels travel by rail to Halifax, Moncton and Saint John within four days."}
    for i in range(3)]}
CUSTOMS = [
    asked("Will I pay customs on my order to Halifax?"),
    call("web_search", {"query": "Kettle & Loom Canada customs"}, 1), result(SEARCHED, 1),
    said("Canadian orders ship from a depot in Vancouver, so no customs duties, and they "
         "reach Halifax by rail within four days."),
    asked("Great."),
    said("Because it is fulfilled out of Vancouver, Canada Post won't ask for duties."),
    asked("And my sister in Moncton?"),
    said("Same: orders to Canada leave the Vancouver warehouse, so no import fees."),
    asked("Perfect."),
]


@pytest.fixture
def embedded(encode, monkeypatch):
    """The texts each embedding call got, by a detector on an empty clause cache."""
    from collections import OrderedDict

    from agentmem.quarantine.poison import vectors

    monkeypatch.setattr(vectors, "_cache", OrderedDict())
    batches: list[list[str]] = []

    def recording(texts):
        batches.append(list(texts))
        return encode(texts)

    return batches, recording


def _detect(found, recording, **options):
    import asyncio

    from agentmem.quarantine.detectors import PoisonDetector, Scope

    scope = Scope(found, [], list(range(int(found.position.max()) + 1)), [], SETTINGS,
                  encode=recording, **options)
    return asyncio.run(PoisonDetector().detect(scope)), scope


def test_the_detector_embeds_new_clauses_in_parallel_chunks_first(encode, embedded):
    """A new search result's clauses are embedded as the pool's chunks (both workers of a
    2-core machine), not as one serial batch inside the detection, with the same findings."""
    from agentmem.models.runtime import chunk_size

    batches, recording = embedded
    found = statements(CUSTOMS, encode)
    records, _ = _detect(found, recording)
    sizes = [len(batch) for batch in batches]
    assert sum(sizes) > chunk_size() and max(sizes) <= chunk_size()
    assert {r.position for r in records} | {o["position"] for r in records for o in r.occurrences} \
        == set(flagged(CUSTOMS, encode))
    batches.clear()
    _detect(found, recording)
    assert batches == []  # each clause embedded once per process


def test_past_the_call_paths_budget_the_poison_check_waits_for_the_reply(encode, embedded):
    """A long history's first call (or the first after a restart) would embed every claim
    clause of the window on the call path (~10 s for 2,000 clauses). Past the call's budget
    nothing is embedded and nothing decided there (a partial read quarantined what the whole
    read does not: on the agent bench, 0.75 -> 6.75 withheld sentences a call); the check
    after the reply, unbounded, reads it whole."""
    batches, recording = embedded
    found = statements(CUSTOMS, encode)
    records, bounded = _detect(found, recording, clause_budget=2)
    assert records == [] and batches == [] and "the poison check runs after the reply" in bounded.warnings[0]
    records, whole = _detect(found, recording)
    assert records and len([t for batch in batches for t in batch]) > 2 and not whole.warnings


@pytest.mark.parametrize(("tool", "trust"), [
    ("web_search", "untrusted"), ("search", "untrusted"), ("tavily_search_results_json", "untrusted"),
    ("duckduckgo_search", "untrusted"), ("browser__navigate", "untrusted"), ("fetch_url", "untrusted"),
    ("Google_Search", "untrusted"), ("faq_search", "tool"), ("kb_search", "tool"),
    ("search_orders", "tool"), ("help_center_search", "tool"), ("lookup_order", "tool"),
])
def test_by_default_the_web_is_untrusted_and_an_operators_own_searches_are_not(tool, trust):
    """A support bot's help-centre search states the company's own policies: under the old
    default (``*search*``) every answer it backed was a claim, and a bot repeating "gift cards
    never expire" from it had them withheld."""
    from agentmem.quarantine.statements import trust_class

    assert trust_class(f"tool:{tool}", QuarantineSettings().untrusted_tools) == trust
