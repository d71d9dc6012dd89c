"""The ``agentmem`` command: serve, inspect, bench, train, sessions, policies, echo-upstream."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer
from rich.console import Console

from agentmem.bench.cli import bench_app
from agentmem.train.cli import DEFAULT_DATA, train_app

if TYPE_CHECKING:
    from agentmem.config import Settings

# rich_markup_mode=None: help text is shown as written (rich markup would eat "[[tool:...]]")
app = typer.Typer(help="agentmem: context hygiene for LLM calls.", no_args_is_help=True,
                  rich_markup_mode=None,
                  add_completion=False)
app.add_typer(bench_app, name="bench")
app.add_typer(train_app, name="train")
sessions_app = typer.Typer(help="Read and delete stored sessions.", no_args_is_help=True,
                           rich_markup_mode=None)
app.add_typer(sessions_app, name="sessions")
policy_app = typer.Typer(help="List and check policies.", no_args_is_help=True,
                         rich_markup_mode=None)
app.add_typer(policy_app, name="policy")
console = Console()


LOCAL_CONFIG = "agentmem.yaml"
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")  # uvicorn's

# The store commands read the deployment's settings as ``serve`` does: --config, else
# AGENTMEM_CONFIG, else ./agentmem.yaml; --redis-url (or AGENTMEM_REDIS_URL) over the file.
CONFIG = typer.Option(None, "--config", exists=True, dir_okay=False,
                      help="Settings file (default: AGENTMEM_CONFIG, else ./agentmem.yaml).")
REDIS_URL = typer.Option(None, "--redis-url", help="The deployment's Redis (default: the "
                         "settings', else the embedded one in the data folder).")


def main() -> None:
    """The ``agentmem`` console script: a configuration or policy error is one line on
    stderr and exit status 2, not a traceback."""
    from agentmem.errors import AgentmemError

    try:
        app()
    except AgentmemError as error:
        print(f"agentmem: {' '.join(error.message.split())}", file=sys.stderr)
        raise SystemExit(2) from None


@app.command()
def serve(host: str = typer.Option("127.0.0.1", help="Interface to listen on."),
          port: int = typer.Option(8787, min=1, max=65535, help="Port to listen on."),
          policy: str | None = typer.Option(None, help="Preset name or YAML path (default: 'default')."),
          config: Path | None = typer.Option(None, help="YAML settings file (see README)."),
          redis_url: str | None = typer.Option(None, help="Use this Redis instead of the embedded one."),
          log_level: str = typer.Option("info", help="uvicorn log level."),
          log_format: str = typer.Option("text", help="'json': one JSON object per log line "
                                         "(each call's line carries its session and report ids)."),
          workers: int = typer.Option(1, min=1, max=64, help="Processes serving the port (each "
                                      "loads its own models: about 1 GB each). Sessions are safe "
                                      "across them: the store's lock serialises each session."),
          verbose: bool = typer.Option(False, "--verbose", help="Show model loading output.")):
    """Run the OpenAI-compatible proxy (embedded Redis, no config needed; ./agentmem.yaml is
    read when present and no --config or AGENTMEM_CONFIG is given)."""
    if log_format not in {"text", "json"}:
        raise typer.BadParameter("use 'text' or 'json'", param_hint="--log-format")
    if log_level.lower() not in LOG_LEVELS:
        raise typer.BadParameter(f"use one of {', '.join(LOG_LEVELS)}", param_hint="--log-level")
    if verbose:
        os.environ["AGENTMEM_VERBOSE"] = "1"
    if config is None and not os.environ.get("AGENTMEM_CONFIG") and Path(LOCAL_CONFIG).is_file():
        config = Path(LOCAL_CONFIG)
        print(f"agentmem: using ./{LOCAL_CONFIG}", file=sys.stderr)
    listener = _listen(host, port)  # before anything slow: a busy port is one line, at once

    import uvicorn

    from agentmem.config import Settings, redacted_url
    from agentmem.metrics import configure_logging
    from agentmem.models.runtime import switch_interval_s
    from agentmem.policy import load_policy
    from agentmem.proxy import create_app

    configure_logging(log_format, log_level)
    settings = Settings.load(config, policy=policy, redis_url=redis_url)
    switch_interval_s()  # AGENTMEM_SWITCH_INTERVAL_MS checked now, not in the app's start-up
    load_policy(settings.policy)  # a bad policy is one line before the banner, not after
    from agentmem.models.backend import configure as configure_runtime
    from agentmem.models.backend import runtime_for

    if settings.model_runtime != "auto":
        configure_runtime(settings.model_runtime)
    base = f"http://{host}:{port}"
    banner = (f"agentmem on {base}/v1  policy={settings.policy}  models={runtime_for(None)}  "
              f"store={redacted_url(settings.redis_url) if settings.redis_url else 'embedded'}"
              + (f"  workers={workers}" if workers > 1 else "")
              + f"\n  inspect: {base}/ui   metrics: {base}/metrics   health: {base}/healthz")
    if log_format == "json":
        logging.getLogger("agentmem").warning(" ".join(banner.split()), extra={"agentmem": {
            "event": "start", "url": f"{base}/v1", "policy": settings.policy, "workers": workers}})
    else:
        print(banner, flush=True)
    # Shutdown: uvicorn stops accepting and gives in-flight calls this long, then the app's
    # lifespan gives their writes a little more and leaves the after-reply work recorded in
    # Redis (see agentmem.pending): the process is gone within 10 s, whatever was pending.
    if workers > 1:
        _serve_workers(workers, listener, config, policy, redis_url, log_level, log_format)
    server = _server(uvicorn.Config(create_app(settings), host=host, port=port,
                                    log_level=log_level, timeout_graceful_shutdown=GRACE_S,
                                    **_log_config(log_format)))
    with contextlib.suppress(KeyboardInterrupt):  # SIGINT, re-raised by uvicorn once it is done
        server.run(sockets=[listener])
    _exit_now(0 if server.started else 3)


GRACE_S = 5  # uvicorn's graceful shutdown: how long in-flight calls get to finish
STREAMS_END_S = GRACE_S - 1  # streams still running then end with an error event


def _server(config: Any) -> Any:
    """uvicorn's server, whose first SIGTERM (or Ctrl-C) also ends the streams still relayed
    a second before the grace runs out: each client gets an error event and its reply is
    stored partial as cut by the shutdown, where uvicorn would cut the connection bare."""
    import uvicorn

    from agentmem.streaming import end_streams_after

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            if not self.should_exit:
                with contextlib.suppress(RuntimeError):  # not on the loop's thread: no streams
                    end_streams_after(STREAMS_END_S)
            super().handle_exit(sig, frame)

    return Server(config)


def _serve_workers(workers: int, listener: socket.socket, config: Path | None,
                   policy: str | None, redis_url: str | None, log_level: str,
                   log_format: str) -> NoReturn:
    """uvicorn's supervisor: ``workers`` processes accept on the one listening socket, and a
    worker that dies is started again (it serves at once: see ``Hygiene.warm_up``). Each
    worker reads its settings as this process did, from the environment set here."""
    import uvicorn
    from uvicorn.supervisors import Multiprocess

    from agentmem.metrics import WorkerMetrics, pass_logging_to_workers

    for name, value in (("AGENTMEM_CONFIG", config), ("AGENTMEM_POLICY", policy),
                        ("AGENTMEM_REDIS_URL", redis_url)):
        if value is not None:
            os.environ[name] = str(value)
    pass_logging_to_workers(log_format, log_level)  # per-call lines, --log-format, in workers
    # /metrics sums every worker's counters (prometheus_client's multiprocess mode) in a fresh
    # private directory of this run's, removed when the supervisor ends.
    shared = WorkerMetrics()

    class Supervisor(Multiprocess):
        def keep_subprocess_alive(self) -> None:  # each 0.5 s: replaced workers are dead
            super().keep_subprocess_alive()
            shared.workers_now(process.pid for process in self.processes)

    supervisor = uvicorn.Config("agentmem.proxy.app:app_from_environment", factory=True,
                                workers=workers, log_level=log_level, timeout_graceful_shutdown=GRACE_S,
                                **_log_config(log_format))
    try:
        Supervisor(supervisor, sockets=[listener]).run()
    finally:
        shared.close()
    _exit_now(0)


def _log_config(log_format: str) -> dict[str, Any]:
    """uvicorn's ``log_config`` for the format (nothing: uvicorn's default, for text)."""
    from agentmem.metrics import uvicorn_log_config

    config = uvicorn_log_config(log_format)
    return {} if config is None else {"log_config": config}


def _listen(host: str, port: int) -> socket.socket:
    """Bind and listen on the port, or say in one line why not and exit with status 2.

    The socket is handed to uvicorn, so the port cannot be taken between this check and the
    server's start; connections that arrive while the models load wait in its backlog.
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    except (socket.gaierror, UnicodeError) as error:
        _fail(f"agentmem: cannot listen on {host}: {getattr(error, 'strerror', None) or error}")
    listener = socket.socket(family, kind, proto)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: TIME_WAIT is fine
    try:
        listener.bind(address)
        listener.listen(2048)
    except OSError as error:
        listener.close()
        if error.errno == errno.EADDRINUSE:
            _fail(f"agentmem: port {port} on {host} is already in use")
        _fail(f"agentmem: cannot listen on {host}:{port}: {error.strerror or error}")
    return listener


def _fail(line: str) -> NoReturn:
    print(line, file=sys.stderr)
    raise typer.Exit(2)


def _exit_now(code: int) -> NoReturn:
    """Leave without joining the inference threads. An embedding batch still running (a large
    paste) would hold a normal interpreter exit for minutes; its job is recorded in Redis and
    redone by the next start, and the lifespan has already closed the store."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


@app.command()
def inspect(session_id: str, tenant: str = typer.Option("default"),
            config: Path | None = CONFIG, redis_url: str | None = REDIS_URL,
            call: str | None = typer.Option(None, help="Which call's decisions to lay over the "
                                               "turns: its number (1 = first) or report id prefix; "
                                               "default the latest.")):
    """Show a session: its calls, what each removed from the turns, quarantine, tool loadout."""
    from agentmem.inspection import load_view, pick_report, render
    from agentmem.store import SessionHandle

    view = _run(_with_store(lambda store: load_view(store, SessionHandle(tenant, session_id)),
                            config, redis_url))
    if view is None:
        console.print(f"no session {session_id!r} for tenant {tenant!r}")
        raise typer.Exit(1)
    report = pick_report(view, call)
    if call is not None and report is None:
        console.print(f"no call {call!r} in session {session_id!r}")
        raise typer.Exit(1)
    render(view, report, console)


@app.command("echo-upstream")
def echo_upstream(host: str = typer.Option("127.0.0.1"), port: int = typer.Option(8788)):
    """Run the deterministic OpenAI-compatible upstream used by benches, examples and tests
    (its directives, such as [[tool:NAME {...}]] or [[status:429]], are listed in
    ``agentmem/echo.py``)."""
    import uvicorn

    from agentmem.echo import create_echo_app

    listener = _listen(host, port)  # listening from here on: connections wait in the backlog
    print(f"echo upstream on http://{host}:{port}/v1 (model: openai/echo)", flush=True)
    server = uvicorn.Server(uvicorn.Config(create_echo_app(), log_level="warning"))
    with contextlib.suppress(KeyboardInterrupt):
        server.run(sockets=[listener])


@app.command("export-onnx")
def export_onnx(models: list[str] = typer.Argument(None, help="Any of: embedder, pruner, "
                                                   "pruner-int8, nli, nli-int8 (default: all "
                                                   "five)."),
                calibration: Path = typer.Option(DEFAULT_DATA / "prune" / "squad_train.jsonl",
                                                 help="Training passages (prune-bench JSONL) the "
                                                 "int8 pruner's smoothing reads."),
                nli_calibration: Path = typer.Option(DEFAULT_DATA / "nli" / "dnli" / "data.csv",
                                                     help="Training pairs (tab-separated premise, "
                                                     "hypothesis) the NLI screen's smoothing "
                                                     "reads.")):
    """Export the shipped models to ONNX for the torch-free runtime (a developer's step after
    retraining a checkpoint; needs torch and onnx: the ``[dev]`` install)."""
    import importlib.util

    from agentmem.models.backend import torch_available
    from agentmem.models.export_onnx import export_all

    if not torch_available() or importlib.util.find_spec("onnxscript") is None:
        _fail("agentmem: export-onnx needs torch, transformers, sentence-transformers, onnx and "
              "onnxscript: pip install -c constraints.txt \"agentmem-hygiene[dev]\"")
    # each int8 copy is made from its float checkpoint: after it
    known = ["embedder", "pruner", "pruner-int8", "nli", "nli-int8"]
    which = models or known
    unknown = sorted(set(which) - set(known))
    if unknown:
        raise typer.BadParameter(f"unknown model(s) {unknown}; use {', '.join(known)}")
    for record in export_all(which, calibration, nli_calibration):
        print(json.dumps(record))


def _run(coroutine):
    return asyncio.run(coroutine)


def _store_settings(config: Path | None, redis_url: str | None) -> Settings:
    from agentmem.config import Settings

    if config is None and not os.environ.get("AGENTMEM_CONFIG") and Path(LOCAL_CONFIG).is_file():
        config = Path(LOCAL_CONFIG)
        print(f"agentmem: using ./{LOCAL_CONFIG}", file=sys.stderr)
    return Settings.load(config, redis_url=redis_url)


async def _with_store(work, config: Path | None = None, redis_url: str | None = None):
    """Run ``work(store)`` on the deployment's store; a store that cannot be reached is one
    line naming it, not a traceback."""
    from agentmem.api import Hygiene
    from agentmem.errors import HygieneUnavailable
    from agentmem.store import StoreUnavailable

    hygiene = Hygiene(policy="off", settings=_store_settings(config, redis_url))
    try:
        return await work(hygiene.store())
    except StoreUnavailable as error:
        raise HygieneUnavailable(f"session store {hygiene.connector.description} unavailable: "
                                 f"{error}") from None
    finally:
        await hygiene.aclose()
        hygiene.connector.close()


@sessions_app.command("list")
def sessions_list(tenant: str = typer.Option("default"), limit: int = typer.Option(50),
                  config: Path | None = CONFIG, redis_url: str | None = REDIS_URL):
    """Sessions of a tenant, most recent first."""
    from rich.table import Table

    rows = _run(_with_store(lambda store: store.list_sessions(tenant, limit=limit), config, redis_url))
    table = Table("session", "turns", "calls", "policy", "model", "updated")
    import datetime as dt

    for row in rows:
        updated = dt.datetime.fromtimestamp(row.get("updated_at", 0)).isoformat(timespec="seconds")
        table.add_row(row["session_id"], str(row["turn_count"]), str(row["calls"]),
                      row.get("policy", ""), row.get("model", ""), updated)
    console.print(table)


@sessions_app.command("show")
def sessions_show(session_id: str, tenant: str = typer.Option("default"),
                  config: Path | None = CONFIG, redis_url: str | None = REDIS_URL):
    """Print a session's active turns as JSON (an id the API would refuse: exit 2)."""
    from agentmem.identity import checked_id
    from agentmem.store import SessionHandle

    handle = SessionHandle(tenant, checked_id(session_id, "session_id"))
    turns = _run(_with_store(lambda store: store.active_turns(handle), config, redis_url))
    if not turns:
        console.print(f"no session {session_id!r}")
        raise typer.Exit(1)
    print(json.dumps([t.model_dump() for t in turns], indent=2, ensure_ascii=False))


@sessions_app.command("delete")
def sessions_delete(session_id: str, tenant: str = typer.Option("default"),
                    config: Path | None = CONFIG, redis_url: str | None = REDIS_URL):
    """Delete a session and everything stored with it (an id the API would refuse: exit 2)."""
    from agentmem.identity import checked_id
    from agentmem.store import SessionHandle

    handle = SessionHandle(tenant, checked_id(session_id, "session_id"))
    removed = _run(_with_store(lambda store: store.delete(handle), config, redis_url))
    console.print("deleted" if removed else f"no session {session_id!r}")
    raise typer.Exit(0 if removed else 1)


@sessions_app.command("quarantine")
def sessions_quarantine(session_id: str, tenant: str = typer.Option("default"),
                        config: Path | None = CONFIG, redis_url: str | None = REDIS_URL,
                        release: str | None = typer.Option(None, help="Release this record id."),
                        confirm: str | None = typer.Option(None, help="Confirm this record id.")):
    """List a session's quarantine records, or release / confirm one.

    As the sessions API: an id it would refuse (400) is one line on stderr and exit 2 (``main``
    prints the ``InvalidRequest``); a session that does not exist (404) is one line and exit 1,
    as ``sessions show`` says it, never an empty table. Record ids are printed whole at any
    width: they are what ``--release`` / ``--confirm`` take.
    """
    from rich.table import Column, Table

    from agentmem.identity import checked_id
    from agentmem.quarantine import QuarantineRecord, QuarantineStore
    from agentmem.store import SessionHandle, SessionStore

    handle = SessionHandle(tenant, checked_id(session_id, "session_id"))
    target = release or confirm
    if target:
        checked_id(target, "record_id")

    async def work(store: SessionStore) -> list[QuarantineRecord] | None:
        """The session's records after the change asked for (None: no such session); a record
        that is not there is reported here, with the session known to exist."""
        if await store.meta(handle) is None:
            return None
        quarantine = QuarantineStore(store)
        if release or confirm:
            record_id, status = (release, "released") if release else (confirm, "confirmed")
            record = await quarantine.set_status(handle, str(record_id), status, by="cli")
            return [] if record is None else [record]
        return await quarantine.all(handle)

    records = _run(_with_store(work, config, redis_url))
    if records is None:
        console.print(f"no session {session_id!r}")
        raise typer.Exit(1)
    if target:
        if not records:
            console.print(f"no quarantine record {target!r} in session {session_id!r}")
            raise typer.Exit(1)
        console.print(f"{records[0].id}: {records[0].status}")
        return
    # A fixed-width id column, as wide as its longest id: rich narrows the other columns first
    # (a min_width would be undone by its last-resort even reduction); fold, never an ellipsis.
    id_width = max((len(r.id) for r in records), default=2)
    table = Table(Column("id", width=id_width, overflow="fold"),
                  "kind", "status", "score", "source", "text", "reason")
    for r in records:
        table.add_row(r.id, r.kind, r.status, f"{r.score:.2f}" if r.score is not None else "",
                      r.source, r.text[:80], r.reason[:80])
    console.print(table)


@policy_app.command("list")
def policy_list():
    """The shipped presets."""
    from agentmem.policy import load_policy, preset_names

    for name in preset_names():
        console.print(f"[bold]{name}[/bold]: {load_policy(name).description}")


@policy_app.command("check")
def policy_check(path: str):
    """Validate a policy file (or preset name); errors name the field."""
    from agentmem.errors import PolicyError
    from agentmem.policy import load_policy

    try:
        policy = load_policy(path)
    except PolicyError as error:
        console.print(f"[red]{error.message}[/red]")
        raise typer.Exit(1) from None
    print(policy.model_dump_json(indent=2))
