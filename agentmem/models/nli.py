"""The NLI cross-encoder behind clash detection.

A clash detector needs one number per (earlier, newer) statement pair: how likely the newer
statement contradicts the earlier one. A cross-encoder reads both statements together, which
catches negations and swapped facts that embedding similarity misses. Checkpoints disagree on
the order of their labels, so columns are mapped by label *name* into one fixed order and
callers never depend on how a model was exported. Models load from disk by default: the hub
is reached only when the caller allows it, and no remote code ever runs. Scores are computed
in fp32 even though the shipped weights are stored in fp16 (half the size on disk).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from agentmem.models.ort import OnnxNLIModel

LABELS: tuple[str, str, str] = ("contradiction", "entailment", "neutral")
CONTRADICTION = 0

# Spellings of the three labels found in public NLI checkpoints.
_ALIASES = {"contradiction": "contradiction", "contradict": "contradiction",
            "entailment": "entailment", "entail": "entailment", "entails": "entailment",
            "neutral": "neutral"}


class HubDisabledError(FileNotFoundError):
    """A model name that is not a local folder, while the Hugging Face hub is off."""


def label_order(id2label: dict[Any, str]) -> list[int]:
    """Model output column for each of LABELS, matched by name (case-insensitive)."""
    by_name: dict[str, int] = {}
    for index, name in id2label.items():
        canonical = _ALIASES.get(str(name).strip().lower())
        if canonical is not None:
            by_name[canonical] = int(index)
    missing = [name for name in LABELS if name not in by_name]
    if missing or len(id2label) != 3:
        raise ValueError(f"not a 3-way NLI model: id2label {dict(id2label)} lacks {missing} "
                         f"(needs exactly {', '.join(LABELS)})")
    return [by_name[name] for name in LABELS]


class NLIModel:
    """A loaded cross-encoder returning (contradiction, entailment, neutral) probabilities."""

    def __init__(self, model: PreTrainedModel, tokenizer: Any, *, max_length: int = 128):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.max_length = max_length
        id2label = model.config.id2label
        if id2label is None:  # transformers types it optional; a classifier's config has one
            raise ValueError("not a 3-way NLI model: its config has no id2label")
        self.order = label_order(id2label)
        self._lock = threading.Lock()  # fast tokenizers are not safe to share across threads

    @classmethod
    def load(cls, path_or_name: str | Path | None = None, *, allow_hub: bool = False,
             max_length: int = 128) -> NLIModel:
        """The shipped checkpoint (None), a local folder, or a hub name when allow_hub is True."""
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        if path_or_name is None:
            from agentmem.models.registry import default_nli_path

            path_or_name = default_nli_path()
        folder = Path(path_or_name).expanduser()
        if folder.is_dir():
            source, local_only = str(folder), True
        elif allow_hub:
            source, local_only = str(path_or_name), False
        else:
            raise HubDisabledError(
                f"{str(path_or_name)!r} is not a local folder and the Hugging Face hub is off; "
                "pass allow_hub=True to download a hub model by name.")
        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=local_only)
        model = AutoModelForSequenceClassification.from_pretrained(
            source, local_files_only=local_only, trust_remote_code=False, dtype=torch.float32)
        return cls(model, tokenizer, max_length=max_length)

    def predict(self, pairs: Sequence[tuple[str, str]], batch_size: int = 32) -> np.ndarray:
        """Probabilities, shape (n, 3) float32, columns in LABELS order; rows follow ``pairs``."""
        out = np.zeros((len(pairs), len(LABELS)), dtype=np.float32)
        if not pairs:
            return out
        import torch

        # Similar lengths in one batch waste less work on padding; results go back in place.
        order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]) + len(pairs[i][1]))
        columns = torch.tensor(self.order)
        with self._lock, torch.inference_mode():
            for start in range(0, len(order), batch_size):
                rows = order[start:start + batch_size]
                batch = self.tokenizer([pairs[i][0] for i in rows], [pairs[i][1] for i in rows],
                                       truncation=True, max_length=self.max_length,
                                       padding=True, return_tensors="pt")
                device = next(self.model.parameters()).device
                logits = self.model(**{k: v.to(device) for k, v in batch.items()}).logits
                probs = torch.softmax(logits.float(), dim=-1).cpu()[:, columns]
                out[rows] = probs.numpy()
        return out

    def contradiction(self, pairs: Sequence[tuple[str, str]], batch_size: int = 32) -> np.ndarray:
        """P(contradiction) per pair, shape (n,) float32."""
        return self.predict(pairs, batch_size=batch_size)[:, CONTRADICTION].copy()


class ContradictionModel(Protocol):
    """What the clash check needs of an NLI model: P(contradiction) per (earlier, newer) pair."""

    def contradiction(self, pairs: Sequence[tuple[str, str]], batch_size: int = 32) -> np.ndarray: ...


class ScreenedNLI:
    """Two NLI models as one, cheapest first: ``screen`` scores every pair, and only the pairs
    it scores at or above ``threshold`` are scored again by ``model``, whose probability then
    replaces the screen's. A pair the screen lets go keeps the screen's (low) probability.

    Why: nearly every pair a clash check scores is unrelated or restated, and the clash
    decision needs P >= 0.98 from the full model. The same model in int8 (``agentmem
    export-onnx nli-int8``) costs under half per pair; at a low threshold it lets go most
    pairs the full model would score low and passes every one it would score high on the
    chat pairs measured (its model card), so decisions stay the full model's.
    """

    def __init__(self, screen: ContradictionModel, model: ContradictionModel, threshold: float):
        self.screen, self.model, self.threshold = screen, model, threshold

    def contradiction(self, pairs: Sequence[tuple[str, str]], batch_size: int = 32) -> np.ndarray:
        # One pair per run: an int8 model quantises its activations per run, so in a batch a
        # pair's score would depend on its neighbours (padding included). Alone is no slower
        # on chat pairs (2.1 ms against 2.2 in batches of 4, one core).
        scores = self.screen.contradiction(pairs, batch_size=1)
        passed = np.flatnonzero(scores >= self.threshold)
        if len(passed):
            scores[passed] = self.model.contradiction([pairs[i] for i in passed.tolist()],
                                                      batch_size=batch_size)
        return scores


class RememberedNLI:
    """A model whose scores are remembered per (earlier, newer) text pair (LRU, ``size``).

    Why: a session grown one reply at a time asks about the same pairs again whenever its
    statements repeat (an agent's status lines, a tool polled, a recycled phrase), and a pair
    costs 2-5 ms of model time. The scores are deterministic (the screen scores each pair
    alone), so a remembered score is the one the model would give again."""

    def __init__(self, model: ContradictionModel, size: int = 1 << 16) -> None:
        self.model, self.size = model, size
        self._scores: OrderedDict[tuple[str, str], float] = OrderedDict()
        self._lock = threading.Lock()

    def contradiction(self, pairs: Sequence[tuple[str, str]], batch_size: int = 32) -> np.ndarray:
        out = np.zeros(len(pairs), dtype=np.float32)
        with self._lock:
            todo = []
            for i, pair in enumerate(pairs):
                score = self._scores.get(pair)
                if score is None:
                    todo.append(i)
                else:
                    self._scores.move_to_end(pair)
                    out[i] = score
        if todo:
            fresh = self.model.contradiction([pairs[i] for i in todo], batch_size=batch_size)
            out[todo] = fresh
            with self._lock:
                for i, score in zip(todo, fresh.tolist()):
                    self._scores[pairs[i]] = score
                while len(self._scores) > self.size:
                    self._scores.popitem(last=False)
        return out


def cached_nli(path: str | None = None) -> NLIModel | OnnxNLIModel:
    """One loaded model per checkpoint for the whole process (loading costs about a second),
    on the configured runtime (``agentmem.models.backend``). ``path``: a folder, the name of a
    shipped checkpoint (``nli-minilm-int8``), or None for the shipped NLI model."""
    from agentmem.models.registry import default_nli_path, shipped_or_path

    return _loaded_nli(shipped_or_path(path) if path else default_nli_path())


@lru_cache(maxsize=4)
def _loaded_nli(folder: str) -> NLIModel | OnnxNLIModel:
    from agentmem.models import LOADING
    from agentmem.models.backend import runtime_for

    with LOADING:
        if runtime_for(folder) == "onnx":
            from agentmem.models.ort import OnnxNLIModel

            return OnnxNLIModel(folder)
        return NLIModel.load(folder)
