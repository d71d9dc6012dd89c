"""The synthetic chat clash generator: deterministic, balanced, with hard negatives of every kind."""

from collections import Counter

from agentmem.train.nli_data import CONTRADICTION, NOT_CONTRADICTION
from agentmem.train.nli_synth import CONTRA_KINDS, NEG_KINDS, ENTAILMENT, generate, negate, summary


def test_same_seed_same_pairs_other_seed_other_pairs():
    assert generate(400, seed=5) == generate(400, seed=5)
    assert generate(400, seed=5) != generate(400, seed=6)


def test_labels_balanced_and_pairs_distinct():
    pairs = generate(2000, seed=1)
    assert len(pairs) == 2000
    labels = Counter(p.contradiction for p in pairs)
    assert labels[True] == labels[False] == 1000
    assert len({(p.premise, p.hypothesis) for p in pairs}) == 2000
    assert all(p.premise.strip() and p.hypothesis.strip() for p in pairs)


def test_every_kind_present_and_consistent_with_label():
    pairs = generate(3000, seed=2)
    kinds = summary(pairs)["kind"]
    for kind in CONTRA_KINDS + NEG_KINDS:
        if kind != "negation":  # negation is a contradiction kind every family may use
            assert kinds.get(kind, 0) >= 20, (kind, kinds)
    for p in pairs:
        assert (p.kind in CONTRA_KINDS) == p.contradiction, p
    hard = sum(kinds.get(k, 0) for k in ("update", "other_person", "hypothetical", "past",
                                         "restatement", "question"))
    assert hard >= 0.5 * 1500


def test_example_labels():
    pairs = generate(600, seed=3)
    for p in pairs:
        e = p.example()
        assert (e.premise, e.hypothesis) == (p.premise, p.hypothesis)
        if p.contradiction:
            assert e.allowed == CONTRADICTION
        elif p.kind == "restatement":
            assert e.allowed == ENTAILMENT
        else:
            assert e.allowed == NOT_CONTRADICTION
        assert e.source == "synth"


def test_typical_pairs():
    pairs = generate(4000, seed=4)
    updates = [p for p in pairs if p.kind == "update"]
    assert any("moved to" in p.hypothesis for p in updates)
    assert any("don't have any pets" in p.hypothesis.lower() and p.contradiction for p in pairs)
    assert any(p.family == "diet" and p.contradiction for p in pairs)


def test_perturbed_shippable_sentences(tmp_path):
    snli = tmp_path / "nli" / "snli"
    snli.mkdir(parents=True)
    snli.joinpath("snli_1.0_dev.jsonl").write_text("\n".join(
        '{"sentence2": "%s"}' % s for s in ["A man is sleeping on a bench.", "The dogs are running outside.",
                                             "Two girls were not smiling at all.", "A woman can ride a horse."]) + "\n")
    pairs = generate(400, seed=9, data_dir=tmp_path, perturbed_fraction=0.25)
    perturbed = [p for p in pairs if p.family == "snli"]
    assert len(perturbed) >= 50
    assert {p.example().source for p in perturbed} == {"synth-perturbed"}
    assert any(p.contradiction for p in perturbed) and any(not p.contradiction for p in perturbed)


def test_negate():
    assert negate("A man is sleeping") == "A man is not sleeping"
    assert negate("They aren't talking about chicken") == "They are talking about chicken"
    assert negate("I don't like it") == "I do like it"
    assert negate("Sleeping outside") is None
