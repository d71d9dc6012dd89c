"""``agentmem sessions quarantine`` as a real process on a real Redis: a session id the API
refuses (400) is one line on stderr and exit 2, a session that does not exist (404) is one line
and exit 1 as for ``sessions show``, and a record id is printed whole even on an 80-column or
non-terminal output, since it is the value ``--release`` / ``--confirm`` take."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from agentmem import Hygiene
from agentmem.quarantine import QuarantineStore
from agentmem.quarantine.records import QuarantineRecord
from agentmem.store import SessionHandle


def _agentmem(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The console entry point in a child process, its output a pipe at 80 columns."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "AGENTMEM_DATA_DIR": str(cwd / "embedded"), "COLUMNS": "80"}
    env.pop("AGENTMEM_CONFIG", None)
    env.pop("AGENTMEM_REDIS_URL", None)
    return subprocess.run([sys.executable, "-m", "agentmem", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def _session_with_a_record(redis_url: str) -> tuple[str, QuarantineRecord]:
    """A stored session (two turns) holding one active quarantine record with long text."""
    session = f"qcli-{uuid.uuid4().hex[:8]}"
    record = QuarantineRecord(
        kind="clash", detector="nli:test", turn_id=0, position=0, span=(0, 60),
        text="I ran 5k today in 31 minutes and it felt like a good pace for a beginner. " * 2,
        source="user", score=0.93,
        reason="contradicted by a later turn: 10k in 65 minutes, stated with more certainty")
    engine = Hygiene("off", redis_url=redis_url)

    async def seed() -> None:
        await engine.apply([{"role": "user", "content": "I ran 5k today in 31 minutes."},
                            {"role": "assistant", "content": "A solid beginner pace."}],
                           session_id=session)
        await QuarantineStore(engine.store()).add(SessionHandle("default", session), [record],
                                                  ttl=None)

    try:
        engine.run_sync(seed())
    finally:
        engine.close()
    return session, record


@pytest.mark.parametrize("command", ["quarantine", "show", "delete"])
def test_an_invalid_session_id_is_one_line_and_exit_2(redis_server, tmp_path, command):
    done = _agentmem("sessions", command, "bad id!", "--redis-url", redis_server.url,
                     cwd=tmp_path)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.startswith("agentmem: session_id must be")
    assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr
    assert done.stdout == ""


def test_an_invalid_record_id_to_release_is_one_line_and_exit_2(redis_server, tmp_path):
    session, _ = _session_with_a_record(redis_server.url)
    done = _agentmem("sessions", "quarantine", session, "--release", "q_ bad",
                     "--redis-url", redis_server.url, cwd=tmp_path)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.startswith("agentmem: record_id must be")
    assert len(done.stderr.splitlines()) == 1


def test_an_unknown_session_is_one_line_and_exit_1_like_show(redis_server, tmp_path):
    missing = f"no-such-{uuid.uuid4().hex[:8]}"
    shown = _agentmem("sessions", "show", missing, "--redis-url", redis_server.url, cwd=tmp_path)
    listed = _agentmem("sessions", "quarantine", missing, "--redis-url", redis_server.url,
                       cwd=tmp_path)
    assert shown.returncode == 1
    assert listed.returncode == 1, (listed.stdout, listed.stderr)
    assert listed.stdout.strip() == f"no session {missing!r}"  # the line ``show`` prints
    assert "┃" not in listed.stdout  # no (empty) table
    released = _agentmem("sessions", "quarantine", missing, "--release", "q_0123456789abcdef",
                         "--redis-url", redis_server.url, cwd=tmp_path)
    assert released.returncode == 1 and released.stdout.strip() == f"no session {missing!r}"


def test_record_ids_are_printed_whole_at_80_columns_and_release_takes_them(redis_server, tmp_path):
    session, record = _session_with_a_record(redis_server.url)
    listed = _agentmem("sessions", "quarantine", session, "--redis-url", redis_server.url,
                       cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert record.id in listed.stdout, listed.stdout  # on one line, not wrapped or cut
    assert "…" not in listed.stdout.split(record.id)[0].splitlines()[-1]
    assert max(len(line) for line in listed.stdout.splitlines()) <= 80
    released = _agentmem("sessions", "quarantine", session, "--release", record.id,
                         "--redis-url", redis_server.url, cwd=tmp_path)
    assert released.returncode == 0, released.stderr
    assert released.stdout.strip() == f"{record.id}: released"


def test_a_session_without_records_is_an_empty_table_and_exit_0(redis_server, tmp_path):
    session = f"qcli-{uuid.uuid4().hex[:8]}"
    engine = Hygiene("off", redis_url=redis_server.url)
    try:
        engine.run_sync(engine.apply([{"role": "user", "content": "nothing to flag"}],
                                     session_id=session))
    finally:
        engine.close()
    listed = _agentmem("sessions", "quarantine", session, "--redis-url", redis_server.url,
                       cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "id" in listed.stdout and "reason" in listed.stdout
