"""The two-stage history mode: the pruner reads recalled turns with their neighbours, batched,
cached per (query, window), bounded by a token budget per call; and `bench history --compare`.

Real parts: the engine on the embedded Redis, the shipped pruner checkpoint, MiniLM, and the
proxy with the echo upstream for what reaches the provider.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import numpy as np
import pytest

import agentmem.stages.prune as prune_module
from agentmem import Hygiene
from agentmem.config import Settings
from agentmem.models.array_cache import ArrayCache
from agentmem.policy import policy_from_dict
from agentmem.stages.prune import Candidate, _score_windows, _window_key
from agentmem.text import split_sentences
from tests.test_prune_stage import HISTORY

# A chat where the evidence ("Lyon") is in a reply that names nothing of the question itself:
# only the turn before it says what it is about.
CHAT = [
    {"role": "system", "content": "You are a friendly companion."},
    {"role": "user", "content": "I finally booked the train for my sister's wedding."},
    {"role": "assistant", "content": "Lovely! Where is it going to be?"},
    {"role": "user", "content": "In Lyon, at an old silk factory by the river."},
    {"role": "assistant", "content": "That sounds beautiful."},
    {"role": "user", "content": "My cat knocked a plant over this morning. Soil everywhere."},
    {"role": "assistant", "content": "Cats love doing that. Did the plant survive?"},
    {"role": "user", "content": "Barely. I repotted it in a bigger pot."},
    {"role": "assistant", "content": "Good call, it will have room to grow."},
    {"role": "user", "content": "I watched a documentary about whales yesterday."},
    {"role": "assistant", "content": "Whales are fascinating. Which species?"},
    {"role": "user", "content": "Humpbacks, mostly. They sing for hours."},
    {"role": "assistant", "content": "Their songs change every season."},
    {"role": "user", "content": "Where is my sister's wedding going to be?"},
]


@pytest.fixture(scope="module")
def hygiene(data_dir):
    engine = Hygiene("default", settings=Settings(data_dir=data_dir))
    engine.embedder.load()  # as a ready server has it: a call during the load skips the stage
    yield engine
    engine.connector.close()


def _policy(**prune):
    prune = {"history_floor_tokens": 0, "history_fraction": 0.4, "keep_recent_exchanges": 1,
             "rerank_turns": 4, **prune}
    return policy_from_dict({"name": "rerank-test", "stages": ["prune"], "embed": False,
                             "prune": prune})


def _candidates(messages):
    return [Candidate(i, m["content"], [(s.start, s.end) for s in split_sentences(m["content"])],
                      True, m["role"]) for i, m in enumerate(messages) if m.get("content")]


def test_a_window_returns_the_recalled_turns_scores_read_with_its_neighbours():
    # imported here: torch imported while collecting made test_prune_stage's first call see
    # MiniLM "still loading" (its prefetch thread started sooner), a race of that test's setup
    from agentmem.models.pruner import cached_pruner
    from agentmem.models.registry import default_pruner_path

    pruner = cached_pruner(default_pruner_path())
    turns = _candidates(CHAT[1:4])
    query = "Where is my sister's wedding going to be?"
    [alone] = _score_windows(pruner, query, [([turns[2]], 0)])
    [framed] = _score_windows(pruner, query, [(turns, 2)])
    assert alone.shape == framed.shape == (len(turns[2].spans),)
    assert not np.allclose(alone, framed)  # the neighbours are read: the score changes
    # one batch of windows gives each window what it gives alone
    both = _score_windows(pruner, query, [([turns[2]], 0), (turns, 2)])
    assert np.allclose(both[0], alone, atol=1e-5) and np.allclose(both[1], framed, atol=1e-5)
    key = _window_key("ckpt", "q", turns, 2)
    assert key != _window_key("ckpt", "q", turns, 1) != _window_key("ckpt", "q2", turns, 1)
    assert key != _window_key("other", "q", turns, 2)


@pytest.mark.parametrize("scope", ["top", "margin"])
async def test_two_stage_mode_keeps_the_evidence_and_caches_repeated_queries(hygiene, monkeypatch, scope):
    reads: list[int] = []
    real = prune_module._score_windows

    def counting(pruner, query, windows):
        reads.append(len(windows))
        return real(pruner, query, windows)

    monkeypatch.setattr(prune_module, "_score_windows", counting)
    session = f"rr-{uuid.uuid4().hex}"
    policy = _policy(rerank_scope=scope)
    first = await hygiene.apply(CHAT, session_id=session, policy=policy)
    assert not first.report.warnings and first.report.stages[0].error is None
    sent = " ".join(m.get("content") or "" for m in first.messages)
    assert "Lyon" in sent and first.report.tokens_after < first.report.tokens_before
    assert reads and reads[0] <= 4  # at most rerank_turns windows, in one batch
    again = await hygiene.apply(CHAT, session_id=session, policy=policy)
    assert len(reads) == 1  # the same query over the same turns: every window from the cache
    assert [m.get("content") for m in again.messages] == [m.get("content") for m in first.messages]


async def test_past_the_pruner_budget_the_rest_keep_the_first_stage_score(hygiene, monkeypatch):
    monkeypatch.setattr(prune_module, "_RERANK_CACHE", ArrayCache(16))
    result = await hygiene.apply(HISTORY, session_id=f"rr-{uuid.uuid4().hex}",
                                 policy=_policy(rerank_tokens=40, rerank_turns=6))
    [warning] = result.report.warnings
    assert "past the pruner budget (40 tokens)" in warning and "keep their embedding" in warning
    sent = " ".join(m.get("content") or "" for m in result.messages)
    assert "5512" in sent and "Lyon" in sent  # still pruned by the first stage, still right
    off = await hygiene.apply(HISTORY, session_id=f"rr-{uuid.uuid4().hex}",
                              policy=_policy(rerank_tokens=0))
    assert not off.report.warnings  # a zero budget is the fast path, not a fault


def test_score_cache_is_a_bounded_lru():
    cache = ArrayCache(2)
    for key in "abc":
        cache.put(key, np.asarray([ord(key)], dtype=np.float32))
    assert cache.get("a") is None and cache.get("b") is not None
    cache.put("d", np.zeros(1, dtype=np.float32))  # b was read last: c goes
    assert cache.get("c") is None and cache.get("b") is not None


def test_two_stage_mode_through_the_proxy(proxy, received, policy_dir):
    import httpx

    (policy_dir / "rerank-margin.yaml").write_text(json.dumps({
        "extends": "default", "name": "rerank-margin", "stages": ["prune", "budget"],
        "prune": {"history_floor_tokens": 0, "history_fraction": 0.4, "keep_recent_exchanges": 1,
                  "rerank_turns": 4, "rerank_scope": "margin"}}))
    response = httpx.post(f"{proxy.url}/v1/chat/completions", timeout=120, headers={
        "X-Agentmem-Policy": "rerank-margin", "X-Session-Id": f"rr-{uuid.uuid4().hex}"},
        json={"model": "echo", "messages": CHAT})
    assert response.status_code == 200, response.text
    [upstream] = received.requests()
    sent = [m.get("content") or "" for m in upstream["messages"]]
    assert any("Lyon" in text for text in sent)
    assert len(" ".join(sent)) < len(" ".join(m["content"] for m in CHAT))


def test_bench_history_compares_policies_on_the_same_sessions(tmp_path):
    turns = [{"speaker": "Ann" if i % 2 == 0 else "Bo", "dia_id": f"D1:{i + 1}",
              "text": text["content"]} for i, text in enumerate(CHAT[1:-1])]
    sample = {"sample_id": "s", "conversation": {"speaker_a": "Ann", "speaker_b": "Bo",
                                                 "session_1": turns,
                                                 "session_1_date_time": "1 May 2023"},
              "qa": [{"question": "Where is the wedding?", "answer": "Lyon", "evidence": ["D1:3"],
                      "category": 1}]}
    data = tmp_path / "locomo.json"
    data.write_text(json.dumps([sample]))
    base = {"extends": "default", "stages": ["prune", "budget"],
            "prune": {"history_floor_tokens": 0, "history_fraction": 0.3}}
    first = tmp_path / "first.yaml"
    first.write_text(json.dumps({**base, "name": "first"}))
    second = tmp_path / "second.yaml"
    second.write_text(json.dumps({**base, "name": "second",
                                  "prune": {**base["prune"], "rerank_turns": 3}}))
    out = tmp_path / "history.json"
    run = subprocess.run([sys.executable, "-m", "agentmem", "bench", "history", "--data", str(data),
                          "--policy", str(first), "--compare", str(second), "--no-scaling",
                          "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(out.read_text())
    assert result["n"] == 1 and result["latency_vs_turns"] == {}
    compared = result["compare"][str(second)]
    for entry in (result, compared):
        assert entry["evidence_turns"] == 1 and 0 < entry["token_fraction"] < 1
        assert set(entry["baselines"]) == {"recency", "embedding_topk"}
        assert entry["evidence_recall_by_category"]["1"]["evidence_turns"] == 1
        assert entry["latency_ms_p50"] > 0


def test_margin_reads_the_turns_at_the_budgets_edge():
    from types import SimpleNamespace

    from agentmem.stages.prune import PruneSettings, _rerank_picks

    # ten one-sentence turns of 10 tokens; first-stage scores fall with the position
    turns = 10
    corpus = SimpleNamespace(position=np.arange(turns), tokens=np.full(turns, 10),
                             spans=[(0, 1)] * turns, rows_of=[range(i, i + 1) for i in range(turns)])
    older = [Candidate(i, "x", [(0, 1)], True, rows=np.asarray([i])) for i in range(turns)]
    score = np.linspace(1.0, 0.1, turns).astype(np.float32)
    rows = np.arange(turns)
    budget = 4 * (10 + 3) + 1  # room for four turns with their message overhead
    margin = PruneSettings(rerank_turns=4, rerank_scope="margin", turn_spread=0.0)
    assert _rerank_picks(older, score, rows, corpus, budget, margin) == [3, 4, 2, 5]
    top = PruneSettings(rerank_turns=4, rerank_scope="top")
    assert _rerank_picks(older, score, rows, corpus, budget, top) == [0, 1, 2, 3]
    score[7] = -np.inf  # withheld by quarantine: never read
    wide = PruneSettings(rerank_turns=10, rerank_scope="margin", turn_spread=0.0)
    assert 7 not in _rerank_picks(older, score, rows, corpus, budget, wide)


def test_bench_history_renders_a_shared_photo_as_locomo_does():
    """A turn that shares a photo carries its caption, and each turn its speaker's name, as
    LoCoMo's own evaluation renders them; ``captions=False, names=False`` gives the earlier
    rendering (text only)."""
    from agentmem.bench.formats import LocomoSample
    from agentmem.bench.history import conversation_messages

    sample = LocomoSample.model_validate({"sample_id": "s", "conversation": {
        "speaker_a": "Ann", "speaker_b": "Bo", "session_1_date_time": "1 May 2023",
        "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "Look at this!",
                       "blip_caption": "a photo of a clipboard with a notepad"},
                      {"speaker": "Bo", "dia_id": "D1:2", "text": "Nice. How do you use it?"}]},
        "qa": []})
    messages, where = conversation_messages(sample)
    assert messages[0]["content"] == ("[1 May 2023] Look at this! "
                                      "[and shared a photo of a clipboard with a notepad]")
    assert messages[1] == {"role": "assistant", "name": "Bo", "content": "Nice. How do you use it?"}
    assert where == {"D1:1": 0, "D1:2": 1}
    plain, _ = conversation_messages(sample, captions=False, names=False)
    assert plain[0] == {"role": "user", "content": "[1 May 2023] Look at this!"}
