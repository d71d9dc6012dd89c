"""The broader training mixture of issue 15: the shared SQuAD set plus data fetched from public
snapshots (sources, commits and licences in agentmem/train/DATA.md), all kept outside the repo
under one folder (``--extra``):

- ``squad_train_v2.json``: more SQuAD 2.0 train articles (official train split, CC BY-SA 4.0),
  converted to the prune format here (sentences by agentmem's splitter, a sentence is kept when
  it overlaps an annotated answer; unanswerable questions keep nothing).
- ``hotpotqa_train_evidence.jsonl``: HotpotQA train questions with their supporting-fact
  sentences (CC BY-SA 4.0); the training slice only (``dev_sets.is_dev`` holds the rest out),
  passages built with BM25-near distractors so the second hop must be found by reading.
- ``musique_train.json``: MuSiQue train rows (CC BY 4.0): each hop's supporting Wikipedia
  paragraph among the row's own retrieved distractor paragraphs, the sentences naming a hop's
  answer labelled (``musique_examples``): long multi-paragraph contexts in HotpotQA's shape.
- ``hotpotqa_train_distractor.json``: HotpotQA **train** rows in HotpotQA's own distractor
  layout (ten paragraphs, supporting-fact sentences; CC BY-SA 4.0), read whole as the stage
  reads a long passage, every model window a training example (``hotpot_examples``): the
  shape of the issue's held-out multi-hop set, where the second hop is in another paragraph.
- Multi-paragraph passages (from the shared SQuAD train articles and the extra ones): a
  question's paragraph among 1-3 other paragraphs of the same article, no title, and for about
  half of the questions 2-3 same-article paragraphs without it (nothing to keep). The model otherwise only ever sees one
  paragraph, or another article's, so on ten same-topic paragraphs it keeps sentences of the
  wrong ones with confidence; these are the hard negatives of that setting.
- ``sgd/``: Schema-Guided Dialogue train files (CC BY-SA 4.0), turned into conversational QA
  passages by agentmem/train/pruner_chat.py (questions about earlier turns; never the chat dev
  set's files).
- Synthetic chat sessions: passages rendered as a dated multi-speaker conversation, with filler
  turns and turns of other passages in between, so the model learns to find evidence in
  speaker-prefixed history where a turn may carry no words of its own.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from agentmem.text import sentences, split_sentences
from agentmem.train.dev_sets import (
    hotpot_paragraphs,
    hotpot_rows,
    join_groups,
    multihop_records,
    read_multihop_rows,
)
from agentmem.train.pruner_chat import conversation_examples, read_train_dialogues
from agentmem.train.pruner_data import NAMES, Example, squad_examples_from

MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]
FILLERS = ["Oh nice!", "Really? Tell me more.", "Haha, that sounds fun.", "I see.",
           "That's great to hear!", "Wow, me too!", "Hmm, interesting.", "Thanks for sharing.",
           "How did that go?", "Good luck with that!"]


def squad_json_records(articles: list[dict]) -> list[dict]:
    """SQuAD JSON articles -> prune records (title, sentences, labels per question)."""
    records = []
    for article in articles:
        title = article["title"].replace("_", " ")
        for paragraph in article["paragraphs"]:
            context = paragraph["context"]
            spans = split_sentences(context)
            for qa in paragraph["qas"]:
                answers = [] if qa.get("is_impossible") else qa.get("answers", [])
                marked = [(a["answer_start"], a["answer_start"] + len(a["text"])) for a in answers]
                labels = [int(any(start < e and s < end for start, end in marked))
                          for s, e in spans]
                records.append({"id": f"squad-{qa['id']}", "question": qa["question"],
                                "title": title, "labels": labels,
                                "sentences": [context[s:e] for s, e in spans]})
    return records


def multiparagraph_examples(articles: list[dict], rng: random.Random, limit: int,
                            negative_share: float = 0.5) -> list[Example]:
    """``limit`` questions of ``articles`` (SQuAD JSON), each as its paragraph among 1-3 other
    paragraphs of the same article, in random order and without the title (as a long retrieved
    context reads), plus for ``negative_share`` of them 2-3 other paragraphs of that article
    alone, labelled 0: same topic, same names, no answer."""
    records = squad_json_records(articles)
    by_title: dict[str, list[list[str]]] = {}
    for record in records:
        group = by_title.setdefault(record["title"], [])
        if record["sentences"] not in group:
            group.append(record["sentences"])
    rng.shuffle(records)
    out = []
    for record in records[:limit]:
        others = [p for p in by_title[record["title"]] if p != record["sentences"]]
        if len(others) < 3:
            continue
        chosen = rng.sample(others, rng.randint(1, 3))
        groups = [(record["sentences"], record["labels"]), *((p, [0] * len(p)) for p in chosen)]
        rng.shuffle(groups)
        out.append(Example(record["question"], *join_groups(groups)))
        if rng.random() < negative_share:
            negatives = rng.sample(others, rng.randint(2, 3))
            out.append(Example(record["question"], [s for p in negatives for s in p],
                               [0] * sum(len(p) for p in negatives)))
    return out


def multihop_examples(source: Path, rng: random.Random) -> list[Example]:
    """The training slice as passages of 1-3 distractor groups (about one 224-token window)."""
    rows = read_multihop_rows(source, dev=False)
    return [Example(r["question"], r["sentences"], r["labels"])
            for r in multihop_records(rows, rng, distractors=(1, 3), prefix="multihop-train")]


def _hop_labels(hops: list[dict], paragraphs: dict[int, list[str]]) -> dict[int, list[int]]:
    """Per supporting paragraph, its sentences naming some hop's answer; empty when a hop's
    answer is in no sentence of its paragraph (the row is then not labelled at all)."""
    labelled: dict[int, list[int]] = {}
    for hop in hops:
        own = paragraphs.get(int(hop.get("paragraph_support_idx", -1)), [])
        names = [int(hop["answer"].lower() in s.lower()) for s in own]
        if not any(names):
            return {}
        previous = labelled.get(hop["paragraph_support_idx"], [0] * len(own))
        labelled[hop["paragraph_support_idx"]] = [max(a, b) for a, b in zip(previous, names)]
    return labelled


def musique_examples(source: Path, rng: random.Random, *, draws: int = 3,
                     distractors: tuple[int, int] = (4, 8),
                     negative_share: float = 0.3) -> list[Example]:
    """MuSiQue train rows (a JSON list in MuSiQue's own layout: ``paragraphs`` with
    ``is_supporting``, ``question_decomposition`` with each hop's ``answer`` and
    ``paragraph_support_idx``) as long Wikipedia contexts in HotpotQA's shape: every hop's
    supporting paragraph, split into sentences, among ``distractors`` of the row's own
    retrieved non-supporting paragraphs, shuffled, ``draws`` times with other distractors.

    MuSiQue labels paragraphs, not sentences; a sentence is labelled 1 when it names its hop's
    answer (what the hop asks for, in the paragraph that supports it). A row where some hop's
    answer is in no sentence of its paragraph is skipped rather than half-labelled. With
    ``negative_share``, a draw also yields 2-3 distractor paragraphs alone (nothing to keep)."""
    out = []
    for row in json.loads(source.read_text(encoding="utf-8")):
        paragraphs = {p["idx"]: sentences(p["paragraph_text"]) for p in row["paragraphs"]}
        labelled = _hop_labels(row.get("question_decomposition", []), paragraphs)
        if not labelled:
            continue
        others = [idx for idx, p in paragraphs.items() if idx not in labelled and p]
        for _ in range(draws):
            chosen = rng.sample(others, min(len(others), rng.randint(*distractors)))
            groups = [(paragraphs[i], labels) for i, labels in labelled.items()]
            groups += [(paragraphs[i], [0] * len(paragraphs[i])) for i in chosen]
            rng.shuffle(groups)
            out.append(Example(row["question"], *join_groups(groups)))
            if others and rng.random() < negative_share:
                alone = rng.sample(others, min(len(others), rng.randint(2, 3)))
                out.append(Example(row["question"], [s for i in alone for s in paragraphs[i]],
                                   [0] * sum(len(paragraphs[i]) for i in alone)))
    return out


def hotpot_examples(source: Path, rng: random.Random, *, draws: int = 2,
                    exclude: frozenset[str] = frozenset()) -> list[Example]:
    """HotpotQA train rows (a JSON list: ``question``, ``context`` as ``[title, [sentence, ...]]``
    for the ten paragraphs, ``supporting_facts`` as ``[title, sentence index]``) as whole
    passages, the supporting facts labelled, read in every window (``every_window``). The first
    draw keeps the row's paragraph order, later ones shuffle it (another split into windows,
    so the two hops fall together or apart). Rows whose question is in ``exclude`` (the check
    file's) are skipped, as are rows whose facts name a sentence the context lacks."""
    out = []
    for row in hotpot_rows(json.loads(source.read_text(encoding="utf-8"))):
        if row["question"].strip().lower() in exclude:
            continue
        paragraphs = hotpot_paragraphs(row)
        if paragraphs is None:
            continue
        for draw in range(draws):
            order = list(paragraphs)
            if draw:
                rng.shuffle(order)
            pairs = [pair for _, body in order for pair in body]
            out.append(Example(row["question"], [s for s, _ in pairs], [label for _, label in pairs],
                               every_window=True))
    return out


def _date(rng: random.Random) -> str:
    hour, minute = rng.randint(1, 12), rng.choice(["00", "15", "30", "45"])
    return (f"{rng.randint(1, 28)} {rng.choice(MONTHS)} {rng.randint(2019, 2024)}, "
            f"{hour}:{minute} {rng.choice(['am', 'pm'])}")


def chat_session(example: Example, others: list[Example], rng: random.Random) -> Example:
    """The passage as a dated two-speaker session: each sentence a turn, with filler turns and
    turns taken from other passages (all labelled 0) in between."""
    speakers = rng.sample(NAMES[:8], 2)
    sentences, labels = [f"[Session {rng.randint(1, 30)}, {_date(rng)}]"], [0]
    body = [(s, label) for s, label in zip(example.sentences, example.labels) if s]
    other = rng.choice(others)
    noise = [(s, 0) for s in other.sentences[1:] if s and not any(other.labels)]
    turns: list[tuple[str, int]] = []
    for item in body:
        turns.append(item)
        roll = rng.random()
        if roll < 0.3:
            turns.append((rng.choice(FILLERS), 0))
        elif roll < 0.5 and noise:
            turns.append(noise.pop(0))
    for number, (text, label) in enumerate(turns):
        sentences.append(f"{speakers[number % 2]}: {text}")
        labels.append(label)
    return Example(example.query, sentences, labels)


def build_mixture(base: list[Example], extra: Path | None, *, seed: int, squad_limit: int | None = None,
                  shared_limit: int | None = None, chat_share: float = 0.2,
                  multihop_draws: int = 4, shared_articles: list[dict] | None = None,
                  multiparagraph: int = 0, chat_qa: int = 0,
                  musique_draws: int = 3, hotpot_draws: int = 2,
                  hotpot_exclude: frozenset[str] = frozenset()) -> tuple[list[Example], dict[str, int]]:
    """``base`` (the shared-data examples, a random ``shared_limit`` of them) plus every extra
    source present under ``extra``, plus ``multiparagraph`` multi-paragraph questions drawn
    from ``shared_articles`` and the extra SQuAD articles, plus ``chat_qa`` conversational
    questions from ``extra/sgd`` (after the synthetic chats, which are rendered from prose
    only), each MuSiQue row drawn ``musique_draws`` times; returns the shuffled examples and a count per source."""
    rng = random.Random(seed + 1)
    out = rng.sample(base, min(shared_limit, len(base))) if shared_limit is not None else list(base)
    counts = {"shared": len(out)}
    squad_file = extra / "squad_train_v2.json" if extra is not None else None
    articles: list[dict] = []
    if squad_file is not None and squad_file.exists():
        articles = json.loads(squad_file.read_text(encoding="utf-8"))["data"]
        records = squad_json_records(articles)
        rng.shuffle(records)
        added = squad_examples_from(records[:squad_limit], articles, rng)
        counts["squad_train_v2"] = len(added)
        out += added
    if multiparagraph:
        added = multiparagraph_examples([*(shared_articles or []), *articles], rng, multiparagraph)
        counts["multiparagraph"] = len(added)
        out += added
    multihop_file = extra / "hotpotqa_train_evidence.jsonl" if extra is not None else None
    if multihop_file is not None and multihop_file.exists():
        added = [e for _ in range(multihop_draws)  # each draw: other distractors, other order
                 for e in multihop_examples(multihop_file, rng)]
        counts["hotpotqa_train"] = len(added)
        out += added
    musique_file = extra / "musique_train.json" if extra is not None else None
    if musique_file is not None and musique_file.exists():
        added = musique_examples(musique_file, rng, draws=musique_draws)
        counts["musique_train"] = len(added)
        out += added
    hotpot_file = extra / "hotpotqa_train_distractor.json" if extra is not None else None
    if hotpot_draws and hotpot_file is not None and hotpot_file.exists():
        added = hotpot_examples(hotpot_file, rng, draws=hotpot_draws, exclude=hotpot_exclude)
        counts["hotpotqa_train_distractor"] = len(added)
        out += added
    relevant = [e for e in out if any(e.labels) and not e.every_window]
    negatives = [e for e in out if not any(e.labels) and not e.every_window] or out
    chats = [chat_session(e, negatives, rng) for e in rng.sample(relevant, int(chat_share * len(relevant)))]
    counts["synthetic_chat"] = len(chats)
    out += chats
    sgd = extra / "sgd" if extra is not None else None
    if chat_qa and sgd is not None and sgd.is_dir():
        added = conversation_examples(read_train_dialogues(sgd), rng, chat_qa)
        counts["sgd_chat_qa"] = len(added)
        out += added
    rng.shuffle(out)
    return out, counts
