"""Detectors: each finds one kind of bad statement and proposes quarantine records.

A detector looks at a ``Scope`` (the session's statements, which rows are new, the records
that exist) and returns new records; it never writes and never edits a request. The stage
runs them on the call path only for what must be decided now, and after the reply for the
rest, through the same interface. A new detector is a class with ``name``, ``enabled`` and
``detect``, added to ``DETECTORS``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from collections.abc import Callable
from typing import Any, Protocol

from agentmem.models.runtime import embed, run_inference
from agentmem.quarantine.clash import (Clash, all_rule_clashes, clash_sources, load_nli, nli_candidates,
                                       settle, undecided)
from agentmem.quarantine.judge import Judge
from agentmem.quarantine.poison import (ClaimScan, detect_poison, remember_clause_vectors, scan_claims,
                                        unembedded_clauses)
from agentmem.quarantine.records import QuarantineRecord
from agentmem.quarantine.settings import QuarantineSettings
from agentmem.quarantine.statements import Statements

RecordKey = tuple[int, int, int]


@dataclass
class Scope:
    """What detectors see: statements of history[:n], the rows to examine, existing records."""

    statements: Statements
    new_rows: list[int]
    turn_ids: list[int]  # turn id per history position
    records: list[QuarantineRecord]
    settings: QuarantineSettings
    known: dict[RecordKey, QuarantineRecord] = field(default_factory=dict)
    judge: Judge | None = None  # after the reply, when the policy names a judge_model
    encode: Callable[[list[str]], Any] | None = None  # the engine's embedder (clause vectors)
    grown: list[QuarantineRecord] = field(default_factory=list)  # existing records that gained
    # occurrences: the caller saves them (they already exist, so ``add`` would not)
    clause_budget: int | None = None  # on the call path: new clause vectors it may embed; past
    # it the check waits for the reply (a partial read would quarantine what the whole does not)
    warnings: list[str] = field(default_factory=list)  # for the call's report

    def __post_init__(self) -> None:
        if not self.known:
            self.known = {key: record for record in self.records for key in record.keys}

    @cached_property
    def row_of(self) -> dict[RecordKey, int]:
        statements = self.statements
        return {(self.turn_ids[int(p)], *span): row
                for row, (p, span) in enumerate(zip(statements.position, statements.spans))}

    def key_of(self, row: int) -> RecordKey:
        return (self.turn_ids[int(self.statements.position[row])], *self.statements.spans[row])


class Detector(Protocol):
    name: str

    def enabled(self, settings: QuarantineSettings) -> bool: ...

    async def detect(self, scope: Scope) -> list[QuarantineRecord]: ...


class PoisonDetector:
    """Recurring claims of the assistant or untrusted tools that no authority supports."""

    name = "poison"

    def enabled(self, settings: QuarantineSettings) -> bool:
        return settings.poison

    async def detect(self, scope: Scope) -> list[QuarantineRecord]:
        scan = None
        if scope.encode is not None:  # the new clauses' vectors in parallel chunks, first
            scan, texts = await run_inference(_scan_unembedded, scope)
            budget = scope.clause_budget
            if budget is not None and len(texts) > budget:  # a long history's first call
                scope.warnings.append(
                    f"quarantine: {len(texts):,} claim clauses to embed, past the call's budget "
                    f"({budget}); the poison check runs after the reply")
                return []
            if texts:
                remember_clause_vectors(texts, await embed(scope.encode, texts, bounded=False))
        return await run_inference(poison_records, scope, scan)


def _scan_unembedded(scope: Scope) -> tuple[ClaimScan, list[str]]:
    """The window's claim clauses (read once: the detection reuses them) and those of them
    still without a vector."""
    scan = scan_claims(scope.statements, poison_since(scope.statements, scope.settings),
                       open_domain=scope.settings.poison_open_domain)
    return scan, unembedded_clauses(scope.statements, scope.settings, scan)


class ClashDetector:
    """Statements that contradict an earlier one of the same source: rules, then the NLI
    backstop, and (when configured) the judge for the candidates NLI is unsure of."""

    name = "clash"

    def enabled(self, settings: QuarantineSettings) -> bool:
        return settings.clash

    async def detect(self, scope: Scope) -> list[QuarantineRecord]:
        statements, settings = scope.statements, scope.settings
        allowed = set(clash_sources(statements, settings))
        new_rows = [row for row in scope.new_rows if row in allowed]
        if not new_rows:
            return []
        decided = await run_inference(all_rule_clashes, statements, new_rows)
        rest = undecided(statements, new_rows, decided)
        scored = []
        if rest:
            nli = await run_inference(load_nli, settings)
            scored = await run_inference(nli_candidates, statements, rest, nli, settings,
                                         settings.nli_pairs_per_reply)
        verdicts: dict[tuple[int, int], bool | None] = {}
        judge = scope.judge
        asked = [c for c in scored if c.probability >= settings.judge_threshold] if judge else []
        if judge is not None and asked:
            answers = await judge.verdicts([(statements.texts[c.older], statements.texts[c.newer])
                                            for c in asked])
            verdicts = {(c.older, c.newer): a for c, a in zip(asked, answers)}
        return clash_records(settle(decided, scored, settings, verdicts,
                                    judge.model if judge else ""), scope)


DETECTORS: tuple[Detector, ...] = (ClashDetector(), PoisonDetector())


def poison_records(scope: Scope, scan: ClaimScan | None = None) -> list[QuarantineRecord]:
    """One record per unsupported recurring claim, holding every occurrence: new claims make
    new records; a claim already recorded gains its new occurrences (``scope.grown``), unless
    a person released or confirmed it. ``scan``: the window's claim clauses, if read already."""
    statements, settings, known = scope.statements, scope.settings, scope.known
    confirmed_rows = [scope.row_of[key] for r in scope.records
                      if r.kind == "poison" and r.status == "confirmed"
                      for key in r.keys if key in scope.row_of]
    confirmed = statements.vectors[confirmed_rows] if confirmed_rows else None
    out = []
    for finding in detect_poison(statements, settings, confirmed=confirmed,
                                 since_position=poison_since(statements, settings), encode=scope.encode,
                                 scan=scan):
        fresh = [row for row in finding.rows if scope.key_of(row) not in known]
        if not fresh:
            continue
        existing = next((known[scope.key_of(row)] for row in finding.rows
                         if scope.key_of(row) in known and known[scope.key_of(row)].kind == "poison"),
                        None)
        if existing is not None and existing.status != "active":
            continue  # a person decided about this claim; its new occurrences follow that
        occurrences = [{"turn_id": scope.key_of(row)[0], "span": list(statements.spans[row]),
                        "position": int(statements.position[row]), "text": statements.texts[row]}
                       for row in fresh]
        if existing is not None:
            existing.occurrences.extend(occurrences)
            record = existing
            if record not in scope.grown:
                scope.grown.append(record)
        else:
            first, *rest = fresh
            key = scope.key_of(first)
            record = QuarantineRecord(
                kind="poison", detector="recurrence", turn_id=key[0],
                position=int(statements.position[first]), span=statements.spans[first],
                text=statements.texts[first], source=statements.sources[first],
                score=round(finding.score, 4), reason=finding.reason, claim=finding.claim,
                related=[{"position": p} for p in finding.positions], occurrences=occurrences[1:])
            out.append(record)
        for row in fresh:
            known[scope.key_of(row)] = record
    return out


def poison_since(statements: Statements, settings: QuarantineSettings) -> int:
    """The first position of the window poison detection reads."""
    return max(0, int(statements.position.max(initial=0)) + 1 - settings.poison_window_turns)


def clash_records(clashes: list[Clash], scope: Scope) -> list[QuarantineRecord]:
    """One record per clash: the loser's sentence, or (keep_both) a note on the newer one."""
    statements, settings, known = scope.statements, scope.settings, scope.known
    out = []
    for clash in clashes:
        loser = clash.loser(statements, settings.resolution)
        subject = loser if loser is not None else clash.newer
        other = clash.newer if subject == clash.older else clash.older
        key = scope.key_of(subject)
        if key in known:
            continue
        detector = (f"nli:{settings.nli_model or 'nli-minilm'}" if clash.detector == "nli"
                    else clash.detector)
        why = f" ({clash.reason})" if clash.reason else ""
        record = QuarantineRecord(
            kind="clash", detector=detector,
            turn_id=key[0], position=int(statements.position[subject]),
            span=statements.spans[subject], text=statements.texts[subject],
            source=statements.sources[subject], score=round(clash.probability, 4),
            reason=(f"contradicted by {_relation(subject, clash, loser)} "
                    f"statement of {statements.sources[other]}: \"{statements.texts[other][:200]}\""
                    f"{why}"),
            related=[{"turn_id": scope.key_of(other)[0], "span": list(statements.spans[other]),
                      "text": statements.texts[other]}],
            note=(f"(Earlier: \"{statements.texts[clash.older][:200]}\")" if loser is None else None))
        known[key] = record
        out.append(record)
    return out


def _relation(subject: int, clash: Clash, loser: int | None) -> str:
    """How the other statement of a clash stands to the record's subject."""
    if subject == clash.older:
        return "a later"
    return "an earlier" if loser is None else "a more trusted"


async def run_detectors(scope: Scope, detectors: tuple[Detector, ...] = DETECTORS
                        ) -> list[QuarantineRecord]:
    """Every enabled detector, in order; later ones see the earlier ones' records as known."""
    out: list[QuarantineRecord] = []
    for detector in detectors:
        if detector.enabled(scope.settings):
            out += await detector.detect(scope)
    return out
