"""The budget-aware keep rule: threshold first, then a floor of the passage's tokens, best first;
the bench applies it as the stage does (a title is neither counted nor kept by the floor)."""

from __future__ import annotations

import numpy as np

from agentmem.bench.formats import PruneRecord
from agentmem.bench.prune import kept_share, pruner_keeps
from agentmem.models.keep_rule import KeepRule, apply_floor
from agentmem.models.pruner import SentenceScores


def _scores(token_probs: list[list[float]]) -> SentenceScores:
    arrays = [np.asarray(p, dtype=np.float32) for p in token_probs]
    return SentenceScores([float(a.mean()) if a.size else 0.0 for a in arrays], arrays, 0.0)


def test_floor_adds_the_best_sentences_until_the_share_of_tokens_is_reached():
    ranking = [0.05, 0.30, 0.02, 0.20]
    sizes = [10, 10, 10, 10]
    assert apply_floor([False] * 4, ranking, sizes, 0.0) == [False] * 4  # no floor: as given
    assert apply_floor([False] * 4, ranking, sizes, 0.25) == [False, True, False, False]
    assert apply_floor([False] * 4, ranking, sizes, 0.26) == [False, True, False, True]
    # what the threshold kept counts toward the floor
    assert apply_floor([False, False, False, True], ranking, sizes, 0.5) == [False, True, False, True]
    # a long sentence crossing the line is kept whole; ties of size are by rank
    assert apply_floor([False] * 3, [0.9, 0.1, 0.5], [30, 5, 5], 0.1) == [True, False, False]
    # only eligible sentences are counted and added
    assert apply_floor([False] * 4, ranking, sizes, 0.5, eligible=[0, 2, 3]) == [True, False, False, True]


def test_the_floor_asks_for_at_most_floor_tokens_however_long_the_passage():
    """A question's evidence is a few sentences: on a long passage the share is capped."""
    ranking = [0.1 * i for i in range(40)]  # the best sentences are the last ones
    sizes = [20] * 40  # 800 tokens: a 10% floor asks for 80 tokens, four sentences
    assert sum(apply_floor([False] * 40, ranking, sizes, 0.1)) == 4
    capped = apply_floor([False] * 40, ranking, sizes, 0.1, most=30)
    assert capped == [False] * 38 + [True, True]  # the sentence crossing 30 is kept whole
    assert apply_floor([False] * 4, [0.1, 0.9, 0.2, 0.3], [10] * 4, 0.25, most=100) == [
        False, True, False, False]  # a short passage: the share is the smaller, the cap idle
    scores = _scores([[0.01] * 20 for _ in range(40)])  # unsure: the threshold keeps nothing
    rule = KeepRule(0.5, "mean_prob", floor=0.1, floor_tokens=30)
    assert rule.short_of_floor(scores) and sum(rule.decide(scores)) == 2
    assert not KeepRule(0.5, "mean_prob", floor=0.1, floor_tokens=30).short_of_floor(
        _scores([[0.9] * 40] + [[0.01] * 20 for _ in range(39)]))  # 40 kept tokens pass the cap


def test_the_floor_bridges_to_the_second_hop_through_the_first():
    """Multi-hop: the second hop shares little with the question but much with the first hop;
    with a bridge weight the floor takes it before a distractor closer to the question."""
    scores = _scores([[0.01] * 10] * 4)  # the threshold keeps nothing: the floor decides
    cosines = [0.8, 0.2, 0.35, 0.1]  # first hop, second hop, distractor, noise
    vectors = np.eye(4, dtype=np.float32)
    vectors[1] = [0.9, 0.436, 0, 0]  # the second hop names the first hop's bridge entity
    plain = KeepRule(0.5, "mean_prob", floor=0.5)
    assert plain.decide(scores, similarities=cosines, vectors=vectors) == [True, False, True, False]
    bridged = KeepRule(0.5, "mean_prob", floor=0.5, bridge=0.4)
    assert bridged.decide(scores, similarities=cosines, vectors=vectors) == [True, True, False, False]
    assert bridged.decide(scores, similarities=cosines) == [True, False, True, False]  # no vectors


def test_keep_rule_never_goes_below_the_floor_and_never_drops_what_the_threshold_keeps():
    scores = _scores([[0.9, 0.8], [0.01, 0.02, 0.03], [0.2, 0.1], [0.04] * 5])
    assert KeepRule(0.5, "mean_prob").decide(scores) == [True, False, False, False]
    assert KeepRule(0.5, "mean_prob", floor=0.3).decide(scores) == [True, False, True, False]
    assert KeepRule(0.99, "mean_prob", floor=0.3).decide(scores) == [True, False, True, False]
    assert KeepRule(0.0, "mean_prob", floor=0.3).decide(scores) == [True, True, True, True]
    assert KeepRule(0.99, "mean_prob", floor=1.0).decide(scores) == [True] * 4


def test_bench_keeps_apply_the_rule_without_the_title():
    record = PruneRecord(id="r", question="q", title="Title", sentences=["a b", "c d e", "f"],
                         labels=[0, 1, 0])
    # sentence 0 is the title: scored, but never kept for the record nor counted by the floor
    scores = _scores([[0.99, 0.99], [0.01, 0.02], [0.3, 0.3, 0.3], [0.05]])
    [keep] = pruner_keeps([record], [scores], KeepRule(0.9, "mean_prob", floor=0.4))
    assert keep == [False, True, False]
    [keep] = pruner_keeps([record], [scores], KeepRule(0.9, "mean_prob"))
    assert keep == [False, False, False]
    assert kept_share([[True, False], [False, False]]) == 0.25


def test_the_querys_cosine_vetoes_unrelated_keeps_and_orders_the_floor():
    scores = _scores([[0.9] * 10, [0.8] * 10, [0.04] * 10, [0.01] * 10])
    cosines = [0.1, 0.5, 0.2, 0.9]
    rule = KeepRule(0.5, "mean_prob", floor=0.2, min_similarity=0.3)
    assert rule.decide(scores) == [True, True, False, False]  # no cosines: the model's alone
    # the first keep is unrelated to the query (0.1 < 0.3): vetoed; the second stays
    assert rule.decide(scores, similarities=cosines) == [False, True, False, False]
    # the floor (2 sentences) then adds by cosine, not by the model's order
    assert KeepRule(0.5, "mean_prob", floor=0.4, min_similarity=0.3).decide(
        scores, similarities=cosines) == [False, True, False, True]
    # without min_similarity nothing is vetoed; cosines still order the floor
    assert KeepRule(0.95, "mean_prob", floor=0.2).decide(scores, similarities=cosines) == [
        False, False, False, True]
    # only eligible sentences are vetoed or added (a title is not one)
    assert rule.decide(scores, [1, 2, 3], cosines) == [True, True, False, False]
    # cosines are wanted where the threshold keeps something to veto, or the floor acts
    assert rule.wants_similarities(scores)
    assert not KeepRule(0.5, "mean_prob").wants_similarities(scores)
    assert KeepRule(0.95, "mean_prob", floor=0.2).wants_similarities(scores)
    assert not KeepRule(0.03, "mean_prob", floor=0.3).short_of_floor(scores)


def test_process_orders_the_floor_by_the_query_where_it_is_given_an_embedder():
    """The shipped pruner with a threshold nothing passes: the floor decides. Alone it takes the
    model's best sentence; given an embedder that points the question at the model's third,
    the floor takes that one."""
    from agentmem.models.pruner import cached_pruner
    from agentmem.models.registry import default_pruner_path

    pruner = cached_pruner(default_pruner_path())
    sentences = ["The gearbox was serviced in March.", "Oil pressure stayed nominal all week.",
                 "The ferry timetable changes on Sunday.", "Pallets are stacked near door four."]
    question = "Where are the pallets?"

    def encode(texts: list[str]) -> np.ndarray:  # unit vectors: the question and "The ferry ..."
        rows = np.zeros((len(texts), 8), dtype=np.float32)
        for i, text in enumerate(texts):
            rows[i, 0 if text in (question, sentences[2]) else 1 + i] = 1.0
        return rows

    def kept(**options) -> list[bool]:
        result = pruner.process(question, sentences, title=None, threshold=0.99, floor=0.25,
                                rule="mean_prob", **options)
        return [row["kept"] for row in result["sentences"]]  # one question, one context

    assert kept() == [False, False, False, True]  # the model's own order: the pallets
    by_query = kept(encode=encode)  # the ferry first (then ties, in order, if the floor needs more)
    assert by_query[2] and not by_query[3]


def test_relative_bm25_scores_a_passage_against_the_query_best_first():
    from agentmem.lexical import relative_bm25

    sentences = ["Sathish Kalathil is an Indian film director.", "He was born in Kerala.",
                 "The film premiered in 2014.", "Christopher Nolan directs films too."]
    scores = relative_bm25("Is Sathish Kalathil a film director?", sentences)
    assert scores[0] == 1.0 and scores[1] == 0.0  # the rare name wins; no shared term: 0
    assert 0 < scores[2] < 1 and 0 < scores[3] < 1
    assert relative_bm25("unrelated words", sentences).tolist() == [0.0] * 4
    assert relative_bm25("anything", []).size == 0


def test_the_fused_rule_adds_cosine_and_bm25_to_the_model_and_keeps_the_best_few():
    """An unsure model (every probability under the threshold): the fused score still finds
    the sentence that names the question's entity, and the margin keeps what is close to the
    passage's best; with no weights and no margin the rule is the model's, as before."""
    scores = _scores([[0.10] * 10, [0.12] * 10, [0.08] * 10, [0.11] * 10])
    cosines = [0.35, 0.30, 0.32, 0.60]
    bm25 = [0.0, 0.0, 1.0, 0.1]
    plain = KeepRule(0.5, "mean_prob")
    assert not plain.fused and plain.decide(scores, similarities=cosines, lexical=bm25) == [False] * 4
    # threshold on the fused score: 0.08 + 0.3 x 0.32 + 0.5 x 1.0 = 0.676 passes 0.6, nothing else
    fused = KeepRule(0.6, "mean_prob", fuse_cosine=0.3, fuse_lexical=0.5)
    assert fused.fused and fused.decide(scores, similarities=cosines, lexical=bm25) == [
        False, False, True, False]
    # the margin keeps what is within 0.1 of the best (sentence 3: 0.11 + 0.18 + 0.05 = 0.34 is
    # 0.336 below; at 0.4 it is kept), whatever the threshold
    margin = KeepRule(9.0, "mean_prob", fuse_cosine=0.3, fuse_lexical=0.5, margin=0.1)
    assert margin.decide(scores, similarities=cosines, lexical=bm25) == [False, False, True, False]
    wide = KeepRule(9.0, "mean_prob", fuse_cosine=0.3, fuse_lexical=0.5, margin=0.4)
    assert wide.decide(scores, similarities=cosines, lexical=bm25) == [False, False, True, True]
    # the cosine still vetoes, and a fused rule always wants the cosines
    vetoed = KeepRule(9.0, "mean_prob", min_similarity=0.4, fuse_cosine=0.3, fuse_lexical=0.5,
                      margin=0.4)
    assert vetoed.decide(scores, similarities=cosines, lexical=bm25) == [False, False, False, True]
    assert vetoed.wants_similarities(scores)
    # the floor adds in fused order: BM25's sentence first, not the best cosine
    floored = KeepRule(9.0, "mean_prob", floor=0.25, fuse_cosine=0.3, fuse_lexical=0.5)
    assert floored.decide(scores, similarities=cosines, lexical=bm25) == [False, False, True, False]
    assert KeepRule(9.0, "mean_prob", floor=0.25).decide(scores, similarities=cosines) == [
        False, False, False, True]


def test_bench_keeps_compute_bm25_for_a_fused_rule_from_the_record():
    record = PruneRecord(id="r", question="Who founded Acme Rockets?", title=None,
                         sentences=["The weather was mild.", "Acme Rockets was founded by Ada.",
                                    "Launches resumed in May."], labels=[0, 1, 0])
    scores = _scores([[0.2] * 5, [0.2] * 6, [0.2] * 5])  # the model cannot tell them apart
    [keep] = pruner_keeps([record], [scores], KeepRule(0.5, "mean_prob", fuse_lexical=0.5))
    assert keep == [False, True, False]
    [keep] = pruner_keeps([record], [scores], KeepRule(0.5, "mean_prob"))
    assert keep == [False, False, False]
