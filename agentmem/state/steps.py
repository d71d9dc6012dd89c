"""What a stage decided on an agent step's first call, replayed on the step's later calls.

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
once. The memo is per process: a step whose calls land on another worker recomputes there,
as before.
"""

from __future__ import annotations

import hashlib
import json
from array import array
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentmem.report import Decision, StageRun
    from agentmem.stages.base import Draft, StageContext


@dataclass(frozen=True)
class StepOutcome:
    """A stage's edits of the messages before the step, and the decisions that explain them."""

    key: str
    dropped: array[int]  # history indices (a long session drops thousands: kept compact)
    replaced: dict[int, tuple[dict[str, Any], int | None]]  # index -> (message, tokens)
    decisions: tuple[Decision, ...]


class StepMemo:
    """The latest step outcome per (tenant, session, stage), least recently used evicted."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[tuple[str, str, str], StepOutcome] = OrderedDict()

    def get(self, slot: tuple[str, str, str], key: str) -> StepOutcome | None:
        found = self._items.get(slot)
        if found is None or found.key != key:
            return None
        self._items.move_to_end(slot)
        return found

    def put(self, slot: tuple[str, str, str], outcome: StepOutcome) -> None:
        self._items[slot] = outcome
        self._items.move_to_end(slot)
        while len(self._items) > self.size:
            self._items.popitem(last=False)

    def forget(self, tenant: str, session_id: str) -> None:
        for slot in [s for s in self._items if s[:2] == (tenant, session_id)]:
            del self._items[slot]


@dataclass
class StepReplay:
    """One call's handle on a stage's step outcome: ``replay`` it, or ``record`` this call's."""

    memo: StepMemo
    slot: tuple[str, str, str]
    key: str
    step_start: int
    entry: dict[int, dict[str, Any]]  # the messages before the step as the stage got them

    @classmethod
    def of(cls, context: StageContext, draft: Draft, step_start: int, settings: str
           ) -> StepReplay | None:
        """The handle for this call, or None when there is no step to speak of (no session,
        no user message, or no chain hashes). ``settings``: what else the stage's outcome
        depends on (its settings, serialised)."""
        if context.session is None or not 0 < step_start < len(context.chains):
            return None
        entry = {m.index: m.message for m in draft.messages if m.index < step_start}
        digest = hashlib.blake2b(digest_size=16)
        history = context.history
        for part in (context.policy.name, context.model, settings, context.chains[step_start],
                     ",".join(map(str, entry))):
            digest.update(str(part).encode() + b"\0")
        for index, message in entry.items():  # rewritten by an earlier stage (quarantine)
            if message is not history[index]:
                digest.update(f"{index}:".encode() + json.dumps(
                    message, sort_keys=True, default=str).encode() + b"\0")
        withheld = sorted((index, sorted(spans)) for index, spans
                          in context.channels.excluded_spans.items() if index < step_start)
        digest.update(json.dumps(withheld).encode())
        slot = (context.session.tenant, context.session.session_id, context.run.stage)
        return cls(context.state.steps, slot, digest.hexdigest(), step_start, entry)

    def replay(self, draft: Draft, run: StageRun) -> bool:
        """Apply the recorded outcome of this step, if there is one for this very input."""
        outcome = self.memo.get(self.slot, self.key)
        if outcome is None:
            return False
        if outcome.dropped:
            draft.drop_indices(set(outcome.dropped))
        if outcome.replaced:  # copies: whoever gets the outgoing messages may edit them
            draft.replace_messages({i: dict(m) for i, (m, _) in outcome.replaced.items()},
                                   {i: t for i, (_, t) in outcome.replaced.items() if t is not None})
        run.decisions.extend(d.model_copy() for d in outcome.decisions)
        run.replayed = True
        return True

    def record(self, draft: Draft, run: StageRun) -> None:
        """Remember what the stage did to the messages before the step on this call."""
        kept = {m.index: m for m in draft.messages if m.index < self.step_start}
        replaced = {index: (held.message, held.tokens) for index, held in kept.items()
                    if held.message is not self.entry.get(index)}
        dropped = array("q", sorted(set(self.entry) - set(kept)))
        self.memo.put(self.slot, StepOutcome(self.key, dropped, replaced, tuple(run.decisions)))
