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

OpenProvence checkpoints (``hotchpotch/open_provence``, MIT; the layout its exporter writes)
and Zilliz's ``zilliz/semantic-highlight-bilingual-v1`` (MIT, BAAI/bge-reranker-v2-m3 with a
"pruning head" and a "rerank head", the model card's ``process(question, context, threshold,
return_sentence_metrics)`` being OpenProvence's API) share one layout: ``config.json`` has
``model_type: open_provence``, ``architectures: [OpenProvenceForSequenceClassification]``,
the backbone's own config under ``base_model_config`` (XLM-R for bge-m3), ``pruning_config``
(``hidden_size``, ``num_labels`` 2, ``classifier_dropout``), ``num_labels`` 1 (the rerank
logit), ``max_length`` and an optional ``default_threadshold`` (sic; 0.1 when absent). The
state dict is ``ranking_model.*`` (the backbone's ``AutoModelForSequenceClassification``:
``roberta.*`` + ``classifier.dense``/``classifier.out_proj`` for XLM-R) and
``pruning_head.classifier.{weight,bias}`` (a linear layer on every token's last hidden state;
``pruning_head.pooling_weights`` when ``use_weighted_pooling``, unused at inference); older
exports omit the ``ranking_model.`` prefix. Input is the tokenizer's pair encoding of the raw
query and the concatenated sentence tokens (XLM-R: ``<s> q </s></s> s0 s1 ... </s>``); a
token's keep probability is the softmax's second label, a sentence's is the mean over its
tokens, and it is kept when that mean exceeds the threshold (``mean_prob``). The rerank score
is the classifier's first logit (upstream reports its sigmoid). The model is rebuilt from
these facts with plain transformers modules (no remote code); the tokenizer must sit in the
folder (OpenProvence's exporter saves it there). Never run on the real Zilliz weights here: that its
``config.json`` and key names follow OpenProvence's exporter is inferred from its card, the
Milvus blog and a third-party GGUF port, not read from the checkpoint.

A backend is a ``Pruner`` subclass, so the prune stage, ``/v1/highlight`` and ``process()``
use it unchanged: per sentence it reports its probability for every one of its tokens, so
the sentence rules (``mean_prob``) and token-level compression see one value per sentence.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from itertools import groupby
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from agentmem.models.provence import load_state, resolve_folder
from agentmem.models.pruner import Pruner, SentenceScores, _Block, pack_blocks

OPENSEARCH_ARCHITECTURE = "BertTaggerForSentenceExtractionWithBackoff"
OPEN_PROVENCE_ARCHITECTURES = frozenset({"OpenProvenceForSequenceClassification",
                                         "OpenProvenceForTokenClassification"})
OPEN_PROVENCE_MODEL_TYPE = "open_provence"
ZILLIZ_HUB_NAME = "zilliz/semantic-highlight-bilingual-v1"
OPEN_PROVENCE_DEFAULT_THRESHOLD = 0.1  # upstream's process() default when the config sets none


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


class PruningHead(nn.Module):
    """OpenProvence's pruning head: dropout, then one linear layer on every token's state."""

    def __init__(self, hidden_size: int, labels: int, dropout: float, weighted_pooling: bool):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(hidden_size, labels)
        if weighted_pooling:  # present in such checkpoints; upstream's inference ignores it too
            self.pooling_weights = nn.Linear(hidden_size, 1)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(hidden))


class OpenProvenceReranker(nn.Module):
    """The backbone's sequence classifier (``ranking_model``) and ``pruning_head`` on its last
    hidden states; returns what ``Pruner.score_batch`` expects: (rerank logit [B], token
    logits [B, T, 2])."""

    def __init__(self, base_config, pruning: dict[str, Any]):
        super().__init__()
        from transformers import AutoModelForSequenceClassification

        self.ranking_model = AutoModelForSequenceClassification.from_config(base_config)
        self.pruning_head = PruningHead(
            int(pruning.get("hidden_size", base_config.hidden_size)),
            int(pruning.get("num_labels", 2)), float(pruning.get("classifier_dropout", 0.1)),
            bool(pruning.get("use_weighted_pooling", False)))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.ranking_model(input_ids=input_ids, attention_mask=attention_mask,
                                 output_hidden_states=True, return_dict=True)
        hidden = out.hidden_states[-1].to(self.pruning_head.classifier.weight.dtype)
        return out.logits[:, 0], self.pruning_head(hidden)


class OpenProvenceHighlighter(Pruner):
    """OpenProvence / Zilliz semantic highlight behind the Pruner API (rule ``mean_prob``).

    Only the input differs from Provence's: the raw query (OpenProvence does not lowercase or
    strip it; the bilingual model reads Chinese punctuation) in the tokenizer's own pair
    format, which for XLM-R doubles the separator. Scoring is ``Pruner.score_batch``.
    """

    def __init__(self, model, tokenizer, config, *, threshold: float, max_length: int):
        super().__init__(model, tokenizer, config, max_length=max_length)
        self.max_length = max_length  # the base caps at max_position_embeddings; RoBERTa offsets
        self.rule, self.threshold = "mean_prob", threshold
        self._prefix, self._middle, self._suffix = _pair_specials(tokenizer)

    def _blocks(self, query: str, sentences: Sequence[str]) -> list[_Block]:
        query_ids = self._tokens(query)[: self.max_length // 2]  # the raw query, upstream's way
        return pack_blocks([*self._prefix, *query_ids, *self._middle], self._suffix,
                           self.max_length, self._sentence_ids(sentences))


ZillizHighlighter = OpenProvenceHighlighter  # zilliz/semantic-highlight-bilingual-v1's backend


def _pair_specials(tokenizer) -> tuple[list[int], list[int], list[int]]:
    """The special tokens the tokenizer puts before, between and after a (query, context)
    pair, read from its own pair encoding; when it adds none (a bare fast tokenizer),
    ``[CLS] q [SEP] c [SEP]`` as upstream rebuilds it by hand."""
    encoded = tokenizer("a", "b", return_special_tokens_mask=True)
    runs = [(bool(special), [token for token, _ in group]) for special, group in
            groupby(zip(encoded["input_ids"], encoded["special_tokens_mask"]), key=lambda x: x[1])]
    if runs and not runs[0][0]:
        runs.insert(0, (True, []))
    if runs and not runs[-1][0]:
        runs.append((True, []))
    if len(runs) == 5 and (runs[0][1] or runs[2][1]):  # specials, a, specials, b, specials
        return runs[0][1], runs[2][1], runs[4][1]
    return [tokenizer.cls_token_id], [tokenizer.sep_token_id], [tokenizer.sep_token_id]


def load_scorer(name_or_path: str | os.PathLike, *, allow_network: bool | None = None) -> Pruner:
    """A pruner backend by folder or hub name: OpenSearch's or OpenProvence's (Zilliz's) layout
    when its config names that architecture, else a Provence-layout checkpoint."""
    folder = resolve_folder(name_or_path, allow_network=allow_network)
    data = json.loads((folder / "config.json").read_text())
    architectures = set(data.get("architectures") or ())
    if OPENSEARCH_ARCHITECTURE in architectures:
        return _load_opensearch(folder)
    if architectures & OPEN_PROVENCE_ARCHITECTURES or data.get("model_type") == OPEN_PROVENCE_MODEL_TYPE:
        return _load_open_provence(folder)
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


def _load_open_provence(folder: Path) -> OpenProvenceHighlighter:
    from transformers import AutoConfig, AutoTokenizer

    data = json.loads((folder / "config.json").read_text())
    base = dict(data.get("base_model_config") or {})
    model_type = base.pop("model_type", None)
    if not model_type:
        # upstream would fetch base_model_name_or_path's config from the hub: not done silently
        raise ValueError(f"{folder}: an OpenProvence config without base_model_config (with its "
                         "model_type); re-export it with the backbone's config included")
    for key in ("architectures", "auto_map", "transformers_version", "_name_or_path"):
        base.pop(key, None)
    base_config = AutoConfig.for_model(model_type, **base)
    base_config.num_labels = int(data.get("num_labels") or 1)
    model = OpenProvenceReranker(base_config, dict(data.get("pruning_config") or {}))
    state = load_state(folder)
    if not any(key.startswith("ranking_model.") for key in state):  # an older export
        state = {key if key.startswith("pruning_head.") else f"ranking_model.{key}": value
                 for key, value in state.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith("position_ids")]
    unexpected = [k for k in unexpected if not k.endswith("position_ids")]
    if missing or unexpected:
        raise ValueError(f"{folder}: not the OpenProvence layout (missing {missing[:3]}, "
                         f"unknown {unexpected[:3]})")
    if not any((folder / name).exists() for name in
               ("tokenizer.json", "sentencepiece.bpe.model", "vocab.txt", "tokenizer.model")):
        raise ValueError(f"{folder}: no tokenizer files; an OpenProvence export saves its "
                         "backbone's tokenizer (bge-reranker-v2-m3's for Zilliz's model) beside it")
    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    window = int(getattr(base_config, "max_position_embeddings", 512))
    if "roberta" in model_type:  # positions start after the padding index
        window -= int(getattr(base_config, "pad_token_id", 1) or 0) + 1
    threshold = data.get("default_threadshold", data.get("default_threshold"))
    return OpenProvenceHighlighter(
        model.float().eval(), tokenizer, base_config,
        threshold=OPEN_PROVENCE_DEFAULT_THRESHOLD if threshold is None else float(threshold),
        max_length=min(int(data.get("max_length") or 512), window))
