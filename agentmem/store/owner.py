"""Who holds a lock or a lease, precisely enough to tell that the holder has died.

A session lock is a lease (a few seconds, renewed while the call runs): whoever holds it, a
crash frees the session when the lease runs out. A proxy that is killed and restarted on the
same machine can do better, because it can *see* that the previous holder is gone: the lock's
token names the holder process by the kernel's boot id, its PID namespace, its PID and its
start time. A holder on this kernel, in this PID namespace, whose PID no longer runs (or runs a
newer process: PIDs are reused) is dead, and its lock can be taken at once.

Anything that cannot be checked this way (another machine, another container's PID namespace,
a platform without ``/proc``, a token of another format) counts as alive: the lease decides.
A wrong "dead" would only cost fencing, never data: the commit checks the lock token.
"""

from __future__ import annotations

import collections
import functools
import os
import secrets
from pathlib import Path

_PROC = Path("/proc")


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (``/proc/PID/stat`` field 22)."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()  # the name (field 2) may hold spaces
    return fields[19] if len(fields) > 19 else None


@functools.cache
def _machine() -> str | None:
    """This kernel's boot id and this process's PID namespace: where a PID means something."""
    try:
        boot = (_PROC / "sys/kernel/random/boot_id").read_text().strip()
        namespace = os.stat(_PROC / "self/ns/pid").st_ino
    except OSError:
        return None
    return f"{boot}.{namespace}"


def this_process() -> str:
    """This process, as ``machine.pid.start`` (``x`` where it cannot be told). Read once per
    PID (a forked worker has its own): every lock token names it."""
    return _process(os.getpid())


@functools.cache
def _process(pid: int) -> str:
    machine = _machine()
    start = _start_time(pid) if machine else None
    if machine is None or start is None:
        return "x"
    return f"{machine}.{pid}.{start}"


def new_token() -> str:
    """A lock token that names its holder: ``<process>/<random>``."""
    return f"{this_process()}/{secrets.token_hex(8)}"


def holder_is_dead(token: str | bytes | None) -> bool:
    """True only when ``token`` names a process of this machine and PID namespace that no
    longer runs; False whenever that cannot be known."""
    if isinstance(token, bytes):
        token = token.decode(errors="replace")
    parts = (token or "").split("/")
    if len(parts) < 2:
        return False
    holder = parts[-2]  # a server id may put its host name first: host/process/random
    machine, _, rest = holder.rpartition(".")  # rest: the start time
    machine, _, pid = machine.rpartition(".")
    if not machine or machine != _machine() or not pid.isdigit():
        return False
    return _start_time(int(pid)) != rest


# Session-lock tokens that calls of this process hold now (a call, or a retried write).
_held: collections.Counter[str] = collections.Counter()


def hold(token: str) -> None:
    """Mark a lock token of this process as in use (counted: a retried write may hold a
    call's token after the call itself let go)."""
    if token:
        _held[token] += 1


def drop(token: str) -> None:
    if token and _held[token] > 0:
        _held[token] -= 1
        if not _held[token]:
            del _held[token]


def abandoned_here(token: str | bytes | None) -> bool:
    """True when ``token`` is a session lock of this very process that none of its calls holds
    any more: left behind when its release failed while the store was down, and brought back
    by the store's restart. It would otherwise block the session until its lease ran out."""
    if isinstance(token, bytes):
        token = token.decode(errors="replace")
    process, _, _ = (token or "").rpartition("/")
    return bool(process) and process == this_process() != "x" and token not in _held
