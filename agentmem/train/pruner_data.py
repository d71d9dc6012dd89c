"""Training pairs for the pruner, from data whose license allows shipping the weights.

- SQuAD 2.0 train (CC BY-SA 4.0): the question, its paragraph (title first), answer sentences
  kept; passages randomly cropped (1-10 sentences) or widened with another paragraph of the
  article; unanswerable questions and paragraphs of other articles as negatives.
- WikiText-2 (CC BY-SA 3.0): self-supervised pairs, a sentence's content words as the query
  and that sentence as the one to keep.
- Conversational variants: a share of the passages rendered as chat turns ("Name: text"), so
  the model learns to read speaker-prefixed history the way sessions present it.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from pathlib import Path

from agentmem.text import sentences as split

NAMES = ["Alex", "Sam", "Jordan", "Maria", "Chen", "Priya", "Tom", "Aisha", "User", "Assistant"]
STOPWORDS = set("""a an the of and or to in on at for with by from as is was were are be been being
it its this that these those he she they them his her their there which who whom what when where
why how not no but if then than so such also into over after before during about between""".split())


@dataclass
class Example:
    query: str
    sentences: list[str]
    labels: list[int]
    # a passage longer than one model window trains on every window, as the stage reads it
    # (HotpotQA's ten paragraphs); otherwise only the first window is read
    every_window: bool = False

    @property
    def relevant(self) -> int:
        return int(any(self.labels))


def _chatify(example: Example, rng: random.Random) -> Example:
    speakers = rng.sample(NAMES, 2)
    body = [f"{speakers[i % 2]}: {s}" for i, s in enumerate(example.sentences[1:])]
    return Example(example.query, [example.sentences[0], *body], example.labels)


def _crop(sentences: list[str], labels: list[int], rng: random.Random) -> tuple[list[str], list[int]]:
    """A window of 1-10 sentences that contains every positive (or any window for negatives)."""
    if len(sentences) <= 1:
        return sentences, labels
    positives = [i for i, label in enumerate(labels) if label]
    length = rng.randint(1, 10)
    low, high = (min(positives), max(positives)) if positives else (0, 0)
    length = max(length, high - low + 1)
    start_min, start_max = max(0, high - length + 1), min(low, len(sentences) - length)
    start = rng.randint(start_min, max(start_min, start_max)) if positives else rng.randint(0, max(0, len(sentences) - length))
    return sentences[start:start + length], labels[start:start + length]


def squad_examples(prune_file: Path, articles_file: Path, rng: random.Random) -> list[Example]:
    articles = json.loads(Path(articles_file).read_text())["data"]
    records = [json.loads(line) for line in Path(prune_file).read_text().splitlines()]
    return squad_examples_from(records, articles, rng)


def squad_examples_from(records: list[dict], articles: list[dict], rng: random.Random) -> list[Example]:
    """Examples from prune records of SQuAD questions and the articles they come from."""
    paragraphs = {a["title"].replace("_", " "): [split(p["context"]) for p in a["paragraphs"]]
                  for a in articles}
    titles = list(paragraphs)
    out = []
    for record in records:
        title = record.get("title") or ""
        sentences, labels = list(record["sentences"]), list(record["labels"])
        roll = rng.random()
        if roll < 0.45:
            sentences, labels = _crop(sentences, labels, rng)
        elif roll < 0.7 and paragraphs.get(title):
            extra = rng.choice(paragraphs[title])
            if extra != sentences:
                if rng.random() < 0.5:
                    sentences, labels = sentences + extra, labels + [0] * len(extra)
                else:
                    sentences, labels = extra + sentences, [0] * len(extra) + labels
        example = Example(record["question"], [title, *sentences], [0, *labels])
        out.append(_chatify(example, rng) if rng.random() < 0.25 else example)
        others = [t for t in titles if t != title]
        if rng.random() < 0.5 and others:  # a paragraph of another article: nothing to keep
            other = rng.choice(others)
            negative = rng.choice(paragraphs[other])
            out.append(Example(record["question"], [other, *negative], [0] * (len(negative) + 1)))
    return out


def _pseudo_query(sentence: str, rng: random.Random) -> str | None:
    words = [w for w in re.findall(r"[A-Za-z][A-Za-z'-]+|\d+", sentence) if w.lower() not in STOPWORDS]
    if len(words) < 4:
        return None
    keep = max(3, int(len(words) * rng.uniform(0.35, 0.65)))
    chosen = sorted(rng.sample(range(len(words)), min(keep, len(words))))
    return " ".join(words[i] for i in chosen)


def wikitext_examples(raw_file: Path, rng: random.Random, limit: int) -> list[Example]:
    title, paragraphs = "", []
    for line in Path(raw_file).read_text(encoding="utf-8").splitlines():
        line = line.strip()
        heading = re.fullmatch(r"=\s([^=].*?)\s=", line)
        if heading:
            title = heading.group(1)
        elif len(line) > 200 and not line.startswith("="):
            parts = [s for s in split(line.replace(" @-@ ", "-").replace(" @,@ ", ",").replace(" @.@ ", "."))
                     if len(s) > 20]
            if len(parts) >= 3:
                paragraphs.append((title, parts))
    rng.shuffle(paragraphs)
    out = []
    for title, parts in paragraphs[:limit]:
        target = rng.randrange(len(parts))
        query = _pseudo_query(parts[target], rng)
        if query is None:
            continue
        sentences, labels = _crop(parts, [int(i == target) for i in range(len(parts))], rng)
        out.append(Example(query, [title, *sentences], [0, *labels]))
        if rng.random() < 0.4:
            other_title, other = rng.choice(paragraphs)
            if other is not parts:
                out.append(Example(query, [other_title, *other[:8]], [0] * (min(8, len(other)) + 1)))
    return out


def build_training_set(data_dir: Path, *, seed: int, wikitext_limit: int = 1500) -> list[Example]:
    rng = random.Random(seed)
    examples = squad_examples(data_dir / "prune" / "squad_train.jsonl",
                              data_dir / "squad" / "train_articles.json", rng)
    examples += wikitext_examples(data_dir / "wikitext2" / "wiki.test.raw", rng, wikitext_limit)
    rng.shuffle(examples)
    return examples
