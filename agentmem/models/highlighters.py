"""Other sentence highlighters as pruner backends, loaded by name or folder like Provence.

OpenSearch's semantic highlighter (``opensearch-project/opensearch-semantic-highlighter-v1``,
Apache-2.0) is a BERT cross-encoder over ``[CLS] query [SEP] document [SEP]`` (query in
segment 0, document in segment 1) whose token states are averaged per sentence and
classified by one linear layer (``classifier``, two labels); a sentence is kept when its
positive probability reaches 0.5, and when none does, the best one is kept if it reaches
0.05. Its checkpoint is a ``BertConfig`` with ``BertTaggerForSentenceExtractionWithBackoff``
in ``architectures`` and the state dict ``bert.*`` + ``classifier.*``; the model is rebuilt
here from those facts (no remote code). It uses BERT's uncased tokenizer: the folder must
hold its tokenizer files.

A backend is a ``Pruner`` subclass, so the prune stage, ``/v1/highlight`` and ``process()``
use it unchanged: per sentence it reports its probability for every one of its tokens, so
the sentence rules (``mean_prob``) and token-level compression see one value per sentence.
Not done yet: Zilliz's semantic-highlight model (its layout could not be checked here).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from agentmem.models.provence import load_state, resolve_folder
from agentmem.models.pruner import Pruner, SentenceScores

OPENSEARCH_ARCHITECTURE = "BertTaggerForSentenceExtractionWithBackoff"


class SentenceTagger(nn.Module):
    """BERT, token states averaged per sentence, a two-label classifier (OpenSearch layout)."""

    def __init__(self, config):
        super().__init__()
        from transformers import BertModel

        self.bert = BertModel(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, getattr(config, "num_labels", 2))

    def forward(self, input_ids, attention_mask, token_type_ids, sentence_ids, sentences: int):
        """Positive probability per (row, sentence): [B, sentences]; a sentence with no
        token in a row gets 0."""
        hidden = self.dropout(self.bert(input_ids=input_ids, attention_mask=attention_mask,
                                        token_type_ids=token_type_ids)[0])
        member = (sentence_ids.unsqueeze(-1) == torch.arange(sentences)).float()  # [B, T, S]
        counts = member.sum(dim=1).clamp(min=1).unsqueeze(-1)
        pooled = torch.einsum("bts,bth->bsh", member, hidden) / counts
        probabilities = torch.softmax(self.classifier(pooled).float(), dim=-1)[..., 1]
        return probabilities * (member.sum(dim=1) > 0)


class OpenSearchHighlighter(Pruner):
    """OpenSearch's semantic highlighter behind the Pruner API (threshold 0.5, backoff 0.05)."""

    backoff = 0.05

    def __init__(self, model, tokenizer, config, **kwargs):
        super().__init__(model, tokenizer, config, **kwargs)
        self.rule, self.threshold = "mean_prob", 0.5

    @torch.inference_mode()
    def score_batch(self, pairs: Sequence[tuple[str, Sequence[str]]], batch_size: int = 32
                    ) -> list[SentenceScores]:
        results = []
        for query, sentences in pairs:
            per_sentence = np.zeros(len(sentences), dtype=np.float32)
            lengths = np.zeros(len(sentences), dtype=np.int64)
            with self._lock:
                for block in self._blocks(query, sentences):
                    ids = torch.tensor([block.input_ids])
                    first_sep = block.input_ids.index(self.tokenizer.sep_token_id)
                    segments = torch.tensor([[0] * (first_sep + 1)
                                             + [1] * (len(block.input_ids) - first_sep - 1)])
                    owners = torch.tensor([[o if o >= 0 else -100 for o in block.owners]])
                    [probabilities] = self.model(ids, torch.ones_like(ids), segments, owners,
                                                 len(sentences)).numpy()
                    present = np.bincount([o for o in block.owners if o >= 0],
                                          minlength=len(sentences)) > 0
                    per_sentence[present] = np.maximum(per_sentence[present], probabilities[present])
                    lengths += np.bincount([o for o in block.owners if o >= 0],
                                           minlength=len(sentences))
            if len(sentences) and per_sentence.max() < self.threshold \
                    and per_sentence.max() >= self.backoff:  # keep the best one (its backoff)
                per_sentence[int(per_sentence.argmax())] = np.float32(self.threshold + 1e-6)
            results.append(SentenceScores(
                probabilities=[float(p) for p in per_sentence],
                kept_fraction_by_threshold=[np.full(int(n), p, dtype=np.float32)
                                            for n, p in zip(lengths, per_sentence)],
                ranking_score=float(per_sentence.max()) if len(sentences) else 0.0))
        return results


def load_scorer(name_or_path: str | os.PathLike, *, allow_network: bool | None = None) -> Pruner:
    """A pruner backend by folder or hub name: OpenSearch's layout when its config names that
    architecture, else a Provence-layout checkpoint."""
    folder = resolve_folder(name_or_path, allow_network=allow_network)
    data = json.loads((folder / "config.json").read_text())
    if OPENSEARCH_ARCHITECTURE in (data.get("architectures") or ()):
        return _load_opensearch(folder)
    return Pruner.load(folder)


def _load_opensearch(folder: Path) -> OpenSearchHighlighter:
    from transformers import AutoTokenizer, BertConfig

    data = json.loads((folder / "config.json").read_text())
    clean = {k: v for k, v in data.items() if k not in {"architectures", "model_type", "auto_map"}}
    config = BertConfig(**clean)
    model = SentenceTagger(config)
    missing, unexpected = model.load_state_dict(load_state(folder), strict=False)
    missing = [k for k in missing if not k.endswith("position_ids")]
    unexpected = [k for k in unexpected if not k.endswith("position_ids")]
    if missing or unexpected:
        raise ValueError(f"{folder}: not the OpenSearch highlighter layout (missing "
                         f"{missing[:3]}, unknown {unexpected[:3]})")
    if not any((folder / name).exists() for name in ("tokenizer.json", "vocab.txt")):
        # transformers would build an empty tokenizer from config.json alone, silently
        raise ValueError(f"{folder}: no tokenizer files; the OpenSearch highlighter uses BERT's "
                         "uncased tokenizer (bert-base-uncased): save it into this folder")
    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    return OpenSearchHighlighter(model.eval(), tokenizer, config)
