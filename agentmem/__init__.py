"""agentmem: context hygiene for LLM calls.

    import agentmem
    response = await agentmem.acompletion(model="openai/gpt-4o-mini", messages=[...],
                                          session_id="ticket-42")

``Hygiene`` is the engine; ``Policy`` says what it does; ``completion``/``acompletion`` are
drop-ins for litellm's; ``agentmem serve`` runs the same engine as an OpenAI-compatible proxy.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # models load from disk unless a user opts in
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

if TYPE_CHECKING:
    from agentmem.api import Call, Hygiene, HygieneResult
    from agentmem.policy import Policy, load_policy
    from agentmem.report import Report

__version__ = "0.1.0"

# Loaded on first use: the engine pulls in litellm and torch (seconds), and ``agentmem serve``
# must answer "port in use" before paying for them.
_LAZY = {"Call": "agentmem.api", "Hygiene": "agentmem.api", "HygieneResult": "agentmem.api",
         "Policy": "agentmem.policy", "load_policy": "agentmem.policy", "Report": "agentmem.report"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'agentmem' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


_default: Hygiene | None = None


def default_hygiene() -> Hygiene:
    """The process-wide engine used by the module-level functions (settings from the env)."""
    global _default
    if _default is None:
        from agentmem.api import Hygiene

        _default = Hygiene()
    return _default


async def acompletion(model: str, messages: list[dict], **kwargs):
    """``litellm.acompletion`` with hygiene first; extra keywords: session_id, stateful, policy."""
    return await default_hygiene().acompletion(model, messages, **kwargs)


def completion(model: str, messages: list[dict], **kwargs):
    """``litellm.completion`` with hygiene first; extra keywords: session_id, stateful, policy."""
    return default_hygiene().completion(model, messages, **kwargs)


__all__ = [
    "Call",
    "Hygiene",
    "HygieneResult",
    "Policy",
    "Report",
    "acompletion",
    "completion",
    "default_hygiene",
    "load_policy",
]
