"""`agentmem bench reliability --scale small`, end to end: the figures are there, and nothing
acknowledged was lost or doubled in the scenarios that are about loss (load, shared sessions,
kill -9 of the proxy, kill -9 of redis-server, provider failures)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agentmem.bench.reliability import LOSS_SCENARIOS, SCENARIOS

COMMON = {"calls", "acknowledged", "errors", "latency_ms", "lost", "duplicated", "peak_rss_mb"}


@pytest.fixture(scope="module")
def result(redis_server, tmp_path_factory):
    """``redis_server`` for its rule (skip, or fail in CI, without Debian's redis-server); the
    bench starts servers of its own."""
    out = tmp_path_factory.mktemp("reliability") / "small.json"
    run = subprocess.run([sys.executable, "-m", "agentmem", "bench", "reliability", "--scale", "small",
                          "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return json.loads(out.read_text())


def test_every_scenario_reports_its_figures(result):
    assert set(result["scenarios"]) == set(SCENARIOS.values())
    for name, figures in result["scenarios"].items():
        parts = [figures[mode] for mode in ("stateful", "stateless", "everysec", "always")
                 if mode in figures] or [figures]
        for part in parts:
            assert set(part) >= COMMON, (name, sorted(part))
            assert part["acknowledged"] > 0, name  # a run that acknowledged nothing proves nothing
            assert part["latency_ms"]["p50"] <= part["latency_ms"]["p99"]
    assert result["scenarios"]["soak"]["rss_mb_end"] > 0
    noisy = result["scenarios"]["noisy_neighbour"]
    assert noisy["paste"]["acknowledged"] == 1 and noisy["quiet_calls"] > 0


@pytest.mark.parametrize("name", LOSS_SCENARIOS)
def test_no_acknowledged_turn_lost_or_duplicated(result, name):
    figures = result["scenarios"][name]
    assert (figures["lost"], figures["duplicated"], figures["out_of_order"]) == (0, 0, 0), figures


def test_the_faults_happened_as_scripted(result):
    """Each kind of fault was met (otherwise 'nothing lost' would mean nothing)."""
    kill = result["scenarios"]["proxy_kill"]
    assert kill["cut_calls"] >= 1 and kill["errors"], kill
    redis_kill = result["scenarios"]["redis_kill"]
    assert all(redis_kill[mode]["healthy_again_s_max"] > 0
               for mode in ("everysec", "always", "embedded"))
    # The restarted proxy serves its sessions as soon as it answers (no lock left to wait out,
    # no model load in the way); its own start-up time depends on the machine.
    assert kill["usable_via_restart_s_max"] < kill["restart_s_max"] + 15, kill
    faults = result["scenarios"]["upstream_faults"]
    assert faults["unexpected_outcomes"] == 0, faults["outcomes"]
