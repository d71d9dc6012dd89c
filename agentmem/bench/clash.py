"""`agentmem bench clash`: does the newest turn contradict an earlier one of its speaker?

Runs the same cascade as the quarantine stage (rules, then the NLI backstop on similar
candidates) on each dialogue's last turn. Speakers map to sources one to one (``user``,
``assistant``, ``tool:NAME``, or a name), so a clash is only ever looked for between turns
of the same speaker. The NLI threshold is swept so the operating point is visible; the rule
layer's share and recall per clash kind (when records carry a ``kind``) are reported, and
where each missed contradiction was lost (``misses``; per record in ``records``): a written
contradiction the rules miss is either a candidate pair the NLI model scored low, or never a
candidate (the cascade's step 2 did not pair its turn), which call for different fixes (data
for the model, or the candidate step).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

THRESHOLDS = (0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 0.98, 1.01)


@dataclass
class Outcome:
    rule: bool  # a rule fired on the last turn
    rule_turn: int | None
    nli: float  # the best NLI probability among candidates the rules left
    nli_turn: int | None
    # the best NLI probability of a candidate pairing a contradicting turn; None when no
    # candidate pairs one (or the record names none)
    gold_nli: float | None = None

    def predicted(self, threshold: float) -> tuple[bool, int | None]:
        if self.rule:
            return True, self.rule_turn
        return self.nli >= threshold, self.nli_turn

    def row(self, record: Any, threshold: float) -> dict[str, Any]:
        """This record's outcome for the JSON report: what was said, and by which layer."""
        said, turn = self.predicted(threshold)
        return {"id": record.id, "label": record.label, "kind": getattr(record, "kind", None),
                "said": said, "by": ("rule" if self.rule else "nli") if said else None,
                "turn": turn, "nli": round(self.nli, 4),
                "gold_nli": None if self.gold_nli is None else round(self.gold_nli, 4)}


def _role(speaker: str, first: str) -> str:
    if speaker in {"user", "assistant", "system"}:
        return speaker
    if speaker.startswith("tool:"):
        return "assistant"  # its text is what matters here; the source keeps it apart
    return "user" if speaker == first else "assistant"


class DialogueReader:
    """A dialogue's statements as the quarantine stage reads them (sentences, sources, vectors),
    outside any session: one embedder and its caches for every dialogue read. Used by this
    bench and by ``agentmem.train.sgd_pairs``."""

    def __init__(self, settings: Any) -> None:
        from agentmem.models.embedder import default_embedder
        from agentmem.policy import policy_from_dict
        from agentmem.state import EngineState

        self.settings = settings
        self.policy = policy_from_dict({"name": "dialogue-reader"})
        self.state = EngineState(default_embedder())

    async def statements(self, history: list[dict[str, Any]]) -> Any:
        from agentmem.ingest import chain_hashes
        from agentmem.quarantine.statements import statements_of
        from agentmem.report import Report, StageRun
        from agentmem.stages.base import StageContext

        context = StageContext(self.policy, "gpt-4o", history, self.state,
                               Report(tenant="bench", session_id="clash", policy="bench"),
                               StageRun(stage="clash"), chains=chain_hashes(history))
        corpus = await context.corpus(len(history))
        return statements_of(corpus, history, len(history), self.settings.untrusted_tools)

    async def nli_pairs(self, history: list[dict[str, Any]]) -> list[tuple[str, str]]:
        """The (older, newer) sentence pairs the cascade would send the NLI model for this
        dialogue: every statement's candidates after the rules and their guards. The training
        pair builders (``agentmem.train.sgd_pairs``, ``agentmem.train.chat_pairs``) read them."""
        from agentmem.quarantine.clash import all_rule_clashes, candidate_pairs, undecided

        statements = await self.statements(history)
        rows = list(range(statements.size))
        rest = undecided(statements, rows, all_rule_clashes(statements, rows))
        return [(statements.texts[older], statements.texts[newer])
                for older, newer in candidate_pairs(statements, rest, self.settings)]


async def _outcomes(records: list[Any], settings: Any) -> list[Outcome]:
    from agentmem.quarantine.clash import (
        clash_sources,
        load_nli,
        nli_candidates,
        rule_clashes,
        turn_rule_clashes,
    )

    nli = load_nli(settings)
    reader = DialogueReader(settings)
    out = []
    for record in records:
        first = record.turns[0].speaker
        history = [{"role": _role(t.speaker, first), "content": t.text} for t in record.turns]
        statements = await reader.statements(history)
        if len({t.speaker for t in record.turns}) > 2:  # several people map to one role: pair
            statements.sources = [record.turns[int(p)].speaker for p in statements.position]
        last = len(history) - 1
        allowed = set(clash_sources(statements, settings))  # as the policy would (clash_tools)
        new_rows = [int(r) for r in np.flatnonzero(statements.position == last) if int(r) in allowed]
        rules = rule_clashes(statements, new_rows) or turn_rule_clashes(statements, new_rows)
        rule_turn = int(statements.position[rules[0].older]) if rules else None
        rest = [r for r in new_rows if r not in {c.newer for c in rules}]
        scored = nli_candidates(statements, rest, nli, settings) if rest else []
        best = max(scored, key=lambda c: c.probability, default=None)
        gold = set(record.contradicting_turns or ())
        gold_nli = max((c.probability for c in scored if int(statements.position[c.older]) in gold),
                       default=None)
        out.append(Outcome(bool(rules), rule_turn, best.probability if best else 0.0,
                           int(statements.position[best.older]) if best else None, gold_nli))
    return out


def _misses(records: list[Any], outcomes: list[Outcome], threshold: float) -> dict[str, int]:
    """Where the written contradictions the cascade did not catch were lost: a candidate pair
    with a contradicting turn that NLI scored under the threshold, no candidate pairing one,
    or a record that names no contradicting turn (so it cannot tell)."""
    misses = {"candidate_scored_low": 0, "not_a_candidate": 0, "unlocated": 0}
    for record, outcome in zip(records, outcomes):
        if not record.label or outcome.predicted(threshold)[0]:
            continue
        if not record.contradicting_turns:
            misses["unlocated"] += 1
        elif outcome.gold_nli is None:
            misses["not_a_candidate"] += 1
        else:
            misses["candidate_scored_low"] += 1
    return misses


def _metrics(records: list[Any], outcomes: list[Outcome], threshold: float) -> dict[str, float | None]:
    tp = fp = fn = tn = located = locatable = 0
    for record, outcome in zip(records, outcomes):
        predicted, turn = outcome.predicted(threshold)
        if predicted and record.label:
            tp += 1
            if record.contradicting_turns:
                locatable += 1
                located += turn in record.contradicting_turns
        elif predicted:
            fp += 1
        elif record.label:
            fn += 1
        else:
            tn += 1
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    return {"precision": precision, "recall": recall,
            "f1": 2 * precision * recall / (precision + recall) if precision + recall else 0.0,
            "accuracy": (tp + tn) / len(records) if records else 0.0,
            "false_positive_rate": fp / (fp + tn) if fp + tn else 0.0,
            "localization": located / locatable if locatable else None}  # None: no gold turns


def _by_kind(records: list[Any], outcomes: list[Outcome], threshold: float) -> dict[str, Any]:
    """Per record kind (when the file has one): how often the cascade said "clash"."""
    said: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for record, outcome in zip(records, outcomes):
        kind = getattr(record, "kind", None)
        if kind:
            total[kind] += 1
            said[kind] += outcome.predicted(threshold)[0]
    return {k: {"n": total[k], "flagged": said[k] / total[k]} for k in sorted(total)}


def run_clash(records: list[Any], *, policy: str | None = None) -> dict[str, Any]:
    from agentmem.policy import load_policy

    settings = load_policy(policy or "default").quarantine
    outcomes = asyncio.run(_outcomes(records, settings))
    threshold = settings.contradiction_threshold
    result: dict[str, Any] = {
        "n": len(records), "path": "rules+nli", "model": settings.nli_model or "nli-minilm",
        # below its threshold a pair keeps the screen's probability (the sweep's low end)
        "screen": ({"model": settings.nli_screen, "threshold": settings.nli_screen_threshold}
                   if settings.nli_screen else None),
        "threshold": threshold, **_metrics(records, outcomes, threshold)}
    result["rules_only"] = _metrics(records, outcomes, float("inf"))
    result["sweep"] = {str(t): _metrics(records, outcomes, t) for t in THRESHOLDS}
    kinds = _by_kind(records, outcomes, threshold)
    if kinds:
        result["by_kind"] = kinds
    result["misses"] = _misses(records, outcomes, threshold)
    result["judge"] = ({"status": f"configured ({settings.judge_model}); it runs after the reply "
                                  "in the proxy, not in this offline bench"} if settings.judge_model
                       else {"status": "not run: the policy sets no judge_model"})
    result["records"] = [o.row(r, threshold) for r, o in zip(records, outcomes)]
    return result
