"""A bench's own engine: an embedded Redis in a temporary folder, removed afterwards.

Benches replay thousands of sessions; each run's Redis files (tens of MB) used to stay in
the temporary folder, a hundred runs' worth after a few days of measuring."""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentmem.api import Hygiene
    from agentmem.policy import Policy


@asynccontextmanager
async def scratch_hygiene(policy: str | Policy, name: str) -> AsyncIterator[Hygiene]:
    """``async with scratch_hygiene("default", "history") as hygiene:`` a fresh engine on its
    own embedded Redis (folder ``agentmem-NAME-*``), closed and deleted on the way out."""
    from agentmem.api import Hygiene
    from agentmem.config import Settings

    with tempfile.TemporaryDirectory(prefix=f"agentmem-{name}-", ignore_cleanup_errors=True) as folder:
        hygiene = Hygiene(policy, settings=Settings(data_dir=folder))
        try:
            yield hygiene
        finally:
            await hygiene.aclose()
            hygiene.connector.close()
