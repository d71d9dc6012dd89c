"""What the stages decided earlier in an agent step, kept for the step's later calls.

Records per session and stage: the prune stage's outcome on the step's first call, replayed
(``StepReplay``); the budget stage's drops so far, replayed before it drops more (the same
record, extended); and the tools the step has offered so far, which its later calls only add
to (``offered_in_step``). All keep the head of the request the same from call to call.

An agent step is one user message and the calls the agent makes while it works on it, each
adding its tool calls and results. Everything before the step is the same on each of those
calls, but a stage that rewrites it by relevance (prune) was asked again each time, with a
query that now held the step's tool results, over a corpus that had grown: the older turns it
kept differed from call to call, so the request's prefix changed from the first old turn on,
and providers' prompt caches (OpenAI's automatic prefix cache, Anthropic's ``cache_control``)
missed on every call of the step (``agentmem bench agent-history --follow-up``: the history
before the step went out identical on 0 of 80 second calls). Replaying the first call's
outcome keeps the prefix byte-identical for the whole step, and the later calls skip the
stage's work.

The outcome is replayed only onto the same input: the same session and stage settings, the
same history through the step's user message (its chain hash), and the same draft of it as
the stage received it (which messages earlier stages dropped or rewrote, and the sentences
quarantine withheld). Anything else recomputes: a new quarantine decision still applies at
once. Each record is kept in process and beside the session in Redis (one hash field per
stage, written with the call's commit when it changed and the reply continues the step, read
on a step's later call when the process has no record for it): a step whose calls land on
several workers (``serve --workers N``) keeps one prefix too. Redis faults only cost the
stability (the stage decides anew), never the call.
"""

from __future__ import annotations

import hashlib
import json
import logging
from array import array
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from redis.exceptions import RedisError

from agentmem.report import Decision

if TYPE_CHECKING:
    from agentmem.report import StageRun
    from agentmem.stages.base import Draft, StageContext

log = logging.getLogger("agentmem.steps")


@dataclass(frozen=True)
class StepOutcome:
    """A stage's edits of the messages before the step, and the decisions that explain them."""

    key: str
    dropped: array[int]  # history indices (a long session drops thousands: kept compact)
    replaced: dict[int, tuple[dict[str, Any], int | None]]  # index -> (message, tokens)
    decisions: tuple[Decision, ...]


@dataclass(frozen=True)
class StepOffer:
    """The tools offered so far in a step (by name)."""

    key: str
    names: frozenset[str]


Slot = tuple[str, str, str]  # tenant, session id, stage


class StepMemo:
    """The latest step's record per (tenant, session, stage), least recently used evicted."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[Slot, StepOutcome | StepOffer] = OrderedDict()

    def get(self, slot: Slot, key: str) -> StepOutcome | StepOffer | None:
        found = self._items.get(slot)
        if found is None or found.key != key:
            return None
        self._items.move_to_end(slot)
        return found

    def put(self, slot: Slot, record: StepOutcome | StepOffer) -> None:
        self._items[slot] = record
        self._items.move_to_end(slot)
        while len(self._items) > self.size:
            self._items.popitem(last=False)

    def forget(self, tenant: str, session_id: str) -> None:
        for slot in [s for s in self._items if s[:2] == (tenant, session_id)]:
            del self._items[slot]

    async def load(self, context: StageContext, slot: Slot, key: str, step_start: int
                   ) -> StepOutcome | StepOffer | None:
        """This step's record: the process's, else (on the step's later calls, the only ones
        another worker can have prepared for) the one left in Redis."""
        found = self.get(slot, key)
        later = step_start < len(context.history) - 1  # the step's own turns follow its message
        if found is not None or not later or context.store is None or context.session is None:
            return found
        try:
            raw = await context.store.redis.hget(context.session.keys.steps, slot[2])
        except RedisError as error:
            log.warning("session %s: step record not read: %s", slot[1], error)
            return None
        shared = _decoded(raw) if raw else None
        if shared is None or shared.key != key:
            return None
        self.put(slot, shared)
        return shared

    def save(self, context: StageContext, slot: Slot, record: StepOutcome | StepOffer) -> None:
        """Keep the record here, and hand it to the call's commit, which writes it beside the
        session in the same round trip (for the step's calls on other workers) unless the
        reply ends the step (``shared_records``)."""
        before = self._items.get(slot)
        self.put(slot, record)
        if context.session is None or before == record:
            return
        context.channels.step_records[slot[2]] = record


def continues_step(reply: dict[str, Any] | None) -> bool:
    """Whether the step may have later calls after this reply: it calls a tool, or the reply
    is not known here (a library caller calls the model itself)."""
    return reply is None or bool(reply.get("tool_calls") or reply.get("function_call"))


def shared_records(records: dict[str, StepOutcome | StepOffer], reply: dict[str, Any] | None,
                   session_id: str) -> dict[str, str]:
    """The call's changed step records, encoded for the commit to keep beside the session.
    Nothing when the reply ends the step (a chat turn's answer): no later call of the step
    will come to read them, so a chat call neither encodes them (a median 2.5 ms for a
    600-turn session's prune outcome) nor writes them (~57 KB). Done at the commit, after the
    reply and the stages. A record whose messages are not JSON (a library caller's objects)
    is kept in process only."""
    if not records or not continues_step(reply):
        return {}
    out = {}
    for stage, record in records.items():
        try:
            out[stage] = _encoded(record)
        except (TypeError, ValueError) as error:
            log.warning("session %s: step record not shared: %s", session_id, error)
    return out


def _encoded(record: StepOutcome | StepOffer) -> str:
    if isinstance(record, StepOffer):
        return json.dumps({"kind": "offer", "key": record.key, "names": sorted(record.names)})
    return json.dumps({"kind": "outcome", "key": record.key, "dropped": list(record.dropped),
                       "replaced": [[i, m, t] for i, (m, t) in record.replaced.items()],
                       "decisions": [d.model_dump(mode="json") for d in record.decisions]})


def _decoded(raw: str | bytes) -> StepOutcome | StepOffer | None:
    """A stored record, or None for one this version cannot read (decided anew)."""
    try:
        data = json.loads(raw)
        if data["kind"] == "offer":
            return StepOffer(str(data["key"]), frozenset(map(str, data["names"])))
        return StepOutcome(str(data["key"]), array("q", map(int, data["dropped"])),
                           {int(i): (dict(m), None if t is None else int(t)) for i, m, t in data["replaced"]},
                           tuple(Decision.model_validate(d) for d in data["decisions"]))
    except (ValueError, KeyError, TypeError, ValidationError):
        return None


@dataclass
class StepReplay:
    """One call's handle on a stage's step outcome: ``replay`` it, or ``record`` this call's."""

    memo: StepMemo
    slot: tuple[str, str, str]
    key: str
    step_start: int
    entry: dict[int, dict[str, Any]]  # the messages before the step as the stage got them
    context: StageContext  # the call's: where the records are shared (its session in Redis)

    @classmethod
    def of(cls, context: StageContext, draft: Draft, step_start: int, settings: str
           ) -> StepReplay | None:
        """The handle for this call, or None when there is no step to speak of (no session,
        no user message, or no chain hashes). ``settings``: what else the stage's outcome
        depends on (its settings, serialised)."""
        slot = _slot(context, step_start)
        if slot is None:
            return None
        entry = {m.index: m.message for m in draft.messages if m.index < step_start}
        history = context.history
        parts = [settings, ",".join(map(str, entry))]
        for index, message in entry.items():  # rewritten by an earlier stage (quarantine)
            if message is not history[index]:
                parts.append(f"{index}:" + json.dumps(message, sort_keys=True, default=str))
        withheld = sorted((index, sorted(spans)) for index, spans
                          in context.channels.excluded_spans.items() if index < step_start)
        parts.append(json.dumps(withheld))
        return cls(context.state.steps, slot, _step_key(context, step_start, parts), step_start,
                   entry, context)

    async def replay(self, draft: Draft, run: StageRun) -> bool:
        """Apply the recorded outcome of this step, if there is one for this very input."""
        outcome = await self.memo.load(self.context, self.slot, self.key, self.step_start)
        if not isinstance(outcome, StepOutcome):
            return False
        if outcome.dropped:
            draft.drop_indices(set(outcome.dropped))
        if outcome.replaced:  # copies: whoever gets the outgoing messages may edit them
            draft.replace_messages({i: dict(m) for i, (m, _) in outcome.replaced.items()},
                                   {i: t for i, (_, t) in outcome.replaced.items() if t is not None})
        run.decisions.extend(d.model_copy() for d in outcome.decisions)
        run.replayed = True
        return True

    async def record(self, draft: Draft, run: StageRun) -> None:
        """Remember what the stage did to the messages before the step on this call."""
        kept = {m.index: m for m in draft.messages if m.index < self.step_start}
        replaced = {index: (held.message, held.tokens) for index, held in kept.items()
                    if held.message is not self.entry.get(index)}
        dropped = array("q", sorted(set(self.entry) - set(kept)))
        self.memo.save(self.context, self.slot,
                       StepOutcome(self.key, dropped, replaced, tuple(run.decisions)))


async def offered_in_step(context: StageContext, step_start: int, names: list[str],
                          keep: list[bool], settings: str) -> list[bool]:
    """``keep`` plus every tool this step offered before (the tools stage's step memory).

    A step's later calls hold its tool results in the query, which now speaks of the tool
    just called, and the selection narrowed (MetaTool, a step's second call: 57 of 60 dropped
    a tool the first call offered): mid-step the model lost tools it may need next, and the
    tools block, at the head of the prompt, changed, so a provider's prompt cache missed from
    the first token. So within a step tools are only added: a tool offered once stays
    offered, and a call that adds nothing sends the same list. ``settings``: the stage's
    settings, serialised (the memory holds for the same ones and the same offered list)."""
    slot = _slot(context, step_start)
    if slot is None:
        return keep
    key = _step_key(context, step_start, [settings, "\0".join(names)])
    before = await context.state.steps.load(context, slot, key, step_start)
    if isinstance(before, StepOffer):
        keep = [k or name in before.names for name, k in zip(names, keep)]
    context.state.steps.save(context, slot,
                             StepOffer(key, frozenset(n for n, k in zip(names, keep) if k)))
    return keep


def _slot(context: StageContext, step_start: int) -> Slot | None:
    """Where a stage's step record lives, or None when there is no step to speak of (no
    session, no user message, or no chain hashes)."""
    if context.session is None or not 0 <= step_start < len(context.chains):
        return None
    return context.session.tenant, context.session.session_id, context.run.stage


def _step_key(context: StageContext, step_start: int, parts: list[str]) -> str:
    """What a step record holds for: the policy, the model, the history through the step's
    user message (its chain hash), and the stage's own ``parts``."""
    digest = hashlib.blake2b(digest_size=16)
    for part in (context.policy.name, context.model, context.chains[step_start], *parts):
        digest.update(str(part).encode() + b"\0")
    return digest.hexdigest()
