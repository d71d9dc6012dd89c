"""The typed facts and conflicts the slot rules produce."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Fact:
    """One typed statement. ``value`` is normalised so equal facts compare equal."""

    slot: str
    value: str
    polarity: bool = True
    subject: str = "self"  # "self", "other:<relation>", "generic"
    qualifiers: frozenset[str] = field(default_factory=frozenset)
    evidence: str = ""
    strength: float = 1.0  # 1.0 stated outright; lower when inferred ("stay-at-home mom" -> kids)


@dataclass(frozen=True)
class Conflict:
    kind: str
    slot: str
    older: Fact
    newer: Fact
    score: float
    reason: str
