"""A bench's own engine: an embedded Redis in a temporary folder, removed afterwards, in a
process set up as `agentmem serve` sets up its own.

Benches replay thousands of sessions; each run's Redis files (tens of MB) used to stay in
the temporary folder, a hundred runs' worth after a few days of measuring. And a bench times
the engine as the proxy runs it: the server's GIL switch interval, and once warm its startup
objects frozen out of the cyclic collector's reach (``agentmem.models.runtime``); without
them a bench's calls paid ~180 ms full collections of imports' objects the proxy never walks
(every few agent calls), so its tail latencies were the library's defaults, not the server's."""

from __future__ import annotations

import gc
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentmem.api import Hygiene
    from agentmem.policy import Policy


@asynccontextmanager
async def scratch_hygiene(policy: str | Policy, name: str) -> AsyncIterator[Hygiene]:
    """``async with scratch_hygiene("default", "history") as hygiene:`` a fresh, warm engine on
    its own embedded Redis (folder ``agentmem-NAME-*``), in the server's process settings;
    closed and deleted, and the process settings restored, on the way out."""
    from agentmem.api import Hygiene
    from agentmem.config import Settings
    from agentmem.models.runtime import favour_latency, freeze_startup_objects

    switch, thresholds = sys.getswitchinterval(), gc.get_threshold()
    ours = gc.get_freeze_count() == 0  # else the process's collector is tuned already: left be
    with tempfile.TemporaryDirectory(prefix=f"agentmem-{name}-", ignore_cleanup_errors=True) as folder:
        hygiene = Hygiene(policy, settings=Settings(data_dir=folder))
        try:
            favour_latency()  # as the proxy's lifespan does
            await hygiene.warm_up(models=hygiene.policy.embed)
            if ours:
                freeze_startup_objects()  # ... once warm
            yield hygiene
        finally:
            await hygiene.aclose()
            hygiene.connector.close()
            if ours:
                gc.unfreeze()
                gc.set_threshold(*thresholds)
            sys.setswitchinterval(switch)
