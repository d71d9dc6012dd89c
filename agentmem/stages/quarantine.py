"""The quarantine stage: withhold clashing and poisoned statements, record every decision.

Call path, in order: read the session's records (one HGETALL); find poison with the cached
sentence vectors (claims grouped by meaning, support looked up; numpy only), but only when
the client sent assistant or untrusted-tool turns no detection has seen, and only when the
call can read them whole (every sentence's vector, new clause vectors within the call's
embedding budget; else after the reply, and then the step's results after the user's
message are not even read on the call path); check the newest user message against the user's
earlier statements with the clash rules (and, if the policy spends
``call_path_candidates``, a few NLI pairs); mark a tool's older answer superseded where this
call brings a newer answer to the same call (``quarantine/superseded.py``: set arithmetic on
the two texts, no model); then remove every active record's sentence (a superseded answer:
all of it) from the outgoing messages. Everything else (clashes of assistant and tool statements, poison in
our stored replies) is found after the reply (``after_reply``), which does not repeat a
poison check the call path made on the same statements. Nothing is deleted: a record names a
sentence of a stored turn, and releasing it puts the sentence back on the next call.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from agentmem.conversation import last_user_index, opening_index, opening_role
from agentmem.messages import text_of
from agentmem.models.runtime import run_inference
from agentmem.quarantine.clash import all_rule_clashes, load_nli, nli_candidates, settle, undecided
from agentmem.quarantine.detectors import DETECTORS, PoisonDetector, Scope, clash_records, run_detectors
from agentmem.quarantine.judge import Judge
from agentmem.quarantine.records import QuarantineRecord, QuarantineStore
from agentmem.quarantine.settings import QuarantineSettings
from agentmem.quarantine.statements import Statements, bears_claims, statements_of
from agentmem.quarantine.superseded import DETECTOR as SUPERSEDED
from agentmem.quarantine.superseded import superseded_records
from agentmem.report import Action, Decision
from agentmem.speakers import embedding_text, speaker_of
from agentmem.stages.base import Draft, Stage, StageContext
from agentmem.structured import tool_layout
from agentmem.text import kept_text, split_sentences

if TYPE_CHECKING:
    from agentmem.policy import Policy
    from agentmem.store.sessions import TurnRecord

log = logging.getLogger("agentmem.quarantine")
PREFETCH_CHARS = 32_000  # of the newest user message, split for the prefetch

__all__ = ["QuarantineSettings", "QuarantineStage"]


class QuarantineStage(Stage):
    name: ClassVar[str] = "quarantine"
    settings_model = QuarantineSettings

    def wants_query(self, policy: Policy, request: dict[str, Any]) -> list[str]:
        """The sentences of the newest user message, when the call path spends NLI pairs on
        them (the corpus picks their vectors up from the prefetch instead of embedding again);
        the rules need no vectors, so by default nothing is embedded for this stage."""
        if not policy.quarantine.clash or not policy.quarantine.call_path_candidates:
            return []
        messages = request["messages"]
        last = last_user_index(messages)
        text = text_of(messages[last]) if last is not None else ""
        # The prefetch takes the first sentences only (the call's embedding budget): split the
        # head of a long message, never all of a 1 MB paste on the event loop (~1 s).
        head = text[:PREFETCH_CHARS]
        spans = split_sentences(head)
        speaker = speaker_of(messages[last]) if last is not None else ""
        return [embedding_text(head[s.start:s.end], speaker)  # as the corpus embeds them
                for s in (spans[:-1] if len(head) < len(text) else spans)]

    async def apply(self, draft: Draft, context: StageContext) -> None:
        settings = context.policy.quarantine
        history = context.history
        qstore = (QuarantineStore(context.store)
                  if context.store is not None and context.session is not None else None)
        records = await qstore.all(context.session) if qstore and context.session else []
        # Vectors only for what needs them now: poison in turns the client sent that no
        # detection has seen, or NLI pairs spent on the call path. The usual call (a new user
        # message) runs the rules on text and embeds nothing here.
        client_claims = settings.poison and any(
            m.get("role") in {"assistant", "tool"} for m in history[context.stored_positions:])
        turn_ids = await context.turn_ids(len(history))
        superseded = (superseded_records(history, turn_ids, since=context.stored_positions,
                                         min_overlap=settings.supersede_overlap)
                      if settings.clash and settings.supersede_repeated_calls
                      and settings.resolution != "keep_both" else [])
        cached = context.last_cache_mark if settings.respect_cache_marks else None
        if cached is not None:  # the client's cached prefix: repeats leave it as it is
            superseded = [r for r in superseded if r.position > cached]
        # The poison check reads every sentence with its vector or runs after the reply: past
        # the call's budget (a 300,000-character web page) embedding part of it would be work
        # spent for nothing on the call path (~0.5 s on two cores), so it is all or none; and
        # then the turns after the user's message that nothing here reads (the agent step's
        # tool results) are not even split and indexed now (~0.2 s): the reply's check does it.
        upto = _read_upto(context, superseded) if client_claims else len(history)
        tail_waits = upto < len(history)
        nli = bool(settings.clash and settings.call_path_candidates)
        corpus = await context.corpus(upto, vectors=(client_claims and not tail_waits) or nli,
                                      whole=not nli)
        statements = statements_of(corpus, history, upto, settings.untrusted_tools)
        scope = Scope(statements, [], turn_ids, records, settings,
                      encode=context.state.embedder.encode,
                      clause_budget=context.state.limits.call_path_sentences)
        fresh: list[QuarantineRecord] = []
        checked = False
        if tail_waits:
            unread = sum(len(turn.sentences) for turn in context.new_turns
                         if turn.position >= upto and bears_claims(
                             turn.source, text_of(turn.message), settings.untrusted_tools))
            if unread or _unreviewed_claims(statements, context.stored_positions):
                context.report.warnings.append(
                    f"quarantine: the client's {_new_sentences(context):,} new sentences are more "
                    "than the call may embed; the poison check runs after the reply")
        elif settings.poison and _unreviewed_claims(statements, context.stored_positions):
            if corpus.missing:  # a partial read would quarantine what the whole does not
                context.report.warnings.append(
                    f"quarantine: {corpus.missing:,} sentences without a vector yet; the poison "
                    "check runs after the reply")
            else:
                fresh += await PoisonDetector().detect(scope)
                context.report.warnings.extend(scope.warnings)
                checked = not scope.warnings  # read whole, within the call's budget
        if settings.clash:
            fresh += await self._newest_user_clash(scope, history, context)
            fresh += superseded
        if qstore and context.session:
            await qstore.add(context.session, fresh, ttl=context.policy.ttl_seconds)
            await qstore.save(context.session, scope.grown, ttl=context.policy.ttl_seconds)
            if checked:
                context.channels.poison_checked = statements.size
        if cached is not None:
            where = {turn: position for position, turn in enumerate(turn_ids)}
            records = [r for r in records if r.detector != SUPERSEDED
                       or where.get(r.turn_id, -1) > cached]
        self._withhold(draft, context, [*records, *fresh], turn_ids, statements)

    async def after_reply(self, context: StageContext, turns: list[TurnRecord]) -> None:
        """Clashes and poison involving the call's new turns (the reply included), found
        after the reply; the next call applies the records written here."""
        settings = context.policy.quarantine
        if not (settings.clash or settings.poison) or context.store is None or context.session is None:
            return
        history = context.history
        corpus = await context.corpus(len(history))
        statements = statements_of(corpus, history, len(history), settings.untrusted_tools)
        qstore = QuarantineStore(context.store)
        records = await qstore.all(context.session)
        new_positions = {turn.position for turn in turns}
        new_rows = [row for row in range(statements.size)
                    if int(statements.position[row]) in new_positions]
        if not new_rows:
            return
        judge = None
        if settings.judge_model and context.state.upstream is not None:
            judge = Judge(settings.judge_model, context.state.upstream, context.store.redis,
                          budget=settings.judge_budget, budget_key=context.session.keys.judge_spent,
                          ttl=context.policy.ttl_seconds)
        scope = Scope(statements, new_rows, await context.turn_ids(len(history)), records, settings,
                      judge=judge, encode=context.state.embedder.encode)
        detectors = DETECTORS
        if context.channels.poison_checked == statements.size:
            # The call path read these very statements whole (the reply, a tool call, added
            # none): the same detection would find what it found, so it is not run twice.
            detectors = tuple(d for d in DETECTORS if d.name != PoisonDetector.name)
        await qstore.add(context.session, await run_detectors(scope, detectors),
                         ttl=context.policy.ttl_seconds, after_reply=True)
        await qstore.save(context.session, scope.grown, ttl=context.policy.ttl_seconds,
                          after_reply=True)

    @staticmethod
    async def _newest_user_clash(scope: Scope, history: list[dict[str, Any]],
                                 context: StageContext) -> list[QuarantineRecord]:
        """The user just said something that contradicts what they said before? The rules
        answer on the call path (microseconds); the NLI backstop runs here only when the policy
        gives it ``call_path_candidates`` pairs, else after the reply like everything else."""
        statements, settings = scope.statements, scope.settings
        last_user = last_user_index(history)
        if last_user is None:
            return []
        new_rows = [int(r) for r in np.flatnonzero(statements.position == last_user)]
        if not new_rows:
            return []
        clashes = all_rule_clashes(statements, new_rows)
        rest = undecided(statements, new_rows, clashes)
        if rest and settings.call_path_candidates:
            narrow = settings.model_copy(update={  # the fast check: fewer, closer candidates
                "clash_similarity": max(settings.clash_similarity, settings.call_path_similarity),
                "clash_candidates": min(settings.clash_candidates, settings.call_path_candidates)})
            try:
                nli = await run_inference(load_nli, narrow)
                scored = await run_inference(nli_candidates, statements, rest, nli, narrow)
            except Exception as error:  # noqa: BLE001 - no NLI model: the rules still work
                context.report.warnings.append(f"clash check skipped: {type(error).__name__}: {error}")
                scored = []
            clashes = settle(clashes, scored, narrow)
        return clash_records(clashes, scope)

    @staticmethod
    def _withhold(draft: Draft, context: StageContext, records: list[QuarantineRecord],
                  turn_ids: list[int], statements: Statements) -> None:
        """Remove each active record's sentence from the message that holds it."""
        history = context.history
        position_of = {turn: position for position, turn in enumerate(turn_ids)}
        last_user = last_user_index(history)
        spans_by_position: dict[int, list[tuple[tuple[int, int], QuarantineRecord]]] = {}
        notes: dict[int, list[QuarantineRecord]] = {}
        for record in records:
            if record.status != "active":
                continue
            if record.note is not None:  # keep_both: nothing is withheld, the note is added
                if record.turn_id in position_of:
                    notes.setdefault(position_of[record.turn_id], []).append(record)
                continue
            for turn_id, start, end in record.keys:
                position = position_of.get(turn_id)
                if position is None or position == last_user \
                        or history[position].get("role") in {"system", "developer"}:
                    continue  # the validator keeps these verbatim; the record still shows in the API
                spans_by_position.setdefault(position, []).append(((start, end), record))
        excluded = context.channels.excluded_spans
        replacements, dropped = {}, set()
        opening = opening_index(history) if opening_role(history) == "user" else None
        current = {m.index: m for m in draft.messages}
        for position, entries in sorted(spans_by_position.items()):
            if position not in current:
                continue
            text = text_of(history[position])
            rows = np.flatnonzero(statements.position == position)
            spans = [(int(a), int(b)) for a, b in (statements.spans[r] for r in rows)]
            removed = {span for span, _ in entries}
            superseded = any(record.detector == SUPERSEDED for _, record in entries)
            if superseded:
                removed |= set(spans)  # a superseded answer goes whole
            excluded[position] = removed
            keep = [span not in removed for span in spans]
            anything_kept = any(keep)
            message = history[position]
            for span, record in entries:
                context.run.decisions.append(Decision(
                    action=Action.QUARANTINE, message_index=position, position=position, span=span,
                    score=record.score, reason=record.reason,
                    detail={"record": record.id, "kind": record.kind, "detector": record.detector}))
            in_unit = message.get("role") == "tool" or bool(message.get("tool_calls"))
            # The conversation's opening user turn stays, as its placeholder: dropped, the
            # request would open with the assistant's turn, which providers refuse.
            if not anything_kept and not in_unit and position != opening:
                dropped.add(position)
            elif isinstance(message.get("content"), str):
                content = (kept_text(text, spans, keep) if anything_kept
                           else _placeholder([r for _, r in entries]))
                layout = tool_layout(text) if anything_kept and message.get("role") == "tool" else None
                if layout is not None and removed <= {span for span, kind in zip(
                        layout.spans, layout.kinds) if kind != "frame"}:  # it still parses
                    kept = [span not in removed for span in layout.spans]
                    # Only the frame would be left (``{"results": []}``): that reads as an
                    # answer that found nothing, so it says what a result withheld whole says.
                    content = (layout.keep(kept) if any(
                        k for k, kind in zip(kept, layout.kinds) if kind != "frame")
                        else _placeholder([r for _, r in entries]))
                elif layout is not None:  # frame text withheld: no JSON without it
                    content = _placeholder([r for _, r in entries])
                replacements[position] = {**current[position].message, "content": content}
            elif (superseded or position == opening) and not anything_kept \
                    and _text_parts(message.get("content")):  # a tool_result's, a turn's blocks
                replacements[position] = {**current[position].message,
                                          "content": _placeholder([r for _, r in entries])}
        for position, noted in sorted(notes.items()):
            target = replacements.get(position) or (current[position].message if position in current else None)
            if target is None or position == last_user or not isinstance(target.get("content"), str):
                continue
            extra = [r.note for r in noted if r.note]
            replacements[position] = {**target, "content": " ".join([target["content"], *extra])}
            context.run.decisions.extend(Decision(
                action=Action.CLARIFY, message_index=position, position=position, score=r.score,
                reason=r.reason, detail={"record": r.id, "note": r.note}) for r in noted)
        draft.drop_indices(dropped)
        draft.replace_messages(replacements)


def _text_parts(content: Any) -> bool:
    """Whether a message's content is a list of text parts only (an answer in the Messages or
    Responses shape, which arrive as chat text parts); an image or a file in it is never
    withheld by its text."""
    return isinstance(content, list) and bool(content) and all(
        isinstance(part, dict) and part.get("type") == "text" for part in content)


def _placeholder(records: list[QuarantineRecord]) -> str:
    """What a tool result (or a tool-calling message) says when all of it was withheld: the
    message must stay (its call needs an answer), and the model should know why it is empty."""
    ids = ", ".join(sorted({r.id for r in records}))
    if all(r.detector == SUPERSEDED for r in records):
        return f"[agentmem withheld this older result: the same call was answered again later " \
               f"(quarantine record {ids})]"
    kinds = " and ".join(sorted({r.kind for r in records}))
    return f"[agentmem withheld this content ({kinds}; quarantine record {ids})]"


def _new_sentences(context: StageContext) -> int:
    """Sentences of the client's new turns (ingest split them; the corpus's rows are the same)."""
    return sum(len(turn.sentences) for turn in context.new_turns)


def _read_upto(context: StageContext, superseded: list[QuarantineRecord]) -> int:
    """How much of the history the stage reads on this call when the client brought claims.

    All of it, unless the new turns hold more sentences than the call may still embed: then the
    poison check runs after the reply whatever is read now, and what the call path still needs
    is the newest user message (the clash rules), the turns records name (withholding), and
    what comes before them; an agent step's tool results after that wait for the reply."""
    history = context.history
    if not context.new_turns or _new_sentences(context) <= (
            context.state.corpora.call_budget - context.channels.embedded):
        return len(history)
    last_user = last_user_index(history)
    needed = max([context.stored_positions, 0 if last_user is None else last_user + 1,
                  *(record.position + 1 for record in superseded)])
    return min(needed, len(history))


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
