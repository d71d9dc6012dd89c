"""Calibrate a pruner's keep rule (sentence rule, threshold, token floor and its cap, least query
cosine) on dev files.

One rule has to serve every kind of text the stage meets, so it is chosen on one dev file per
domain (a single SQuAD paragraph, ten paragraphs of a multi-hop question, ...) to maximise
the mean F1 over the domains: a threshold tuned on SQuAD alone cuts the other domains to a
sliver, and the floor (``agentmem.models.keep_rule``) is what lets one rule fit both. The rule
is evaluated as the stage applies it, with each sentence's MiniLM cosine to the question
(which vetoes keeps below ``min_similarity`` and orders the floor). Each
domain's own best is reported next to the joint choice. The result is stored in the
checkpoint's config.json, which the stage, the bench and ``/v1/highlight`` read.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentmem.models.keep_rule import KeepRule
from agentmem.models.provence import SentenceRule

FLOORS = [0.0, 0.05, 0.08, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4]
RULES: tuple[SentenceRule, ...] = ("paper", "mean_prob")
# None: no veto; MiniLM puts unrelated sentences around 0.1 and a paraphrase above 0.6
MIN_SIMILARITIES: tuple[float | None, ...] = (None, 0.2, 0.25, 0.3, 0.35, 0.4)
# None: the floor is a share of the passage however long; else the most tokens it asks for
FLOOR_TOKENS: tuple[int | None, ...] = (None,)
BRIDGES: tuple[float, ...] = (0.0,)  # the floor's bridge weight (keep_rule.add_bridge)
# The fused family (keep_rule.KeepRule.fused_keep), searched only when weights are given:
# (cosine weight, BM25 weight) pairs, margins to the passage's best, thresholds on the fused
# score (above 1 + both weights: the margin alone decides).
FUSE_WEIGHTS: tuple[tuple[float, float], ...] = ()
MARGINS: tuple[float | None, ...] = (None, 0.1, 0.2, 0.3, 0.4)
FUSED_THRESHOLDS: tuple[float, ...] = (0.7, 0.9, 1.1, 1.3, 9.0)
# Fused rule: weights of the second hop's name link (keep_rule.KeepRule.bridge_names)
NAME_BRIDGES: tuple[float, ...] = (0.0,)


def calibrate(pruner, dev_files: Sequence[Path], *, floors: Sequence[float] = FLOORS,
              min_similarities: Sequence[float | None] = MIN_SIMILARITIES,
              floor_tokens: Sequence[int | None] = FLOOR_TOKENS,
              bridges: Sequence[float] = BRIDGES,
              fuse_weights: Sequence[tuple[float, float]] = FUSE_WEIGHTS,
              margins: Sequence[float | None] = MARGINS,
              fused_thresholds: Sequence[float] = FUSED_THRESHOLDS,
              name_bridges: Sequence[float] = NAME_BRIDGES, log=print) -> dict[str, Any]:
    """The keep rule with the best mean F1 over the dev files, and per-file metrics."""
    from agentmem.bench.formats import PruneRecord, read_jsonl
    from agentmem.bench.prune import (
        THRESHOLDS,
        kept_share,
        lexical_scores,
        prune_metrics,
        pruner_keeps,
        pruner_scores,
        sentence_embeddings,
    )
    from agentmem.models.embedder import default_embedder

    embedder = default_embedder()
    domains = {}
    for path in dev_files:
        records = read_jsonl(Path(path), PruneRecord)
        log(f"calibrate: scoring {len(records)} records of {Path(path).name}")
        domains[Path(path).name] = (records, pruner_scores(pruner, records),
                                    *sentence_embeddings(embedder, records),
                                    lexical_scores(records))

    def evaluate(keep_rule: KeepRule) -> dict[str, dict[str, Any]]:
        out = {}
        for name, (records, scores, similarities, vectors, lexical) in domains.items():
            keeps = pruner_keeps(records, scores, keep_rule, similarities, vectors, lexical)
            out[name] = {**prune_metrics(records, keeps, keep_rule.threshold),
                         "kept_sentences": kept_share(keeps)}
        return out

    grid = [KeepRule(t, r, f, m, most, bridge) for r in RULES for t in THRESHOLDS for f in floors
            for m in min_similarities for most in floor_tokens for bridge in bridges]
    grid += [KeepRule(t, "mean_prob", f, m, most, bridge, cosine, lexical, margin, names)
             for cosine, lexical in fuse_weights for t in fused_thresholds for margin in margins
             for f in floors for m in min_similarities for most in floor_tokens
             for bridge in bridges for names in name_bridges]
    log(f"calibrate: {len(grid):,} rules x {len(domains)} dev files")
    results = [(keep_rule, evaluate(keep_rule)) for keep_rule in grid]

    def mean_f1(item: tuple[KeepRule, dict[str, dict[str, Any]]]) -> float:
        return sum(m["f1"] for m in item[1].values()) / len(item[1])

    def f1_of(name: str):
        return lambda item: item[1][name]["f1"]

    chosen, metrics = max(results, key=mean_f1)
    best_alone = {name: max(results, key=f1_of(name)) for name in domains}
    unfused = [item for item in results if not item[0].fused]
    out = {**settings_of(chosen), "mean_f1": mean_f1((chosen, metrics)), "domains": metrics,
           "best_per_domain": {name: {**settings_of(k), "f1": m[name]["f1"]}
                               for name, (k, m) in best_alone.items()},
           "dev_files": [str(p) for p in dev_files]}
    if fuse_weights and unfused:  # what the fused family adds over the best unfused rule
        rule, unfused_metrics = max(unfused, key=mean_f1)
        out["best_unfused"] = {**settings_of(rule), "mean_f1": mean_f1((rule, unfused_metrics)),
                               "f1": {name: m["f1"] for name, m in unfused_metrics.items()}}
    return out


def settings_of(keep_rule: KeepRule) -> dict[str, Any]:
    """A keep rule's settings by the names calibration results and ``store`` use (its
    fields)."""
    return asdict(keep_rule)


def store(checkpoint: Path, calibration: dict[str, Any]) -> None:
    """Write the chosen rule into config.json (and the whole calibration into training.json)."""
    config_file = checkpoint / "config.json"
    config = json.loads(config_file.read_text())
    config.update(KeepRule.config_entries(calibration))
    config_file.write_text(json.dumps(config, indent=2) + "\n")
    training_file = checkpoint / "training.json"
    training = json.loads(training_file.read_text()) if training_file.exists() else {}
    training["calibration"] = calibration
    training_file.write_text(json.dumps(training, indent=2) + "\n")
