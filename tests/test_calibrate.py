"""`agentmem train calibrate`: the keep rule chosen on dev files, the fused family searched
only when asked, and the choice stored where the stage, the bench and /v1/highlight read it."""

from __future__ import annotations

import json
import shutil

from agentmem.models.pruner import Pruner
from agentmem.models.registry import default_pruner_path
from agentmem.train.calibrate import calibrate, store


def _dev_file(path) -> None:
    rows = [
        {"id": "a", "question": "Which river flows through Vorlund?", "title": None,
         "sentences": ["Vorlund is a town in the north.", "The Ebbe river flows through Vorlund.",
                       "Its bakery opened in 1902.", "Tourists visit in summer."],
         "labels": [0, 1, 0, 0]},
        {"id": "b", "question": "Who designed the Kessler bridge?", "title": None,
         "sentences": ["The Kessler bridge spans the bay.", "Engineers praised its cables.",
                       "It was designed by Mira Halvorsen.", "Traffic doubled by 1990."],
         "labels": [0, 0, 1, 0]},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_calibrate_searches_the_fused_family_when_asked_and_stores_the_choice(tmp_path):
    checkpoint = tmp_path / "pruner"
    shutil.copytree(default_pruner_path(), checkpoint)
    dev = tmp_path / "dev.jsonl"
    _dev_file(dev)
    pruner = Pruner.load(checkpoint)
    small = dict(floors=[0.05], min_similarities=[0.3], floor_tokens=[40], bridges=[0.0],
                 log=lambda line: None)
    plain = calibrate(pruner, [dev], **small)
    assert plain["fuse_cosine"] == 0.0 and plain["margin"] is None and "best_unfused" not in plain
    fused = calibrate(pruner, [dev], fuse_weights=[(1.0, 0.7)], margins=[None, 0.2],
                      fused_thresholds=[1.1, 9.0], **small)
    assert fused["mean_f1"] >= plain["mean_f1"]  # the unfused rules are searched too
    assert fused["best_unfused"]["mean_f1"] == plain["mean_f1"]
    store(checkpoint, fused)
    rule = Pruner.load(checkpoint).keep_rule()
    assert (rule.threshold, rule.fuse_cosine, rule.fuse_lexical, rule.margin) == (
        fused["threshold"], fused["fuse_cosine"], fused["fuse_lexical"], fused["margin"])
    overridden = Pruner.load(checkpoint).keep_rule(fuse_cosine=0.5, margin=0.3)
    assert (overridden.fuse_cosine, overridden.margin) == (0.5, 0.3)
    # Provence's threshold (a keep probability) given alone: the model's own rule, not a
    # threshold on the fused score
    provence = Pruner.load(checkpoint).keep_rule(threshold=0.5)
    assert provence.threshold == 0.5 and not provence.fused
    assert Pruner.load(checkpoint).keep_rule(threshold=1.2, margin=0.1).fused  # asked for


def test_calibrate_searches_name_bridge_weights_and_stores_the_choice(tmp_path):
    """A dev file whose second hop only a name reaches: the search finds the weight that
    keeps it, stores it, and Provence's threshold given alone drops it with the fused rule."""
    checkpoint = tmp_path / "pruner"
    shutil.copytree(default_pruner_path(), checkpoint)
    dev = tmp_path / "dev.jsonl"
    dev.write_text(json.dumps({
        "id": "hop", "question": "The author of Where Rainbows End grew up in which city?",
        "title": None,
        "sentences": ["Where Rainbows End is Irish writer Cecelia Ahern's second novel.",
                      "Rainbows End is a 2006 science fiction novel by Vernor Vinge.",
                      "Cecelia Ahern (born 1981) is an Irish novelist from Dublin.",
                      "Lisbon has many bakeries.", "Trams climb the hills of Porto."],
        "labels": [1, 0, 1, 0, 0]}) + "\n")
    pruner = Pruner.load(checkpoint)
    chosen = calibrate(pruner, [dev], floors=[0.0], min_similarities=[0.3], floor_tokens=[40],
                       bridges=[0.0], fuse_weights=[(0.6, 0.7)], margins=[0.1],
                       fused_thresholds=[1.1], name_bridges=[0.0, 3.0], log=lambda line: None)
    assert chosen["name_bridge"] == 3.0 and chosen["domains"]["dev.jsonl"]["recall"] == 1.0
    store(checkpoint, chosen)
    assert Pruner.load(checkpoint).keep_rule().name_bridge == 3.0
    assert Pruner.load(checkpoint).keep_rule(threshold=0.5).name_bridge == 0.0
