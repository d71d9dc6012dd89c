"""Training and held-out pairs for the NLI model, from data whose licenses allow shipping weights.

Every example carries the set of labels it allows rather than one label: a 3-way source allows
exactly one, while the binary sources (ProSeCCo, the binary MultiNLI sample) only say
"contradiction" or "not contradiction", and forcing their negatives into one class would teach
the model that every entailment is neutral. The loss maximises the probability of the allowed
set. Contradiction is symmetric, so a swapped pair keeps the knowledge that it contradicts (or
does not); swapping also teaches that the newer statement may come first in a clash query.
ANLI is CC BY-NC: it is read only by ``held_out_sets`` and never enters training.
"""

from __future__ import annotations

import csv
import hashlib
import json
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

LABEL_IDS = {"contradiction": 0, "entailment": 1, "neutral": 2}
CONTRADICTION: frozenset[int] = frozenset({0})
ENTAILMENT: frozenset[int] = frozenset({1})
NOT_CONTRADICTION: frozenset[int] = frozenset({1, 2})
WRITTEN_PAIRS = Path(__file__).parent / "data" / "chat_clash_pairs_written.jsonl"
WRITTEN_HELD_OUT_PERCENT = 10  # of the written pairs, by a hash of the pair: never trained on
ORDERED_KINDS = frozenset({"update"})  # consistent in one order only: never swapped


@dataclass(frozen=True)
class Example:
    premise: str
    hypothesis: str
    allowed: frozenset[int]  # label ids that count as correct
    source: str

    @property
    def label(self) -> int | None:
        """The single gold label id, or None for a binary (contradiction vs not) example."""
        return next(iter(self.allowed)) if len(self.allowed) == 1 else None


def _three_way(name: str) -> frozenset[int]:
    return frozenset({LABEL_IDS[name.strip().lower()]})


def read_dnli(path: Path, source: str = "dnli") -> list[Example]:
    """DNLI TSV: dialogue context (speaker tags kept), hypothesis, label."""
    out = []
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            parts = line.rstrip("\n").split("\t")
            if len(parts) == 3 and parts[2].strip().lower() in LABEL_IDS:
                out.append(Example(parts[0].strip(), parts[1].strip(), _three_way(parts[2]), source))
    return out


def read_snli(path: Path, source: str = "snli") -> list[Example]:
    """SNLI jsonl; records without an annotator majority (gold_label "-") are skipped."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record["gold_label"] in LABEL_IDS:
            out.append(Example(record["sentence1"], record["sentence2"],
                               _three_way(record["gold_label"]), source))
    return out


def read_prosecco(path: Path) -> list[Example]:
    """ProSeCCo: the two reconstructed propositions of one speaker, self-contradiction or not."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        allowed = CONTRADICTION if record["label"] == "self-contradiction" else NOT_CONTRADICTION
        out.append(Example(record["proposition_1"], record["proposition_2"], allowed, "prosecco"))
    return out


def read_mnli_binary(path: Path) -> list[Example]:
    """The binary MultiNLI dev-matched sample: 1 = contradiction, 0 = entailment or neutral."""
    with path.open(encoding="utf-8", newline="") as handle:
        return [Example(row["sentence1"].strip(), row["sentence2"].strip(),
                        CONTRADICTION if row["label"].strip() == "1" else NOT_CONTRADICTION, "mnli")
                for row in csv.DictReader(handle)]


def read_anli(path: Path) -> list[Example]:
    """ANLI jsonl (labels e/n/c). Evaluation only: CC BY-NC."""
    names = {"e": "entailment", "n": "neutral", "c": "contradiction"}
    return [Example(r["context"], r["hypothesis"], _three_way(names[r["label"]]), "anli")
            for r in map(json.loads, path.read_text(encoding="utf-8").splitlines())]


def read_pairs(path: Path | Sequence[Path], *, held_out: bool = False,
               kinds: frozenset[str] | None = None, source: str = "written") -> list[Example]:
    """A pair file: one speaker's earlier and newer sentence, "contradiction" or "consistent",
    with a kind; the written chat pairs (``chat_clash_pairs_written.jsonl``, DATA.md) or the
    task-dialogue pairs of ``sgd_pairs`` (``source`` names them).

    Contradictions here mostly need meaning or world knowledge ("we live in Oslo" / "here in
    Denmark..."), and about 40% of the newer sentences are questions that presuppose the fact,
    which the template pairs of ``nli_synth`` do not teach. A restatement is entailment; every
    other consistent pair allows entailment or neutral. ``held_out`` returns the pairs kept out
    of training (a fixed share by a hash of the pair) instead of the others; ``kinds`` keeps
    only pairs of those kinds. Several files read as their concatenation (the written pairs
    come in one file per writing round).
    """
    out = []
    for line in pair_lines(path):
        record = json.loads(line)
        pair = f"{record['older']}\t{record['newer']}"
        bucket = int(hashlib.sha256(pair.encode()).hexdigest()[:8], 16) % 100
        kind = record.get("kind", "")
        if (bucket < WRITTEN_HELD_OUT_PERCENT) != held_out or (kinds is not None and kind not in kinds):
            continue
        allowed = (CONTRADICTION if record["label"] == "contradiction"
                   else ENTAILMENT if kind == "restatement" else NOT_CONTRADICTION)
        out.append(Example(record["older"], record["newer"], allowed, source))
    return out


def pair_lines(path: Path | Sequence[Path]) -> list[str]:
    """The lines of a pair file, or of several in the order given."""
    paths = [path] if isinstance(path, Path) else list(path)
    return [line for one in paths for line in one.read_text(encoding="utf-8").splitlines()]


def written_examples(path: Path | Sequence[Path], *, repeat: int = 1) -> list[Example]:
    """The written pairs' training share ``repeat`` times, each time with a swapped copy of
    every pair whose kind is not order-bound (an announced update is consistent one way only)."""
    kinds = frozenset(json.loads(line).get("kind", "") for line in pair_lines(path))
    both_ways = read_pairs(path, kinds=kinds - ORDERED_KINDS)
    return (read_pairs(path) + swapped(both_ways)) * repeat


def swapped(examples: list[Example]) -> list[Example]:
    """Hypothesis first: contradiction stays contradiction, anything else is not contradiction."""
    return [replace(e, premise=e.hypothesis, hypothesis=e.premise, source=e.source + "-swap",
                    allowed=CONTRADICTION if e.allowed == CONTRADICTION else NOT_CONTRADICTION)
            for e in examples]


def build_training_set(data_dir: Path, *, seed: int = 13, swap_fraction: float = 0.5,
                       dnli_max: int | None = None, limit: int | None = None,
                       synthetic: int = 0, written: Path | Sequence[Path] | None = None,
                       written_repeat: int = 1, dialogue_pairs: Path | None = None,
                       dialogue_max: int | None = None, chat_pairs: Path | None = None,
                       chat_max: int | None = None, small_talk: Path | None = None,
                       small_talk_repeat: int = 1) -> list[Example]:
    """Shippable training pairs, plus a swapped copy of ``swap_fraction`` of them, shuffled.

    ``dnli_max`` caps the DNLI pairs (random sample): they are most of the data and the longest,
    so the cap is what fits a training run into a CPU budget. ``synthetic`` adds that many
    generated chat pairs (``nli_synth``, seeded with ``seed``); they are not swapped, because
    their negatives include announced updates, which are only consistent in one order.
    ``written`` adds the written chat pairs (``read_pairs``, training share) ``written_repeat``
    times, each time with a swapped copy of every pair whose kind is not order-bound.
    ``dialogue_pairs`` adds consistent pairs of real task dialogues in the same format (a
    random ``dialogue_max`` of their training share; see ``sgd_pairs``). ``chat_pairs`` adds
    the pairs of written general-assistant chats (``chat_pairs``: consistent candidate pairs,
    of which a random ``chat_max``, and every written self-contradiction), each with a swapped
    copy (both kinds are symmetric). ``small_talk`` adds written pairs of open-domain small
    talk (a speaker's own facts, likes and life: ``chat_clash_pairs_small_talk.jsonl``, DATA.md;
    the written chat pairs are an assistant's and its user's) ``small_talk_repeat`` times, each
    with a swapped copy: none of its kinds is order-bound.
    """
    nli = data_dir / "nli"
    rng = random.Random(seed)
    dnli = read_dnli(nli / "dnli" / "data.csv")
    if dnli_max is not None and dnli_max < len(dnli):
        dnli = rng.sample(dnli, dnli_max)
    base = (dnli
            + read_prosecco(nli / "prosecco" / "ProSeCCo_final.json")
            + read_mnli_binary(nli / "prosecco" / "mnli_dev_matched_binary_42.csv")
            + read_snli(nli / "snli" / "snli_1.0_dev.jsonl"))
    extra = swapped(rng.sample(base, int(len(base) * swap_fraction)))
    examples = base + extra
    if synthetic:
        from agentmem.train.nli_synth import synthetic_examples

        examples += synthetic_examples(synthetic, seed=seed, data_dir=data_dir)
    if written is not None:
        examples += written_examples(written, repeat=written_repeat)
    if dialogue_pairs is not None:
        pairs = read_pairs(dialogue_pairs, source="sgd")
        if dialogue_max is not None and dialogue_max < len(pairs):
            pairs = rng.sample(pairs, dialogue_max)
        examples += pairs
    if chat_pairs is not None:
        pairs = read_pairs(chat_pairs, source="general_chat")
        consistent = [e for e in pairs if e.allowed != CONTRADICTION]
        if chat_max is not None and chat_max < len(consistent):
            consistent = rng.sample(consistent, chat_max)
        pairs = [e for e in pairs if e.allowed == CONTRADICTION] + consistent
        examples += pairs + swapped(pairs)
    if small_talk is not None:
        pairs = read_pairs(small_talk, source="small_talk")
        examples += (pairs + swapped(pairs)) * small_talk_repeat
    rng.shuffle(examples)
    return examples[:limit]


SYNTHETIC_HELD_OUT_SEED = 9001


def held_out_sets(data_dir: Path, synthetic: int = 0,
                  written: Path | Sequence[Path] | None = None,
                  chat_pairs: Path | None = None,
                  small_talk: Path | None = None) -> dict[str, list[Example]]:
    """The sets metrics are reported on; none of them is trained on.

    ``synthetic`` adds that many generated chat pairs from a seed no training run uses (same
    templates, other draws, so it checks fit to the synthetic task rather than generalisation);
    ``written`` the written pairs' held-out share (same writers, so the same caveat), and
    ``chat_pairs`` the general-assistant chat pairs' (pairs of the same chats as trained ones),
    ``small_talk`` the small-talk pairs' (same writers again).
    """
    nli = data_dir / "nli"
    sets = {"dnli_test_3": read_dnli(nli / "dnli" / "test_3_data.csv", "dnli_test_3"),
            "snli_test": read_snli(nli / "snli" / "snli_1.0_test.jsonl", "snli_test"),
            "anli_r1_dev (eval only)": read_anli(nli / "anli" / "R1" / "dev.jsonl")}
    if synthetic:
        from agentmem.train.nli_synth import synthetic_examples

        sets["synthetic_chat (binary)"] = synthetic_examples(
            synthetic, seed=SYNTHETIC_HELD_OUT_SEED, data_dir=data_dir)
    if written is not None:
        sets["written_chat (held-out share, binary)"] = _binary(read_pairs(written, held_out=True))
    if chat_pairs is not None:
        sets["general_chat (held-out share, binary)"] = _binary(
            read_pairs(chat_pairs, held_out=True, source="general_chat"))
    if small_talk is not None:
        sets["small_talk (held-out share, binary)"] = _binary(
            read_pairs(small_talk, held_out=True, source="small_talk"))
    return sets


def _binary(examples: list[Example]) -> list[Example]:
    """A pair file's held-out share judged contradiction or not (a restatement's entailment
    counts as "not contradiction")."""
    return [replace(e, allowed=e.allowed if e.allowed == CONTRADICTION else NOT_CONTRADICTION)
            for e in examples]


def describe(examples: list[Example]) -> dict[str, dict[str, int]]:
    """Counts per source and label (binary negatives as "not_contradiction"), for the card."""
    names = {v: k for k, v in LABEL_IDS.items()}
    counts: dict[str, Counter] = {}
    for e in examples:
        label = names[e.label] if e.label is not None else "not_contradiction"
        counts.setdefault(e.source, Counter())[label] += 1
    return {source: dict(sorted(c.items())) for source, c in sorted(counts.items())}
