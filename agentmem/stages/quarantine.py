"""The quarantine stage: withhold clashing and poisoned statements, record every decision.

Call path, in order: read the session's records (one HGETALL); find poison with the cached
sentence vectors (claims grouped by meaning, support looked up; numpy only), but only when
the client sent assistant or untrusted-tool turns no detection has seen; check the newest
user message against the user's earlier statements with the NLI model (a few pairs, only
when similar statements exist); then remove every active record's sentence from the
outgoing messages. Everything else (clashes of assistant and tool statements, poison in our
stored replies) is found after the reply (``quarantine.background``). Nothing is deleted: a
record names a sentence of a stored turn, and releasing it puts the sentence back on the
next call.
"""

from __future__ import annotations

import logging
from typing import ClassVar

import numpy as np

from agentmem.messages import text_of
from agentmem.quarantine.clash import find_clashes
from agentmem.quarantine.poison import detect_poison
from agentmem.quarantine.records import QuarantineRecord, QuarantineStore
from agentmem.quarantine.statements import Statements, statements_of
from agentmem.report import Decision
from agentmem.stages import register_stage
from agentmem.stages.base import Draft, StageContext
from agentmem.stages.corpus import corpus_for

log = logging.getLogger("agentmem.quarantine")


@register_stage
class QuarantineStage:
    name: ClassVar[str] = "quarantine"

    async def apply(self, draft: Draft, context: StageContext) -> None:
        settings = context.policy.quarantine
        history = context.history
        qstore = QuarantineStore(context.store) if context.store and context.session else None
        records = await qstore.all(context.session) if qstore else []
        corpus = await corpus_for(context, len(history))
        statements = statements_of(corpus, history, len(history), settings.untrusted_tools)
        turn_ids = await context.turn_ids(len(history))
        row_of = {(turn_ids[int(p)], *span): row
                  for row, (p, span) in enumerate(zip(statements.position, statements.spans))}
        known = {r.key: r for r in records}
        fresh: list[QuarantineRecord] = []
        if settings.poison and _unreviewed_claims(statements, context.stored_positions):
            fresh += self.poison_records(statements, records, row_of, known, turn_ids, settings)
        if settings.clash:
            fresh += await self._newest_user_clash(statements, history, known, turn_ids, settings, context)
        if fresh and qstore:
            await qstore.add(context.session, fresh, ttl=context.policy.ttl_seconds)
        self._withhold(draft, context, [*records, *fresh], turn_ids, statements)

    @staticmethod
    def poison_records(statements: Statements, records, row_of, known, turn_ids, settings
                       ) -> list[QuarantineRecord]:
        """New records for every occurrence of an unsupported recurring claim."""
        confirmed_rows = [row_of[r.key] for r in records
                          if r.kind == "poison" and r.status == "confirmed" and r.key in row_of]
        confirmed = statements.vectors[confirmed_rows] if confirmed_rows else None
        out = []
        since = max(0, int(statements.position.max(initial=0)) + 1 - settings.poison_window_turns)
        for finding in detect_poison(statements, settings, confirmed=confirmed, since_position=since):
            for row in finding.rows:
                position = int(statements.position[row])
                key = (turn_ids[position], *statements.spans[row])
                if key in known:
                    continue
                record = QuarantineRecord(
                    kind="poison", detector="recurrence", turn_id=key[0], position=position,
                    span=statements.spans[row], text=statements.texts[row],
                    source=statements.sources[row], score=round(finding.score, 4),
                    reason=finding.reason, claim=finding.claim,
                    related=[{"position": p} for p in finding.positions])
                known[key] = record
                out.append(record)
        return out

    @staticmethod
    async def _newest_user_clash(statements: Statements, history, known, turn_ids, settings,
                                 context: StageContext) -> list[QuarantineRecord]:
        """The user just said something that contradicts what they said before?"""
        last_user = max((i for i, m in enumerate(history) if m.get("role") == "user"), default=None)
        if last_user is None:
            return []
        new_rows = [int(r) for r in np.flatnonzero(statements.position == last_user)]
        if not new_rows or not settings.call_path_candidates:
            return []
        settings = settings.model_copy(update={  # the fast check: fewer, closer candidates
            "clash_similarity": max(settings.clash_similarity, settings.call_path_similarity),
            "clash_candidates": min(settings.clash_candidates, settings.call_path_candidates)})
        try:
            from agentmem.quarantine.clash import load_nli
            from agentmem.models.runtime import run_inference

            nli = await run_inference(load_nli, settings)
            clashes = await run_inference(find_clashes, statements, new_rows, nli, settings)
        except Exception as error:  # noqa: BLE001 - no NLI model: poison still works
            context.report.warnings.append(f"clash check skipped: {type(error).__name__}: {error}")
            return []
        return clash_records(clashes, statements, turn_ids, known, settings, detector="nli")

    @staticmethod
    def _withhold(draft: Draft, context: StageContext, records: list[QuarantineRecord],
                  turn_ids: list[int], statements: Statements) -> None:
        """Remove each active record's sentence from the message that holds it."""
        history = context.history
        position_of = {turn: position for position, turn in enumerate(turn_ids)}
        last_user = max((i for i, m in enumerate(history) if m.get("role") == "user"), default=-1)
        spans_by_position: dict[int, list[tuple[tuple[int, int], QuarantineRecord]]] = {}
        notes: dict[int, list[QuarantineRecord]] = {}
        for record in records:
            position = position_of.get(record.turn_id)
            if record.status != "active" or position is None:
                continue
            if record.note is not None:  # keep_both: nothing is withheld, the note is added
                notes.setdefault(position, []).append(record)
                continue
            if position == last_user or history[position].get("role") in {"system", "developer"}:
                continue  # the validator keeps these verbatim; the record still shows in the API
            spans_by_position.setdefault(position, []).append((record.span, record))
        excluded = context.extra.setdefault("excluded_spans", {})
        replacements, dropped = {}, set()
        current = {m.index: m for m in draft.messages}
        for position, entries in sorted(spans_by_position.items()):
            if position not in current:
                continue
            removed = {span for span, _ in entries}
            excluded[position] = removed
            text = text_of(history[position])
            rows = np.flatnonzero(statements.position == position)
            kept = [text[a:b] for a, b in (statements.spans[r] for r in rows) if (a, b) not in removed]
            message = history[position]
            for span, record in entries:
                context.run.decisions.append(Decision(
                    action="quarantine", message_index=position, position=position, span=span,
                    score=record.score, reason=record.reason,
                    detail={"record": record.id, "kind": record.kind, "detector": record.detector}))
            in_unit = message.get("role") == "tool" or bool(message.get("tool_calls"))
            if not kept and not in_unit:
                dropped.add(position)
            elif isinstance(message.get("content"), str):
                replacements[position] = {**current[position].message, "content": " ".join(kept)}
        for position, entries in sorted(notes.items()):
            message = replacements.get(position) or (current[position].message if position in current else None)
            if message is None or position == last_user or not isinstance(message.get("content"), str):
                continue
            replacements[position] = {**message, "content": " ".join([message["content"], *(r.note for r in entries)])}
            context.run.decisions.extend(Decision(
                action="clarify", message_index=position, position=position, score=r.score,
                reason=r.reason, detail={"record": r.id, "note": r.note}) for r in entries)
        draft.drop_indices(dropped)
        draft.replace_messages(replacements)


def _unreviewed_claims(statements: Statements, stored_positions: int) -> bool:
    """Whether the client sent claim-bearing turns that no detection has seen yet.

    Stored turns were reviewed when they arrived: on the call path if the client sent them,
    after the reply if they are our stored replies. So a call whose only new turn is the
    user's message (the usual flow) skips poison detection and just applies the records.
    """
    new = statements.position >= stored_positions
    if not new.any():
        return False
    trust = statements.trust
    return any(trust[row] in {"assistant", "untrusted"} or statements.relayed[row]
               for row in np.flatnonzero(new).tolist())


def clash_records(clashes, statements: Statements, turn_ids: list[int], known: dict,
                  settings, *, detector: str) -> list[QuarantineRecord]:
    """One record per clash: the loser's sentence, or (keep_both) a note on the newer one."""
    out = []
    for clash in clashes:
        loser = clash.loser(statements, settings.resolution)
        subject = loser if loser is not None else clash.newer
        other = clash.newer if subject == clash.older else clash.older
        position = int(statements.position[subject])
        key = (turn_ids[position], *statements.spans[subject])
        if key in known:
            continue
        record = QuarantineRecord(
            kind="clash", detector=f"{detector}:{settings.nli_model or 'nli-minilm'}",
            turn_id=key[0], position=position, span=statements.spans[subject],
            text=statements.texts[subject], source=statements.sources[subject],
            score=round(clash.probability, 4),
            reason=(f"contradicted by a {'later' if subject == clash.older else 'more trusted'} "
                    f"statement of {statements.sources[other]}: \"{statements.texts[other][:200]}\""),
            related=[{"turn_id": turn_ids[int(statements.position[other])],
                      "span": list(statements.spans[other]), "text": statements.texts[other]}],
            note=(f"(Earlier: \"{statements.texts[clash.older][:200]}\")" if loser is None else None))
        known[key] = record
        out.append(record)
    return out

