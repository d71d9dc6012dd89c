"""The stage interface: each hygiene stage edits a Draft of the outgoing request.

Stages never touch the stored session and never re-serialise a message they leave alone:
they drop whole tool-call units, replace a message's text with a pruned copy, or drop tools,
and record every change as a Decision. The validator checks the result after all stages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from agentmem.messages import tool_call_units

if TYPE_CHECKING:
    from agentmem.policy import Policy
    from agentmem.report import Report, StageRun
    from agentmem.store.sessions import SessionHandle, SessionStore


@dataclass
class OutgoingMessage:
    index: int  # position in the full incoming history (also the stored turn position)
    message: dict[str, Any]  # the client's dict, or a pruned copy of it
    tokens: int | None = None  # a rewriting stage's count for its copy, when it has one

    @property
    def role(self) -> str:
        return self.message.get("role", "")


@dataclass
class Draft:
    """The request as it will be sent: messages in their original order, and the tools."""

    messages: list[OutgoingMessage]
    tools: list[dict[str, Any]] | None
    functions: list[dict[str, Any]] | None = None

    @classmethod
    def of(cls, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
           functions: list[dict[str, Any]] | None = None) -> "Draft":
        return cls([OutgoingMessage(i, m) for i, m in enumerate(messages)], tools, functions)

    def units(self) -> list[list[OutgoingMessage]]:
        """Kept messages grouped into tool-call units (see messages.tool_call_units)."""
        plain = [m.message for m in self.messages]
        return [[self.messages[i] for i in unit] for unit in tool_call_units(plain)]

    def drop_unit(self, unit: list[OutgoingMessage]) -> None:
        self.drop_indices({m.index for m in unit})

    def drop_indices(self, gone: set[int]) -> None:
        """Drop many messages in one pass (callers keep tool-call units whole)."""
        self.messages = [m for m in self.messages if m.index not in gone]

    def replace_message(self, index: int, message: dict[str, Any]) -> None:
        self.replace_messages({index: message})

    def replace_messages(self, replacements: dict[int, dict[str, Any]],
                         tokens: dict[int, int] | None = None) -> None:
        """Swap in rewritten copies by history index, in one pass; ``tokens`` may give their
        counts (summed from sentences counted at ingest) so nobody has to recount them."""
        found = 0
        for kept in self.messages:
            if kept.index in replacements:
                kept.message = replacements[kept.index]
                kept.tokens = (tokens or {}).get(kept.index)
                found += 1
        if found != len(replacements):
            raise KeyError(sorted(set(replacements) - {m.index for m in self.messages}))

    def message_at(self, index: int) -> dict[str, Any]:
        return next(m.message for m in self.messages if m.index == index)

    def plain_messages(self) -> list[dict[str, Any]]:
        return [m.message for m in self.messages]


@dataclass
class StageContext:
    """What a stage may read: the policy, the incoming history, the session and its report."""

    policy: "Policy"
    model: str
    history: list[dict[str, Any]]  # the full incoming history, as sent (or rebuilt)
    session: "SessionHandle | None"  # None when the store is unavailable or off
    report: "Report"
    run: "StageRun"
    store: "SessionStore | None" = None
    stored_positions: int = 0  # history[:stored_positions] is already stored, identical
    chains: list[str] = field(default_factory=list)  # chain hash per position (ingest.chain_hashes)
    next_turn_id: int = 0  # history[stored_positions + k] will be stored as turn next_turn_id + k
    extra: dict[str, Any] = field(default_factory=dict)  # shared by the stages of one call

    async def turn_ids(self, upto: int) -> list[int]:
        """The turn id of each position < upto (stored ones from Redis, new ones as they will be)."""
        stored = []
        if self.store is not None and self.session is not None and self.stored_positions:
            stored = (await self.store.active_ids(self.session))[: self.stored_positions]
        return (stored + [self.next_turn_id + k for k in range(max(0, upto - len(stored)))])[:upto]


class Stage(Protocol):
    """A hygiene stage. ``name`` is what policies list; ``apply`` edits the draft in place."""

    name: ClassVar[str]

    async def apply(self, draft: Draft, context: StageContext) -> None: ...
