"""Query-time recall over a session's sentences: BM25, the per-session corpus cache."""

import uuid

import numpy as np
import pytest

from agentmem.ingest import chain_hashes
from agentmem.lexical import BM25Index, terms
from agentmem.models.embedder import default_embedder
from agentmem.policy import policy_from_dict
from agentmem.report import Report, StageRun
from agentmem.stages.base import StageContext
from agentmem.state import EngineState

STATE = EngineState(default_embedder())


def test_bm25_ranks_the_rare_exact_term_first():
    index = BM25Index()
    docs = ["We talked about the weather today.", "The weather was nice and the weather was warm.",
            "My LGBTQ support group meets on Tuesdays.", "Nothing in common here."]
    for doc in docs:
        index.add(terms(doc))
    scores = index.scores(terms("When does the LGBTQ support group meet?"))
    assert int(np.argmax(scores)) == 2 and scores[3] == 0.0
    assert terms("Groups meeting") == ["group", "meet"]  # plural and -ing folded, like the query
    assert index.scores([]).tolist() == [0.0] * 4


def _context(history, session=None):
    policy = policy_from_dict({"name": "t", "stages": ["prune"]})
    report = Report(tenant="t", session_id="s", policy="t")
    return StageContext(policy, "gpt-4o", history, STATE, report, StageRun(stage="prune"),
                        session=session, chains=chain_hashes(history))


async def corpus_for(context, upto):
    return await context.corpus(upto)


async def test_corpus_extends_and_never_serves_a_stale_prefix():
    marker = uuid.uuid4().hex  # a first message no other test shares: its own cache entry
    history = [{"role": "user", "content": f"{marker}. The kettle is blue. It ships to Lyon."},
               {"role": "assistant", "content": "Noted. Anything else?"}]
    corpus = await corpus_for(_context(history), 2)
    assert corpus.covered == 2 and len(corpus.spans) == 5 and corpus.vectors.shape == (5, 384)
    longer = history + [{"role": "user", "content": "Yes. Also a red mug."}]
    again = await corpus_for(_context(longer), 3)
    assert again is corpus and corpus.covered == 3 and len(corpus.spans) == 7  # extended in place
    edited = [{"role": "user", "content": f"{marker}. The kettle is green."}, *history[1:]]
    rebuilt = await corpus_for(_context(edited), 2)
    text = edited[0]["content"]
    assert rebuilt is not corpus and [text[a:b] for a, b in rebuilt.spans[:2]] == [
        f"{marker}.", "The kettle is green."]
    assert float(rebuilt.vectors[1] @ corpus.vectors[1]) < 0.999  # re-embedded, not reused


def test_fill_respects_the_budget_and_spreads_over_turns():
    from types import SimpleNamespace

    from agentmem.stages.selection import fill

    # three turns of two sentences, 10 tokens each; turn 0 holds the two best sentences
    corpus = SimpleNamespace(position=np.array([0, 0, 1, 1, 2, 2]), tokens=np.full(6, 10),
                             spans=[(0, 1)] * 6, rows_of=[range(0, 2), range(2, 4), range(4, 6)])
    score = np.array([0.9, 0.8, 0.7, 0.1, 0.6, 0.2], dtype=np.float32)
    rows = np.arange(6)
    deep = fill(rows, score, corpus, budget=26, neighbours=0, spread=0.0)
    assert deep.tolist() == [True, True, False, False, False, False]  # 13 + 10 tokens, best first
    wide = fill(rows, score, corpus, budget=26, neighbours=0, spread=0.3)
    assert wide.tolist() == [True, False, True, False, False, False]  # a second turn instead
    with_context = fill(rows, score, corpus, budget=46, neighbours=1, spread=0.0)
    assert with_context.tolist() == [True, True, True, True, False, False]
    assert not fill(rows, score, corpus, budget=5, neighbours=0, spread=0.0).any()


def _turns(lengths):
    from types import SimpleNamespace

    from agentmem.stages.selection import TurnRows

    older, first = [], 0
    for index, length in enumerate(lengths):
        older.append(SimpleNamespace(index=index, rows=np.arange(first, first + length)))
        first += length
    return TurnRows.of(older)


def test_a_short_answer_is_scored_with_the_question_it_answers():
    """exchange_weight: the cosine between the query and the turn summed with the turn before
    it. "Yes, last Tuesday." shares nothing with "When was the pottery class?"; its exchange
    (the question it answers plus itself) does."""
    from agentmem.stages.selection import add_exchange_similarity

    query = np.array([1.0, 0.0, 0.0], np.float32)
    # turn 0: off topic; turn 1: the question (on topic); turn 2: the bare answer; turn 3: off topic
    turn_sums = np.array([[0, 1, 0], [0.8, 0.6, 0], [0, 0, 1], [0, 1, 0]], np.float32)
    score = np.zeros(4, np.float32)
    add_exchange_similarity(_turns([1, 1, 1, 1]), score, turn_sums, query, weight=0.5)
    pair = turn_sums[1] + turn_sums[2]
    assert score[2] == np.float32(0.5 * pair[0] / np.linalg.norm(pair))  # the answer gains
    assert score[3] == 0.0 and score[0] == 0.0  # nothing on topic in their exchange
    assert score[1] > 0  # the question, summed with the off-topic turn before it
    assert turn_sums[2].tolist() == [0, 0, 1]  # the caller's array is read, never changed


def test_evidence_spread_over_a_stretch_of_turns_is_kept_together():
    """window_turns/window_weight/window_decay: turns 2..K away from a relevant one inherit a
    decayed share of its best score (after the adjacent-turn context is added)."""
    from agentmem.stages.selection import add_turn_context

    score = np.array([0, 0, 0, 1.0, 0, 0, 0, 0], np.float32)  # one sentence per turn
    alone = score.copy()
    add_turn_context(_turns([1] * 8), alone, 0.4)
    assert alone.tolist() == pytest.approx([0, 0, 0.4, 1.0, 0.4, 0, 0, 0])
    wide = score.copy()
    add_turn_context(_turns([1] * 8), wide, 0.4, window=3, window_weight=0.5, decay=0.5)
    # after the first pass the turns' best are [0, 0, .4, 1, .4, 0, 0, 0]; a turn gains 0.5 x
    # the larger of 0.5 x (best two away) and 0.25 x (best three away)
    assert wide.tolist() == pytest.approx([0.125, 0.25, 0.4 + 0.1, 1.0, 0.4 + 0.1, 0.25, 0.125, 0.05])
    two = np.array([1.0, 0.5, 0.5], np.float32)  # two-sentence first turn: its best counts
    add_turn_context(_turns([2, 1]), two, 0.0, window=2, window_weight=1.0, decay=1.0)
    assert two.tolist() == [1.0, 0.5, 0.5]  # no turn is two away


def test_the_budget_share_moves_with_the_best_turns_lead():
    """lead_budget: a best turn far ahead of the rest (one clear answer) gets a smaller share
    than turns close together (evidence spread over many), within the bounds (in
    history_fractions); the lead is measured to the lead_turns-th best turn, by each turn's
    best sentence; withheld turns (-inf) are not counted; with fewer than twice lead_turns
    turns, and at slope 0, the share is fixed; a share moved down still holds the leading
    turns whole."""
    from agentmem.stages.selection import lead_budget

    rule = {"lead_turns": 2, "slope": 2.0, "pivot": 0.4, "least": 0.5, "most": 2.0}
    ones = np.ones(6, np.int64)  # one token a sentence

    def budget(lengths, score, tokens=ones, total=1000, **change):
        return lead_budget(_turns(lengths), score, tokens, total, 0.1, **{**rule, **change})

    def share(scale):  # of the fixed 100 tokens; floored, from float32 scores
        return pytest.approx(100 * scale, abs=1.5)

    sharp = np.array([2.0, 1.9, 1.0, 0.8, 0.7], np.float32)  # turns of 2 + 1 + 1 + 1 sentences
    lead = 2.0 - 1.0  # the best turn's 2.0 over the second best turn's 1.0 (not 1.9: same turn)
    assert budget([2, 1, 1, 1], sharp) == share(max(1 + 2.0 * (0.4 - lead), 0.5))
    assert budget([2, 1, 1, 1], sharp, pivot=1.1) == share(1 + 2.0 * (1.1 - lead))
    spread = np.array([1.0, 0.95, 0.9, 0.85, 0.1], np.float32)
    assert budget([1] * 5, spread) == share(1 + 2.0 * (0.4 - 0.05))
    assert budget([1] * 5, spread * 0) == share(1.8)
    assert budget([1] * 5, spread * 0, pivot=0.6) == 200  # at most 2 history_fractions
    withheld = np.array([1.0, -np.inf, 0.9, 0.8, 0.85, -np.inf], np.float32)
    assert budget([1] * 6, withheld) == share(1 + 2.0 * (0.4 - 0.1))
    few = np.array([1.0, -np.inf, 0.2, -np.inf], np.float32)  # two turns left: no crowd
    assert budget([1] * 4, few) == 100
    assert budget([1] * 3, spread[:3]) == 100
    assert budget([2, 1, 1, 1], sharp, slope=0.0) == 100
    # the clear answer is one large turn (its two sentences 30 + 40 tokens): it goes whole,
    # with its message overhead, however low the share; never past the most
    large = np.array([30, 40, 5, 5, 5], np.int64)
    assert budget([2, 1, 1, 1], sharp, large) == 30 + 40 + 3
    assert budget([2, 1, 1, 1], sharp, large * 10) == 200


def test_a_sitting_named_by_one_turn_lifts_its_other_turns():
    """sitting_weight: each sentence gains a share of the best score of its sitting (which a
    date stamp opens), however far from the turn that holds it; turns of other sittings gain
    their own sitting's best, and a chat without stamps is unchanged."""
    from agentmem.stages.selection import add_sitting_context

    score = np.array([0, 0, 0, 0, 0.9, 0, 0, 0, 0.2, 0], np.float32)  # one sentence per turn
    dated = np.array([1, 0, 0, 0, 1, 0, 0, 0, 1, 0], bool)  # sittings: 0-3, 4-7, 8-9
    lifted = score.copy()
    add_sitting_context(_turns([1] * 10), lifted, dated, 0.5)
    assert lifted.tolist() == pytest.approx([0, 0, 0, 0, 1.35, .45, .45, .45, .3, .1])
    undated = score.copy()
    add_sitting_context(_turns([1] * 10), undated, np.zeros(10, bool), 0.5)
    assert undated.tolist() == score.tolist()
    # older turns are a subset of the positions (the recent window is not among them)
    tail = np.array([0.0, 0.4, 0.0], np.float32)
    add_sitting_context(_turns([1, 1, 1]), tail, np.array([0, 1, 0, 0, 0], bool), 1.0)
    assert tail.tolist() == pytest.approx([0.0, 0.8, 0.4])  # turn 0 precedes the first stamp


def test_a_turn_opens_a_sitting_only_with_a_date_stamp():
    from agentmem.episodes import opens_with_date

    for stamped in ["[1:56 pm on 8 May, 2023] Hey Mel!", "(2023-05-08) Morning.",
                    "[03/04/2023 10:00] hi", "[Session 2, 3 June 2023] So?", " [May 8] ok"]:
        assert opens_with_date(stamped), stamped
    for plain in ["Hey [1 May] was fun", "[note] May 8 we met", "(see page 3) of the book",
                  "On 8 May, 2023 we met.", "[a link](https://example.com/2023-05-08)"]:
        assert not opens_with_date(plain), plain


async def test_turn_sums_follow_the_corpus_as_it_grows_and_fills():
    """The exchange rule's per-turn vector sums are query-independent and kept in the corpus:
    extended with new turns, and patched when the background fill embeds a row."""
    from agentmem.state.corpus import _patch

    marker = uuid.uuid4().hex
    history = [{"role": "user", "content": f"{marker}. The kettle is blue. It ships to Lyon."},
               {"role": "assistant", "content": "Noted."},
               {"role": "user", "content": "Also a red mug. And a spoon."}]
    corpus = await _context(history).corpus(3, vectors=False)
    waiting = np.flatnonzero(~corpus.embedded)
    assert len(waiting)  # nothing embedded on this path yet

    def expected():
        return np.vstack([corpus.vectors[span].sum(axis=0) for span in corpus.rows_of])

    assert np.allclose(corpus.turn_sums(), expected())
    vectors = default_embedder().encode([corpus.embedding_text(int(row)) for row in waiting])
    for row, vector in zip(waiting.tolist(), vectors):
        _patch(corpus, row, corpus.embedding_text(row), vector)
    assert corpus.embedded.all() and np.allclose(corpus.turn_sums(), expected(), atol=1e-6)
    assert np.abs(corpus.turn_sums()).sum() > 0
    longer = history + [{"role": "assistant", "content": "Two items, then."}]
    again = await _context(longer).corpus(4)
    assert again is corpus and corpus.turn_sums().shape == (4, 384)
    assert np.allclose(corpus.turn_sums(), expected(), atol=1e-6)


async def test_a_replaced_last_turn_keeps_the_shared_prefix():
    marker = uuid.uuid4().hex
    history = [{"role": "user", "content": f"{marker}. The kettle is blue."},
               {"role": "assistant", "content": "Noted. It ships to Lyon."},
               {"role": "user", "content": "What colour is it?"}]
    first = await corpus_for(_context(history), 3)
    retried = [*history[:2], {"role": "user", "content": "Where does it ship? Tell me."}]
    second = await corpus_for(_context(retried), 3)
    assert second is not first and second.covered == 3
    assert second.texts[:4] == first.texts[:4] and second.texts[4:] == ["Where does it ship?", "Tell me."]
    assert np.array_equal(second.vectors[:4], first.vectors[:4])  # reused, not recomputed
    assert first.texts[-1] == "What colour is it?"  # a reader of the old corpus is unaffected
    scores = second.lexical.scores(terms("ship"))
    assert scores.shape == (6,) and scores[4] > 0


async def test_a_participants_name_is_searchable_with_each_of_their_sentences():
    """A group chat names its participants (OpenAI's ``name``); a question names the person
    ("What does Ann bake?") whose own turns say "I". The name's terms are indexed with every
    sentence of that person's messages, also after a retry rebuilds the index, and never join
    the sentence's own terms (the clash check compares those); the sentence is embedded with
    its speaker."""
    marker = uuid.uuid4().hex
    history = [{"role": "user", "name": "Ann", "content": f"{marker}. I bake sourdough. It takes hours."},
               {"role": "assistant", "name": "Bo_Lind", "content": "I paint landscapes."},
               {"role": "user", "content": "Nice one."},
               {"role": "user", "content": "Who bakes?"}]
    first = await corpus_for(_context(history), 4)
    ann = first.lexical.scores(terms("Ann"))
    assert ann[:3].min() > 0 and ann[3:].max() == 0  # all three of Ann's sentences, nobody else's
    bo = first.lexical.scores(terms("Lind"))
    assert bo.nonzero()[0].tolist() == [3]
    assert "ann" not in first.words[1]
    # embedded as a transcript line: "Ann: I bake sourdough." (the unnamed turn as it is)
    expected = default_embedder().encode(["Ann: I bake sourdough.", "Nice one."])
    assert float(first.vectors[1] @ expected[0]) > 0.999 and float(first.vectors[4] @ expected[1]) > 0.999
    assert float(first.vectors[1] @ default_embedder().encode(["I bake sourdough."])[0]) < 0.99
    retried = [*history[:3], {"role": "user", "content": "Who paints?"}]
    second = await corpus_for(_context(retried), 4)  # the shared prefix, its index rebuilt
    assert second is not first
    assert np.array_equal(second.lexical.scores(terms("Ann"))[:5], ann[:5])
    tool = [{"role": "user", "content": f"{marker} x"},
            {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {
                "name": "lookup", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "name": "lookup", "content": "Found it."}]
    corpus = await corpus_for(_context(tool), 3)
    assert corpus.lexical.scores(terms("lookup")).max() == 0  # a tool's name is not a speaker


async def test_a_turn_cut_another_way_is_not_paired_with_the_corpus_rows():
    """A turn stored by an older cut (a tool's JSON answer by sentences, before records) may
    have as many pieces as today's rows: its pieces are not paired with the rows' vectors."""
    from agentmem.state.corpus import _turn_rows
    from agentmem.store.sessions import TurnRecord

    marker = uuid.uuid4().hex
    answer = ('{"results": [{"title": "Red mug", "text": "A red mug. Holds tea."}, '
              '{"title": "Blue kettle", "text": "A blue kettle. Boils fast."}]}')
    history = [{"role": "user", "content": f"{marker}. Find a mug."},
               {"role": "tool", "tool_call_id": "c1", "content": answer}]
    context = _context(history)
    corpus = await corpus_for(context, 2)
    rows = [tuple(corpus.spans[row]) for row in corpus.rows_of[1]]
    assert len(rows) >= 2

    def turn(spans):
        return TurnRecord(id=1, position=1, role="tool", message=history[1], hash="h",
                          chain=context.chains[1], tokens=40, sentences=spans, source="tool:x")

    same = _turn_rows(corpus, turn(rows))
    assert all(vector is not None and row is not None for _, vector, row in same)
    step = len(answer) // len(rows)  # as many pieces, cut elsewhere
    other = [(k * step, (k + 1) * step) for k in range(len(rows))]
    assert other != rows
    assert all(vector is None and row is None for _, vector, row in _turn_rows(corpus, turn(other)))
