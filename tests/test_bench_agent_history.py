"""`agentmem bench agent-history`: sessions built from passages, measured through the engine."""

from __future__ import annotations

import json
import subprocess
import sys

from agentmem.bench.agent_history import build_sessions, passages_of
from agentmem.bench.formats import PruneRecord


def _records() -> list[PruneRecord]:
    """Thirty made-up towns, four facts each; two questions per town about different facts."""
    records = []
    for k in range(30):
        town = f"Velmora{k}"
        sentences = [f"{town} lies on the banks of the river Osk{k}.",
                     f"{town} has {k * 1000 + 7} inhabitants according to the last census.",
                     f"The mayor of {town} is Adela Brinkman{k}.",
                     f"{town} was founded in the year {1500 + k}."]
        for question, gold in ((f"Which river does {town} lie on?", 0),
                               (f"Who is the mayor of {town}?", 2)):
            records.append(PruneRecord(id=f"{k}-{gold}", question=question, title=f"region{k % 3}",
                                       sentences=sentences,
                                       labels=[int(i == gold) for i in range(4)]))
    return records


def test_sessions_never_repeat_a_passage_and_ask_only_about_old_unquoted_sentences():
    [session] = build_sessions(passages_of(_records()), steps=12, sessions=1, per_session=50,
                               results=2, recent_steps=2, seed=3)
    tools = [m["content"] for m in session.messages if m["role"] == "tool"]
    passages = [p for text in tools for p in text.split("\n\n")]
    assert len(tools) == 12 and len(passages) == 24 == len(set(passages))
    recent = len(session.messages) - 8
    assert session.finals and all(f.tool_index < recent for f in session.finals)
    for final in session.finals:
        assert session.messages[final.tool_index]["role"] == "tool"
        assert all(g in session.messages[final.tool_index]["content"] for g in final.gold)
        quoted = session.messages[final.tool_index + 1]["content"]  # the assistant's answer
        assert not any(g in quoted for g in final.gold) and "mayor" in final.question


def test_bench_keeps_the_answers_of_old_tool_outputs_inside_the_budget(tmp_path):
    source = tmp_path / "towns.jsonl"
    source.write_text("".join(r.model_dump_json() + "\n" for r in _records()))
    policy = tmp_path / "prune_only.yaml"
    policy.write_text("extends: default\nname: prune-only\nstages: [prune]\n"
                      "prune: {history_floor_tokens: 100, history_fraction: 0.08}\n")
    out = tmp_path / "result.json"
    done = subprocess.run([sys.executable, "-m", "agentmem", "bench", "agent-history", "--data",
                           str(source), "--policy", str(policy), "--steps", "24", "--sessions",
                           "1", "--per-session", "6", "--results", "2", "--json", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["n"] == 6
    assert result["answer_sentence_recall"] >= 0.8
    # the old tool-call units go whole (call and result) when unneeded: the budget holds
    assert result["token_fraction"] < 0.25  # 0.31 when every old result stayed
    assert result["baselines"]["embedding_topk"]["answer_sentence_recall"] >= 0.8  # same tokens


def test_json_search_results_are_kept_by_record_and_always_parse(tmp_path):
    """The search tool answering as a search API does (one line of JSON): old results keep
    the records the final questions need and every outgoing tool output parses (before
    agentmem/structured.py, sentence cuts of these lines left unparsable fragments)."""
    [session] = build_sessions(passages_of(_records()), steps=6, sessions=1, per_session=5,
                               results=2, seed=3, result_format="json")
    for message in session.messages:
        if message["role"] == "tool":
            hits = json.loads(message["content"])["results"]
            assert len(hits) == 2 and set(hits[0]) == {"title", "url", "content"}
    source = tmp_path / "towns.jsonl"
    source.write_text("".join(r.model_dump_json() + "\n" for r in _records()))
    policy = tmp_path / "prune_only.yaml"  # the towns' templated facts would read as poison
    policy.write_text("extends: default\nname: prune-only\nstages: [prune]\n"
                      "prune: {history_floor_tokens: 100, history_fraction: 0.08}\n")
    out = tmp_path / "result.json"
    done = subprocess.run([sys.executable, "-m", "agentmem", "bench", "agent-history", "--data",
                           str(source), "--policy", str(policy), "--steps", "24", "--sessions", "1",
                           "--per-session", "6", "--results", "2", "--result-format", "json",
                           "--json", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["n"] == 6 and result["result_format"] == "json"
    assert result["unparsable_tool_outputs"] == 0
    assert result["answer_sentence_recall"] >= 0.8
    assert result["token_fraction"] < 0.3


def test_reruns_repeat_an_earlier_step_and_leave_the_draw_alone():
    passages = passages_of(_records())
    [plain] = build_sessions(passages, steps=12, sessions=1, per_session=50, results=2, seed=3)
    [rerun] = build_sessions(passages, steps=12, sessions=1, per_session=50, results=2, seed=3,
                             rerun_every=4)
    assert len(rerun.messages) == len(plain.messages) + 4 * 2  # after steps 4 and 8
    tools = [m for m in rerun.messages if m["role"] == "tool"]
    contents = [m["content"] for m in tools]
    assert len(set(contents)) == 12 and len(contents) == 14  # two results seen again
    assert len({m["tool_call_id"] for m in tools}) == 14  # each call its own id
    calls = [m for m in rerun.messages if m.get("tool_calls")]
    assert [c["tool_calls"][0]["id"] for c in calls] == [m["tool_call_id"] for m in tools]
    firsts = [c for i, c in enumerate(contents) if contents.index(c) == i]
    assert firsts == [m["content"] for m in plain.messages if m["role"] == "tool"]  # same draw


def test_follow_up_calls_of_a_step_send_the_history_before_it_unchanged(tmp_path):
    """Each final question's step gets a second call (a search answered with passages the
    session never saw): with ``prune.step_stable`` (the default) the history before the step
    goes out as on the first call, byte for byte, also when the second call comes back to back
    (before the first call's background work is done); decided anew it does not."""
    source = tmp_path / "towns.jsonl"
    source.write_text("".join(r.model_dump_json() + "\n" for r in _records()))
    shares = {}
    for stable, back_to_back in (("true", False), ("true", True), ("false", False)):
        policy = tmp_path / f"prune_{stable}.yaml"
        policy.write_text("extends: default\nname: prune-only\nstages: [prune]\n"
                          "prune: {history_floor_tokens: 100, history_fraction: 0.08, "
                          f"step_stable: {stable}}}\n")
        out = tmp_path / f"result_{stable}_{back_to_back}.json"
        done = subprocess.run([sys.executable, "-m", "agentmem", "bench", "agent-history",
                               "--data", str(source), "--policy", str(policy), "--steps", "9",
                               "--sessions", "1", "--per-session", "6", "--results", "2",
                               "--follow-up", *(["--back-to-back"] if back_to_back else []),
                               "--json", str(out)],
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        result = json.loads(out.read_text())
        assert result["follow_up"]["n"] == result["n"] >= 3
        assert result.get("back_to_back", False) is back_to_back
        shares[stable, back_to_back] = result["follow_up"]["prefix_identical"]
    assert shares["true", False] == 1.0
    assert shares["true", True] == 1.0
    assert shares["false", False] < 1.0


def test_back_to_back_needs_a_second_call(tmp_path):
    source = tmp_path / "towns.jsonl"
    source.write_text("".join(r.model_dump_json() + "\n" for r in _records()))
    done = subprocess.run([sys.executable, "-m", "agentmem", "bench", "agent-history", "--data",
                           str(source), "--back-to-back"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2
    assert "--back-to-back" in done.stderr and "--follow-up" in done.stderr


def test_compared_policies_take_turns_running_first():
    """A question's first call pays its cold caches; in a fixed order the compared policies
    always ran warm and looked faster for that alone."""
    from agentmem.bench.history import Tally, turn_order

    tallies = [Tally(name) for name in ("default", "agent", "chat")]
    firsts = [turn_order(tallies, question)[0].policy for question in range(9)]
    assert firsts.count("default") == firsts.count("agent") == firsts.count("chat") == 3
    for question in range(9):  # every policy still runs once per question
        assert sorted(t.policy for t in turn_order(tallies, question)) == ["agent", "chat", "default"]
    assert turn_order(tallies[:1], 5) == tallies[:1]


def test_a_final_question_without_unreturned_passages_left_gets_no_second_call(tmp_path):
    """Twelve steps of two passages leave six of the thirty unreturned: three second calls.
    The others would have answered "No results.", a far lighter step than the ones measured."""
    [session] = build_sessions(passages_of(_records()), steps=12, sessions=1, per_session=6,
                               results=2, seed=0)
    assert len(session.spare) == 6 and len(session.finals) == 6
    source = tmp_path / "towns.jsonl"
    source.write_text("".join(r.model_dump_json() + "\n" for r in _records()))
    policy = tmp_path / "prune.yaml"
    policy.write_text("extends: default\nname: prune-only\nstages: [prune]\n")
    out = tmp_path / "result.json"
    done = subprocess.run([sys.executable, "-m", "agentmem", "bench", "agent-history",
                           "--data", str(source), "--policy", str(policy), "--steps", "12",
                           "--sessions", "1", "--per-session", "6", "--results", "2",
                           "--follow-up", "--json", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["n"] == 6 and result["follow_up"]["n"] == 3
