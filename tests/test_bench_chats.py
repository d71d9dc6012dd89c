"""`agentmem bench chats`: a written self-contradiction is caught when a clash record pairs its
two sentences, and every other clash record counts as false; through the real engine."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from agentmem.bench.chats import chat_messages, locomo_chats, read_chats, run_chats
from agentmem.cli import app

AGE = {"id": "c-age", "system": None, "messages": [
    {"role": "user", "content": "I'm 34 years old and I want to start running."},
    {"role": "assistant", "content": "Great idea! Start with three easy runs a week."},
    {"role": "user", "content": "How long should each run be?"},
    {"role": "assistant", "content": "Twenty minutes of run-walk intervals is plenty at first."},
    {"role": "user", "content": "I'm 52 years old, so is that still fine for me?"},
    {"role": "assistant", "content": "Yes, the same plan works well at any age."},
], "contradictions": [{"speaker": "user", "older": "I'm 34 years old and I want to start running.",
                       "newer": "I'm 52 years old, so is that still fine for me?", "kind": "age"}]}


def test_a_written_contradiction_the_rules_read_is_caught_and_not_counted_false():
    result = run_chats([AGE])
    assert result["contradictions"] == 1 and result["contradictions_caught"] == 1
    assert result["recall"] == 1.0
    assert result["false_records"] == 0 and result["false"] == []


def test_the_same_clash_unwritten_is_a_false_record():
    result = run_chats([{**AGE, "id": "c-age-unwritten", "contradictions": []}])
    assert result["contradictions"] == 0 and result["recall"] is None
    assert result["false_records"] == result["false_records_in_consistent_chats"] == 1
    assert result["chats_with_a_false_record"] == 1
    assert result["false"][0]["withheld"].startswith("I'm 34 years old")


def test_the_command_reads_several_files(tmp_path: Path):
    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    one.write_text(json.dumps(AGE) + "\n")
    two.write_text(json.dumps({**AGE, "id": "c-2", "system": "You are a running coach."}) + "\n")
    assert [c["id"] for c in read_chats([one, two])] == ["c-age", "c-2"]
    assert chat_messages(read_chats([two])[0])[0]["role"] == "system"
    out = tmp_path / "result.json"
    run = CliRunner().invoke(app, ["bench", "chats", "--data", str(one), "--data", str(two),
                                   "--json", str(out)])
    assert run.exit_code == 0, run.output
    assert json.loads(out.read_text())["contradictions_caught"] == 2


def test_a_locomo_conversation_reads_as_one_chat(tmp_path: Path):
    """The first speaker is the user, the second the assistant; one speaker's consecutive
    turns are one message, the chat opens on the user, and it is cut at ``turns`` messages."""
    conversation = {"speaker_a": "Ann", "speaker_b": "Bo",
                    "session_1": [{"speaker": "Bo", "dia_id": "D1:1", "text": "Hey!"},
                                  {"speaker": "Ann", "dia_id": "D1:2", "text": "Hi Bo."},
                                  {"speaker": "Ann", "dia_id": "D1:3", "text": "I moved to Oslo."},
                                  {"speaker": "Bo", "dia_id": "D1:4", "text": "Nice!"}],
                    "session_2": [{"speaker": "Ann", "dia_id": "D2:1", "text": "Oslo is cold."},
                                  {"speaker": "Bo", "dia_id": "D2:2", "text": "Wrap up."}]}
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([{"conversation": conversation, "qa": []}]))
    [chat] = locomo_chats(path, [0], turns=3)
    assert chat["id"] == "locomo-0" and chat["contradictions"] == []
    assert chat["messages"] == [{"role": "user", "content": "Hi Bo. I moved to Oslo."},
                                {"role": "assistant", "content": "Nice!"},
                                {"role": "user", "content": "Oslo is cold."}]
    result = run_chats([chat])
    assert result["n"] == 1 and result["false_records"] == 0


def test_a_malformed_chat_file_is_refused_with_its_line(tmp_path: Path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(AGE) + "\n" + json.dumps({"id": "c-3"}) + "\n")
    run = CliRunner().invoke(app, ["bench", "chats", "--data", str(bad)])
    assert run.exit_code == 2
    assert f"{bad}:2: not a valid ChatRecord" in run.output
