"""Quarantine: context clash and context poisoning, detected, recorded, reversible."""

from agentmem.quarantine.records import QuarantineRecord, QuarantineStore

__all__ = ["QuarantineRecord", "QuarantineStore"]
