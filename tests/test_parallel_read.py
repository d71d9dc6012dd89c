"""A large tool output is read block by block on the call path's idle workers, with the same
scores as one pass (agentmem/stages/prune.py: ``_read_transcript``)."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

from agentmem.bench.prune_speed import tool_output
from agentmem.models.pruner import cached_pruner
from agentmem.models.registry import pruner_path
from agentmem.models.runtime import run_inference, scheduler
from agentmem.stages.prune import _read_transcript, _score_transcript

SENTENCES = [f"Step {i}: the deploy script copied build {i} to host-{i % 7} and restarted the "
             f"worker pool, which logged a warning about stale sockets." for i in range(70)]
SENTENCES[41] = "Sessions are stored in Redis under the agentmem prefix."


@pytest.mark.parametrize("name", ["pruner-minilm", "pruner-minilm-int8"])
def test_a_long_output_reads_its_blocks_in_parallel_with_one_pass_scores(name, monkeypatch):
    pruner = cached_pruner(pruner_path(name))
    if not pruner.reads_concurrently:
        pytest.skip("the torch runtime reads one block at a time")
    question, candidate = "which database stores the sessions", tool_output(SENTENCES, 3)
    blocks = pruner.blocks(question, [candidate.text[a:b] for a, b in candidate.spans])
    assert len(blocks) >= 3
    threads: set[str] = set()
    forward = pruner.forward_blocks

    def recording(chunk, batch_size=32):
        threads.add(threading.current_thread().name)
        time.sleep(0.05)  # long enough that a second idle worker takes the next block
        return forward(chunk, batch_size)

    async def both():
        one = await run_inference(_score_transcript, pruner, question, [candidate])
        monkeypatch.setattr(pruner, "forward_blocks", recording)
        return one, await _read_transcript(pruner, question, [candidate])

    one, parallel = asyncio.run(both())
    np.testing.assert_allclose(parallel[3].probabilities, one[3].probabilities, atol=1e-4)
    assert parallel[3].ranking_score == pytest.approx(one[3].ranking_score, abs=1e-3)
    assert int(np.argmax(parallel[3].probabilities)) == 41
    if scheduler().call_path.workers >= 2:
        assert len(threads) >= 2
