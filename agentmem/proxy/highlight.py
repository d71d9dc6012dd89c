"""``POST /v1/highlight``: semantic highlighting with the pruner's sentence scores.

Body: ``{"query": str, "text": str}`` or ``{"query": str, "sentences": [str, ...]}``, optional
``threshold`` and ``floor`` (share of the tokens kept whatever the threshold; both default to
the checkpoint's calibrated keep rule, the one the prune stage and ``agentmem bench prune``
apply). Returns every sentence with its character span (into ``text``, or into the
sentences joined by single spaces), its keep probability and the decision; with
``"token_scores": true`` also its model tokens and their keep probabilities, for a UI.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from dataclasses import asdict
from typing import Any, cast

import numpy as np
from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agentmem.errors import InvalidRequest
from agentmem.messages import describe_validation_error
from agentmem.models.array_cache import ArrayCache
from agentmem.models.keep_rule import KeepRule
from agentmem.models.runtime import embed, read_passage, run_inference
from agentmem.proxy.auth import tenant_of
from agentmem.proxy.body import read_json

router = APIRouter()


class HighlightRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    query: str = Field(min_length=1)
    text: str | None = None
    sentences: list[str] | None = None
    threshold: float | None = Field(None, ge=0, le=1)
    floor: float | None = Field(None, ge=0, le=1)
    token_scores: bool = False

    @model_validator(mode="after")
    def _one_input(self):
        if (self.text is None) == (self.sentences is None):
            raise ValueError("give exactly one of 'text' or 'sentences'")
        return self


@router.post("/v1/highlight")
async def highlight(request: Request, tenant: str = Depends(tenant_of)):
    from agentmem.models.pruner import cached_pruner
    from agentmem.models.registry import pruner_path

    body = await read_json(request, request.app.state.settings.max_body_bytes)
    try:
        query = HighlightRequest.model_validate(body)
    except ValidationError as error:
        message, param = describe_validation_error(error)
        raise InvalidRequest(message, param=param) from None
    policy = request.app.state.hygiene.policy
    pruner = await run_inference(cached_pruner, pruner_path(policy.prune.checkpoint))
    context = query.text if query.text is not None else query.sentences or []
    settings = policy.prune  # the stage's rule, so a highlight shows what the stage would keep
    overrides = settings.keep_rule_overrides()
    if query.threshold is not None:
        overrides["threshold"] = query.threshold
    if query.floor is not None:
        overrides["floor"] = query.floor
    keep_rule = pruner.keep_rule(**overrides)
    result = await highlight_passage(pruner, request.app.state.hygiene.embedder.encode,
                                     query.query, context, keep_rule,
                                     token_scores=query.token_scores,
                                     cache=request.app.state.highlight_vectors, scope=tenant)
    return {"object": "highlight", "reranking_score": result["reranking_score"],
            **asdict(keep_rule), "highlighted": result["pruned_context"],
            "compression_rate": result["compression_rate"], "sentences": result["sentences"]}


async def highlight_passage(pruner: Any, encode: Callable[[list[str]], Any], query: str,
                            context: str | list[str], keep_rule: KeepRule, *,
                            token_scores: bool = False, cache: ArrayCache | None = None,
                            scope: str = "") -> dict[str, Any]:
    """``pruner.process`` of one text (or list of sentences) for a query, on the inference
    workers: the pruner reads a long text's blocks in parallel, as the stage reads a tool
    output, while the embedder's chunks (the query's cosine, as in the stage) queue beside
    them; then the keep rule decides. The same decisions as ``process`` reading it in one
    pass (``python -m agentmem.bench.prune_speed --highlight`` times it).

    A sentence's vector does not depend on the query, so with a ``cache`` a text highlighted
    again (a document asked about twice, a search result that comes back) embeds only the new
    query and the sentences not seen before; ``scope`` (the tenant) is part of each key, so a
    hit never tells one tenant what another has sent."""
    [(_, sentences)] = pruner.passages(query, context, title=None)
    keys = [_vector_key(scope, sentence) for sentence in sentences]
    found = [None if cache is None else cache.get(key) for key in keys]
    missing = [i for i, row in enumerate(found) if row is None]
    scores, rows = await asyncio.gather(
        read_passage(pruner, query, sentences),
        embed(encode, [query, *(sentences[i] for i in missing)], bounded=False))
    for i, row in zip(missing, rows[1:]):
        found[i] = row
        if cache is not None and row is not None:
            cache.put(keys[i], row.copy())  # not a view that keeps its whole chunk alive
    # embedding asked for with bounded=False is never shed: every row is there
    vectors = [np.vstack(cast(list[np.ndarray], [rows[0], *found]))] if sentences else None
    return await run_inference(lambda: pruner.process(
        query, context, title=None, token_scores=token_scores, encode=encode,
        keep_rule=keep_rule, scores=[scores], vectors=vectors))


def _vector_key(scope: str, sentence: str) -> str:
    """What a sentence's vector is kept under: its text, within its tenant."""
    return hashlib.blake2b(f"{scope}\0{sentence}".encode(), digest_size=16).hexdigest()
