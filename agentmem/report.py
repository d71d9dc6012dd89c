"""The per-call report: what each stage did, why, and what it cost.

Reports are stored with the session and returned by id (``X-Agentmem-Report``), so every
decision that changed what the model saw can be audited later.
"""

from __future__ import annotations

import time
import uuid
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, Field


class Action(StrEnum):
    """What a decision did. Metrics, ``agentmem inspect`` and the /ui page switch on these
    values; the page reads them from ``GET /v1/agentmem/actions``."""

    DROP_MESSAGE = "drop_message"  # whole messages left out: detail.unit lists them all
    PRUNE_SPANS = "prune_spans"  # sentences removed from one message
    DROP_TOOL = "drop_tool"  # a tool not offered
    KEEP_TOOLS = "keep_tools"  # summary of the tool selection
    QUARANTINE = "quarantine"  # a statement withheld by a quarantine record
    CLARIFY = "clarify"  # a note added next to a statement (keep_both clashes)
    REORDER_DOCUMENTS = "reorder_documents"  # documents inside one message, most relevant at the edges
    FORMAT_CONTEXT = "format_context"  # kept context rendered as tagged blocks with a note
    COMPRESS_TOKENS = "compress_tokens"  # low-value words dropped inside kept sentences


class Decision(BaseModel):
    """One change to the outgoing request (or a decision to leave something alone)."""

    action: Action
    reason: str
    message_index: int | None = None  # index in the incoming request
    position: int | None = None  # position of the turn in the stored session
    span: tuple[int, int] | None = None  # characters of the message's text
    spans: list[tuple[int, int]] | None = None  # prune_spans: every removed span of the message
    span_scores: list[float] | None = None  # ... and the score of each
    tool: str | None = None
    score: float | None = None
    detail: dict[str, Any] = Field(default_factory=dict)


def decision_removals(decision: Decision) -> int:
    """How many things one decision removed: spans of a message, or messages of a dropped unit
    or run (``detail.unit``), else one."""
    if decision.spans:
        return len(decision.spans)
    unit = decision.detail.get("unit") if decision.action is Action.DROP_MESSAGE else None
    return len(unit) if isinstance(unit, list) and unit else 1


class StageRun(BaseModel):
    stage: str
    latency_ms: float = 0.0
    decisions: list[Decision] = Field(default_factory=list)
    error: str | None = None
    skipped: str | None = None  # why the stage left the request as it was (models still
    # loading; the prune stage and a request to sum up the conversation)
    replayed: bool = False  # the agent step's first call's decisions, replayed (state/steps.py)


class IngestSummary(BaseModel):
    new_turns: int = 0
    stored_turns: int = 0
    diverged_at: int | None = None  # first position where the client's history differs
    superseded: int = 0  # stored turns no longer in the active history (kept in the log)
    stateful: bool = False


class Report(BaseModel):
    id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    tenant: str
    session_id: str
    created_at: float = Field(default_factory=time.time)
    policy: str
    model: str | None = None
    status: Literal["pending", "ok", "partial", "error", "passthrough"] = "pending"
    error: str | None = None
    warnings: list[str] = Field(default_factory=list)
    ingest: IngestSummary = Field(default_factory=IngestSummary)
    stages: list[StageRun] = Field(default_factory=list)
    tokens_before: int = 0
    tokens_after: int = 0
    messages_before: int = 0
    messages_after: int = 0
    tools_before: int = 0
    tools_after: int = 0
    latency_ms: dict[str, float] = Field(default_factory=dict)
    usage: dict[str, Any] | None = None
    reply_position: int | None = None

    def stage(self, name: str) -> StageRun:
        run = StageRun(stage=name)
        self.stages.append(run)
        return run
