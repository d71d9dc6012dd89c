"""The broader pruner training data: SQuAD JSON conversion, the multi-hop split and passages,
synthetic chat sessions, and a training run that stops and resumes (`--work`/`--resume`)."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

from agentmem.train.dev_sets import (
    hotpot,
    is_dev,
    multihop,
    multihop_records,
    read_multihop_rows,
)
from agentmem.train.pruner_data import Example
from agentmem.train.pruner_mix import (
    build_mixture,
    chat_session,
    hotpot_examples,
    multiparagraph_examples,
    musique_examples,
    squad_json_records,
)
from tests.test_train import SHARED_DATA

ARTICLES = {"version": "v2.0", "data": [{"title": "Solar_energy", "paragraphs": [{
    "context": "Solar energy is radiant light from the Sun. It is harnessed by panels. "
               "Panels were invented in 1883.",
    "qas": [{"id": "q1", "question": "When were panels invented?", "is_impossible": False,
             "answers": [{"text": "1883", "answer_start": 89}]},
            {"id": "q2", "question": "Who owns the Sun?", "is_impossible": True, "answers": []}]}]}]}

ROWS = [{"question": f"Which river flows through city {i}?", "type": "bridge",
         "evidence": [f"City {i} lies on the river R{i}.", f"The river R{i} is {i} km long."]}
        for i in range(10)]


def test_hotpot_layout_becomes_prune_records_with_the_supporting_facts_labelled(tmp_path):
    rows = [{"_id": "a1", "question": "Where was the director of Film X born?", "type": "bridge",
             "level": "easy",
             "context": [["Film X", ["Film X is a 1990 film.", " It was directed by Jane Doe."]],
                         ["Other", ["An unrelated paragraph.", ""]],
                         ["Jane Doe", ["Jane Doe is a director.", " She was born in Paris."]]],
             "supporting_facts": [["Film X", 1], ["Jane Doe", 1]]},
            {"_id": "a2", "question": "Half-labelled?", "context": [["T", ["One sentence."]]],
             "supporting_facts": [["T", 0], ["T", 3]]}]  # a fact the context lacks: skipped
    source, out = tmp_path / "hotpot.json", tmp_path / "hotpot.jsonl"
    source.write_text(json.dumps(rows))
    assert hotpot(source, out) == 1
    record = json.loads(out.read_text())
    assert record["id"] == "hotpot-a1" and record["title"] is None
    assert record["sentences"][1] == "It was directed by Jane Doe."  # stripped, blanks dropped
    assert len(record["sentences"]) == 5
    assert record["labels"] == [0, 1, 0, 0, 1]


def test_musique_rows_label_the_sentences_naming_each_hops_answer(tmp_path):
    def paragraph(idx, text, supporting=False):
        return {"idx": idx, "title": f"T{idx}", "paragraph_text": text, "is_supporting": supporting}

    rows = [{"id": "2hop__1", "question": "Who founded the publisher of Journal X?",
             "paragraphs": [paragraph(0, "Journal X is a journal. It is published by Acme Press.", True),
                            paragraph(1, "Acme Press was founded by Ann Lee. It sits in Leeds.", True),
                            *(paragraph(i, f"Distractor {i} is a town. It has a river.")
                              for i in range(2, 8))],
             "question_decomposition": [{"answer": "Acme Press", "paragraph_support_idx": 0},
                                        {"answer": "Ann Lee", "paragraph_support_idx": 1}]},
            {"id": "2hop__2", "question": "Unlabelled?",  # a hop answer in no sentence: skipped
             "paragraphs": [paragraph(0, "Nothing here.", True), paragraph(1, "Or here.")],
             "question_decomposition": [{"answer": "Zed", "paragraph_support_idx": 0}]}]
    source = tmp_path / "musique_train.json"
    source.write_text(json.dumps(rows))
    examples = musique_examples(source, random.Random(3), draws=4, distractors=(2, 4),
                                negative_share=0.0)
    assert len(examples) == 4 and {e.query for e in examples} == {rows[0]["question"]}
    for example in examples:
        kept = [s for s, label in zip(example.sentences, example.labels) if label]
        assert kept == sorted(kept, key=example.sentences.index)
        assert set(kept) == {"It is published by Acme Press.", "Acme Press was founded by Ann Lee."}
        assert 4 + 4 <= len(example.sentences) <= 4 + 8  # two gold paragraphs, 2-4 distractors


def test_squad_json_becomes_prune_records_labelled_by_answer_overlap():
    records = squad_json_records(ARTICLES["data"])
    assert [r["id"] for r in records] == ["squad-q1", "squad-q2"]
    assert records[0]["sentences"][2] == "Panels were invented in 1883."
    assert records[0]["title"] == "Solar energy"
    assert records[0]["labels"] == [0, 0, 1] and records[1]["labels"] == [0, 0, 0]


def test_multihop_split_is_closed_and_passages_hold_all_the_evidence(tmp_path):
    source = tmp_path / "rows.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    dev, train = read_multihop_rows(source, dev=True), read_multihop_rows(source, dev=False)
    assert [r["number"] for r in dev] == [n for n in range(10) if is_dev(n)] == [0, 1, 5, 6]
    assert {r["question"] for r in dev}.isdisjoint(r["question"] for r in train)
    records = multihop_records(train, random.Random(1), distractors=(2, 2))
    for row, record in zip(train, records):
        kept = [s for s, label in zip(record["sentences"], record["labels"]) if label]
        assert kept and set(kept) <= set(row["evidence"]) and sorted(kept) == sorted(row["evidence"])
        others = {s for s, label in zip(record["sentences"], record["labels"]) if not label}
        train_text = {s for r in train for s in r["evidence"]}
        assert len(others) == 4 and others <= train_text  # distractors from the same split only
    out = tmp_path / "dev.jsonl"
    assert multihop(source, out, distractor_groups=3) == 4
    assert all(len(json.loads(line)["sentences"]) == 8 for line in out.read_text().splitlines())


def test_chat_session_renders_turns_with_a_dated_header_and_noise():
    example = Example("when were panels invented", ["Solar", "Panels came in 1883.", "They are blue."],
                      [0, 1, 0])
    noise = Example("q", ["Other", "Cats sleep a lot.", "Dogs bark."], [0, 0, 0])
    chat = chat_session(example, [noise], random.Random(3))
    assert chat.sentences[0].startswith("[Session ") and chat.labels[0] == 0
    assert all(": " in s for s in chat.sentences[1:])
    kept = [s for s, label in zip(chat.sentences, chat.labels) if label]
    assert len(kept) == 1 and kept[0].endswith(": Panels came in 1883.")
    assert len(chat.sentences) >= 4


HOTPOT_ROWS = [{"question": "Where was the director of Film X born?",
                "context": [["Film X", ["Film X is a 1990 film.", " It was directed by Jane Doe."]],
                            ["Other", ["An unrelated paragraph.", ""]],
                            ["Jane Doe", ["Jane Doe is a director.", " She was born in Paris."]]],
                "supporting_facts": [["Film X", 1], ["Jane Doe", 1]]},
               {"question": "Which is older, A or B?",
                "context": [["A", ["A was founded in 1900."]], ["B", ["B was founded in 1950."]]],
                "supporting_facts": [["A", 0], ["B", 0]]},
               {"question": "Half-labelled?", "context": [["T", ["One sentence."]]],
                "supporting_facts": [["T", 0], ["T", 3]]}]


def test_hotpot_train_rows_are_whole_passages_read_in_every_window(tmp_path):
    source = tmp_path / "hotpotqa_train_distractor.json"
    source.write_text(json.dumps(HOTPOT_ROWS))
    examples = hotpot_examples(source, random.Random(1), draws=3)
    assert len(examples) == 6  # two usable rows x three draws; the half-labelled row skipped
    assert all(e.every_window for e in examples)
    first = examples[0]  # the first draw keeps the row's order
    assert first.sentences == ["Film X is a 1990 film.", "It was directed by Jane Doe.",
                               "An unrelated paragraph.", "Jane Doe is a director.",
                               "She was born in Paris."]
    assert first.labels == [0, 1, 0, 0, 1]
    for example in examples[:3]:  # every order keeps each sentence with its own label
        assert sorted(zip(example.sentences, example.labels)) == sorted(zip(first.sentences, first.labels))
    # a check file's questions are never trained on
    kept = hotpot_examples(source, random.Random(1), draws=1,
                           exclude=frozenset({"which is older, a or b?"}))
    assert [e.query for e in kept] == ["Where was the director of Film X born?"]


def test_hotpot_rows_read_from_a_sample_file_of_sources(tmp_path):
    sample = {"split": "train", "examples": [{
        "question": "Where was the director of Film X born?", "answer": "Paris",
        "sources": [{"title": "Film X", "text": ["Film X is a 1990 film.", "It was directed by Jane Doe."],
                     "gold_sentence_indices": [1]},
                    {"title": "Jane Doe", "text": ["Jane Doe is a director.", "She was born in Paris."],
                     "gold_sentence_indices": [1]}]}]}
    source = tmp_path / "hotpotqa_train_distractor.json"
    source.write_text(json.dumps(sample))
    [example] = hotpot_examples(source, random.Random(1), draws=1)
    assert example.labels == [0, 1, 0, 1] and example.every_window
    base = [Example("q", ["t", "a"], [0, 1]), Example("q", ["t", "b"], [0, 0])]
    examples, counts = build_mixture(base, tmp_path, seed=1, hotpot_draws=2)
    assert counts["hotpotqa_train_distractor"] == 2 and len(examples) == sum(counts.values())
    # whole ten-paragraph passages are not re-rendered as synthetic chats
    assert sum(e.every_window for e in examples) == 2


def test_mixture_counts_each_source(tmp_path):
    (tmp_path / "squad_train_v2.json").write_text(json.dumps(ARTICLES))
    (tmp_path / "hotpotqa_train_evidence.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    base = [Example("q", ["t", "a"], [0, 1]), Example("q", ["t", "b"], [0, 0])]
    examples, counts = build_mixture(base, tmp_path, seed=1, multihop_draws=2)
    assert counts["shared"] == 2 and counts["squad_train_v2"] >= 2 and counts["hotpotqa_train"] == 12
    assert len(examples) == sum(counts.values()) and counts["synthetic_chat"] >= 1


def _article(title: str, paragraphs: int) -> dict:
    def paragraph(p: int) -> dict:
        lead = f"{title} fact {p} is here. Its number is "
        return {"context": f"{lead}{p}{p}.",
                "qas": [{"id": f"{title}-{p}", "question": f"What is the number of {title} fact {p}?",
                         "is_impossible": False,
                         "answers": [{"text": f"{p}{p}", "answer_start": len(lead)}]}]}

    return {"title": title, "paragraphs": [paragraph(p) for p in range(paragraphs)]}


def test_multiparagraph_passages_hold_their_answer_among_same_article_paragraphs():
    articles = [_article("Alpha", 5), _article("Beta", 5)]
    examples = multiparagraph_examples(articles, random.Random(2), limit=10, negative_share=1.0)
    positives = [e for e in examples if any(e.labels)]
    negatives = [e for e in examples if not any(e.labels)]
    assert len(positives) == 10 and len(negatives) == 10
    for example in positives:
        title = example.query.split(" of ")[1].split()[0]
        number = example.query.split("fact ")[1].rstrip("?")
        kept = [s for s, label in zip(example.sentences, example.labels) if label]
        assert kept == [f"Its number is {number}{number}."]
        assert all(s.startswith(title) or s.startswith("Its") for s in example.sentences)
        assert 4 <= len(example.sentences) <= 8 and example.sentences[0] != title  # no title row
    for example in negatives:  # same article, never the question's own paragraph
        fact = example.query.split(" of ")[1].rstrip("?")
        assert f"{fact} is here." not in example.sentences and len(example.sentences) >= 4
    assert multiparagraph_examples([_article("Gamma", 3)], random.Random(2), limit=5) == []


def test_mixture_adds_multiparagraph_passages_without_an_extra_folder():
    base = [Example("q", ["t", "a"], [0, 1]), Example("q", ["t", "b"], [0, 0])]
    examples, counts = build_mixture(base, None, seed=1, shared_articles=[_article("Alpha", 6)],
                                     multiparagraph=4)
    assert counts["multiparagraph"] >= 4 and "squad_train_v2" not in counts
    assert len(examples) == sum(counts.values())


def test_a_window_that_cuts_off_the_answer_is_trained_as_a_negative():
    from agentmem.models.pruner import Pruner
    from agentmem.models.registry import default_pruner_path
    from agentmem.train.pruner import _encode

    pruner = Pruner.load(default_pruner_path(), max_length=48)
    filler = [f"Sentence {i} says nothing about the question at all." for i in range(8)]
    early = Example("When were panels invented?", ["Panels came in 1883.", *filler], [1] + [0] * 8)
    late = Example("When were panels invented?", [*filler, "Panels came in 1883."], [0] * 8 + [1])
    [(ids, labels, relevant)] = _encode(pruner, early)
    assert len(ids) <= 48 and relevant == 1 and 1 in labels
    [(ids, labels, relevant)] = _encode(pruner, late)
    assert late.relevant == 1 and relevant == 0 and 1 not in labels
    # read as the stage reads it, every window trains: the answer's window as a positive
    windows = _encode(pruner, Example(late.query, late.sentences, late.labels, every_window=True))
    assert len(windows) >= 2 and [w[2] for w in windows][-1] == 1 and sum(w[2] for w in windows) == 1
    assert all(len(ids) <= 48 for ids, _, _ in windows)


def test_training_resumes_from_its_saved_state(tmp_path):
    if not (SHARED_DATA / "prune" / "squad_train.jsonl").exists():
        pytest.skip(f"training data not found at {SHARED_DATA}")
    dev = tmp_path / "dev.jsonl"
    dev.write_text(json.dumps({"id": "d", "question": "Where is Paris?", "title": None,
                               "sentences": ["Paris is in France.", "It is big."], "labels": [1, 0]}) + "\n")
    (tmp_path / "extra").mkdir()
    (tmp_path / "extra" / "squad_train_v2.json").write_text(json.dumps(ARTICLES))
    work = tmp_path / "work"

    def train(out, *more):
        return subprocess.run([sys.executable, "-m", "agentmem", "train", "pruner", "--out", str(out),
                               "--limit", "8", "--epochs", "1", "--batch-size", "4", "--max-length", "96",
                               "--dev", str(dev), "--data", str(SHARED_DATA), "--extra",
                               str(tmp_path / "extra"), "--work", str(work), "--save-every", "1",
                               "--threads", "1", *more], capture_output=True, text=True, timeout=600)

    first = train(tmp_path / "a")
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    assert (work / "state.pt").exists()
    again = train(tmp_path / "b", "--resume")
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert "resumed at step 2/2" in again.stdout
    weights = [(tmp_path / run / "model.safetensors").read_bytes() for run in ("a", "b")]
    assert weights[0] == weights[1]
    card = json.loads((tmp_path / "b" / "training.json").read_text())
    assert card["resumed_at_step"] == 2 and card["counts"]["squad_train_v2"] >= 1
    changed = train(tmp_path / "c", "--resume", "--lr", "1e-3")
    assert changed.returncode != 0 and "settings differ" in changed.stdout + changed.stderr
