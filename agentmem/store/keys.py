"""The Redis key schema. Every key of a session carries the hash tag ``{tenant:session}``.

The hash tag puts all of a session's keys in one Redis Cluster slot, so the commit
transaction (MULTI/EXEC over several keys) works on a cluster as on a single server.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agentmem.structured import ROWS_VERSION

PREFIX = "agentmem"
ID_PATTERN = re.compile(r"^[A-Za-z0-9._:@+=-]{1,200}$")


@dataclass(frozen=True)
class SessionKeys:
    tenant: str
    session_id: str

    @property
    def _base(self) -> str:
        return f"{PREFIX}:{{{self.tenant}:{self.session_id}}}"

    @property
    def judge_spent(self) -> str:  # counter: clash pairs this session sent to the LLM judge
        return f"{self._base}:judge_spent"

    @property
    def meta(self) -> str:  # hash: tenant, session_id, created_at, updated_at, policy, counters
        return f"{self._base}:meta"

    @property
    def turns(self) -> str:  # hash: turn id -> TurnRecord JSON; ids are never reused
        return f"{self._base}:turns"

    @property
    def active(self) -> str:  # list: turn ids of the current history, by position
        return f"{self._base}:active"

    @property
    def chain(self) -> str:  # list aligned with active: "<chain hash>:<cumulative tokens>"
        return f"{self._base}:chain"

    @property
    def embeddings(self) -> str:
        """Hash: turn id -> float16 sentence embeddings, one row per row of the turn's cut.
        Named by the cut's version (``agentmem.structured.ROWS_VERSION``): vectors stored by
        an older cut stay unread rather than be paired with rows they were not made from."""
        return f"{self._base}:emb{ROWS_VERSION}"

    @property
    def stale_embeddings(self) -> list[str]:
        """The embeddings hashes of older cuts (version 1's was ``:emb``): never read,
        deleted with the session."""
        return [f"{self._base}:emb"] + [f"{self._base}:emb{v}" for v in range(2, ROWS_VERSION)]

    @property
    def reports(self) -> str:  # hash: report id -> Report JSON
        return f"{self._base}:reports"

    @property
    def report_ids(self) -> str:  # list: report ids in call order
        return f"{self._base}:report_ids"

    @property
    def quarantine(self) -> str:  # hash: record id -> QuarantineRecord JSON (never deleted)
        return f"{self._base}:quarantine"

    @property
    def steps(self) -> str:  # hash: stage -> its record of the latest agent step (state/steps.py)
        return f"{self._base}:steps"

    @property
    def lock(self) -> str:
        return f"{self._base}:lock"

    def data_keys(self) -> list[str]:
        return [self.meta, self.turns, self.active, self.chain, self.embeddings,
                self.reports, self.report_ids, self.quarantine, self.steps, *self.stale_embeddings]


def tenant_index(tenant: str) -> str:
    """Sorted set of a tenant's session ids by last update (its own slot)."""
    return f"{PREFIX}:tenant:{{{tenant}}}:sessions"


def tool_usage_examples(scope: str, tool: str) -> str:
    """List, newest first: the distinct queries that led to one tool identity in a usage scope
    (a tenant or a shared catalogue), each with its vector. The scope is the hash tag, so all of
    a scope's keys share one Redis Cluster slot."""
    return f"{PREFIX}:toolmem:{{{scope}}}:ex:{tool}"


def tool_usage_index(scope: str) -> str:
    """Hash: tool identity key -> {name, schema, updated_at} of every tool a scope learned about."""
    return f"{PREFIX}:toolmem:{{{scope}}}:tools"


def tool_usage_offers(scope: str) -> str:
    """Hash: offer-set id -> the sorted identity keys of the tools one request offered (JSON),
    for the learned examples of a usage scope that name it. Bounded by ``tool_usage_offers_used``."""
    return f"{PREFIX}:toolmem:{{{scope}}}:offers"


def tool_usage_offers_used(scope: str) -> str:
    """Sorted set: offer-set id -> when an example last named it; beyond the policy's bound the
    least recently named sets leave both this and ``tool_usage_offers``."""
    return f"{PREFIX}:toolmem:{{{scope}}}:offers:used"


def response_ref(tenant: str, response_id: str) -> str:
    """String: the session and turn a Responses API response id stands for (its own slot per
    tenant, so one tenant's ids are never found by another)."""
    return f"{PREFIX}:resp:{{{tenant}}}:{response_id}"
