"""The stage interface: each hygiene stage edits a Draft of the outgoing request.

Stages never touch the stored session and never re-serialise a message they leave alone:
they drop whole tool-call units, replace a message's text with a pruned copy, or drop tools,
and record every change as a Decision. The validator checks the result after all stages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel

from agentmem.cache_marks import last_marked_message
from agentmem.messages import tool_call_units

if TYPE_CHECKING:
    import numpy as np

    from agentmem.policy import Policy
    from agentmem.report import Report, StageRun
    from agentmem.state import Corpus, EngineState
    from agentmem.state.steps import StepOffer, StepOutcome
    from agentmem.store.sessions import SessionHandle, SessionStore, TurnRecord


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
           functions: list[dict[str, Any]] | None = None) -> Draft:
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

    def snapshot(self) -> Draft:
        """A copy to go back to if a stage stops half-way (messages are replaced, never edited
        in place, so copying the holders is enough)."""
        return Draft([OutgoingMessage(m.index, m.message, m.tokens) for m in self.messages],
                     self.tools, self.functions)


@dataclass
class Channels:
    """What one stage leaves for the later stages of the same call, typed.

    ``excluded_spans``: sentences an earlier stage withheld (quarantine), by history position,
    so a later stage never brings them back. ``tool_choice``/``function_call``: the client's
    choice, which the tools stage must honour. ``poison_checked``: how many statements the
    call path's poison check read, every one with its vector (quarantine; carried to the
    after-reply hooks): a reply that adds no statement (a tool call) leaves the same ones.
    ``step_records``: per stage, its record of the agent step that changed on this call
    (state/steps.py); the call's commit keeps them beside the session for other workers.
    ``corpus_from``: the first history position this call added to the session's corpus, and
    ``embedded``: the new sentences it has embedded (or taken from the query's prefetch) on its
    path, the stages together, against the corpus's ``call_budget`` (state/corpus.py).
    ``position_tokens``: ingest's token counts by history position, once read
    (``StageContext.position_tokens``: the prune stage and the budget stage both need them).
    """

    excluded_spans: dict[int, set[tuple[int, int]]] = field(default_factory=dict)
    tool_choice: Any = None
    function_call: Any = None
    poison_checked: int | None = None
    step_records: dict[str, StepOutcome | StepOffer] = field(default_factory=dict)
    corpus_from: int | None = None
    embedded: int = 0
    position_tokens: list[int] | None = None

    def added_from(self, position: int) -> None:
        self.corpus_from = position if self.corpus_from is None else min(self.corpus_from, position)


async def ingest_counts(channels: Channels, store: SessionStore | None,
                        session: SessionHandle | None, stored_positions: int,
                        new_turns: list[TurnRecord]) -> list[int]:
    """Token counts by history position as ingest counted them: the stored turns' (kept at
    ingest) and the call's new ones; shorter than the history when the stored ones cannot be
    read (the caller counts the rest itself). Read once per call: the prune stage, the budget
    stage and the call's commit all need them (``channels.position_tokens``)."""
    from agentmem.store.sessions import StoreUnavailable

    if channels.position_tokens is not None:
        return channels.position_tokens
    try:
        stored = await store.turn_tokens(session) if store and session else []
    except StoreUnavailable:  # counted by the caller instead: a blip must not fail a stage
        stored = []
    stored = stored[:stored_positions]  # later stored turns may be a superseded branch
    if len(stored) == stored_positions:
        stored += [turn.tokens for turn in new_turns]
    channels.position_tokens = stored
    return stored


UNREAD = object()  # StageContext.cache_mark before anyone read it


@dataclass
class StageContext:
    """What a stage may read: the policy, the incoming history, the session, the engine's state
    (embedder and caches) and the report. Built by the engine, once per stage run."""

    policy: Policy
    model: str
    history: list[dict[str, Any]]  # the full incoming history, as sent (or rebuilt)
    state: EngineState
    report: Report
    run: StageRun
    session: SessionHandle | None = None  # None when the store is unavailable or off
    store: SessionStore | None = None
    stored_positions: int = 0  # history[:stored_positions] is already stored, identical
    chains: list[str] = field(default_factory=list)  # chain hash per position (ingest.chain_hashes)
    next_turn_id: int = 0  # history[stored_positions + k] will be stored as turn next_turn_id + k
    channels: Channels = field(default_factory=Channels)  # shared by the stages of one call
    new_turns: list[TurnRecord] = field(default_factory=list)  # ingest's records of
    # history[stored_positions:] (their sentence spans and token counts, counted once)
    cache_mark: int | object | None = field(default=UNREAD, repr=False)  # see last_cache_mark

    @property
    def last_cache_mark(self) -> int | None:
        """The last message the client marked for the provider's prompt cache (None: none;
        ``agentmem.cache_marks``). A call reads it once for all its stages (``cache_mark``);
        a context made elsewhere reads it here."""
        if self.cache_mark is UNREAD:
            self.cache_mark = last_marked_message(self.history)
        return self.cache_mark  # type: ignore[return-value]

    async def turn_ids(self, upto: int) -> list[int]:
        """The turn id of each position < upto (stored ones from Redis, new ones as they will be)."""
        stored: list[int] = []
        if self.store is not None and self.session is not None and self.stored_positions:
            stored = (await self.store.active_ids(self.session))[: self.stored_positions]
        return (stored + [self.next_turn_id + k for k in range(max(0, upto - len(stored)))])[:upto]

    async def position_tokens(self) -> list[int]:
        """Token counts of the history's positions as ingest counted them (``ingest_counts``)."""
        return await ingest_counts(self.channels, self.store, self.session, self.stored_positions,
                                   self.new_turns)

    async def corpus(self, upto: int, *, vectors: bool = True, whole: bool = False) -> Corpus:
        """The session's sentences of history[:upto], with vectors (the engine's cache).

        ``vectors=False``: a stage that reads text only (rules) does not make the call embed
        new sentences; rows still without a vector are embedded in the background.
        ``whole``: vectors only if every row can have one within the call's budget."""
        return await self.state.corpora.corpus_for(self, upto, vectors=vectors, whole=whole)

    async def query_vector(self, text: str) -> np.ndarray:
        """The embedding of a query text (memoised; prefetched when a stage asked early)."""
        return await self.state.queries.vector(text)


class Stage:
    """A hygiene stage: subclass it, set ``name``, implement ``apply``; list it in
    ``agentmem.stages.BUILTIN_STAGES`` (or register it: see ``agentmem.stages``).

    The hooks, each optional:

    - ``wants_query(policy, request)``: texts this stage will embed on this request (the chat
      request body: ``messages``, ``tools``, ...), so the
      engine starts embedding them as the request arrives (while Redis is read).
    - ``apply(draft, context)``: the call path; edit the draft in place and record each change
      as a ``Decision`` on ``context.run``.
    - ``after_reply(context, turns)``: query-independent work on the call's new turns, after
      the reply is stored and embedded; never on the call path (the next call reads its results).
    - ``on_session_deleted(tenant, session_id)``: drop what the stage keeps about a session.

    Class attributes: ``settings_model``, the pydantic model of the stage's policy section
    (the policy composes them; a built-in stage's section is a field of ``Policy``, another
    stage's lives under ``Policy.options[name]``); ``runs_after``, stages that must come
    earlier in a policy's list when both are listed (checked when the policy loads).
    """

    name: ClassVar[str] = ""
    settings_model: ClassVar[type[BaseModel] | None] = None
    runs_after: ClassVar[frozenset[str]] = frozenset()

    def wants_query(self, policy: Policy, request: dict[str, Any]) -> list[str]:
        return []

    async def apply(self, draft: Draft, context: StageContext) -> None:
        raise NotImplementedError

    async def after_reply(self, context: StageContext, turns: list[TurnRecord]) -> None:
        return None

    def on_session_deleted(self, tenant: str, session_id: str) -> None:
        return None
