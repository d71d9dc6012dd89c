"""Hygiene stages and where they are listed.

A stage is a ``Stage`` subclass in a module of its own. The built-in ones are listed, in their
usual order, in ``BUILTIN_STAGES`` (dotted paths, imported when first needed, so importing
this package never imports a model). A package may add stages through the
``agentmem.stages`` entry-point group; an application may call ``register_stage``.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from agentmem.stages.base import Channels, Draft, OutgoingMessage, Stage, StageContext

# The one list of built-in stages: "module:Class", in the order policies usually list them.
BUILTIN_STAGES: tuple[str, ...] = (
    "agentmem.stages.quarantine:QuarantineStage",
    "agentmem.stages.tools:ToolsStage",
    "agentmem.stages.prune:PruneStage",
    "agentmem.stages.assembly:AssemblyStage",
    "agentmem.stages.budget:BudgetStage",
)

_registry: dict[str, type[Stage]] | None = None


def _load(path: str) -> type[Stage]:
    module, _, attribute = path.partition(":")
    stage_class = getattr(importlib.import_module(module), attribute)
    _check(stage_class)
    return stage_class


def _check(stage_class: type) -> None:
    if not (isinstance(stage_class, type) and issubclass(stage_class, Stage)):
        raise TypeError(f"{stage_class!r} is not a Stage subclass")
    if not isinstance(stage_class.name, str) or not stage_class.name:
        raise ValueError(f"{stage_class.__name__} needs a non-empty string attribute 'name'")


def registry() -> dict[str, type[Stage]]:
    """Every known stage by name: the built-ins, then entry points, then registered ones."""
    global _registry
    if _registry is None:
        found = {}
        for path in BUILTIN_STAGES:
            stage_class = _load(path)
            found[stage_class.name] = stage_class
        for point in entry_points(group="agentmem.stages"):
            stage_class = point.load()
            _check(stage_class)
            found.setdefault(stage_class.name, stage_class)
        _registry = found
    return _registry


def register_stage(stage_class: type[Stage]) -> type[Stage]:
    """Make a stage available to policies under its ``name``; usable as a decorator."""
    _check(stage_class)
    registry()[stage_class.name] = stage_class
    return stage_class


def unregister_stage(name: str) -> None:
    """Forget a registered stage (built-ins come back on the next lookup)."""
    global _registry
    if _registry is not None:
        removed = _registry.pop(name, None)
        if removed is not None and f"{removed.__module__}:{removed.__qualname__}" in BUILTIN_STAGES:
            _registry = None


def available_stages() -> set[str]:
    return set(registry())


def stage_class(name: str) -> type[Stage]:
    return registry()[name]


def build_stages(names: list[str]) -> list[Stage]:
    known = registry()
    return [known[name]() for name in names]


__all__ = ["BUILTIN_STAGES", "Channels", "Draft", "OutgoingMessage", "Stage", "StageContext",
           "available_stages", "build_stages", "register_stage", "registry", "stage_class",
           "unregister_stage"]
