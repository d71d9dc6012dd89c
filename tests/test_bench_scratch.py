"""A bench's engine runs in the process settings `agentmem serve` runs in, and gives them back."""

from __future__ import annotations

import asyncio
import gc
import sys

from agentmem.bench.scratch import scratch_hygiene
from agentmem.models.runtime import GC_THRESHOLDS, SWITCH_INTERVAL_S


def test_a_bench_engine_is_timed_as_the_server_runs_and_restores_the_process(monkeypatch):
    """Inside: the server's GIL switch interval, its collector thresholds, its startup objects
    frozen (a bench's calls used to pay full collections the server never makes), and the
    engine warm; outside again: the process as it was."""
    monkeypatch.delenv("AGENTMEM_GC_FREEZE", raising=False)
    monkeypatch.delenv("AGENTMEM_SWITCH_INTERVAL_MS", raising=False)
    switch, thresholds, frozen = sys.getswitchinterval(), gc.get_threshold(), gc.get_freeze_count()
    seen = {}

    async def run() -> None:
        async with scratch_hygiene("default", "scratch-test") as hygiene:
            seen["switch"] = sys.getswitchinterval()
            seen["thresholds"] = gc.get_threshold()
            seen["frozen"] = gc.get_freeze_count()
            seen["loaded"] = hygiene.embedder.loaded
            result = await hygiene.apply([{"role": "user", "content": "Is the Oslo depot open?"}],
                                         session_id="scratch")
            seen["new"] = result.report.ingest.new_turns

    asyncio.run(run())
    assert seen["switch"] == SWITCH_INTERVAL_S
    assert seen["frozen"] > 10_000  # the imports' objects
    assert seen["loaded"] and seen["new"] == 1
    assert (sys.getswitchinterval(), gc.get_threshold()) == (switch, thresholds)
    if frozen:  # a server test in this process tuned the collector already: left as it was
        assert gc.get_freeze_count() <= frozen  # (frozen objects still die by reference count)
    else:
        assert seen["thresholds"] == GC_THRESHOLDS and gc.get_freeze_count() == 0
