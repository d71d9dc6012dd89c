"""The clash cascade's pure steps on hand-made statements (no model, no session): rules decide
first, the NLI candidates skip what the rules decided or a guard explained, settle applies the
threshold and the judge's verdicts, and tool results are not compared unless asked."""

from __future__ import annotations

import numpy as np

from agentmem.quarantine.clash import (
    Candidate,
    all_rule_clashes,
    candidate_pairs,
    clash_sources,
    nli_candidates,
    rule_clashes,
    settle,
    undecided,
)
from agentmem.quarantine.settings import QuarantineSettings
from agentmem.quarantine.statements import Statements, trust_class


def _statements(rows: list[tuple[int, str, str]]) -> Statements:
    """(position, source, text) rows; every vector the same, so similarity never filters."""
    vectors = np.ones((len(rows), 4), dtype=np.float32) / 2.0
    return Statements(
        position=np.asarray([p for p, _, _ in rows]), spans=[(0, len(t)) for _, _, t in rows],
        texts=[t for _, _, t in rows], vectors=vectors, sources=[s for _, s, _ in rows],
        trust=[trust_class(s, []) for _, s, _ in rows],
        relayed=np.zeros(len(rows), dtype=bool), words=[t.lower().split() for _, _, t in rows])


SETTINGS = QuarantineSettings()


def test_rules_decide_first_and_name_the_older_statement():
    statements = _statements([(0, "user", "I'm 34 and new to running."),
                              (1, "assistant", "Great, let's plan."),
                              (2, "user", "As a 52-year-old, should I worry about my knees?")])
    [clash] = all_rule_clashes(statements, [2])
    assert (clash.older, clash.newer) == (0, 2) and clash.detector == "rule:value"
    assert undecided(statements, [2], [clash]) == []


def test_sentences_after_an_announced_change_state_the_new_values():
    """'Slight change: Jess moved out. ... with two of us?' is not a clash with 'three of us':
    the sentence-level rules read the turn's announcement as the turn level does."""
    older = (0, "user", "There are three of us in the flat and we split the bills.")
    statements = _statements([older, (1, "assistant", "Split it evenly then."),
                              (2, "user", "Slight change: Jess moved out on Sunday."),
                              (2, "user", "Does a usage split make sense with two of us?")])
    assert rule_clashes(statements, [2, 3]) == []
    unannounced = _statements([older, (1, "assistant", "Split it evenly then."),
                               (2, "user", "Does a usage split make sense with two of us?")])
    [clash] = rule_clashes(unannounced, [2])
    assert (clash.older, clash.newer) == (0, 2)


def test_nli_candidates_are_same_source_share_a_word_and_skip_questions():
    statements = _statements([(0, "user", "I love my garden in spring."),
                              (1, "assistant", "I love my garden in spring."),
                              (2, "user", "The garden is ugly in spring."),
                              (3, "user", "Is the garden nice?")])
    pairs = candidate_pairs(statements, [2, 3], SETTINGS)
    assert pairs == [(0, 2)]  # not the assistant's sentence, not the question


def test_questions_that_speak_of_their_asker_reach_nli_when_asked():
    """"Since we live in Denmark, which ...?" states, in passing, where the asker lives; "Is Oslo
    cold?" and a question about others state nothing of the asker."""
    statements = _statements([(0, "user", "We live in Oslo with our two kids."),
                              (1, "user", "Since we live in Denmark, which traditions should the kids know?"),
                              (2, "user", "Is Oslo cold?"),
                              (3, "user", "Which traditions in Oslo should kids know about?")])
    on = SETTINGS.model_copy(update={"nli_questions": True})
    assert candidate_pairs(statements, [1, 2, 3], on) == [(0, 1)]
    off = SETTINGS.model_copy(update={"nli_questions": False})
    assert candidate_pairs(statements, [1, 2, 3], off) == []


def test_an_assistant_repeating_its_tools_is_not_compared_with_itself():
    """Two answers copied from search results are the results compared (tools are compared only
    with clash_tools); an answer in the assistant's own words still is."""
    statements = _statements([
        (0, "tool:search", "Kublai moved the capital to Khanbaliq in 1264."),
        (0, "tool:search", "Kaidu refused to submit to Kublai."),
        (1, "assistant", "Kublai moved the capital to Khanbaliq in 1264."),
        (2, "assistant", "Kaidu refused to submit to Kublai."),
        (3, "assistant", "Kublai never moved his capital.")])
    every = SETTINGS.model_copy(update={"nli_assistant_pairs": "all"})
    assert candidate_pairs(statements, [3, 4], every) == [(2, 4), (3, 4)]  # not (2, 3)
    compared = every.model_copy(update={"clash_tools": True})
    assert candidate_pairs(statements, [3], compared) == [(2, 3)]


def test_a_task_assistant_is_compared_with_itself_only_about_itself():
    """With a tool (or a system prompt) in the session the assistant restates its sources in
    other words ("2 refills left" / "Two refills remain"), which the small model reads as
    contradicting; its pairs reach NLI only when both speak of the assistant itself, a
    persona's facts. With no tool and no system prompt (a chat, DECODE's layout) every pair
    does, as before; ``nli_assistant_pairs: all`` compares them in a task session too."""
    rows = [(1, "assistant", "Your prescription has 2 refills left, 30 tablets each."),
            (2, "assistant", "Two refills remain on the current prescription."),
            (3, "assistant", "I have two cats at home."),
            (4, "assistant", "No pets live with me.")]
    for authority in [(0, "tool:get_prescription", "refills_remaining: 2 | tablets: 30"),
                      (0, "system", "You are the pharmacy's assistant.")]:
        task = _statements([authority, *rows])
        assert candidate_pairs(task, [2, 3, 4], SETTINGS) == [(3, 4)]
        every = SETTINGS.model_copy(update={"nli_assistant_pairs": "all"})
        assert candidate_pairs(task, [2, 3, 4], every) == [(1, 2), (1, 3), (2, 3), (1, 4), (2, 4), (3, 4)]
    chat = _statements([(0, "user", "How are you?"), *rows])
    assert candidate_pairs(chat, [2, 3, 4], SETTINGS) == [(1, 2), (1, 3), (2, 3), (1, 4), (2, 4), (3, 4)]


def test_a_counter_is_not_a_contradiction():
    """Two statements that are the same words but for their numbers ("[harness] Turn 1412."
    then "... Turn 1440.") are a counter or a status line; NLI read them as contradicting
    (0.98 with the shipped model). What a person says of themselves with another number still
    goes to NLI."""
    statements = _statements([(0, "user", "[harness] Turn 1412."), (1, "user", "[harness] Turn 1440."),
                              (2, "user", "I work 40 hours a week."),
                              (3, "user", "I work 60 hours a week.")])
    assert candidate_pairs(statements, [1], SETTINGS) == []
    assert candidate_pairs(statements, [3], SETTINGS) == [(2, 3)]


def test_a_persons_pairs_share_a_word_the_assistants_need_not():
    statements = _statements([(0, "user", "Cilantro is awful."),
                              (1, "assistant", "I have two cats at home."),
                              (2, "user", "Parsley tastes great."),
                              (3, "assistant", "No pets live with me.")])
    assert candidate_pairs(statements, [2, 3], SETTINGS) == [(1, 3)]
    strict = SETTINGS.model_copy(update={"nli_shared_terms_assistant": 1})
    assert candidate_pairs(statements, [2, 3], strict) == []


def test_settle_applies_threshold_then_judge_verdicts():
    statements = _statements([(0, "user", "a b c"), (1, "user", "a b d"), (2, "user", "a b e")])
    scored = [Candidate(0, 1, 0.99), Candidate(0, 2, 0.5)]
    plain = settle([], scored, SETTINGS)
    assert [(c.older, c.newer, c.detector) for c in plain] == [(0, 1, "nli")]
    judged = settle([], scored, SETTINGS, {(0, 1): False, (0, 2): True}, "gpt-x")
    assert [(c.older, c.newer, c.detector) for c in judged] == [(0, 2, "judge:gpt-x")]
    assert statements.size == 3


def test_tool_results_are_compared_only_when_asked():
    statements = _statements([(0, "tool:get_order", "status: shipped | id: 7 | carrier: UPS"),
                              (1, "user", "Where is it?")])
    assert clash_sources(statements, SETTINGS) == [1]
    assert clash_sources(statements, SETTINGS.model_copy(update={"clash_tools": True})) == [0, 1]


def test_nli_scores_each_distinct_pair_once_and_no_word_for_word_repeat():
    """Agents repeat sentences; NLI (the cascade's expensive step) sees each distinct pair
    once, a restatement in the same words is no contradiction, and every pair still gets
    its score. The real shipped model, its calls recorded."""
    from agentmem.models.nli import cached_nli

    model, asked = cached_nli(), []

    class Recording:
        def contradiction(self, pairs, batch_size=32):
            asked.append(list(pairs))
            return model.contradiction(pairs, batch_size=batch_size)

    statements = _statements([(0, "user", "The meeting is on Thursday."),
                              (1, "user", "The meeting is on Thursday."),
                              (2, "user", "The meeting is on Friday."),
                              (3, "user", "the meeting is  on thursday.")])
    scored = nli_candidates(statements, [2, 3], Recording(), SETTINGS)
    assert sorted((c.older, c.newer) for c in scored) == [(0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    assert sorted(asked[0]) == [
        ("The meeting is on Friday.", "the meeting is  on thursday."),
        ("The meeting is on Thursday.", "The meeting is on Friday.")]
    assert len(asked) == 2  # the second call reads the confident pairs the other way
    by_pair = {(c.older, c.newer): c.probability for c in scored}
    assert by_pair[(0, 2)] == by_pair[(1, 2)] > 0.5  # Thursday vs Friday: one score, shared
    assert by_pair[(0, 3)] == by_pair[(1, 3)] == 0.0


def test_chit_chat_must_read_as_a_contradiction_both_ways():
    """The small model calls chit-chat that shares a word a contradiction one way ("That
    sounds amazing!" then "That sounds awful!": 0.93 with the shipped model, at a threshold of
    0.85 here; the model before Stop 66 did so for "Thanks, Mel!" / "No worries, Mel!") but
    not the other (0.55). A pair with no typed fact on either side is read again swapped and
    keeps the lower score; a pair about facts keeps its one reading; only pairs confident enough
    to decide are read again (the real shipped model, its calls recorded); with nli_both_ways
    off the forward score decides alone."""
    from agentmem.models.nli import cached_nli
    from agentmem.quarantine.slots import extract_facts

    model, asked = cached_nli(), []
    settings = SETTINGS.model_copy(update={"contradiction_threshold": 0.85})

    class Recording:
        def contradiction(self, pairs, batch_size=32):
            asked.append(list(pairs))
            return model.contradiction(pairs, batch_size=batch_size)

    statements = _statements([(0, "user", "That sounds amazing!"), (1, "user", "That sounds awful!"),
                              (2, "user", "I live in Paris."), (3, "user", "I live in Berlin."),
                              (4, "user", "I love dogs."), (5, "user", "My dog is called Rex.")])
    assert extract_facts("I live in Berlin.") and not extract_facts("That sounds awful!")
    scored = {(c.older, c.newer): c.probability
              for c in nli_candidates(statements, [1, 3, 5], Recording(), settings)}
    forward = dict(zip(asked[0], model.contradiction(asked[0])))
    threshold = settings.contradiction_threshold
    assert forward[("That sounds amazing!", "That sounds awful!")] >= threshold
    assert forward[("I live in Paris.", "I live in Berlin.")] >= threshold
    assert asked[1] == [("That sounds awful!", "That sounds amazing!")]  # facts and low scores: once
    assert scored[(0, 1)] < threshold  # the lower reading
    assert scored[(2, 3)] == forward[("I live in Paris.", "I live in Berlin.")]
    assert [(c.older, c.newer) for c in settle([], [Candidate(a, b, p) for (a, b), p in scored.items()],
                                                settings)] == [(2, 3)]

    one_way = settings.model_copy(update={"nli_both_ways": False})
    asked.clear()
    scored = {(c.older, c.newer): c.probability
              for c in nli_candidates(statements, [1, 3, 5], Recording(), one_way)}
    assert len(asked) == 1 and scored[(0, 1)] >= threshold
