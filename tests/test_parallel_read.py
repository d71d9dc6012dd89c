"""A large tool output is read block by block on the call path's idle workers, with the same
scores as one pass (agentmem/stages/prune.py: ``_read_transcript``)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from agentmem.bench.prune_speed import tool_output
from agentmem.models.pruner import cached_pruner
from agentmem.models.registry import pruner_path
from agentmem.models.runtime import run_inference, scheduler
from agentmem.stages.prune import _read_transcript, _transcript
from tests.block_reads import SENTENCES, record_threads


@pytest.mark.parametrize("name", ["pruner-minilm", "pruner-minilm-int8"])
def test_a_long_output_reads_its_blocks_in_parallel_with_one_pass_scores(name, monkeypatch):
    pruner = cached_pruner(pruner_path(name))
    if not pruner.reads_concurrently:
        pytest.skip("the torch runtime reads one block at a time")
    question, candidate = "which database stores the sessions", tool_output(SENTENCES, 3)
    sentences, _ = _transcript([candidate])  # what the stage reads: "tool: ..." first
    blocks = pruner.blocks(question, sentences)
    assert len(blocks) >= 3

    async def both():
        [one] = await run_inference(pruner.score_batch, [(question, sentences)])  # one pass
        threads = record_threads(monkeypatch, pruner)  # filled as the blocks run
        return one, threads, await _read_transcript(pruner, question, [candidate])

    one, threads, parallel = asyncio.run(both())
    np.testing.assert_allclose(parallel[3].probabilities, one.probabilities, atol=1e-4)
    assert parallel[3].ranking_score == pytest.approx(one.ranking_score, abs=1e-3)
    assert int(np.argmax(parallel[3].probabilities)) == 41
    if scheduler().call_path.workers >= 2:
        assert len(threads) >= 2
