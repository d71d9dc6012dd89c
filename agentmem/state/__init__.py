"""Per-engine state: the embedder and every cache built from it.

Two engines in one process share nothing by accident: each ``Hygiene`` owns one
``EngineState``, and every stage reads the embedder, the query vectors, the session corpora
and the tool catalogues through ``StageContext.state``. So an injected embedder is the one
used everywhere, and the caches' bounds are settings of the engine that owns them.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentmem.models.embedder import Embedder
from agentmem.state.corpus import Corpus, CorpusCache
from agentmem.state.queries import QueryVectors
from agentmem.state.steps import StepMemo
from agentmem.state.toolcat import Catalogue, ToolCatalogues

__all__ = ["CacheLimits", "Catalogue", "Corpus", "CorpusCache", "EngineState", "QueryVectors",
           "StepMemo", "ToolCatalogues"]

MB = 1024 * 1024


class CacheLimits(BaseModel):
    """Bounds of the in-process caches of one engine, and of the model work of one call."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    corpus_mb: int = Field(512, ge=1, description="Session corpora (sentences, vectors, BM25).")
    query_memo: int = Field(1024, ge=1, description="Query texts whose vectors are remembered.")
    tool_catalogue_mb: int = Field(64, ge=1, description="Distinct tool lists, ready for scoring.")
    tool_vectors: int = Field(20_000, ge=1, description="Tool-text vectors kept in process.")
    step_memo: int = Field(
        1024, ge=1, description="Sessions whose latest agent step's stage outcomes are kept in "
        "process (and beside the session in Redis), replayed on the step's later calls "
        "(agentmem/state/steps.py).")
    call_path_sentences: int = Field(
        64, ge=0, description="New sentences one call may embed on its path (newest first); "
        "the rest are scored lexically on that call and embedded in the background. It bounds the "
        "poison check's new claim clauses too: past it (or with sentences still without a "
        "vector) the check of the client's new turns runs after the reply.")


class EngineState:
    """The embedder and the caches of one engine."""

    def __init__(self, embedder: Embedder, limits: CacheLimits | None = None,
                 upstream: Any = None) -> None:
        limits = limits or CacheLimits()
        self.embedder = embedder
        self.upstream = upstream  # the engine's provider seam, for stages that ask a model
        self.limits = limits
        self.queries = QueryVectors(embedder, limits.query_memo, limits.call_path_sentences)
        self.corpora = CorpusCache(self.queries, limits.corpus_mb * MB, limits.call_path_sentences)
        self.catalogues = ToolCatalogues(embedder, limits.tool_catalogue_mb * MB, limits.tool_vectors)
        self.steps = StepMemo(limits.step_memo)

    def forget_session(self, tenant: str, session_id: str) -> None:
        """Drop what is cached about a deleted session."""
        self.corpora.forget(tenant, session_id)
        self.steps.forget(tenant, session_id)
