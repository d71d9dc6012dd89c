"""The written chat pairs for the NLI model: a fixed held-out share, and how they are trained
(contradictions both ways, an announced update in its own order only, a restatement as
entailment)."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest

from agentmem.train.nli_data import (
    CONTRADICTION,
    ENTAILMENT,
    NOT_CONTRADICTION,
    WRITTEN_PAIRS,
    build_training_set,
    held_out_sets,
    read_pairs,
    written_examples,
)
from tests.nli_folders import nli_data_folder


def test_the_shipped_file_is_balanced_and_distinct():
    rows = [json.loads(line) for line in WRITTEN_PAIRS.read_text().splitlines()]
    labels = Counter(r["label"] for r in rows)
    assert set(labels) == {"contradiction", "consistent"} and len(rows) >= 4000
    assert abs(labels["contradiction"] - labels["consistent"]) <= 0.02 * len(rows)
    assert len({(r["older"], r["newer"]) for r in rows}) == len(rows)


STOP67_PAIRS = WRITTEN_PAIRS.with_name("chat_clash_pairs_written_stop67.jsonl")
BENCH_DATA = Path(__file__).parents[1] / "agentmem" / "bench" / "data"


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _balanced_and_new(rows: list[dict], earlier: list[Path], *, least: int, slack: float) -> None:
    """A writing round's file: both labels, within ``slack`` of balanced, at least ``least``
    pairs, none repeated, none already in an ``earlier`` round's file."""
    labels = Counter(r["label"] for r in rows)
    assert set(labels) == {"contradiction", "consistent"} and len(rows) >= least
    assert abs(labels["contradiction"] - labels["consistent"]) <= slack * len(rows)
    pairs = {(r["older"], r["newer"]) for r in rows}
    assert len(pairs) == len(rows)
    assert not pairs & {(r["older"], r["newer"]) for path in earlier for r in _rows(path)}


def _turns(paths: list[Path]) -> set[str]:
    """Every turn's text of clash benchmark files, lower-cased."""
    return {turn["text"].strip().lower() for path in paths for r in _rows(path)
            for turn in r["turns"]}


def test_the_stop67_pairs_are_balanced_new_and_not_benchmark_text():
    rows = _rows(STOP67_PAIRS)
    _balanced_and_new(rows, [WRITTEN_PAIRS], least=2000, slack=0.05)
    # no line is a whole turn of a clash benchmark file, held out or not (DATA.md, Stop 67)
    texts = _turns(list(BENCH_DATA.glob("chat_clash_agentmem_*.jsonl")))
    written = {s.strip().lower() for r in rows for s in (r["older"], r["newer"])}
    assert len(texts) > 1000 and not written & texts


SMALL_TALK_PAIRS = WRITTEN_PAIRS.with_name("chat_clash_pairs_small_talk.jsonl")
SHARED_CLASH = Path(os.environ.get("AGENTMEM_SHARED_DATA",
                                   Path(__file__).resolve().parents[2] / "shared" / "data")) / "clash"


def test_the_small_talk_pairs_are_balanced_new_and_not_benchmark_text():
    rows = _rows(SMALL_TALK_PAIRS)
    _balanced_and_new(rows, [WRITTEN_PAIRS, STOP67_PAIRS], least=1900, slack=0.05)
    # no line is a whole turn of a clash benchmark file: ours, and the shared DECODE and chat
    # dev files (DATA.md, Stop 68)
    if not (SHARED_CLASH / "decode_dev.jsonl").exists():
        if os.environ.get("CI"):
            pytest.fail(f"DECODE dev file not found in {SHARED_CLASH} (set AGENTMEM_SHARED_DATA)")
        pytest.skip(f"DECODE dev file not found in {SHARED_CLASH}")
    texts = _turns([*BENCH_DATA.glob("chat_clash_agentmem_*.jsonl"), *SHARED_CLASH.glob("*.jsonl")])
    written = {s.strip().lower() for r in rows for s in (r["older"], r["newer"])}
    assert len(texts) > 5000 and not written & texts

def test_the_held_out_share_is_fixed_and_never_trained():
    train, held = read_pairs(WRITTEN_PAIRS), read_pairs(WRITTEN_PAIRS, held_out=True)
    pairs = lambda examples: {(e.premise, e.hypothesis) for e in examples}  # noqa: E731
    assert not pairs(train) & pairs(held)
    assert 0.07 < len(held) / (len(train) + len(held)) < 0.13
    assert pairs(read_pairs(WRITTEN_PAIRS, held_out=True)) == pairs(held)


def _file(tmp_path: Path, rows: list[tuple[str, str, str, str]]) -> Path:
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps({"older": o, "newer": n, "label": label, "kind": kind}) + "\n"
                            for o, n, label, kind in rows))
    return path


def test_labels_and_swaps(tmp_path: Path):
    rows = [(f"I live in town {i}.", f"Here in village {i} it rains.", "contradiction", "location")
            for i in range(30)]
    rows += [(f"I live in city {i}.", f"We moved to city {i + 100} last month.", "consistent", "update")
             for i in range(30)]
    rows += [(f"I have {i} cats.", f"I've got {i} cats.", "consistent", "restatement") for i in range(30)]
    path = _file(tmp_path, rows)
    trained = read_pairs(path)
    assert {e.allowed for e in trained if "moved" in e.hypothesis} == {NOT_CONTRADICTION}
    assert {e.allowed for e in trained if "got" in e.hypothesis} == {ENTAILMENT}
    assert {e.allowed for e in trained if "village" in e.hypothesis} == {CONTRADICTION}
    examples = written_examples(path, repeat=2)
    swapped = [e for e in examples if e.source == "written-swap"]
    assert len(examples) == 2 * (len(trained) + len(swapped) // 2)
    # an update is consistent only in its own order: never swapped
    assert not [e for e in swapped if "moved" in e.premise]
    assert {e.allowed for e in swapped if "village" in e.premise} == {CONTRADICTION}
    # a swapped restatement is only "not contradiction"
    assert {e.allowed for e in swapped if "got" in e.premise} == {NOT_CONTRADICTION}


def test_small_talk_pairs_train_repeated_both_ways_and_keep_their_held_out_share(tmp_path: Path):
    rows = [(f"i have {i} dogs", f"walking my {i + 1} dogs now lol", "contradiction", "pets_count")
            for i in range(60)]
    rows += [(f"i love hiking {i}", f"trail {i} was muddy today", "consistent", "hobby")
             for i in range(60)]
    path = _file(tmp_path, rows)
    examples = build_training_set(nli_data_folder(tmp_path / "data"), swap_fraction=0.0, small_talk=path,
                                  small_talk_repeat=3)
    trained = read_pairs(path, source="small_talk")
    own = Counter((e.premise, e.hypothesis) for e in examples if e.source == "small_talk")
    swapped = Counter((e.premise, e.hypothesis) for e in examples if e.source == "small_talk-swap")
    assert set(own.values()) == {3} and len(own) == len(trained)
    assert swapped == Counter({(h, p): n for (p, h), n in own.items()})
    held = held_out_sets(nli_data_folder(tmp_path / "held"), small_talk=path)[
        "small_talk (held-out share, binary)"]
    assert held and not {(e.premise, e.hypothesis) for e in held} & set(own)
    assert len(held) + len(own) == len(rows)


def test_several_written_files_read_as_their_concatenation(tmp_path: Path):
    first = _file(tmp_path, [(f"I live in town {i}.", f"Here in village {i}.", "contradiction", "place")
                             for i in range(40)])
    second = (tmp_path / "second.jsonl")
    second.write_text("".join(json.dumps({"older": f"I swim {i}.", "newer": f"Pool {i} was cold.",
                                          "label": "consistent", "kind": "hobby"}) + "\n"
                              for i in range(40)))
    joined = tmp_path / "joined.jsonl"
    joined.write_text(first.read_text() + second.read_text())
    assert written_examples([first, second]) == written_examples(joined)
    assert read_pairs([first, second], held_out=True) == read_pairs(joined, held_out=True)
