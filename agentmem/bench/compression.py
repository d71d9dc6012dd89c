"""Token-level compression on the prune bench: extra tokens saved, answers kept.

Sentence pruning decides which sentences stay; compression (``agentmem.assembly.compression``)
then drops the least valuable words inside them, so gold-sentence recall is the same by
construction. What it can cost is the answer itself, so the SQuAD answer strings (the raw
SQuAD JSON the prune file was made from, matched by question id) are the evidence: of the
questions whose answer survives sentence pruning, the share whose answer still appears,
word for word, after compression. The baseline drops the same number of words chosen at
random (the same protections), so the pruner's token values are measured, not the rules.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

RATES = (0.9, 0.75, 0.6, 0.5)


def squad_answers(path: Path) -> dict[str, list[str]]:
    """``squad-<id>`` -> its gold answer texts (answerable questions only)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    return {f"squad-{qa['id']}": [a["text"] for a in qa["answers"]]
            for article in data["data"] for paragraph in article["paragraphs"]
            for qa in paragraph["qas"] if qa.get("answers")}


def compression_result(records: Sequence[Any], scores: Sequence[Any], keeps: Sequence[Sequence[bool]],
                       tokenizer: Any, answers: dict[str, list[str]],
                       rates: Sequence[float] = RATES) -> dict[str, Any]:
    from agentmem.assembly.compression import compress, is_compressible, token_words
    from agentmem.text import count_tokens

    pruned_texts, word_lists = [], []
    for record, score, keep in zip(records, scores, keeps):
        first = 1 if record.title else 0
        sentences = list(record.sentences)
        words = token_words(tokenizer, sentences, score.kept_fraction_by_threshold[first:], first)
        kept = [i for i, k in enumerate(keep) if k]
        pruned_texts.append([sentences[i] for i in kept])
        word_lists.append([words[i] for i in kept])
    sentence_tokens = sum(count_tokens(" ".join(texts)) for texts in pruned_texts)
    with_answer = [n for n, (record, texts) in enumerate(zip(records, pruned_texts))
                   if any(a in " ".join(texts) for a in answers.get(record.id, []))]
    out: dict[str, Any] = {"sentence_pruned_tokens": sentence_tokens,
                           "answers_after_sentence_pruning": len(with_answer),
                           "answerable": sum(1 for r in records if answers.get(r.id)), "rates": {}}
    generator = np.random.default_rng(0)  # the baseline: the same drops, words valued at random
    shuffled = [[[replace(w, value=float(generator.random())) for w in words] for words in lists]
                for lists in word_lists]
    for rate in rates:
        out["rates"][str(rate)] = row = {}
        for name, valued in (("pruner", word_lists), ("random_words", shuffled)):
            compressed = [" ".join(compress(text, words, rate) if is_compressible(text) else text
                                   for text, words in zip(texts, record_words))
                          for texts, record_words in zip(pruned_texts, valued)]
            total = sum(count_tokens(text) for text in compressed)
            found = sum(1 for n in with_answer
                        if any(a in compressed[n] for a in answers[records[n].id]))
            row[name] = {"tokens": total,
                         "extra_savings": 1 - total / sentence_tokens if sentence_tokens else 0.0,
                         "answers_kept": found / len(with_answer) if with_answer else 0.0}
    return out
