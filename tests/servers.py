"""Real servers for the tests: uvicorn apps on loopback threads and Debian's redis-server."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import redis
import uvicorn
from redis.backoff import NoBackoff
from redis.retry import Retry


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ThreadServer:
    """An ASGI app served by uvicorn on its own thread and event loop."""

    def __init__(self, app, port: int | None = None):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                lifespan="on", timeout_graceful_shutdown=2)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self) -> ThreadServer:
        self.thread.start()
        deadline = time.time() + 60
        while not self.server.started:
            if time.time() > deadline or not self.thread.is_alive():
                raise RuntimeError(f"server on {self.url} did not start")
            time.sleep(0.05)
        # Ready as a readiness probe would say (/healthz "embedder": "loaded"): calls that come
        # while the proxy's warm-up loads MiniLM skip the stages needing it, by design.
        hygiene = getattr(getattr(self.server.config.app, "state", None), "hygiene", None)
        deadline = time.time() + 180
        while hygiene is not None and hygiene.embedder.loading:
            if time.time() > deadline:
                raise RuntimeError(f"server on {self.url}: MiniLM did not load")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)


class RedisServer:
    """Debian's redis-server on a free loopback port, in its own folder."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None

    @staticmethod
    def available() -> bool:
        return shutil.which("redis-server") is not None

    def start(self, *options: str) -> RedisServer:
        """Start (or restart, on the same port and folder) with extra ``redis-server`` options."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.folder),
             "--appendonly", "yes", "--save", "", "--daemonize", "no", *options],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.process:
            self.process.terminate()
            self.process.wait(timeout=10)


def require_redis_server() -> bool:
    """CI sets AGENTMEM_REQUIRE_REDIS_SERVER=1 so a missing server fails instead of skipping."""
    return os.environ.get("AGENTMEM_REQUIRE_REDIS_SERVER") == "1"


def probe_node(port: int) -> redis.Redis:
    """A client of a loopback Redis that tries once, with a short timeout: redis-py's default
    retries would wait ~25 s on a port held by something that is not (yet) a node, while the
    node it waits for may have exited."""
    return redis.Redis(port=port, socket_timeout=2, retry=Retry(NoBackoff(), 0))


def wait_until(check, what: str, timeout: float = 30) -> None:
    """Poll ``check`` (a Redis error counts as not yet) until it holds, or fail naming ``what``."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if check():
                return
        except redis.RedisError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting until {what}")
