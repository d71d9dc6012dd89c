"""What operators read: /metrics, the per-call JSON log line, and ``agentmem inspect``."""

from __future__ import annotations

import json
import logging
import uuid

from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from agentmem.metrics import JsonFormatter
from tests.test_quarantine import SESSION


def _samples(text: str) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _tools(n: int) -> list[dict]:
    names = ["get_weather", *[f"lookup_part_{i}" for i in range(n - 1)]]
    return [{"type": "function", "function": {"name": name, "description": f"{name.replace('_', ' ')}.",
                                              "parameters": {"type": "object", "properties": {}}}}
            for name in names]


def test_metrics_count_calls_tokens_removals_and_stage_latency(client, http):
    before = _samples(http.get("/metrics").text)
    client.chat.completions.create(
        model="echo", tools=_tools(20),
        messages=[{"role": "user", "content": "What is the weather in Oslo?"}],
        extra_headers={"X-Session-Id": f"m-{uuid.uuid4().hex[:8]}", "X-Agentmem-Policy": "agent"})
    response = http.get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    after = _samples(response.text)

    def grew(name, **labels):
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0) - before.get(key, 0)

    assert grew("agentmem_calls_total", policy="agent", status="ok") == 1
    assert grew("agentmem_tools_offered_total", policy="agent") == 20
    kept = grew("agentmem_tools_kept_total", policy="agent")
    assert 1 <= kept < 20
    assert grew("agentmem_removals_total", stage="tools", action="drop_tool") == 20 - kept
    tokens_in = grew("agentmem_tokens_in_total", policy="agent")
    assert tokens_in > grew("agentmem_tokens_out_total", policy="agent") > 0
    assert grew("agentmem_stage_latency_seconds_count", stage="tools") == 1
    assert grew("agentmem_hygiene_latency_seconds_count", policy="agent") == 1


def test_metrics_time_the_after_reply_work_by_phase(client, http):
    """The background work a reply leaves (embeddings, then quarantine's detection, the tools
    stage's learning) is timed
    per phase, so an operator sees where the CPU goes between calls."""
    import time

    before = _samples(http.get("/metrics").text)
    client.chat.completions.create(
        model="echo", messages=[{"role": "user", "content": "My flight to Lisbon leaves on Friday."}],
        extra_headers={"X-Session-Id": f"ar-{uuid.uuid4().hex[:8]}", "X-Agentmem-Policy": "default"})
    for _ in range(200):  # after-reply work runs once the reply is out
        if http.get("/healthz").json().get("background", 0) == 0:
            break
        time.sleep(0.05)
    after = _samples(http.get("/metrics").text)

    def grew(name, **labels):
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0) - before.get(key, 0)

    for phase in ("embeddings", "quarantine"):
        assert grew("agentmem_after_reply_seconds_count", phase=phase) >= 1
        assert grew("agentmem_after_reply_seconds_sum", phase=phase) > 0
    assert grew("agentmem_after_reply_seconds_count", phase="prune") == 0  # no after-reply hook


async def test_metrics_show_the_background_backlog_and_the_process(tmp_path):
    """Read when scraped: the after-reply jobs not finished, the inference queues, the shed
    sentences and the process' memory; a backlog that outgrows the CPU shows here."""
    from agentmem.api import Hygiene
    from agentmem.config import Settings

    engine = Hygiene("default", settings=Settings(data_dir=tmp_path))
    paste = " ".join(f"Line {i} of the harbour log says the tide was {i % 7} metres." for i in range(60))
    try:
        call = await engine.prepare({"model": "echo", "messages": [{"role": "user", "content": paste}]},
                                    session_id=f"bk-{uuid.uuid4().hex[:8]}")
        await call.finish({"role": "assistant", "content": "Noted."})
        busy = _samples(engine.metrics.exposition().decode())  # the reply's work is queued
        await engine.drain()
        idle = _samples(engine.metrics.exposition().decode())
    finally:
        await engine.aclose()
        engine.connector.close()
    assert busy[("agentmem_background_jobs", ())] >= 1
    assert idle[("agentmem_background_jobs", ())] == 0
    for pool in ("call_path", "background"):
        assert ("agentmem_inference_queued_jobs", (("pool", pool),)) in idle
    assert ("agentmem_background_shed_sentences_total", ()) in idle
    assert idle[("process_resident_memory_bytes", ())] > 0


def test_each_call_logs_one_structured_line_with_its_session(client, caplog):
    session_id = f"log-{uuid.uuid4().hex[:8]}"
    with caplog.at_level(logging.INFO, logger="agentmem.calls"):
        client.chat.completions.create(model="echo", messages=[{"role": "user", "content": "Hi"}],
                                       extra_headers={"X-Session-Id": session_id})
        for _ in range(50):  # the line is written when the call's storage finishes
            records = [r for r in caplog.records
                       if getattr(r, "agentmem", {}).get("session_id") == session_id]
            if records:
                break
            import time
            time.sleep(0.05)
    [record] = records
    line = json.loads(JsonFormatter().format(record))
    assert line["session_id"] == session_id and line["event"] == "call" and line["status"] == "ok"
    assert line["tokens_before"] > 0 and line["report_id"] and line["level"] == "info"


def test_inspect_shows_calls_quarantine_and_struck_text(tmp_path, monkeypatch):
    import asyncio

    from agentmem.api import Hygiene
    from agentmem.cli import app
    from agentmem.config import Settings

    session_id = f"inspect-{uuid.uuid4().hex[:8]}"

    async def replay():
        hygiene = Hygiene("guarded", settings=Settings(data_dir=tmp_path))
        for end in [i + 1 for i, m in enumerate(SESSION) if m["role"] == "user"]:
            await hygiene.apply(SESSION[:end], session_id=session_id)
        await hygiene.drain()
        await hygiene.aclose()
        hygiene.connector.close()

    asyncio.run(replay())

    monkeypatch.setenv("AGENTMEM_DATA_DIR", str(tmp_path))
    runner = CliRunner()
    shown = runner.invoke(app, ["inspect", session_id], env={"COLUMNS": "220"})
    assert shown.exit_code == 0, shown.output
    out = shown.output
    assert "calls 4" in out and "Quarantine" in out and "poison" in out and "recurrence" in out
    assert "[q:The driver left it in the Maple Street parcel locker" in out  # withheld, bracketed
    assert "Your order LH-1 shipped with UPS." in out  # kept text shown plain
    first = runner.invoke(app, ["inspect", session_id, "--call", "1"], env={"COLUMNS": "220"})
    assert first.exit_code == 0 and "[q:" not in first.output  # nothing was withheld on call 1
    missing = runner.invoke(app, ["inspect", session_id, "--call", "99"])
    assert missing.exit_code == 1 and "no call '99'" in missing.output
    unknown = runner.invoke(app, ["inspect", "no-such-session"])
    assert unknown.exit_code == 1 and "no session" in unknown.output
