"""Policies: what hygiene does, as validated pydantic models loaded from YAML presets.

A policy is data, not code: the presets live in ``policies/*.yaml`` (shipped as
``agentmem.policies``) and any YAML file with the same schema can be loaded by path. Unknown
keys are errors, so a typo never silently turns a feature off.
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agentmem.config import yaml_preset_name, yaml_problem
from agentmem.errors import PolicyError
from agentmem.quarantine.settings import QuarantineSettings
from agentmem.stages import registry
from agentmem.stages.assembly import AssemblySettings
from agentmem.stages.budget import BudgetSettings
from agentmem.stages.prune import PruneSettings
from agentmem.stages.tools import ToolSettings

MAX_EXTENDS_DEPTH = 8


class Policy(BaseModel):
    """Everything a hygiene call needs to decide; presets are ``off`` and ``default``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    description: str = ""
    stages: list[str] = Field(
        default_factory=list,
        description="Stages to run, in order (quarantine, tools, prune, assembly, budget).",
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
        8, gt=0, description="The session lock's lease: renewed every third of it while the call "
        "runs, so a proxy that dies frees its sessions within this many seconds."
    )
    lock_wait_s: float = Field(
        60, ge=0, description="How long a call waits for a concurrent call on the same session."
    )
    commit_retry_s: float = Field(
        120, ge=0, description="A reply that went out while Redis was down: how long its turns "
        "are kept in memory and their write retried, so the session keeps them once Redis is back."
    )
    prune: PruneSettings = Field(default_factory=PruneSettings)
    budget: BudgetSettings = Field(default_factory=BudgetSettings)
    tools: ToolSettings = Field(default_factory=ToolSettings)
    quarantine: QuarantineSettings = Field(default_factory=QuarantineSettings)
    assembly: AssemblySettings = Field(default_factory=AssemblySettings)
    options: dict[str, Any] = Field(
        default_factory=dict, description="Settings of stages that are not built in, by stage "
        "name (validated by the stage's settings_model).")

    @field_validator("stages")
    @classmethod
    def _known_stages(cls, value: list[str]) -> list[str]:
        known = registry()
        for position, name in enumerate(value):
            if name not in known:
                raise ValueError(
                    f"stages[{position}]: unknown stage {name!r}; available: {sorted(known)}"
                )
        if len(set(value)) != len(value):
            raise ValueError("a stage is listed twice")
        for position, name in enumerate(value):  # each stage names what must come before it
            for earlier in sorted(known[name].runs_after):
                if earlier in value[position + 1:]:
                    raise ValueError(f"stage {earlier!r} must run before {name!r} "
                                     f"(list it earlier in stages)")
        return value

    @model_validator(mode="after")
    def _stage_options(self) -> Policy:
        known = registry()
        for name, value in self.options.items():
            model = known[name].settings_model if name in known else None
            if model is None:
                raise ValueError(f"options.{name}: no such stage with settings")
            if name in type(self).model_fields:
                raise ValueError(f"options.{name}: built-in stage settings go in '{name}:'")
            self.options[name] = model.model_validate(value)
        return self

    def settings_of(self, stage: str) -> Any:
        """The settings section of a stage: a built-in's field, or ``options[stage]`` (its
        settings model's defaults when the policy gives none)."""
        if stage in type(self).model_fields:
            return getattr(self, stage)
        if stage in self.options:
            return self.options[stage]
        model = registry()[stage].settings_model
        return model() if model is not None else None

    @property
    def is_passthrough(self) -> bool:
        return not self.stages


def preset_names() -> list[str]:
    """The presets shipped in the package (read once: every call with X-Agentmem-Policy asks)."""
    return list(_preset_names())


@functools.cache
def _preset_names() -> tuple[str, ...]:
    folder = resources.files("agentmem.policies")
    return tuple(sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml")))


def load_policy(name_or_path: str | Path | Policy) -> Policy:
    """A preset by name (``default``), or a YAML file by path; errors name the bad field."""
    if isinstance(name_or_path, Policy):
        return name_or_path
    data, origin, folder = _fields(str(name_or_path))
    if folder is not None and "extends" in data and "name" not in data:
        # a file's policy is not its parent's: reports, headers and metrics name it by file
        data = {"name": Path(origin).stem, **data}
    return policy_from_dict(data, origin=origin, _folder=folder)


def _fields(name: str, folder: Path | None = None) -> tuple[dict, str, Path | None]:
    """A preset's or file's fields, where they came from, and the file's folder (``None``
    for a preset): the folder a relative ``extends`` in it is read from."""
    text, origin = _read(name, folder)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise PolicyError(f"policy {origin}: {yaml_problem(error)}") from None
    if not isinstance(data, dict):
        raise PolicyError(f"policy {origin}: expected a mapping of fields")
    return data, origin, (Path(origin).parent if not origin.startswith("preset ") else None)


def policy_from_dict(data: dict, *, origin: str = "<dict>", _depth: int = 0,
                     _folder: Path | None = None) -> Policy:
    """A policy from its fields; ``extends: NAME`` starts from another preset or file (a
    relative path is read next to the file that names it, else from the working folder),
    whose sections this one's override key by key (so a preset writes only what it changes)."""
    if "extends" in data:
        data = _extended(data, origin, _depth, _folder)
    try:
        return Policy.model_validate(data)
    except ValidationError as error:
        raise PolicyError(f"policy {origin}: {field_errors(error)}", param="policy") from None


def _extended(data: dict, origin: str, depth: int, folder: Path | None) -> dict:
    if depth >= MAX_EXTENDS_DEPTH:
        raise PolicyError(f"policy {origin}: 'extends' nests deeper than {MAX_EXTENDS_DEPTH}",
                          param="policy")
    data = dict(data)
    parent_name = yaml_preset_name(data.pop("extends"))
    if not isinstance(parent_name, str) or not parent_name:
        raise PolicyError(f"policy {origin}: extends: expected a preset name or a file path",
                          param="policy")
    parent, parent_origin, parent_folder = _fields(parent_name, folder)
    if "extends" in parent:
        parent = _extended(parent, parent_origin, depth + 1, parent_folder)
    return _merge(parent, data)



def _merge(base: dict, override: dict) -> dict:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def field_errors(error: ValidationError) -> str:
    """Every problem of a settings object as ``field.path: message``, joined by ``; ``."""
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}"
                     for e in error.errors(include_url=False))


def _read(name: str, folder: Path | None = None) -> tuple[str, str]:
    path = Path(name)
    if folder is not None and not path.is_absolute() and (folder / path).is_file():
        path = folder / path
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
