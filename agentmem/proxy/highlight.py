"""``POST /v1/highlight``: semantic highlighting with the pruner's sentence scores.

Body: ``{"query": str, "text": str}`` or ``{"query": str, "sentences": [str, ...]}``, optional
``threshold`` and ``floor`` (share of the tokens kept whatever the threshold; both default to
the checkpoint's calibrated keep rule, the one the prune stage and ``agentmem bench prune``
apply). Returns every sentence with its character span (into ``text``, or into the
sentences joined by single spaces), its keep probability and the decision; with
``"token_scores": true`` also its model tokens and their keep probabilities, for a UI.
"""

from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agentmem.errors import InvalidRequest
from agentmem.messages import describe_validation_error
from agentmem.models.runtime import run_inference
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
    context = query.text if query.text is not None else query.sentences
    settings = policy.prune  # the stage's rule, so a highlight shows what the stage would keep
    overrides = settings.keep_rule_overrides()
    if query.threshold is not None:
        overrides["threshold"] = query.threshold
    if query.floor is not None:
        overrides["floor"] = query.floor
    keep_rule = pruner.keep_rule(**overrides)
    encode = request.app.state.hygiene.embedder.encode  # the query's cosine, as in the stage
    result = await run_inference(lambda: pruner.process(
        query.query, context, title=None, token_scores=query.token_scores, encode=encode,
        keep_rule=keep_rule))
    return {"object": "highlight", "reranking_score": result["reranking_score"],
            **asdict(keep_rule), "highlighted": result["pruned_context"],
            "compression_rate": result["compression_rate"], "sentences": result["sentences"]}
