"""Activation smoothing before the int8 exports of the pruner and the NLI screen (SmoothQuant,
Xiao et al. 2023).

Why: ONNX Runtime's dynamic quantisation gives each matrix product's input one int8 scale
per run, the largest value of the whole tensor. A few channels of the pruner's hidden states
run up to 22x the median channel (after the attention output's LayerNorm and after the GELU),
so that one scale spends most of the 256 levels on them and rounds every other channel
coarsely. Dividing input channel ``c`` by ``s_c`` and multiplying the weight's column ``c``
by ``s_c`` leaves the float product unchanged, ``X W^T = (X / s)(W s)^T``, and moves the
outliers into the weights, which are quantised per output channel and absorb them. With
``s_c = max|X_c|^alpha / max|W_c|^(1 - alpha)`` the int8 copy's sentence probabilities came
~45% closer to the float model's on SQuAD *train* passages (mean gap 0.0050 -> 0.0027;
alpha 0.7-1.0 within 0.0002 of each other, 0.5 worse than none, 0.3 eight times worse), and
the NLI screen's P(contradiction) on DNLI training pairs 0.025 -> 0.014 (alpha 0.8 best there
too): README "Stop 48", the two int8 model cards.

Where the division goes, per encoder layer: the input of query/key/value (one multiply,
shared by the three products) and of the feed-forward's first product get an explicit
multiply (their input also feeds a residual connection, which must stay unscaled); the
attention output's input is the attention-weighted sum of the values, so ``1/s`` is folded
into the value projection and costs nothing; the feed-forward's second product takes the
GELU's output, so it gets an explicit multiply too. The multiplies are element-wise on a
``[tokens, width]`` tensor, small beside the products they precede.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

__all__ = ["ALPHA", "block_inputs", "calibration_pairs", "calibration_passages", "input_maxima",
           "smooth"]

ALPHA = 0.8  # migration strength; chosen by closeness to the float model on training data


class _Prescaled(nn.Module):
    """``inner(x / s, ...)``: a module whose first input is divided per channel."""

    inverse: torch.Tensor

    def __init__(self, inner: nn.Module, inverse: torch.Tensor) -> None:
        super().__init__()
        self.inner = inner
        self.register_buffer("inverse", inverse)

    def forward(self, hidden: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        return self.inner(hidden * self.inverse, *args, **kwargs)


def _layers(model: nn.Module) -> Sequence[Any]:
    """The encoder's layers of a BERT-layout backbone (agentmem's MiniLM pruner)."""
    for name, module in model.named_modules():
        if name.endswith("encoder.layer"):
            return list(module)
    raise ValueError("smoothing needs a BERT-layout encoder (encoder.layer.N)")


def _inner(module: Any) -> Any:
    return module.inner if isinstance(module, _Prescaled) else module


def _products(layer: Any) -> dict[str, list[nn.Linear]]:
    """Each group of products that reads one input, by the name its maximum is kept under
    (in a smoothed layer too: the products' inputs are then the divided ones)."""
    attention = _inner(layer.attention.self)
    return {"qkv": [attention.query, attention.key, attention.value],
            "attention_output": [layer.attention.output.dense],
            "intermediate": [_inner(layer.intermediate).dense],
            "output": [_inner(layer.output).dense]}


def input_maxima(model: nn.Module, inputs: Iterable[Mapping[str, torch.Tensor]]
                 ) -> list[dict[str, torch.Tensor]]:
    """Per layer and product group, the largest absolute value each input channel took
    while ``model`` read ``inputs`` (one forward pass each, ``model(**item)``)."""
    layers = _layers(model)
    maxima: list[dict[str, torch.Tensor]] = [{} for _ in layers]
    hooks = []
    for index, layer in enumerate(layers):
        for group, linears in _products(layer).items():
            def record(_module: nn.Module, given: tuple[torch.Tensor, ...], _output: Any,
                       *, store: dict[str, torch.Tensor] = maxima[index], key: str = group) -> None:
                seen = given[0].detach().abs().reshape(-1, given[0].shape[-1]).amax(dim=0)
                store[key] = torch.maximum(store[key], seen) if key in store else seen
            hooks.append(linears[0].register_forward_hook(record))
    try:
        with torch.inference_mode():
            for item in inputs:
                model(**item)
    finally:
        for hook in hooks:
            hook.remove()
    if any(len(found) < 4 for found in maxima):
        raise ValueError("no calibration input was read")
    return maxima


def block_inputs(blocks: Iterable[Sequence[int]]) -> Iterator[dict[str, torch.Tensor]]:
    """A pruner's blocks (token ids) as its forward pass's arguments, one block a pass."""
    for ids in blocks:
        tensor = torch.tensor([list(ids)])
        yield {"input_ids": tensor, "attention_mask": torch.ones_like(tensor)}


def smooth(model: nn.Module, maxima: list[dict[str, torch.Tensor]], alpha: float = ALPHA) -> nn.Module:
    """``model`` with every encoder product's input smoothed (module docstring), in place;
    its float outputs are unchanged up to rounding."""
    for layer, found in zip(_layers(model), maxima, strict=True):
        if isinstance(layer.intermediate, _Prescaled):  # a second pass would scale twice
            raise ValueError("this model is smoothed already")
        products = _products(layer)
        scales = {}
        for group, linears in products.items():
            weight = torch.stack([linear.weight.detach().abs().amax(dim=0) for linear in linears])
            weights = weight.amax(dim=0).clamp(min=1e-5)
            scales[group] = (found[group].clamp(min=1e-5) ** alpha /
                             weights ** (1 - alpha)).clamp(min=1e-5)
            for linear in linears:
                linear.weight.data *= scales[group][None, :]
        value = products["qkv"][2]  # the context is a weighted sum of values: fold 1/s in
        value.weight.data /= scales["attention_output"][:, None]
        value.bias.data /= scales["attention_output"]
        # the residual connections read these modules' other inputs, which stay unscaled
        layer.attention.self = _Prescaled(layer.attention.self, 1.0 / scales["qkv"])
        layer.intermediate = _Prescaled(layer.intermediate, 1.0 / scales["intermediate"])
        layer.output = _Prescaled(layer.output, 1.0 / scales["output"])
    return model


def calibration_passages(path: Path, *, single: int = 40, joined: int = 40,
                         paragraphs: int = 6) -> list[tuple[str, list[str]]]:
    """(question, sentences) to read for the maxima, from a prune-bench file of *training*
    passages (``prune/squad_train.jsonl``): its first ``single`` paragraphs as they are, then
    ``joined`` passages of ``paragraphs`` consecutive paragraphs of one article (so positions
    past the first few hundred tokens and every block of a long passage are seen)."""
    from agentmem.bench.formats import PruneRecord, read_jsonl

    by_title: dict[str, list[PruneRecord]] = {}
    seen: set[tuple[str, ...]] = set()
    for row in read_jsonl(path, PruneRecord):
        key = tuple(row.sentences)
        if key not in seen:
            seen.add(key)
            by_title.setdefault(row.title or "", []).append(row)
    unique = [row for group in by_title.values() for row in group]
    passages = [(row.question, list(row.sentences)) for row in unique[:single]]
    for group in by_title.values():
        for start in range(0, len(group) - paragraphs + 1, paragraphs):
            if len(passages) >= single + joined:
                return passages
            chunk = group[start:start + paragraphs]
            passages.append((chunk[0].question, [s for row in chunk for s in row.sentences]))
    return passages


def calibration_pairs(path: Path, *, count: int = 300) -> list[tuple[str, str]]:
    """(premise, hypothesis) to read for the NLI screen's maxima: the first ``count`` pairs of
    DNLI's *training* file (``nli/dnli/data.csv``, read as the NLI trainer reads it: dialogue
    turns, the text the clash check scores)."""
    from agentmem.train.nli_data import read_dnli

    return [(pair.premise, pair.hypothesis) for pair in read_dnli(path)[:count]]
