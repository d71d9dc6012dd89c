"""Provence inference: per-sentence keep probabilities, the rerank score, and ``process()``.

Input per block: ``[CLS] + tok(query) + [SEP] + tok(s0) + tok(" " + s1) + ... + [SEP]``; each
sentence is tokenised on its own, so token positions map back to sentences exactly. A passage
longer than the model's window is cut at sentence boundaries into blocks that run
independently; the rerank score comes from the first block. A sentence longer than a whole
block is split into token pieces that share its index. Scores are computed in fp32.
"""

from __future__ import annotations

import contextlib
import string
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from typing import Any

import numpy as np

from agentmem.lexical import relative_bm25
from agentmem.models.keep_rule import (
    CONFIG_KEYS,
    KeepRule,
    SentenceRule,
    query_similarities,
    split_query_row,
)
from agentmem.models.runs import runs
from agentmem.text import split_sentences

_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalise_query(query: str) -> str:
    """Lowercase, punctuation stripped, whitespace collapsed (the queries Provence trained on)."""
    return " ".join(query.lower().translate(_PUNCTUATION).split())


@dataclass
class SentenceScores:
    probabilities: list[float]  # mean token keep probability per sentence
    kept_fraction_by_threshold: list[np.ndarray]  # per sentence: token probabilities (fp32)
    ranking_score: float  # raw logit of the rerank head (first block)
    token_ids: list[list[int]] = field(default_factory=list)  # per sentence, for token-level UIs

    def keep(self, threshold: float, rule: SentenceRule) -> list[bool]:
        out = []
        for probs in self.kept_fraction_by_threshold:
            if probs.size == 0:
                out.append(False)
            elif rule == "mean_prob":
                out.append(float(probs.mean()) > threshold)
            elif rule == "hf_code":
                out.append(float((probs > threshold).mean()) > threshold)
            else:  # paper: more than half of the sentence's tokens pass the threshold
                out.append(float((probs > threshold).mean()) > 0.5)
        return out


@dataclass
class _Block:
    input_ids: list[int]
    owners: list[int] = field(default_factory=list)  # sentence index per token, -1 otherwise


class Pruner:
    """A loaded Provence-style model with the sentence-level API the stages use.

    ``model`` is the torch ``ProvenceModel``, or the ONNX Runtime twin
    (``agentmem.models.ort.OnnxProvence``, marked ``takes_numpy``) that maps numpy ids and
    mask to (rank logits, token keep probabilities); everything around the forward pass is
    shared, so both runtimes cut blocks and decide sentences the same way."""

    # the checkpoint's calibrated keep rule, field by field (``KeepRule.from_config``)
    threshold: float
    rule: SentenceRule
    floor: float
    min_similarity: float | None
    floor_tokens: int | None
    bridge: float
    fuse_cosine: float
    fuse_lexical: float
    margin: float | None
    name_bridge: float

    def __init__(self, model, tokenizer, config, *, max_length: int | None = None):
        self.model, self.tokenizer, self.config = model, tokenizer, config
        self.max_length = min(max_length or 10**9, getattr(config, "max_position_embeddings", 512))
        # the calibrated rule's fields as attributes (a backend may set its own rule/threshold)
        vars(self).update(asdict(KeepRule.from_config(config)))
        self._lock = threading.Lock()

    @classmethod
    def load(cls, name_or_path, *, allow_network: bool | None = None, **kwargs) -> Pruner:
        from agentmem.models.provence import load_model

        return cls(*load_model(name_or_path, allow_network=allow_network), **kwargs)

    def keep_rule(self, threshold: float | None = None, rule: SentenceRule | None = None,
                  floor: float | None = None, min_similarity: float | None = None,
                  floor_tokens: int | None = None, bridge: float | None = None,
                  fuse_cosine: float | None = None, fuse_lexical: float | None = None,
                  margin: float | None = None, name_bridge: float | None = None) -> KeepRule:
        """The checkpoint's calibrated keep rule, with any of its settings overridden. A
        threshold or sentence rule given without any fused setting means the model's own
        probabilities (Provence's ``threshold``), so a fused checkpoint's weights and margin
        are then dropped rather than applied to a threshold on another scale."""
        given: dict[str, Any] = {name: value for name, value in (
            ("threshold", threshold), ("rule", rule), ("floor", floor),
            ("min_similarity", min_similarity), ("floor_tokens", floor_tokens),
            ("bridge", bridge), ("fuse_cosine", fuse_cosine), ("fuse_lexical", fuse_lexical),
            ("margin", margin), ("name_bridge", name_bridge)) if value is not None}
        checkpoint = KeepRule(**{name: getattr(self, name) for name in CONFIG_KEYS})
        if given.keys() & {"threshold", "rule"} and not given.keys() & {
                "fuse_cosine", "fuse_lexical", "margin"}:
            checkpoint = replace(checkpoint, fuse_cosine=0.0, fuse_lexical=0.0, margin=None,
                                 name_bridge=0.0)
        return replace(checkpoint, **given)

    # -- scoring -------------------------------------------------------------------------------

    def _tokens(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def unread(self, sentences: Sequence[str]) -> SentenceScores:
        """Scores of a passage the model does not read (``KeepRule.out_of_reach``): keep
        probability 0 for each of its tokens, so the keep rule decides by its other signals
        and its floor counts the same tokens as after a read."""
        ids = self._sentence_ids(sentences)
        return SentenceScores([0.0] * len(ids), [np.zeros(len(row), np.float32) for row in ids],
                              0.0, ids)

    def _blocks(self, query: str, sentences: Sequence[str]) -> list[_Block]:
        cls_id, sep_id = self.tokenizer.cls_token_id, self.tokenizer.sep_token_id
        query_ids = self._tokens(normalise_query(query))[: self.max_length // 2]
        return pack_blocks([cls_id, *query_ids, sep_id], [sep_id], self.max_length,
                           self._sentence_ids(sentences))

    def _sentence_ids(self, sentences: Sequence[str]) -> list[list[int]]:
        """Each sentence's token ids as it reads inside the passage (a space before all but
        the first)."""
        return [self._tokens(sentence if index == 0 else " " + sentence)
                for index, sentence in enumerate(sentences)]

    def _forward(self, ids: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(rank logit per row, token keep probability per row and token), float32 numpy."""
        if getattr(self.model, "takes_numpy", False):
            return self.model(ids, mask)
        import torch

        with torch.inference_mode():
            rank_logits, token_logits = self.model(torch.from_numpy(ids), torch.from_numpy(mask))
            probs = torch.softmax(token_logits.float(), dim=-1)[..., 1].cpu().numpy()
            return rank_logits.float().cpu().numpy(), probs

    @property
    def reads_concurrently(self) -> bool:
        """Whether blocks may run on several threads at once: ONNX Runtime sessions are
        thread-safe; the torch path keeps one forward pass at a time."""
        return bool(getattr(self.model, "takes_numpy", False))

    def blocks(self, query: str, sentences: Sequence[str]) -> list[_Block]:
        """The model inputs one (query, sentences) pair is read as (``pack_blocks``)."""
        return self._blocks(query, sentences)

    def forward_blocks(self, blocks: Sequence[_Block], batch_size: int = 32
                       ) -> list[tuple[float, np.ndarray]]:
        """(rank logit, token keep probabilities) per block, in the blocks' order: run in
        passes of at most ``batch_size`` blocks and a few padded tokens (a 512-token block
        alone: ``agentmem.models.runs``)."""
        out: list[tuple[float, np.ndarray]] = [(0.0, np.zeros(0, np.float32))] * len(blocks)
        pad = self.tokenizer.pad_token_id or 0
        with contextlib.nullcontext() if self.reads_concurrently else self._lock:
            for rows in runs([len(b.input_ids) for b in blocks], rows=batch_size):
                chunk = [blocks[i] for i in rows]
                width = max(len(b.input_ids) for b in chunk)
                ids = np.full((len(chunk), width), pad, dtype=np.int64)
                mask = np.zeros((len(chunk), width), dtype=np.int64)
                for row, block in enumerate(chunk):
                    ids[row, : len(block.input_ids)] = block.input_ids
                    mask[row, : len(block.input_ids)] = 1
                rank_logits, probs = self._forward(ids, mask)
                for row, (index, block) in enumerate(zip(rows, chunk)):
                    out[index] = (float(rank_logits[row]), probs[row, : len(block.input_ids)])
        return out

    @staticmethod
    def assemble(count: int, blocks: Sequence[_Block],
                 outputs: Sequence[tuple[float, np.ndarray]]) -> SentenceScores:
        """One pair's sentence scores from its blocks' outputs (the rerank score is the first
        block's; a sentence cut across blocks gathers all its tokens)."""
        per_sentence: list[list[float]] = [[] for _ in range(count)]
        ids_of: list[list[int]] = [[] for _ in range(count)]
        for block, (_, probabilities) in zip(blocks, outputs):
            for prob, sentence, token in zip(probabilities, block.owners, block.input_ids):
                if sentence >= 0:
                    per_sentence[sentence].append(float(prob))
                    ids_of[sentence].append(token)
        arrays = [np.asarray(p, dtype=np.float32) for p in per_sentence]
        return SentenceScores(
            probabilities=[float(a.mean()) if a.size else 0.0 for a in arrays],
            kept_fraction_by_threshold=arrays, ranking_score=outputs[0][0] if outputs else 0.0,
            token_ids=ids_of)

    def score_batch(self, pairs: Sequence[tuple[str, Sequence[str]]], batch_size: int = 32
                    ) -> list[SentenceScores]:
        """Scores for many (query, sentences) pairs; blocks of all pairs are batched together."""
        blocks_of = [self._blocks(query, sentences) for query, sentences in pairs]
        outputs = self.forward_blocks([b for blocks in blocks_of for b in blocks], batch_size)
        results, cursor = [], 0
        for (_, sentences), blocks in zip(pairs, blocks_of):
            results.append(self.assemble(len(sentences), blocks,
                                         outputs[cursor:cursor + len(blocks)]))
            cursor += len(blocks)
        return results

    def _token_rows(self, score: SentenceScores, index: int) -> list[dict[str, Any]]:
        """One sentence's model tokens and keep probabilities (what a highlighting UI shades)."""
        tokens = self.tokenizer.convert_ids_to_tokens(score.token_ids[index])
        return [{"token": token, "probability": float(p)}
                for token, p in zip(tokens, score.kept_fraction_by_threshold[index])]

    # -- the Provence process() API ----------------------------------------------------------

    @staticmethod
    def passages(question: str | list[str], context: Any, title: Any = "first_sentence"
                 ) -> list[tuple[str, list[str]]]:
        """The (query, sentences) pairs ``process`` reads for these arguments, in its order
        (a given title first among its passage's sentences): what a caller reads itself to
        hand ``process`` its ``scores``."""
        return _layout(question, context, title)[2]

    def process(self, question: str | list[str], context: Any, title: Any = "first_sentence",
                batch_size: int = 32, threshold: float | None = None,
                always_select_title: bool = False, reorder: bool = False, top_k: int = 5,
                enable_warnings: bool = True, rule: SentenceRule | None = None,
                floor: float | None = None, token_scores: bool = False,
                encode: Callable[[list[str]], Any] | None = None,
                min_similarity: float | None = None,
                keep_rule: KeepRule | None = None,
                scores: Sequence[SentenceScores] | None = None,
                vectors: Sequence[np.ndarray] | None = None) -> dict[str, Any]:
        """Provence's ``process``. A context may be a string (split offline) or a list of
        sentences (used as given). Beyond the official keys the result carries, per context,
        ``sentences``: text, character span in ``pruned``'s source, probability and decision.
        ``floor`` (default: the checkpoint's) is the share of each context's tokens kept
        whatever the threshold (``agentmem.models.keep_rule``); 0 is Provence's own rule.
        ``keep_rule``: a whole rule built already (``Pruner.keep_rule``, e.g. with a policy's
        overrides); it wins over ``threshold``, ``rule``, ``floor`` and ``min_similarity``.
        ``token_scores`` adds each sentence's model tokens with their keep probabilities.
        ``encode`` (a sentence embedder's): the sentences' cosine to the question vetoes
        keeps below ``min_similarity`` (default: the checkpoint's) and orders the floor's
        additions, as in the prune stage.
        ``scores``: the pairs of ``passages(question, context, title)`` already read, one per
        pair in order (the proxy reads a long passage's blocks in parallel,
        ``agentmem.models.runtime.read_passage``); default: read here, in one pass.
        ``vectors``: likewise embedded already, per pair the unit vectors of its query (row 0)
        and its sentences, as ``encode`` returns them (the proxy embeds in parallel with the
        read); they stand for ``encode``.
        """
        keep_rule = keep_rule or self.keep_rule(threshold, rule, floor, min_similarity)
        single = isinstance(question, str)
        questions, contexts, jobs, layout = _layout(question, context, title)
        if scores is None:
            scores = self.score_batch(jobs, batch_size=batch_size) if jobs else []
        for name, given in (("scores", scores), ("vectors", vectors)):
            if given is not None and len(given) != len(jobs):
                raise ValueError(f"{name} must hold one entry per passage ({len(jobs)}), "
                                 f"not {len(given)}")

        pruned: list[list[str | None]] = [[None] * len(c) for c in contexts]
        rerank = [[0.0] * len(c) for c in contexts]
        rates = [[0.0] * len(c) for c in contexts]
        details: list[list[list[dict[str, Any]] | None]] = [[None] * len(c) for c in contexts]
        for number, ((qi, ci, text, spans, offset, title_is_first), score) in enumerate(
                zip(layout, scores)):
            eligible = range(offset, len(spans))
            similarities, units, lexical = None, None, None
            own = [text[a:b] if a >= 0 else "" for a, b in spans]
            if (encode is not None or vectors is not None) and \
                    keep_rule.wants_similarities(score, eligible):
                if vectors is not None:  # a title's row is never read: it is not eligible
                    similarities, units = split_query_row(vectors[number])
                elif encode is not None:
                    similarities, units = query_similarities(encode, questions[qi], own)
            if keep_rule.fuse_lexical:
                lexical = relative_bm25(questions[qi], own).tolist()
            keep = keep_rule.decide(score, eligible, similarities, units, lexical, own,
                                    questions[qi])
            title_index = 0 if (offset or title_is_first) else None
            if always_select_title and title_index is not None and any(keep):
                keep[title_index] = True
            rows, kept_text = [], []
            for index, ((start, end), kept) in enumerate(zip(spans, keep)):
                if start < 0:  # an explicit title: scored, returned only when asked for
                    if kept and always_select_title:
                        given_title = _title_for(title, qi, ci)
                        assert given_title is not None  # a (-1, -1) span is only added for one
                        kept_text.append(given_title)
                    continue
                rows.append({"text": text[start:end], "start": start, "end": end,
                             "probability": score.probabilities[index], "kept": kept})
                if token_scores:
                    rows[-1]["tokens"] = self._token_rows(score, index)
                if kept:
                    kept_text.append(text[start:end])
            result = " ".join(kept_text)
            original_length = len(text)
            pruned[qi][ci] = result
            rerank[qi][ci] = score.ranking_score
            rates[qi][ci] = (((original_length - len(result)) / original_length * 100)
                             if original_length else 0.0)
            details[qi][ci] = rows
        if reorder:
            for qi in range(len(questions)):
                order = sorted(range(len(contexts[qi])), key=lambda c: -rerank[qi][c])[:top_k]
                pruned[qi] = [pruned[qi][c] for c in order]
                rerank[qi] = [rerank[qi][c] for c in order]
                rates[qi] = [rates[qi][c] for c in order]
                details[qi] = [details[qi][c] for c in order]
        if single:
            return {"pruned_context": pruned[0][0], "reranking_score": rerank[0][0],
                    "compression_rate": rates[0][0], "sentences": details[0][0]}
        return {"pruned_context": pruned, "reranking_score": rerank, "compression_rate": rates,
                "sentences": details}


def pack_blocks(head: list[int], suffix: list[int], max_length: int,
                sentence_ids: list[list[int]]) -> list[_Block]:
    """Sentences packed into model inputs of at most ``max_length`` tokens: ``head`` (the
    special tokens and the query), as many whole sentences as fit, ``suffix``. A sentence
    longer than a block's room is cut into pieces. ``owners`` names each token's sentence
    (-1 for the head and suffix). Every backend's layout differs only in head and suffix."""
    budget = max_length - len(head) - len(suffix)
    blocks: list[_Block] = []
    current = _Block(list(head), [-1] * len(head))
    for index, ids in enumerate(sentence_ids):
        pieces = [ids[i:i + budget] for i in range(0, len(ids), budget)] or [[]]
        for piece in pieces:
            if len(current.input_ids) - len(head) + len(piece) > budget:
                blocks.append(current)
                current = _Block(list(head), [-1] * len(head))
            current.input_ids += piece
            current.owners += [index] * len(piece)
    blocks.append(current)
    for block in blocks:
        block.input_ids += suffix
        block.owners += [-1] * len(suffix)
    return blocks


def _layout(question: str | list[str], context: Any, title: Any
            ) -> tuple[list[str], list[list[Any]], list[tuple[str, list[str]]], list[tuple]]:
    """``process``'s arguments as its questions, their contexts, the (query, sentences) pairs
    to read and, per pair, where its decisions go (question, context, source text, sentence
    spans, title offset, whether the first sentence is the title)."""
    if isinstance(question, str):  # a string, or a list of sentences (pre-split), for one question
        questions, contexts = [question], [[context]]
    else:  # per question, a list of contexts; each a string or a list of sentences
        questions, contexts = list(question), [list(c) for c in context]
    if len(contexts) != len(questions):
        raise ValueError("context must hold one list of contexts per question")
    jobs, layout = [], []
    for qi, (q, ctxs) in enumerate(zip(questions, contexts)):
        for ci, ctx in enumerate(ctxs):
            text, spans = _as_sentences(ctx)
            sentences = [text[s:e] for s, e in spans]
            given_title = _title_for(title, qi, ci)
            if given_title is not None:
                sentences, spans, offset = [given_title, *sentences], [(-1, -1), *spans], 1
            else:
                offset = 0
            jobs.append((q, sentences))
            layout.append((qi, ci, text, spans, offset, title == "first_sentence"))
    return questions, contexts, jobs, layout


def _as_sentences(context: Any) -> tuple[str, list[tuple[int, int]]]:
    if isinstance(context, str):
        return context, [(s.start, s.end) for s in split_sentences(context)]
    text, spans = "", []
    for sentence in context:
        if text:
            text += " "
        start = len(text)
        text += sentence
        spans.append((start, len(text)))
    return text, spans


def _title_for(title: Any, qi: int, ci: int) -> str | None:
    if title is None or title == "first_sentence":
        return None
    if isinstance(title, list):
        entry = title[qi]
        return entry[ci] if isinstance(entry, list) else entry
    return str(title)


@lru_cache(maxsize=4)
def cached_pruner(name_or_path: str) -> Pruner:
    """A Provence checkpoint, or another highlighter's (``agentmem.models.highlighters``), on
    the configured runtime (``agentmem.models.backend``)."""
    from agentmem.models import LOADING
    from agentmem.models.backend import runtime_for

    with LOADING:
        if runtime_for(name_or_path) == "onnx":
            from agentmem.models.ort import load_pruner

            return load_pruner(name_or_path)
        from agentmem.models.highlighters import load_scorer

        return load_scorer(name_or_path)
