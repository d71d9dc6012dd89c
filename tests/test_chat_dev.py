"""`python -m agentmem.train.dev_sets chat`: the SGD-derived history dev set is deterministic and
in the LoCoMo layout `bench history` reads, every evidence id naming a turn that exists."""

import json
import re
import subprocess
import sys

from agentmem.bench.formats import read_locomo
from agentmem.bench.history import _evidence, conversation_messages
from agentmem.train.chat_dev import chat_samples, dialogue_facts


def _frame(service, actions, slots=(), utterance=""):
    """One SGD frame; ``slots`` are the values whose character spans the turn annotates."""
    spans = [{"slot": slot, "start": utterance.index(value),
              "exclusive_end": utterance.index(value) + len(value)} for slot, value in slots]
    return {"service": service, "slots": spans,
            "actions": [{"act": act, "slot": slot, "values": values, "canonical_values": values}
                        for act, slot, values in actions]}


def _turn(speaker, utterance, service, actions, slots=()):
    return {"speaker": speaker, "utterance": utterance,
            "frames": [_frame(service, actions, slots, utterance)]}


def _dialogue(number):
    """A restaurant dialogue in SGD's layout: a user value, a taken offer, a confirmation, an
    answered request; names carry a word of their own so each session has its own anchors."""
    word = ["Amber", "Birch", "Cedar", "Delta", "Ember", "Fjord", "Garnet", "Heron", "Indigo",
            "Juniper", "Kestrel", "Linden"][number]
    city, place = f"{word}ville", f"Bistro {word}"
    service = "Restaurants_1"
    return {"dialogue_id": f"1_{number:05d}", "services": [service], "turns": [
        _turn("USER", f"I want Italian food in {city}.", service,
              [("INFORM", "cuisine", ["Italian"]), ("INFORM", "city", [city])],
              [("city", city)]),
        _turn("SYSTEM", f"How about {place}?", service, [("OFFER", "restaurant_name", [place])],
              [("restaurant_name", place)]),
        _turn("USER", "Yes, that one.", service, [("SELECT", "", [])]),
        _turn("SYSTEM", f"Please confirm: a table at {place} for 2.", service,
              [("CONFIRM", "restaurant_name", [place]), ("CONFIRM", "party_size", ["2"])],
              [("restaurant_name", place)]),
        _turn("USER", "Yes. What is their phone number?", service,
              [("AFFIRM", "", []), ("REQUEST", "phone_number", [])]),
        _turn("SYSTEM", "It is 555-0100.", service, [("INFORM", "phone_number", ["555-0100"])]),
        _turn("USER", "Thanks, bye.", service, [("THANK_YOU", "", []), ("GOODBYE", "", [])]),
    ]}


def test_dialogue_facts_find_the_turn_that_states_each_fact():
    kinds = {(f.kind, f.slot): f.evidence for f in dialogue_facts(_dialogue(1)["turns"])}
    assert kinds[("user_value", "city")] == (0,)
    assert kinds[("chosen_offer", "restaurant_name")] == (1, 2)  # the offer and "Yes, that one."
    assert kinds[("confirmed", "party_size")] == (3, 4)
    assert kinds[("system_value", "phone_number")] == (5,)


def test_chat_dev_set_is_deterministic_and_valid(tmp_path):
    source = tmp_path / "sgd"
    source.mkdir()
    (source / "dialogues_001.json").write_text(json.dumps([_dialogue(n) for n in range(12)]))
    out_a, out_b = tmp_path / "a.json", tmp_path / "b.json"
    for out in (out_a, out_b):
        run = subprocess.run([sys.executable, "-m", "agentmem.train.dev_sets", "chat", str(source),
                              str(out), "2", "5", "7"], capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr[-2000:]
    assert out_a.read_bytes() == out_b.read_bytes()
    assert chat_samples([_dialogue(n) for n in range(12)], seed=8, conversations=2, sessions=5) != \
        json.loads(out_a.read_text())  # the seed matters
    samples = read_locomo(out_a)  # the bench's own reader accepts it
    assert len(samples) == 2
    for sample in samples:
        conversation = sample.conversation
        assert {conversation["speaker_a"], conversation["speaker_b"]} == {
            turn["speaker"] for turn in conversation["session_1"]}
        for number in range(1, 6):
            assert re.fullmatch(r"\d{1,2}:\d\d [ap]m on \d{1,2} \w+, \d{4}",
                                conversation[f"session_{number}_date_time"])
        messages, where = conversation_messages(sample)
        assert sample.qa
        for qa in sample.qa:
            assert qa.question and qa.answer and qa.evidence
            assert all(entry in where for entry in qa.evidence)
            assert len(_evidence(qa, where)) == len(qa.evidence)
            if qa.category == 5:  # a list: each item in its own session's evidence turn
                assert len({e.split(":")[0] for e in qa.evidence}) == len(qa.evidence) >= 2
                for item, entry in zip(qa.answer.split(", "), qa.evidence, strict=True):
                    assert item.lower() in messages[where[entry]]["content"].lower()
                continue
            assert qa.answer.lower() in " ".join(messages[where[e]]["content"].lower()
                                                 for e in qa.evidence)
        # one list: the city, asked in all five sessions (the cuisine is always "Italian")
        assert [qa.evidence for qa in sample.qa if qa.category == 5] == [
            [f"D{n}:1" for n in range(1, 6)]]


def test_list_questions_leave_the_other_questions_as_they_were():
    dialogues = [_dialogue(n) for n in range(12)]
    plain = chat_samples(dialogues, seed=7, conversations=2, sessions=5, lists=0)
    with_lists = chat_samples(dialogues, seed=7, conversations=2, sessions=5)
    for before, after in zip(plain, with_lists, strict=True):
        assert after["conversation"] == before["conversation"]
        assert [qa for qa in after["qa"] if qa["category"] != 5] == before["qa"]
        assert len(after["qa"]) == len(before["qa"]) + 1
