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
