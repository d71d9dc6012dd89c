"""Conversational QA passages for the pruner (issue 15): questions about earlier turns of a
dialogue, asked the way a long chat's later turn asks them.

Why: the pruner's other sources are written prose. In a conversation the evidence is often a
turn with no words of its own ("Yes, that one works.") whose meaning is in the turn before it,
the question names people and a session rather than the evidence's words, and neighbouring
sessions are about the same kind of thing. The history path's second stage (``rerank_turns``)
reads exactly such text: a recalled turn with its neighbours, as "role: text".

Source: Schema-Guided Dialogue *train* files (CC BY-SA 4.0; agentmem/train/DATA.md), never the
nine files the chat dev set is built from (``DEV_FILES``), never SGD's dev or test split. The
facts, anchors and question phrasings are the chat dev set's (agentmem/train/chat_dev.py), so
what a fact is and which turns hold it are read from SGD's action annotations, with no model.

Each question gives one positive passage and, for ``negative_share`` of them, one negative:

- positive: the fact's dialogue, either whole as a dated session with the speakers' names
  (half the time followed or preceded by part of another dialogue of the same service), or a
  short window of 1-2 turns around an evidence turn rendered "user: ..." / "assistant: ...",
  as the second stage reads a recalled turn. Labelled: the evidence turns' sentences that
  state the value, or the whole turn when it states nothing itself (an acceptance).
- negative: a dialogue of the same service without the fact (same slots, other values):
  labelled 0.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import re
from pathlib import Path
from typing import Any

from agentmem.text import sentences as split
from agentmem.train.chat_dev import (
    SPEAKERS,
    Fact,
    anchors,
    best_anchor,
    dialogue_facts,
    question,
    session_date,
)
from agentmem.train.pruner_data import Example

# The SGD train files the chat dev set (python -m agentmem.train.dev_sets chat) is built from.
DEV_FILES = frozenset({44, 51, 59, 67, 90, 98, 106, 114, 122})


def read_train_dialogues(folder: Path) -> list[dict[str, Any]]:
    """Every dialogue of the SGD ``dialogues_NNN.json`` files in ``folder`` except the chat dev
    set's files (skipped, so a folder holding both never leaks dev dialogues into training)."""
    rows: list[dict[str, Any]] = []
    for path in sorted(folder.glob("dialogues_*.json")):
        number = re.fullmatch(r"dialogues_(\d+)\.json", path.name)
        if number is None or int(number.group(1)) in DEV_FILES:
            continue
        rows += json.loads(path.read_text(encoding="utf-8"))
    return rows


def _date_text(rng: random.Random) -> str:
    """A session header's time, as the chat dev set (and LoCoMo) writes it."""
    start = dt.datetime(2023, 1, 1, 12) + dt.timedelta(days=rng.randint(0, 700))
    return session_date(start, rng)[1]


def _service(dialogue: dict[str, Any]) -> str:
    return dialogue["services"][0].split("_")[0]


def _names(value: str, text: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(value.lower())}(?!\w)", text.lower()) is not None


def _parts(turn: dict[str, Any]) -> list[str]:
    """A turn's sentences (the whole utterance when the splitter finds none)."""
    return split(turn["utterance"]) or [turn["utterance"]]


def _turn_labels(turn: dict[str, Any], index: int, fact: Fact) -> tuple[list[str], list[int]]:
    """A turn's sentences, and which of them hold ``fact``: in an evidence turn those naming
    its value, or every sentence when it names nothing itself (an acceptance: "Sounds good.");
    in any other turn of the dialogue a sentence that restates a distinctive value (a read-back
    answers the question too), never one that merely holds a short number like "2"."""
    parts = _parts(turn)
    naming = [int(_names(fact.value, p)) for p in parts]
    if index in fact.evidence:
        return parts, naming if any(naming) else [1] * len(parts)
    distinctive = len(fact.value) >= 4 and not fact.value.isdigit()
    return parts, naming if distinctive else [0] * len(parts)


def _render(turns: list[tuple[int, dict[str, Any]]], fact: Fact | None, names: tuple[str, str],
            header: str | None) -> tuple[list[str], list[int]]:
    """Turns as sentences, the first of each turn prefixed with its speaker; ``fact`` None
    labels nothing (a turn of another dialogue)."""
    sentences: list[str] = [] if header is None else [f"[{header}]"]
    labels: list[int] = [] if header is None else [0]
    for index, turn in turns:
        parts, marks = (_turn_labels(turn, index, fact) if fact is not None
                        else (_parts(turn), [0] * len(_parts(turn))))
        speaker = names[0] if turn["speaker"] == "USER" else names[1]
        sentences += [f"{speaker}: {parts[0]}", *parts[1:]]
        labels += marks
    return sentences, labels


def _positive(dialogue: dict[str, Any], fact: Fact, other: dict[str, Any], names: tuple[str, str],
              rng: random.Random) -> tuple[list[str], list[int]]:
    turns = list(enumerate(dialogue["turns"]))
    if rng.random() < 0.5:  # a recalled turn with its neighbours, as the second stage reads it
        centre, side = rng.choice(fact.evidence), rng.randint(1, 2)
        window = turns[max(0, centre - side): centre + side + 1]
        return _render(window, fact, ("user", "assistant"), None)
    when = _date_text(rng)
    sentences, labels = _render(turns, fact, names, when)
    if rng.random() < 0.5:
        cut = rng.randint(3, 8)
        extra = list(enumerate(other["turns"]))
        piece = extra[:cut] if rng.random() < 0.5 else extra[-cut:]
        more, zeros = _render(piece, None, names, _date_text(rng))
        if rng.random() < 0.5:
            return more + sentences, zeros + labels
        return sentences + more, labels + zeros
    return sentences, labels


def conversation_examples(dialogues: list[dict[str, Any]], rng: random.Random, limit: int,
                          negative_share: float = 0.5) -> list[Example]:
    """Up to ``limit`` questions, each a positive passage and for ``negative_share`` of them a
    same-service negative (module docstring); a question is asked only when its anchor occurs
    in no other dialogue the passage holds, so the label is never ambiguous."""
    by_service: dict[str, list[dict[str, Any]]] = {}
    for dialogue in dialogues:
        by_service.setdefault(_service(dialogue), []).append(dialogue)
    pool = list(dialogues)
    rng.shuffle(pool)
    out: list[Example] = []
    asked = 0
    for dialogue in pool:
        if asked >= limit:
            break
        siblings = [d for d in by_service[_service(dialogue)] if d is not dialogue]
        facts = dialogue_facts(dialogue["turns"])
        if not siblings or not facts:
            continue
        fact, other = rng.choice(facts), rng.choice(siblings)
        other_text = " ".join(t["utterance"] for t in other["turns"]).lower()
        if _names(fact.value, other_text):
            continue  # the other dialogue states the same value: its turns would be unlabelled evidence
        unique = [a for a in anchors(dialogue["turns"]) if a.text.lower() not in other_text]
        anchor = best_anchor(fact, unique, rng)
        if anchor is None:
            continue
        names = SPEAKERS[rng.randrange(len(SPEAKERS))]
        query = question(fact, anchor, *names, rng)
        out.append(Example(query, *_positive(dialogue, fact, other, names, rng)))
        asked += 1
        if rng.random() < negative_share:
            out.append(Example(query, *_render(list(enumerate(other["turns"])), None, names,
                                               _date_text(rng))))
    return out
