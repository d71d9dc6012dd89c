"""`agentmem bench clash`: does the newest turn contradict an earlier one of its speaker?

Runs the same detector as the pipeline (candidates by cached-style MiniLM similarity, then
the NLI model) on each dialogue's last turn, with a threshold sweep so the operating point is
visible. The LLM-judge path runs only when the policy names a ``judge_model``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

THRESHOLDS = (0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)


async def _scores(records, settings) -> list[tuple[float, int | None]]:
    """Per record: the best contradiction probability of the last turn, and the turn it names."""
    from agentmem.ingest import chain_hashes
    from agentmem.quarantine.clash import load_nli
    from agentmem.quarantine.clash import candidate_pairs
    from agentmem.quarantine.statements import statements_of
    from agentmem.policy import policy_from_dict
    from agentmem.report import Report, StageRun
    from agentmem.models.embedder import default_embedder
    from agentmem.stages.base import StageContext
    from agentmem.state import EngineState

    nli = load_nli(settings)
    policy = policy_from_dict({"name": "bench-clash"})
    state = EngineState(default_embedder())
    out = []
    for record in records:
        speakers = list(dict.fromkeys(t.speaker for t in record.turns))
        roles = {s: ("user" if i == 0 else "assistant") for i, s in enumerate(speakers)}
        history = [{"role": roles[t.speaker], "content": t.text} for t in record.turns]
        context = StageContext(policy, "gpt-4o", history, state,
                               Report(tenant="bench", session_id="clash", policy="bench"),
                               StageRun(stage="clash"), chains=chain_hashes(history))
        corpus = await context.corpus(len(history))
        statements = statements_of(corpus, history, len(history), settings.untrusted_tools)
        last = len(history) - 1
        new_rows = [int(r) for r in np.flatnonzero(statements.position == last)]
        pairs = candidate_pairs(statements, new_rows, settings)
        if not pairs:
            out.append((0.0, None))
            continue
        probabilities = nli.contradiction([(statements.texts[a], statements.texts[b]) for a, b in pairs])
        best = int(np.argmax(probabilities))
        out.append((float(probabilities[best]), int(statements.position[pairs[best][0]])))
    return out


def _metrics(records, scores, threshold: float) -> dict[str, float | None]:
    tp = fp = fn = tn = located = locatable = 0
    for record, (score, turn) in zip(records, scores):
        predicted = score >= threshold
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


def run_clash(records, *, policy: str | None = None) -> dict[str, Any]:
    from agentmem.policy import load_policy

    settings = load_policy(policy or "default").quarantine
    scores = asyncio.run(_scores(records, settings))
    result = {"n": len(records), "path": "nli", "model": settings.nli_model or "nli-minilm",
              "threshold": settings.contradiction_threshold,
              **_metrics(records, scores, settings.contradiction_threshold)}
    result["sweep"] = {str(t): _metrics(records, scores, t) for t in THRESHOLDS}
    result["judge"] = ({"status": f"not run: the judge ({settings.judge_model}) is not wired into "
                                  "this bench yet"} if settings.judge_model else
                       {"status": "not run: the policy sets no judge_model (no reachable LLM here)"})
    return result
