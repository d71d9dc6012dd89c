"""The learned query-to-tool model: what it learns, that it trains off the call path, that it
stays inside its tenant, and the selection that uses it."""

from __future__ import annotations

import uuid

import numpy as np

from agentmem.models.embedder import from_bytes, to_bytes
from agentmem.stages.tools import ToolSettings, most_kept, select, soft_best
from agentmem.state.tool_model import TrainingSet, fit, leave_one_out_bonus, train
from agentmem.state.tool_usage import memory_scope
from agentmem.tools_memory import ToolExample, add_tool_examples
from tests.test_tool_usage import _kept, _policy, _probe, _summary, engine  # noqa: F401

LEARNING = "zeta_lookup"
REPAIRS = ["When will my espresso maker be fixed?", "Is the repair of my coffee grinder finished?",
           "Has the technician repaired my broken coffee machine?",
           "How long until my kettle comes back from the repair shop?",
           "Any news on fixing my blender?", "Is my toaster repaired yet?"]
PROBE = "What is the status of my coffee machine repair?"


def _clusters(seed: int = 0) -> tuple[TrainingSet, np.ndarray]:
    """Three tools, each asked about from its own direction; the prior favours tool 0 always."""
    rng = np.random.default_rng(seed)
    centres = np.eye(3, 8, dtype=np.float32)
    rows, labels = [], []
    for tool in range(3):
        for _ in range(20):
            vector = centres[tool] + 0.2 * rng.standard_normal(8).astype(np.float32)
            rows.append(vector / np.linalg.norm(vector))
            labels.append(np.eye(3, dtype=bool)[tool])
    data = TrainingSet(np.vstack(rows), [str(i) for i in range(60)], np.vstack(labels))
    prior = np.tile(np.asarray([0.5, 0.0, 0.0], dtype=np.float32), (60, 1))
    return data, prior


def test_the_model_learns_which_tool_a_kind_of_query_leads_to():
    data, prior = _clusters()
    model = fit(data, prior, l2=1e-3, steps=200, rate=0.05)
    centres = np.eye(3, 8, dtype=np.float32)
    for tool in range(3):  # the correction beats the misleading prior for each kind of query
        scores = prior[0] + model.scores(centres[tool])
        assert int(np.argmax(scores)) == tool
    # A heavy penalty keeps the model at (almost) nothing: the prior decides.
    frozen = fit(data, prior, l2=100.0, steps=200, rate=0.05)
    assert float(np.abs(frozen.scores(centres[1])).max()) < 0.05


def test_calls_at_odds_with_the_text_score_never_blow_the_scores_up():
    """The prior favours the tool every query was *not* called for (a scripted client, labels
    at odds with the descriptions): the learned weight of the prior fell to 0.001, and the
    corrections, divided by it, reached +-1,500 and drowned the query (audit 10). The
    correction stays within MAX_CORRECTION of the score; it still learns the right tool."""
    from agentmem.state.tool_model import MAX_CORRECTION, MIN_SCALE

    data, _ = _clusters()
    against = np.where(data.labels, -1.0, 1.0).astype(np.float32)  # high for the wrong tools
    model = fit(data, against, l2=1e-3, steps=300, rate=0.05)
    assert model.scale >= MIN_SCALE
    centres = np.eye(3, 8, dtype=np.float32)
    for tool in range(3):
        scores = model.scores(centres[tool])
        assert float(np.abs(scores).max()) <= MAX_CORRECTION
        assert int(np.argmax(scores)) == tool


def test_a_tool_without_past_queries_is_never_pushed_down():
    """Tools 0-2 have past queries, tool 3 (a new tool) has none: it gets no correction, and
    the corrections of the others sum to zero, so the group is not lifted above it either."""
    data, prior = _clusters()
    data = TrainingSet(data.vectors, data.queries, np.hstack([data.labels, np.zeros((60, 1), bool)]))
    model = train(data, lambda d: np.hstack([prior, np.zeros((60, 1), np.float32)]), weight=0.0,
                  neutral=0.3, evidence=1.0, l2=1e-3, steps=200, rate=0.05, generation=7)
    assert model.generation == 7 and model.weights.shape == (4, 8)
    for tool in range(3):
        scores = model.scores(np.eye(3, 8, dtype=np.float32)[tool])
        assert scores[3] == 0.0 and abs(float(scores[:3].sum())) < 1e-3
        assert int(np.argmax(scores[:3] + prior[0])) == tool


def test_leave_one_out_never_lets_an_example_vouch_for_itself():
    vectors = np.eye(3, 4, dtype=np.float32)
    labels = np.asarray([[True, False], [True, False], [False, True]])
    data = TrainingSet(vectors, ["a", "b", "c"], labels)
    bonus = leave_one_out_bonus(data, weight=2.0, neutral=0.3, evidence=1.0)
    assert bonus[2, 1] == 0.0  # tool 1's only example: no other example speaks for it
    # Tool 0 for row 0: its other example (row 1) is orthogonal, cosine 0, below neutral.
    assert np.isclose(bonus[0, 0], 2.0 * 1 / 2 * (0.0 - 0.3))


def test_select_with_memory_uses_its_own_margin_from_the_best_final_score():
    settings = ToolSettings(max_tools=3, min_tools=1, margin=0.5,
                            memory={"margin": 1.0, "max_tools": 5})
    scores = np.asarray([3.0, 2.5, 2.2, 2.1, 2.05, 1.0, 0.0], dtype=np.float32)
    pinned = np.zeros(len(scores), dtype=bool)
    plain, _ = select(scores, pinned, settings, top=2.0)
    assert plain.tolist() == [True, True, True, False, False, False, False]  # text top 2.0 - 0.5
    learned, floor = select(scores, pinned, settings, top=2.0, learned=True)
    assert floor == 2.0 and learned.sum() == 5  # best final 3.0 - 1.0, up to memory.max_tools
    unset = ToolSettings(max_tools=3, min_tools=1, margin=0.5)
    assert select(scores, pinned, unset, top=2.0, learned=True)[0].tolist() == plain.tolist()


def test_pinned_tools_come_on_top_of_the_cap():
    """Tools an agent called in its last turns stay offered, and the new request still gets
    ``max_tools`` of its own (audit 10: five pinned tools took the places of the read_file the
    request asked for)."""
    settings = ToolSettings(max_tools=3, min_tools=1, margin=5.0)
    scores = np.asarray([0.1, 0.2, 3.0, 2.9, 2.8, 2.7, 0.3], dtype=np.float32)
    pinned = np.asarray([True, True, False, False, False, False, False])
    kept, _ = select(scores, pinned, settings)
    assert kept.tolist() == [True, True, True, True, True, False, False]


def test_softness_cuts_a_crowded_top_harder_and_leaves_a_lone_best_alone():
    """memory.softness counts the margin down from the soft best: eight tools, margin 1.0. A
    lone best keeps what the plain best keeps; five tools crowding it raise the soft best to
    3.28, so the two far ones (2.1, 2.05) that the plain best keeps are dropped."""
    soft = ToolSettings(max_tools=3, min_tools=1, memory={"margin": 1.0, "max_tools": 16,
                                                          "softness": 0.2})
    plain = ToolSettings(max_tools=3, min_tools=1, memory={"margin": 1.0, "max_tools": 16})
    pinned = np.zeros(8, dtype=bool)
    crowd = np.asarray([3.0, 2.9, 2.9, 2.9, 2.9, 2.9, 2.1, 2.05], dtype=np.float32)
    assert select(crowd, pinned, plain, learned=True)[0].sum() == 8
    kept, floor = select(crowd, pinned, soft, learned=True)
    assert kept.tolist() == [True] * 6 + [False] * 2 and np.isclose(floor, 2.28, atol=0.01)
    lone = np.asarray([3.0, 2.1, 2.05, 0.5, 0.4, 0.3, 0.2, 0.1], dtype=np.float32)
    assert (select(lone, pinned, soft, learned=True)[0].tolist()
            == select(lone, pinned, plain, learned=True)[0].tolist() == [True] * 3 + [False] * 5)
    # Without memory the soft best is never used: the plain margin from the text top decides.
    assert select(crowd, pinned, soft, top=3.0)[0].sum() == 3


def test_the_cap_a_drop_reason_quotes_is_the_one_that_applied():
    """A tool dropped for its rank is told the cap that cut it: ``memory.max_tools`` once
    memory scored the list, ``max_tools`` otherwise (select uses the same cap)."""
    settings = ToolSettings(max_tools=3, min_tools=1, memory={"margin": 5.0, "max_tools": 5})
    scores = np.linspace(2.0, 1.0, 8).astype(np.float32)
    pinned = np.zeros(8, dtype=bool)
    assert most_kept(settings, learned=True) == 5 == select(scores, pinned, settings, learned=True)[0].sum()
    assert most_kept(settings, learned=False) == 3 == select(scores, pinned, settings, top=2.0)[0].sum()
    no_margin = ToolSettings(max_tools=3, memory={"max_tools": 5})
    assert most_kept(no_margin, learned=True) == 3


def test_softness_keeps_exactly_the_tools_with_enough_softmax_share():
    """The margin from the soft best is a threshold on each tool's share of softmax(score /
    softness), exp(-margin / softness): checked on random lists against the softmax itself."""
    rng = np.random.default_rng(3)
    settings = ToolSettings(min_tools=1, memory={"margin": 1.0, "max_tools": 200,
                                                 "softness": 0.21})
    for _ in range(20):
        scores = rng.normal(1.0, 0.4, 199).astype(np.float32)
        kept, _ = select(scores, np.zeros(199, dtype=bool), settings, learned=True)
        shares = np.exp((scores - scores.max()) / 0.21)
        shares /= shares.sum()
        assert kept.tolist() == (shares >= np.exp(-1.0 / 0.21) - 1e-9).tolist()
    assert soft_best(np.asarray([1.0, 0.5]), None) == 1.0  # no softness: the best itself


async def test_the_model_trains_in_the_background_and_stays_in_its_tenant(engine):  # noqa: F811
    policy = _policy(model_min_queries=4, model_retrain_s=0)
    examples = [ToolExample(query=q, tool=LEARNING) for q in REPAIRS]
    examples += [ToolExample(query=q, tool="get_weather_forecast")
                 for q in ("Will it rain in Oslo?", "Do I need an umbrella in Rome today?")]
    await add_tool_examples(engine, examples, policy=policy)
    usage = engine.state.catalogues.usage

    first = await _probe(engine, policy)
    assert _summary(first)["model"] is False  # the call never waits: training started behind it
    await usage.trained()
    second = await _probe(engine, policy)
    assert _summary(second)["model"] is True
    assert LEARNING in _kept(second)
    scope = memory_scope(engine.tenant, policy.tools.memory)
    assert {key[0] for key in usage._models} == {scope}

    # Another tenant of the same engine and Redis: no memory, no model, today's selection.
    other = f"other-{uuid.uuid4().hex[:6]}"
    engine.tenant, mine = other, engine.tenant
    try:
        theirs = await _probe(engine, policy)
    finally:
        engine.tenant = mine
    assert "memory" not in _summary(theirs) and LEARNING not in _kept(theirs)

    # Switched off by the policy: the nearest-query bonus alone, no model.
    off = await _probe(engine, _policy(model=False))
    assert _summary(off)["model"] is False


async def test_cross_validation_scores_with_the_memory_the_stage_reads(engine):  # noqa: F811
    """`bench tools-cv` builds each fold's memory without Redis; it must be exactly what the
    stage stacks after the same traffic was recorded (newest ``examples`` distinct queries per
    tool identity, a repeated query once, float16 vectors), or its CV measures something else."""
    from agentmem.bench.tools_cv import Traffic, _evidence
    from agentmem.state.toolcat import function_of
    from tests.test_tool_usage import TOOLS

    policy = _policy(examples=3)
    functions = [function_of(t) for t in TOOLS]
    traffic = [(q, LEARNING) for q in REPAIRS]  # six: only the newest three stay
    traffic += [("Will it rain in Oslo?", "get_weather_forecast"),
                ("Book me a flight to Rome", "book_flight"),
                ("Will it rain in Oslo?", "get_weather_forecast")]  # repeated: kept once
    await add_tool_examples(engine, [ToolExample(query=q, tool=t, parameters=next(
        f["parameters"] for f in functions if f["name"] == t)) for q, t in traffic], policy=policy)
    redis = engine.store().redis
    catalogue = await engine.state.catalogues.catalogue_for(functions, redis)
    stage = await engine.state.catalogues.usage.evidence(
        redis, memory_scope(engine.tenant, policy.tools.memory), catalogue)

    queries = [q for q, _ in traffic]
    vectors = engine.embedder.encode(queries)
    gold = np.zeros((len(traffic), len(functions)), dtype=bool)
    for row, (_, tool) in enumerate(traffic):
        gold[row, catalogue.names.index(tool)] = True
    data = Traffic(queries, vectors, from_bytes(to_bytes(vectors)),
                   np.zeros(gold.shape, dtype=np.float32), gold)
    mine = _evidence(data, list(range(len(traffic))), catalogue, policy.tools.memory.examples)
    assert stage is not None and mine is not None
    assert stage.counts.tolist() == mine.counts.tolist()
    assert mine.counts[catalogue.names.index(LEARNING)] == 3
    assert stage.tools.tolist() == mine.tools.tolist()
    assert stage.queries == mine.queries
    assert REPAIRS[:-4:-1] == [q for q in mine.queries if q in REPAIRS]  # newest first
    np.testing.assert_array_equal(stage.vectors, mine.vectors)
    probe = engine.embedder.encode([PROBE])[0]
    np.testing.assert_array_equal(stage.nearest(probe), mine.nearest(probe))


def test_bench_tools_cv_learns_from_other_folds_and_never_reads_the_evaluation_queries(tmp_path):
    import json
    import subprocess
    import sys

    from tests.test_tool_usage import TOOLS

    weather = ["Will it rain in Oslo tomorrow?", "Do I need an umbrella in Rome?",
               "How hot will it be in Cairo this weekend?", "Is snow expected in Denver?"]
    traffic = [{"id": f"r{i}", "query": q, "gold": [LEARNING]} for i, q in enumerate(REPAIRS)]
    traffic += [{"id": f"w{i}", "query": q, "gold": ["get_weather_forecast"]}
                for i, q in enumerate(weather)]
    traffic.append({"id": "leak", "query": PROBE, "gold": [LEARNING]})  # an evaluation query
    data, warm, out = tmp_path / "tools.jsonl", tmp_path / "traffic.jsonl", tmp_path / "cv.json"
    data.write_text(json.dumps({"id": "probe", "query": PROBE, "messages": None, "tools": TOOLS,
                                "gold": [LEARNING]}) + "\n")
    warm.write_text("\n".join(json.dumps(r) for r in traffic) + "\n")
    policy = tmp_path / "cv.yaml"
    policy.write_text(json.dumps({"name": "cv", "stages": ["tools"], "tools": {
        "min_offered": 4, "min_tools": 1, "max_tools": 2, "margin": 0.5,
        "memory": {"margin": 0.5, "max_tools": 2}}}))
    run = subprocess.run([sys.executable, "-m", "agentmem", "bench", "tools-cv", "--data", str(data),
                          "--warm", str(warm), "--policy", str(policy), "--folds", "2",
                          "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["skipped_evaluation_queries"] == 1 and result["queries"] == 10
    # "Internal lookup service" never matches a repair question by its text; the other fold's
    # repair questions make it the first choice.
    assert result["warmed"]["gold_recall"] == 1.0 > result["cold"]["gold_recall"]
    assert result["warmed"]["kept_mean"] <= 2
