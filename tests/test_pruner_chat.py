"""Conversational QA training passages (agentmem/train/pruner_chat.py): the evidence turns are
labelled (an acceptance with no words of its own included), negatives come from another
dialogue of the service without the question's anchor, and the chat dev set's SGD files are
never read."""

import json
import random
import re

from agentmem.train.pruner_chat import DEV_FILES, conversation_examples, read_train_dialogues
from agentmem.train.pruner_data import Example
from agentmem.train.pruner_mix import build_mixture
from tests.test_chat_dev import _dialogue

WORDS = ["Amber", "Birch", "Cedar", "Delta", "Ember", "Fjord", "Garnet", "Heron", "Indigo",
         "Juniper", "Kestrel", "Linden"]


def _sgd_folder(tmp_path):
    folder = tmp_path / "sgd"
    folder.mkdir()
    (folder / "dialogues_001.json").write_text(json.dumps([_dialogue(n) for n in range(10)]))
    dev = [_dialogue(n) for n in (10, 11)]
    for dialogue in dev:
        dialogue["dialogue_id"] = "dev_" + dialogue["dialogue_id"]
    (folder / f"dialogues_{min(DEV_FILES):03d}.json").write_text(json.dumps(dev))
    return folder


def _word(text: str) -> set[str]:
    return {w for w in WORDS if w in text}


def test_the_chat_dev_sets_files_are_never_read(tmp_path):
    dialogues = read_train_dialogues(_sgd_folder(tmp_path))
    assert len(dialogues) == 10
    assert not any(d["dialogue_id"].startswith("dev_") for d in dialogues)


def test_passages_label_the_evidence_turns_and_negatives_lack_the_anchor(tmp_path):
    dialogues = read_train_dialogues(_sgd_folder(tmp_path))
    examples = conversation_examples(dialogues, random.Random(3), 200)
    positives = [e for e in examples if any(e.labels)]
    negatives = [e for e in examples if not any(e.labels)]
    # At most one question a dialogue; a fact whose value every dialogue shares ("Italian",
    # "555-0100") is never asked, as another dialogue's turns would be unlabelled evidence.
    assert 3 <= len(positives) <= 10 and negatives
    assert not any(re.search(r"cuisine|phone", e.query) for e in examples)
    for example in positives:
        # The passage's labelled sentences all belong to the dialogue the question names.
        anchor_words = _word(example.query)
        assert len(anchor_words) == 1
        kept = [s for s, label in zip(example.sentences, example.labels) if label]
        assert all(_word(s) <= anchor_words for s in kept)
        assert len(example.sentences) == len(example.labels)
    for example in negatives:
        assert not _word(example.query) & _word(" ".join(example.sentences))
    # "Yes, that one." states nothing, yet it is the evidence that the offer was taken.
    taken = [e for e in positives if re.search(r"go with|pick", e.query)]
    assert taken
    for example in taken:
        acceptance = [label for s, label in zip(example.sentences, example.labels)
                      if s.endswith(": Yes, that one.")]
        assert any(acceptance)  # (a part of another dialogue may say it too, unlabelled)


def test_a_read_back_of_a_distinctive_value_is_labelled_but_a_bare_number_is_not():
    from agentmem.train.chat_dev import Fact
    from agentmem.train.pruner_chat import _turn_labels

    turn = {"speaker": "SYSTEM", "utterance": "Please confirm: a table at Bistro Amber for 2."}
    place = Fact("chosen_offer", "Restaurants_1", "restaurant_name", "Bistro Amber", (1, 2))
    size = Fact("user_value", "Restaurants_1", "party_size", "2", (0,))
    assert _turn_labels(turn, 3, place)[1] == [1]
    assert _turn_labels(turn, 3, size)[1] == [0]
    assert _turn_labels(turn, 0, size)[1] == [1]  # in its evidence turn the number counts


def test_mixture_adds_conversational_passages_from_the_extra_folder(tmp_path):
    _sgd_folder(tmp_path)
    base = [Example("q", ["t", "a"], [0, 1]), Example("q", ["t", "b"], [0, 0])]
    examples, counts = build_mixture(base, tmp_path, seed=1, chat_qa=5)
    assert counts["sgd_chat_qa"] >= 5 and len(examples) == sum(counts.values())
    _, without = build_mixture(base, tmp_path, seed=1)
    assert "sgd_chat_qa" not in without
