"""Dev files for calibrating the keep rule per domain, in the prune bench format.

The held-out sets the issue measures on are not ours to tune on, so each domain gets its own
dev file built from other data:

- ``multiparagraph``: SQuAD dev questions (the shared ``prune/squad_dev.jsonl``) with their
  paragraph hidden among nine other paragraphs of the same article, shuffled: ten paragraphs of
  one topic, the long, same-subject context where a threshold tuned on one paragraph cuts too
  much.
- ``multihop``: multi-hop questions with their supporting-fact sentences (a JSONL of
  ``{"question", "evidence": [sentence, ...]}``, e.g. HotpotQA train questions; see
  agentmem/train/DATA.md) among other questions' evidence groups, the ones BM25 finds closest
  to the question first (hard distractors, as HotpotQA's distractor setting retrieves them).
  The second hop rarely shares words with the question: the case where embeddings fall short.
- ``chat``: long two-speaker conversations in the LoCoMo JSON layout (``bench history``) from
  Schema-Guided Dialogue dialogues, questions with known evidence turns
  (agentmem/train/chat_dev.py): the history settings are chosen on it, never on LoCoMo.

- ``hotpot``: HotpotQA *train* rows in HotpotQA's own distractor layout (two gold paragraphs
  among eight retrieved ones, supporting-fact sentences labelled): the shape of the issue's
  held-out multi-hop set, for a check, not for choosing.

``python -m agentmem.train.dev_sets multihop SRC OUT [GROUPS SEED]`` (8 distractor groups, seed
13 by default) / ``... multiparagraph SQUAD_DEV OUT`` / ``... chat SGD_FOLDER OUT
[CONVERSATIONS SESSIONS SEED]`` (4 conversations of 55 sessions, seed 13 by default) /
``... hotpot HOTPOT_TRAIN_ROWS.json OUT``.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from agentmem.lexical import BM25Index, terms


def read_rows(path: Path) -> list[dict]:
    """A JSONL file's rows (blank lines skipped)."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]


def write_rows(out: Path, rows: list[dict]) -> None:
    """Rows as JSONL (UTF-8, one JSON object a line), creating the folder."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows),
                   encoding="utf-8")


def join_groups(groups: list[tuple[list[str], list[int]]]) -> tuple[list[str], list[int]]:
    """Paragraphs with their sentence labels, in order, as one passage's sentences and labels."""
    return ([sentence for paragraph, _ in groups for sentence in paragraph],
            [label for _, labels in groups for label in labels])


def is_dev(number: int) -> bool:
    """The held-out slice of a multi-hop source: two rows in five are dev, never trained on."""
    return number % 5 < 2


def multihop_records(rows: list[dict], rng: random.Random, *, distractors: tuple[int, int],
                     prefix: str = "multihop") -> list[dict]:
    """Evidence sentences (labelled 1, in two halves placed apart: the two hops' paragraphs)
    among a random number (within ``distractors``) of other rows' evidence groups, closest to
    the question by BM25 first. Distractors come from ``rows`` only, so a split stays closed."""
    rows = [r for r in rows if r.get("evidence")]
    index = BM25Index()
    for row in rows:
        index.add(terms(" ".join(row["evidence"])))
    records = []
    for number, row in enumerate(rows):
        scores = index.scores(terms(row["question"]))
        scores[number] = -1.0
        count = rng.randint(*distractors)
        nearest = [int(i) for i in scores.argsort()[::-1][:count]]
        evidence = list(row["evidence"])
        half = max(1, len(evidence) // 2)
        hops = [evidence[:half], evidence[half:]] if len(evidence) > 1 else [evidence]
        groups = [(h, 1) for h in hops if h] + [(list(rows[i]["evidence"]), 0) for i in nearest]
        rng.shuffle(groups)
        records.append({"id": f"{prefix}-{row.get('number', number)}", "question": row["question"],
                        "title": None, "sentences": [s for group, _ in groups for s in group],
                        "labels": [label for group, label in groups for _ in group],
                        "type": row.get("type")})
    return records


def read_multihop_rows(source: Path, *, dev: bool) -> list[dict]:
    """The dev (or the training) slice of a multi-hop JSONL, each row with its line number."""
    lines = [line for line in source.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [{**json.loads(line), "number": number} for number, line in enumerate(lines)
            if is_dev(number) == dev]


def multihop(source: Path, out: Path, *, seed: int = 13, distractor_groups: int = 8) -> int:
    """The multi-hop dev file: the dev slice, ``distractor_groups`` distractor groups each."""
    rows = read_multihop_rows(source, dev=True)
    records = multihop_records(rows, random.Random(seed),
                               distractors=(distractor_groups, distractor_groups))
    write_rows(out, records)
    return len(records)


def hotpot_rows(data: list[dict] | dict) -> list[dict]:
    """HotpotQA rows in HotpotQA's own layout, from that layout (a JSON list) or from a sample
    file that stores each row as ``sources`` (``title``, ``text`` as sentences,
    ``gold_sentence_indices``) under ``examples`` (agentmem/train/DATA.md names it)."""
    if isinstance(data, list):
        return data
    rows: list[dict] = []
    for example in data["examples"]:
        sources = example["sources"]
        rows.append({"_id": f"train{example.get('dataset_index', len(rows))}",
                     "question": example["question"], "answer": example.get("answer"),
                     "context": [[s["title"], s["text"]] for s in sources],
                     "supporting_facts": [[s["title"], i] for s in sources
                                          for i in s.get("gold_sentence_indices", [])]})
    return rows


def hotpot_paragraphs(row: dict) -> list[tuple[str, list[tuple[str, int]]]] | None:
    """A HotpotQA row's paragraphs in order, each as (title, [(sentence, label)]): sentences
    stripped, blanks dropped, the supporting facts labelled 1; None when a fact names a
    sentence the context lacks (such a row is skipped rather than half-labelled)."""
    facts = {(title, int(index)) for title, index in row["supporting_facts"]}
    paragraphs = [(title, [(sentence.strip(), int((title, index) in facts))
                           for index, sentence in enumerate(body) if sentence.strip()])
                  for title, body in row["context"]]
    found = sum(label for _, body in paragraphs for _, label in body)
    return paragraphs if found == len(facts) else None


def hotpot_records(rows: list[dict]) -> list[dict]:
    """HotpotQA's own distractor layout (``context``: ``[title, [sentence, ...]]`` for its ten
    paragraphs, ``supporting_facts``: ``[title, sentence index]``) as prune records: every
    paragraph's sentences in the given order, the supporting facts labelled 1
    (``hotpot_paragraphs``)."""
    records = []
    for number, row in enumerate(rows):
        paragraphs = hotpot_paragraphs(row)
        if paragraphs is None:
            continue
        pairs = [pair for _, body in paragraphs for pair in body]
        records.append({"id": f"hotpot-{row.get('_id', number)}", "question": row["question"],
                        "title": None, "sentences": [s for s, _ in pairs],
                        "labels": [label for _, label in pairs],
                        "type": row.get("type"), "level": row.get("level")})
    return records


def hotpot(source: Path, out: Path) -> int:
    """A check file in HotpotQA's ten-paragraph layout from a JSON list of *train* rows
    (agentmem/train/DATA.md names the source); never HotpotQA's dev split."""
    records = hotpot_records(hotpot_rows(json.loads(source.read_text(encoding="utf-8"))))
    write_rows(out, records)
    return len(records)


def multiparagraph(squad_dev: Path, out: Path, *, seed: int = 13, paragraphs: int = 10,
                   limit: int | None = 300) -> int:
    """Answerable SQuAD dev questions, their paragraph among ``paragraphs - 1`` others of the
    same article (a sample of ``limit`` questions, to keep CPU evaluation short)."""
    rows = read_rows(squad_dev)
    by_title: dict[str, list[tuple[str, ...]]] = {}
    for row in rows:
        group = by_title.setdefault(row.get("title") or "", [])
        if tuple(row["sentences"]) not in group:
            group.append(tuple(row["sentences"]))
    rng = random.Random(seed)
    answerable = [r for r in rows if any(r["labels"])]
    rng.shuffle(answerable)
    records = []
    for row in answerable[:limit]:
        others = [list(p) for p in by_title[row.get("title") or ""] if list(p) != row["sentences"]]
        chosen = rng.sample(others, min(paragraphs - 1, len(others)))
        groups = [(row["sentences"], row["labels"])] + [(p, [0] * len(p)) for p in chosen]
        rng.shuffle(groups)
        sentences, labels = join_groups(groups)
        records.append({"id": row["id"] + "-x10", "question": row["question"], "title": None,
                        "sentences": sentences, "labels": labels})
    write_rows(out, records)
    return len(records)


if __name__ == "__main__":
    kind, source, target = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    if kind == "chat":  # chat SGD_FOLDER OUT [CONVERSATIONS SESSIONS SEED]
        from agentmem.train.chat_dev import chat

        numbers = [int(x) for x in sys.argv[4:7]]
        options = dict(zip(("conversations", "sessions", "seed"), numbers))
        count = chat(source, target, **options)
    elif kind == "multihop" and len(sys.argv) > 4:  # multihop SRC OUT GROUPS SEED
        count = multihop(source, target, distractor_groups=int(sys.argv[4]), seed=int(sys.argv[5]))
    elif kind == "hotpot":  # hotpot HOTPOT_TRAIN_ROWS.json OUT
        count = hotpot(source, target)
    else:
        count = (multihop if kind == "multihop" else multiparagraph)(source, target)
    print(f"wrote {count} records to {target}")
