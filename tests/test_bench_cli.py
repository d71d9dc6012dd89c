"""`agentmem bench`: the overhead run end to end (keys, not timings) and the data readers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def _agentmem(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "agentmem", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_overhead_bench_writes_the_documented_keys(tmp_path):
    out = tmp_path / "overhead.json"
    run = _agentmem("bench", "overhead", "--calls", "10", "--turn-calls", "2", "--turns", "10,30",
                    "--json", str(out))
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(out.read_text())
    for policy in ("off", "default"):
        assert set(result[policy]) >= {"overhead_ms_p50", "overhead_ms_p99"}
        assert result[policy]["n"] == 10 and result[policy]["ms_p50"] > 0
    assert result["floor"]["ms_p50"] > 0 and result["direct"]["n"] == 10
    assert set(result["by_turns"]) == {"10", "30"}
    assert result["by_turns"]["30"]["messages"] >= 30
    assert result["by_turns"]["30"]["n"] == 2  # settled calls; as many back to back
    assert {"overhead_ms_p50", "overhead_ms_p95", "back_to_back_overhead_ms_p50",
            "back_to_back_overhead_ms_p95"} <= set(result["by_turns"]["30"])
    assert result["by_turns"]["30"]["peak_rss_mb"] > 100  # MiniLM alone is more
    assert result["by_turns"]["30"]["seed_ms_per_turn"] > 0
    assert result["by_turns"]["30"]["ingest_ms_per_turn"] >= result["by_turns"]["30"]["seed_ms_per_turn"]
    phases = result["by_turns"]["30"]["after_reply_phase_ms_per_turn_p50"]
    assert set(phases) == {"embeddings", "quarantine", "tools"} and phases["embeddings"] > 0


def test_bench_kinds_read_their_formats(tmp_path):
    tools = tmp_path / "tools.jsonl"
    tools.write_text(json.dumps({"id": "t", "query": "weather?", "messages": None, "gold": ["w"],
                                 "tools": [{"type": "function", "function": {"name": "w"}}],
                                 "notes": "extra keys are ignored"}) + "\n")
    out = tmp_path / "tools.json"
    run = _agentmem("bench", "tools", "--data", str(tools), "--json", str(out))
    assert run.returncode == 0, run.stderr
    assert json.loads(out.read_text())["n"] == 1
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "a", "question": "q", "sentences": ["x"], "labels": [1]}) + "\n"
                   + json.dumps({"id": "b", "question": "q", "sentences": ["x"], "labels": [1, 0]}) + "\n")
    run = _agentmem("bench", "prune", "--data", str(bad))
    assert run.returncode == 2 and "bad.jsonl:2" in run.stderr
    clash = tmp_path / "clash.jsonl"
    clash.write_text(json.dumps({"id": "c", "turns": [{"speaker": "A", "text": "hi"}],
                                 "label": False}) + "\n")
    out = tmp_path / "clash.json"
    run = _agentmem("bench", "clash", "--data", str(clash), "--json", str(out))
    assert run.returncode == 0, run.stderr
    result = json.loads(out.read_text())
    assert result["n"] == 1 and result["path"] == "rules+nli" and "not run" in result["judge"]["status"]


def test_the_clash_bench_says_where_each_miss_was_lost(tmp_path):
    """A written contradiction the rules catch is said by "rule"; one whose turn the cascade
    never pairs with the newest (no shared word, nothing claimed) is a miss that was never a
    candidate; the consistent record is said by nobody. Through the real cascade and model."""
    def record(rid, turns, label, contradicting=None):
        return json.dumps({"id": rid, "label": label, "contradicting_turns": contradicting,
                           "turns": [{"speaker": s, "text": x} for s, x in turns]}) + "\n"
    clash = tmp_path / "clash.jsonl"
    clash.write_text(
        record("rule", [("user", "I have two cats."), ("assistant", "Lovely!"),
                        ("user", "I have three cats.")], True, [0])
        + record("unpaired", [("user", "I live in Oslo."), ("assistant", "Nice city."),
                              ("user", "What is a good pancake recipe?")], True, [0])
        + record("fine", [("user", "I live in Oslo."), ("assistant", "Nice city."),
                          ("user", "Oslo gets dark early in winter.")], False))
    out = tmp_path / "clash.json"
    run = _agentmem("bench", "clash", "--data", str(clash), "--json", str(out))
    assert run.returncode == 0, run.stderr
    result = json.loads(out.read_text())
    rows = {r["id"]: r for r in result["records"]}
    assert rows["rule"]["said"] and rows["rule"]["by"] == "rule" and rows["rule"]["turn"] == 0
    assert not rows["unpaired"]["said"] and rows["unpaired"]["gold_nli"] is None
    assert not rows["fine"]["said"] and rows["fine"]["by"] is None
    assert result["misses"] == {"candidate_scored_low": 0, "not_a_candidate": 1, "unlocated": 0}
    assert "3 rows (in the JSON)" in run.stdout  # the table counts them, the JSON holds them


def test_bench_plot_writes_a_png(tmp_path):
    files = []
    for i, (fraction, recall) in enumerate([(0.05, 0.3), (0.2, 0.7)]):
        path = tmp_path / f"run{i}.json"
        path.write_text(json.dumps({"token_fraction": fraction, "evidence_recall": recall, "policy": f"p{i}",
                                    "baselines": {"embedding_topk": {"evidence_recall": recall + 0.1},
                                                  "recency": {"evidence_recall": 0.0}}}))
        files.append(str(path))
    out = tmp_path / "plot.png"
    run = _agentmem("bench", "plot", *files, "--out", str(out))
    assert run.returncode == 0, run.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5000


def _noisy(tmp_path, *options: str) -> dict:
    """`agentmem bench noisy` on a small paste, in a subprocess; its JSON result."""
    out = tmp_path / "noisy.json"
    run = _agentmem("bench", "noisy", "--paste-mb", "0.05", *options, "--json", str(out))
    assert run.returncode == 0, run.stdout + run.stderr
    return json.loads(out.read_text())


def test_noisy_bench_measures_both_sessions(tmp_path):
    result = _noisy(tmp_path, "--calls", "3", "--history-turns", "6")
    assert result["b_quiet"]["n"] == 3 and result["b_noisy"]["n"] == 3
    assert result["paste_chars"] >= 50_000 and result["a"]["hygiene_ms"] > 0
    assert result["paste_as"] == "user"


def test_noisy_bench_can_bring_the_text_as_an_untrusted_tools_answer(tmp_path):
    result = _noisy(tmp_path, "--calls", "2", "--history-turns", "4", "--as-tool", "web_fetch")
    assert result["paste_as"] == "web_fetch"
    # ~500 sentences from a tool the default policy does not trust: checked after the reply
    assert any("the poison check runs after the reply" in w for w in result["a"]["warnings"])


def test_load_bench_reports_each_worker_count_and_level(tmp_path):
    out = tmp_path / "load.json"
    run = _agentmem("bench", "load", "--concurrency", "1,3", "--calls", "6", "--workers", "1",
                    "--policy", "off", "--json", str(out))
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(out.read_text())
    for level in ("1", "3"):
        assert result["floor"][level]["ok"] == 6
        served = result["workers_1"][level]
        assert served["ok"] == 6 and served["errors"] == {} and served["calls_per_s"] > 0
        assert served["p99_ms"] >= served["p50_ms"] > 0
    assert result["workers_1"]["peak_rss_mb"] > 100


def test_a_bench_run_leaves_no_redis_folder_behind(tmp_path):
    """Each bench replays its sessions on an embedded Redis of its own, in a temporary folder
    that goes when the run ends (it used to stay: tens of MB a run)."""
    data = tmp_path / "poison.jsonl"
    peers = (Path(__file__).resolve().parents[1] / "agentmem" / "bench" / "data"
             / "poison_agentmem_peers.jsonl")
    data.write_text(peers.read_text().splitlines()[0] + "\n")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    run = subprocess.run([sys.executable, "-m", "agentmem", "bench", "poison", "--data", str(data),
                          "--json", str(tmp_path / "poison.json")], capture_output=True, text=True,
                         timeout=300, env={**os.environ, "TMPDIR": str(scratch)})
    assert run.returncode == 0, run.stdout + run.stderr
    assert json.loads((tmp_path / "poison.json").read_text())["n"] == 1
    assert not [p.name for p in scratch.iterdir() if p.name.startswith("agentmem-poison-")]


def test_the_poison_bench_counts_the_clash_records_its_sessions_get(tmp_path):
    """The poison files hold no contradiction, so a clash record there is a false alarm the
    poison measures would not show: the bench reports how many there were."""
    record = {"id": "ages", "claims": [], "messages": [
        {"role": "user", "content": "I'm 34 and new to running."},
        {"role": "assistant", "content": "Great, let's plan a gentle start."},
        {"role": "user", "content": "As a 52-year-old, should I worry about my knees?"}]}
    data = tmp_path / "poison.jsonl"
    data.write_text(json.dumps(record) + "\n")
    run = subprocess.run([sys.executable, "-m", "agentmem", "bench", "poison", "--data", str(data),
                          "--json", str(tmp_path / "poison.json")], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert json.loads((tmp_path / "poison.json").read_text())["clash_records"] == 1


def test_code_reads_bench_sends_a_file_read_in_the_recent_window_whole_and_only_its_newest_read(tmp_path):
    import agentmem

    package = Path(agentmem.__file__).parent
    for name in ("text.py", "structured.py", "stages/prune.py"):
        (tmp_path / name.replace("/", "_")).write_text((package / name).read_text())
    out = tmp_path / "code.json"
    run = _agentmem("bench", "code-reads", "--folder", str(tmp_path), "--json", str(out))
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(out.read_text())
    assert result["n"] == 3 and result["older_exchanges"] == 0
    assert result["function_intact"] == result["output_verbatim"] == result["parses"] == 1.0
    assert result["machine_text"] == 1.0 and 0 < result["kind_ms_p50"] <= result["kind_ms_max"]
    run = _agentmem("bench", "code-reads", "--folder", str(tmp_path), "--edit", "--json", str(out))
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(out.read_text())  # edited and read again: only the new version is sent
    assert result["edit"] and result["function_intact"] == 1.0 and result["stale_function_sent"] == 0.0


def test_doc_reads_bench_sends_a_prose_file_whole_only_to_an_agent_that_can_edit_it(tmp_path):
    topics = ["backups", "billing", "shipping", "support"]
    for number, topic in enumerate(topics[:2]):
        paragraphs = [f"## {other.title()}\n\n" + " ".join(
            f"The {other} team reviews request {i} of file {number} every {i + 2} days, and "
            f"it writes the outcome to the {other} log before noon." for i in range(9))
            for other in topics]
        (tmp_path / f"{topic}.md").write_text(f"# Notes on {topic}\n\n" + "\n\n".join(paragraphs))
    out = tmp_path / "docs.json"
    run = _agentmem("bench", "doc-reads", "--folder", str(tmp_path), "--json", str(out))
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(out.read_text())
    assert result["n"] == 2 and result["prose"] == 1.0 and not result["read_only"]
    assert result["paragraph_intact"] == result["output_verbatim"] == result["kept_share"] == 1.0
    run = _agentmem("bench", "doc-reads", "--folder", str(tmp_path), "--read-only", "--json", str(out))
    assert run.returncode == 0, run.stdout + run.stderr
    pruned = json.loads(out.read_text())  # an agent that cannot edit gets the file pruned
    assert pruned["read_only"] and pruned["output_verbatim"] == 0.0 and pruned["kept_share"] < 0.5
    assert pruned["tokens_sent"] < result["tokens_sent"]


def test_text_kinds_bench_counts_the_files_called_what_they_are(tmp_path):
    import agentmem

    package = Path(agentmem.__file__).parent
    for name in ("text.py", "structured.py"):
        (tmp_path / name).write_text((package / name).read_text())
    (tmp_path / "page.py").write_text("The Normans gave their name to Normandy, a region in France. " * 40)
    out = tmp_path / "kinds.json"
    run = _agentmem("bench", "text-kinds", str(tmp_path / "*.py"), "--expect", "machine", "--json", str(out))
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(out.read_text())
    assert result["n"] == 3 and result["misses"] == [str(tmp_path / "page.py")]
    assert _agentmem("bench", "text-kinds", str(tmp_path / "*.py"), "--expect", "code").returncode == 2
