"""Hygiene stages and their registry.

Each stage is one module here (quarantine, prune, tools, budget) registered under the name
policies use. ``register_stage`` also lets an application add its own.
"""

from __future__ import annotations

from agentmem.stages.base import Draft, OutgoingMessage, Stage, StageContext

_REGISTRY: dict[str, type] = {}


def register_stage(stage_class: type) -> type:
    """Register a stage class under its ``name``; usable as a decorator."""
    name = getattr(stage_class, "name", None)
    if not isinstance(name, str) or not name:
        raise ValueError("a stage class needs a non-empty string attribute 'name'")
    _REGISTRY[name] = stage_class
    return stage_class


def available_stages() -> set[str]:
    return set(_REGISTRY)


def build_stages(names: list[str]) -> list[Stage]:
    return [_REGISTRY[name]() for name in names]


def needs_query_vector(policy, messages: list[dict]) -> bool:
    """Whether a stage of the policy will likely embed this request's query, so the call can
    start it early (a stage whose ``wants_query_vector`` says no may still embed it later)."""
    return any(getattr(_REGISTRY.get(name), "wants_query_vector", lambda p, m: False)(policy, messages)
               for name in policy.stages)


from agentmem.stages import budget, prune, tools  # noqa: E402,F401  (registers the stages)
from agentmem.stages import quarantine  # noqa: E402,F401

__all__ = ["Draft", "OutgoingMessage", "Stage", "StageContext", "available_stages",
           "build_stages", "needs_query_vector", "register_stage"]
