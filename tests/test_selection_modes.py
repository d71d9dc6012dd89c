"""Selection modes of the prune stage: greedy, MMR and clustering (README: Context assembly)."""

from __future__ import annotations

import numpy as np
import pytest

from agentmem.stages.selection import diversified

# Four near-paraphrases of one fact, one other fact a little less relevant to the question.
PARAPHRASES = ["My order 5512 ships to Lyon on Friday.",
               "Order 5512 is being shipped to Lyon this Friday.",
               "The shipment of order 5512 goes to Lyon on Friday.",
               "Friday is when order 5512 ships to Lyon."]
OTHER = "The courier in Lyon needs my door code 4471 for the delivery."
FILLERS = ["Noted. Can you recommend a pasta recipe?", "Noted. Try spaghetti aglio e olio.",
           "Noted. Who won the football match?", "Noted. I do not have live sports results."]


def _history() -> list[dict]:
    history = [{"role": "system", "content": "You are a shopping assistant."}]
    for paraphrase, filler in zip(PARAPHRASES, FILLERS):
        history += [{"role": "user", "content": paraphrase}, {"role": "assistant", "content": filler}]
    history += [{"role": "user", "content": OTHER}, {"role": "assistant", "content": "Thanks."},
                {"role": "user", "content": "Write me a poem about the sea."},
                {"role": "assistant", "content": "The waves roll in, the gulls cry out."},
                {"role": "user", "content": "When does order 5512 ship to Lyon?"}]
    return history


def _unit(*values: float) -> np.ndarray:
    vector = np.asarray(values, dtype=np.float32)
    return vector / np.linalg.norm(vector)


def test_mmr_and_cluster_demote_the_second_of_a_near_duplicate_pair():
    # rows 0 and 1 say the same (cosine 0.99), row 2 is another topic, row 3 is excluded
    vectors = np.stack([_unit(1, 0.1, 0), _unit(1, 0.12, 0), _unit(0, 1, 0), _unit(0, 0, 1)])
    score = np.asarray([0.9, 0.88, 0.6, -np.inf], dtype=np.float32)
    rows = np.arange(4)
    common = {"pool": 8, "cluster_spread": 0.5, "cluster_similarity": 0.6}
    mmr = diversified("mmr", rows, score, vectors, redundancy_weight=0.5, **common)
    cluster = diversified("cluster", rows, score, vectors, redundancy_weight=0.5, **common)
    for adjusted in (mmr, cluster):
        assert adjusted[0] == pytest.approx(0.9) and adjusted[2] > adjusted[1]
        assert adjusted[3] == -np.inf  # what quarantine withheld stays out
    assert mmr[1] == pytest.approx(0.88 - 0.5 * float(vectors[0] @ vectors[1]), abs=1e-5)
    assert cluster[1] == pytest.approx(0.38) and cluster[2] == pytest.approx(0.6)
    assert np.allclose(score[:3], [0.9, 0.88, 0.6])  # the caller's scores are not touched
    # past the pool, every row takes the largest handicap, so none jumps ahead of the pool
    narrow = diversified("cluster", rows, score, vectors, redundancy_weight=0.5,
                         **{**common, "pool": 2})
    assert narrow[2] == pytest.approx(0.1) and narrow[1] == pytest.approx(0.38)
    with pytest.raises(ValueError, match="unknown selection mode"):
        diversified("random", rows, score, vectors, redundancy_weight=0.5, **common)


def test_cluster_mode_through_the_proxy_keeps_one_of_each_topic(client, received, session_id,
                                                                  policy_dir):
    prune = ("{history_floor_tokens: 0, history_tokens: 36, keep_recent_exchanges: 1, "
             "context_weight: 0, lexical_weight: 0, cluster_spread: 0.5, selection: %s}")
    for mode in ("greedy", "cluster"):
        (policy_dir / f"select-{mode}.yaml").write_text(
            f"name: select-{mode}\nstages: [prune]\nprune: {prune % mode}\n")
    sent = {}
    for mode in ("greedy", "cluster"):
        received.clear()
        client.chat.completions.create(model="echo", messages=_history(), extra_headers={
            "X-Session-Id": f"{session_id}-{mode}", "X-Agentmem-Policy": f"select-{mode}"})
        [body] = received.requests()
        sent[mode] = [m["content"] for m in body["messages"]]
        assert sent[mode][0] == "You are a shopping assistant."
        assert sent[mode][-1] == "When does order 5512 ship to Lyon?"
    greedy_kept = [text for text in sent["greedy"] if text in PARAPHRASES]
    assert len(greedy_kept) == 2 and OTHER not in sent["greedy"]  # the same fact twice
    cluster_kept = [text for text in sent["cluster"] if text in PARAPHRASES]
    assert len(cluster_kept) == 1 and OTHER in sent["cluster"]  # the fact once, and the other
    assert not any("poem" in text or "pasta" in text for text in sent["cluster"])
