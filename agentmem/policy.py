"""Policies: what hygiene does, as validated pydantic models loaded from YAML presets.

A policy is data, not code: the presets live in ``policies/*.yaml`` (shipped as
``agentmem.policies``) and any YAML file with the same schema can be loaded by path. Unknown
keys are errors, so a typo never silently turns a feature off.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agentmem.errors import PolicyError


class PruneSettings(BaseModel):
    """The prune stage (see agentmem/stages/prune.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    checkpoint: str | None = Field(None, description="Pruner folder; null: the shipped one.")
    threshold: float | None = Field(None, ge=0, le=1, description="null: the checkpoint's.")
    rule: Literal["paper", "hf_code", "mean_prob"] | None = None
    keep_recent_exchanges: int = Field(2, ge=0, description="Exchanges kept verbatim.")
    large_tool_output_tokens: int = Field(
        400, ge=1, description="Tool outputs this large are pruned even inside the recent window.")
    neighbours: int = Field(0, ge=0, description="Sentences kept on each side of a kept one.")
    history_fraction: float = Field(
        0.18, ge=0, le=1, description="Budget for turns older than the recent window, as a "
        "share of their tokens.")
    history_tokens: int | None = Field(
        None, ge=0, description="Absolute budget for the older turns; wins if set.")
    history_floor_tokens: int = Field(
        2048, ge=0, description="Older history up to this size is never pruned.")
    lexical_weight: float = Field(
        1.0, ge=0, description="Weight of BM25 (scaled to [0, 1]) next to the embedding cosine.")
    turn_spread: float = Field(
        0.3, ge=0, description="Score handicap of a further sentence from a turn that already "
        "has one kept: spreads the budget over more turns.")
    context_weight: float = Field(
        0.4, ge=0, description="Share of the adjacent turns' best score a sentence inherits.")
    rerank_turns: int = Field(
        0, ge=0, description="Best recalled older turns the pruner rescores (0: embeddings and "
        "BM25 only, the fast path).")
    rerank_weight: float = Field(1.0, ge=0, description="Weight of the pruner's probability.")


class BudgetSettings(BaseModel):
    """The budget stage (see agentmem/stages/budget.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_prompt_tokens: int | None = Field(None, ge=1, description="Absolute budget; wins if set.")
    context_fraction: float = Field(
        0.75, gt=0, le=1, description="Budget as a share of the model's context window.")
    mmr_lambda: float = Field(0.3, ge=0, le=1, description="Weight of the redundancy penalty.")


class ToolSettings(BaseModel):
    """The tools stage (see agentmem/stages/tools.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_tools: int = Field(
        10, ge=1, description="Most tools kept; pinned tools are kept even beyond it.")
    min_tools: int = Field(3, ge=1, description="The best-scored tools always kept (never zero).")
    min_offered: int = Field(6, ge=1, description="Requests offering fewer tools are left alone.")
    threshold: float | None = Field(
        None, description="Beyond min_tools, drop tools scoring below this (null: no floor).")
    margin: float | None = Field(
        None, ge=0, description="Beyond min_tools, drop tools scoring more than this below the "
        "best tool (null: no margin).")
    name_weight: float = Field(
        0.5, ge=0, description="Weight of the cosine to the tool's name alone, next to the "
        "cosine to its name, description and parameter names.")
    lexical_weight: float = Field(
        0.3, ge=0, description="Weight of BM25 (scaled to [0, 1]) next to the embedding cosine.")
    context_weight: float = Field(
        0.3, ge=0, description="Weight of the previous exchange's words in BM25, relative to "
        "the current turn's.")
    sentence_match: float | None = Field(
        3.0, ge=0, description="In a request of several sentences, a sentence's best BM25 match "
        "scoring at least this ranks with the best tool, so each part of a multi-part request "
        "keeps its tool (null: off).")
    always_include: list[str] = Field(
        default_factory=list, description="Tool names never dropped.")
    recent_calls_window: int = Field(
        2, ge=0, description="Tools called within this many last user turns are kept (the "
        "current agent step always counts).")


class QuarantineSettings(BaseModel):
    """The quarantine stage: context clash and context poisoning (see agentmem/quarantine/)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    clash: bool = Field(True, description="Detect statements that contradict earlier ones.")
    poison: bool = Field(True, description="Detect recurring unsupported claims.")
    resolution: Literal["newer_wins", "trust_wins", "keep_both"] = Field(
        "newer_wins", description="Who loses a clash: the older statement, the less trusted "
        "source (ties: the older), or nobody (a short note states both).")
    nli_model: str | None = Field(
        None, description="NLI checkpoint folder, or a Hugging Face cross-encoder name "
        "(needs allow_hub); null: the shipped one.")
    allow_hub: bool = Field(False, description="Allow nli_model to name a hub model.")
    contradiction_threshold: float = Field(
        0.85, ge=0, le=1, description="NLI contradiction probability that makes a clash.")
    clash_similarity: float = Field(
        0.2, ge=-1, le=1, description="Cosine above which two statements are about the same "
        "subject and worth an NLI check.")
    clash_candidates: int = Field(6, ge=1, description="Earlier statements checked per statement.")
    call_path_similarity: float = Field(
        0.5, ge=-1, le=1, description="The call-path check of the newest user message only "
        "looks at earlier user statements this similar (the background looks wider).")
    call_path_candidates: int = Field(3, ge=0, description="NLI pairs the call path may spend "
                                      "(0: leave even the newest user message to the background).")
    judge_model: str | None = Field(
        None, description="A litellm model that double-checks NLI clashes in the background.")
    untrusted_tools: list[str] = Field(
        default_factory=lambda: ["web_*", "untrusted_*", "*search*", "*scrape*", "*browse*",
                                 "*fetch_url*"],
        description="Glob patterns of tool names whose results are untrusted.")
    min_occurrences: int = Field(
        3, ge=2, description="Occurrences of an unsupported claim that make it poison.")
    recurrence_similarity: float = Field(
        0.5, ge=-1, le=1, description="Cosine above which two claims are the same claim.")
    poison_window_turns: int = Field(
        200, ge=2, description="Recent turns the call path searches for new poison (records "
        "found earlier keep applying).")
    support_similarity: float = Field(
        0.7, ge=-1, le=1, description="Cosine above which a trusted statement supports a claim.")


class Policy(BaseModel):
    """Everything a hygiene call needs to decide; presets are ``off`` and ``default``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    description: str = ""
    stages: list[str] = Field(
        default_factory=list,
        description="Stages to run, in order (quarantine, prune, tools, budget).",
    )
    store: bool = Field(True, description="Keep the session's turns and reports in Redis.")
    embed: bool = Field(True, description="Compute sentence embeddings at ingest.")
    ttl_seconds: int | None = Field(
        30 * 24 * 3600, ge=60, description="Session lifetime after its last write; null keeps it."
    )
    on_fault: Literal["passthrough", "error"] = Field(
        "passthrough",
        description="When Redis or a model fails: send the request unchanged with a warning "
        "header, or fail the call with a 503.",
    )
    lock_timeout_s: float = Field(
        120, gt=0, description="How long a call may hold its session's lock before it expires."
    )
    lock_wait_s: float = Field(
        60, ge=0, description="How long a call waits for a concurrent call on the same session."
    )
    prune: PruneSettings = Field(default_factory=PruneSettings)
    budget: BudgetSettings = Field(default_factory=BudgetSettings)
    tools: ToolSettings = Field(default_factory=ToolSettings)
    quarantine: QuarantineSettings = Field(default_factory=QuarantineSettings)

    @field_validator("stages")
    @classmethod
    def _known_stages(cls, value: list[str]) -> list[str]:
        from agentmem.stages import available_stages

        known = available_stages()
        for position, name in enumerate(value):
            if name not in known:
                raise ValueError(
                    f"stages[{position}]: unknown stage {name!r}; available: {sorted(known)}"
                )
        if len(set(value)) != len(value):
            raise ValueError("a stage is listed twice")
        return value

    @property
    def is_passthrough(self) -> bool:
        return not self.stages


def preset_names() -> list[str]:
    folder = resources.files("agentmem.policies")
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))


def load_policy(name_or_path: str | Path | Policy) -> Policy:
    """A preset by name (``default``), or a YAML file by path; errors name the bad field."""
    if isinstance(name_or_path, Policy):
        return name_or_path
    text, origin = _read(str(name_or_path))
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise PolicyError(f"policy {origin}: not valid YAML: {error}") from None
    if not isinstance(data, dict):
        raise PolicyError(f"policy {origin}: expected a mapping of fields")
    return policy_from_dict(data, origin=origin)


def policy_from_dict(data: dict, *, origin: str = "<dict>") -> Policy:
    try:
        return Policy.model_validate(data)
    except ValidationError as error:
        raise PolicyError(f"policy {origin}: {field_errors(error)}", param="policy") from None


def field_errors(error: ValidationError) -> str:
    """Every problem of a settings object as ``field.path: message``, joined by ``; ``."""
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}"
                     for e in error.errors(include_url=False))


def _read(name: str) -> tuple[str, str]:
    path = Path(name)
    if path.suffix in {".yaml", ".yml"} or path.exists():
        if not path.is_file():
            raise PolicyError(f"policy file not found: {name}", param="policy")
        return path.read_text(encoding="utf-8"), str(path)
    preset = resources.files("agentmem.policies").joinpath(f"{name}.yaml")
    if not preset.is_file():
        raise PolicyError(
            f"unknown policy {name!r}; presets: {preset_names()} (or pass a YAML file path)",
            param="policy",
        )
    return preset.read_text(encoding="utf-8"), f"preset {name!r}"
