"""How many rows go to a model in one forward pass on the CPU.

Why so few: on this project's 2-core CPU, with one thread per inference
(``agentmem.models.runtime``), a forward pass over many rows is slower *per row* than several
passes over a few. The likely reason (not profiled op by op): the matrix products keep their
speed at any size, but the element-wise work between them (GELU, layer norms, softmax, adds)
reads and writes the whole activation, and once that outgrows the core's cache it runs at
memory speed. MiniLM's feed-forward activation is 1,536 floats per token: 6 KB, so 128 tokens
are ~0.8 MB and 2,000 tokens ~12 MB.

Measured on ONNX Runtime (one thread, quiet machine, sentences sorted by length; scratch
timers of stop 46, README "Stop 46"): the embedder over LoCoMo sentences (12 tokens on average)
3.76 ms a sentence in batches of 64, 3.24 ms in passes of at most 128 padded tokens; over
HotpotQA sentences (31 tokens) 15.0 -> 8.4 ms; the pruner over a 1,200-token passage (three
blocks) 516 -> 358 ms one block per pass instead of the three padded together (its 512 x 512
attention maps, 12 heads a layer, are most of what outgrows the cache). So the embedder and the
pruner are fed passes of at most ``RUN_TOKENS`` padded tokens (a longer row goes alone),
shortest rows first so that a pass pads little (the pruner's passes are the same on the torch
runtime, whose batches this module does not measure). The NLI model's short pairs (~35 tokens)
gained nothing (6.1 ms a pair in batches of 32, 6.3 in such passes): it keeps its batches.
"""

from __future__ import annotations

from collections.abc import Sequence

RUN_TOKENS = 128
"""Padded tokens (rows x the longest row) one forward pass holds at most; a longer row runs
alone. 128 and 256 were within 5% of each other on both sets above; 512 was 5-12% slower
than 128."""


def runs(lengths: Sequence[int], *, tokens: int = RUN_TOKENS,
         rows: int | None = None) -> list[list[int]]:
    """Row indices grouped into forward passes: shortest first, each pass holding at most
    ``tokens`` padded tokens (its row count times its longest row; a row longer than that
    alone) and at most ``rows`` rows. Every index appears once; callers put the outputs back
    in their own order."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    passes: list[list[int]] = []
    current: list[int] = []
    for index in order:
        width = max(lengths[index], 1)  # sorted: this row is the pass's longest so far
        if current and ((len(current) + 1) * width > tokens
                        or (rows is not None and len(current) >= rows)):
            passes.append(current)
            current = []
        current.append(index)
    if current:
        passes.append(current)
    return passes
