"""Names and the sentences that define them: the second hop's link (agentmem/names.py), and
the fused keep rule's ``name_bridge`` built on it, in the bench as in the stage."""

from __future__ import annotations

import numpy as np

from agentmem.bench.formats import PruneRecord
from agentmem.bench.prune import pruner_keeps
from agentmem.models.keep_rule import KeepRule
from agentmem.models.pruner import SentenceScores
from agentmem.names import defined_name, mentioned_names, name_links

QUESTION = 'The author of "Where Rainbows End" was born in what city?'
PASSAGE = [
    "Rainbows End is a 2006 science fiction novel by Vernor Vinge.",
    "Where Rainbows End (in the US known as Love, Rosie) is Irish writer Cecelia Ahern's "
    "second novel, published in 2004.",
    "It was adapted into a film in 2014.",
    "Cecelia Ahern (born 30 September 1981) is an Irish novelist.",
    "She was born in Dublin.",
    "Joshua Ferris (born 1974) is an American author.",
]


def test_names_are_runs_of_capitalised_words_and_a_sentence_opener_is_no_name():
    assert mentioned_names("In 1950 the Bank of England met Ludwig van Beethoven's heirs.") == [
        frozenset({"bank", "england"}), frozenset({"ludwig", "beethoven's"})]
    # "The" opens the sentence; "She" too; a capitalised first word that is no stopword counts
    assert mentioned_names("The novel was praised by Stephen King.") == [
        frozenset({"stephen", "king"})]
    assert mentioned_names("She moved to Paris.") == [frozenset({"paris"})]
    assert mentioned_names("Dublin is her home.") == [frozenset({"dublin"})]
    assert mentioned_names("no capitals in lower-case chat at all") == []


def test_a_defined_name_is_the_subject_of_a_sentence_that_opens_like_a_definition():
    assert defined_name(PASSAGE[3]) == frozenset({"cecelia", "ahern"})
    assert defined_name("Mother's Milk is the fourth studio album by the band.") == frozenset(
        {"mother's", "milk"})
    assert defined_name("The Ivy League is a collegiate athletic conference.") == frozenset(
        {"ivy", "league"})
    # no definition: a pronoun subject, or a name that does something else
    assert defined_name(PASSAGE[4]) == frozenset()
    assert defined_name("Cecelia Ahern wrote it in a month.") == frozenset()


def test_links_follow_a_name_the_anchors_mention_and_the_question_does_not():
    every = range(len(PASSAGE))
    # the anchor (sentence 1) names Cecelia Ahern: her defining sentence is linked, not the
    # novel's (named by the question) nor Joshua Ferris's (named by no anchor)
    assert name_links(QUESTION, PASSAGE, [1], every) == [3]
    assert name_links(QUESTION, PASSAGE, [1], [0, 2, 4, 5]) == []  # only among the eligible
    assert name_links(QUESTION, PASSAGE, [0], every) == []  # Vernor Vinge defines nothing here
    # a name the question gives is no bridge (its words find its sentences already): asked
    # about Cecelia Ahern, the anchor's other name, the novel "Rainbows End", is followed
    assert name_links("Where was Cecelia Ahern born?", PASSAGE, [1], every) == [0]


def _scores(values: list[float]) -> SentenceScores:
    arrays = [np.full(8, v, dtype=np.float32) for v in values]
    return SentenceScores(values, arrays, 0.0)


def test_the_fused_rule_raises_the_second_hop_by_name_bridge_and_only_with_texts():
    # the model and BM25 find the first hop (sentence 1); the second hop shares nothing with
    # the question and scores like the distractors
    scores = _scores([0.30, 0.70, 0.10, 0.10, 0.20, 0.10])
    cosines = [0.5, 0.6, 0.2, 0.2, 0.3, 0.2]
    bm25 = [0.8, 1.0, 0.0, 0.0, 0.0, 0.0]
    settings = dict(threshold=1.0, rule="mean_prob", fuse_cosine=0.5, fuse_lexical=0.5,
                    margin=0.1)
    plain = KeepRule(**settings)
    bridged = KeepRule(**settings, name_bridge=0.8)
    assert plain.decide(scores, similarities=cosines, lexical=bm25, texts=PASSAGE,
                        question=QUESTION) == [False, True, False, False, False, False]
    # 0.10 + 0.5 x 0.2 + 0.8 = 1.0 is not above the threshold; 1.2 x is
    assert bridged.decide(scores, similarities=cosines, lexical=bm25, texts=PASSAGE,
                          question=QUESTION) == [False, True, False, False, False, False]
    stronger = KeepRule(**settings, name_bridge=0.9)
    assert stronger.decide(scores, similarities=cosines, lexical=bm25, texts=PASSAGE,
                           question=QUESTION) == [False, True, False, True, False, False]
    # without the sentences' texts (a caller that gives none) the rule is as before
    assert stronger.decide(scores, similarities=cosines, lexical=bm25) == plain.decide(
        scores, similarities=cosines, lexical=bm25)


def test_the_bench_gives_the_rule_its_sentences_and_question():
    record = PruneRecord(id="r", question=QUESTION, title=None, sentences=PASSAGE,
                         labels=[0, 1, 0, 1, 1, 0])
    scores = _scores([0.30, 0.70, 0.10, 0.10, 0.20, 0.10])
    rule = KeepRule(1.0, "mean_prob", fuse_cosine=0.0, fuse_lexical=0.5, margin=0.1,
                    name_bridge=0.9)
    [keep] = pruner_keeps([record], [scores], rule)
    assert keep[3] and keep[1]
    [keep] = pruner_keeps([record], [scores], KeepRule(1.0, "mean_prob", fuse_lexical=0.5,
                                                       margin=0.1))
    assert not keep[3]
