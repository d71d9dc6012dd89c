"""Forward passes sized for the CPU's cache (agentmem.models.runs)."""

from __future__ import annotations

import random
from itertools import pairwise

from agentmem.models.runs import RUN_TOKENS, runs


def test_each_pass_holds_few_padded_tokens_shortest_first():
    rng = random.Random(7)
    lengths = [rng.randint(1, 300) for _ in range(500)]
    passes = runs(lengths)
    assert sorted(i for group in passes for i in group) == list(range(len(lengths)))
    widths = [max(lengths[i] for i in group) for group in passes]
    for group, width in zip(passes, widths):
        # within the budget, or a single row longer than the budget on its own
        assert len(group) * width <= RUN_TOKENS or len(group) == 1
        assert [lengths[i] for i in group] == sorted(lengths[i] for i in group)
    assert widths == sorted(widths)  # shortest rows first: each pass pads little
    # a pass is closed only when the next row would not fit
    for group, following in pairwise(passes):
        wider = max(lengths[following[0]], 1)
        assert (len(group) + 1) * wider > RUN_TOKENS


def test_a_row_cap_and_a_larger_budget_are_honoured():
    lengths = [10] * 40
    assert [len(group) for group in runs(lengths)] == [12, 12, 12, 4]
    assert [len(group) for group in runs(lengths, rows=5)] == [5] * 8
    assert [len(group) for group in runs(lengths, tokens=10_000)] == [40]
    assert runs([]) == []
    assert runs([0, 0]) == [[0, 1]]  # empty rows count as one token wide
    assert runs([512, 3, 600]) == [[1], [0], [2]]
