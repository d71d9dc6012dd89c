"""``POST /v1/embeddings`` and ``POST /v1/completions``: forwarded without hygiene.

Neither is a conversation, so nothing is stored and no stage runs. They go through litellm
with the configured model routes applied (the same allow-list, routes and error mapping as
the chat path: 404 for an unlisted model, 502 when the provider cannot be reached, 504 when
it does not answer in time), so a client pointed at agentmem keeps every OpenAI route it uses.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

import orjson
from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response, StreamingResponse

from agentmem.config import Settings
from agentmem.errors import AgentmemError, InvalidRequest
from agentmem.proxy.auth import tenant_of
from agentmem.proxy.body import read_json
from agentmem.upstream import aembedding, as_upstream_error, atext_completion, client_params, litellm_kwargs

router = APIRouter()

# What a client may set (as for chat: never api_base, api_key or litellm's own keys).
EMBEDDING_PARAMS = frozenset({"model", "input", "dimensions", "encoding_format", "user", "timeout"})
COMPLETION_PARAMS = frozenset({
    "model", "prompt", "best_of", "echo", "frequency_penalty", "logit_bias", "logprobs",
    "max_tokens", "n", "presence_penalty", "seed", "stop", "stream", "stream_options", "suffix",
    "temperature", "top_p", "user", "timeout",
})


@router.post("/v1/embeddings")
@router.post("/embeddings")
async def embeddings(request: Request, tenant: str = Depends(tenant_of)):
    kwargs, headers = await _request(request, EMBEDDING_PARAMS, "input")
    result = await aembedding(kwargs)
    return Response(orjson.dumps(_plain(result)), headers=headers, media_type="application/json")


@router.post("/v1/completions")
@router.post("/completions")
async def completions(request: Request, tenant: str = Depends(tenant_of)):
    kwargs, headers = await _request(request, COMPLETION_PARAMS, "prompt")
    result = await atext_completion(kwargs)
    if kwargs.get("stream"):
        return StreamingResponse(_sse(result), headers=headers, media_type="text/event-stream")
    return Response(orjson.dumps(_plain(result)), headers=headers, media_type="application/json")


async def _request(request: Request, allowed: frozenset[str], required: str
                   ) -> tuple[dict[str, Any], dict[str, str]]:
    """The litellm keyword arguments of a passthrough request, and the response headers."""
    settings: Settings = request.app.state.settings
    body = await read_json(request, settings.max_body_bytes)
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise InvalidRequest("'model' is required and must be a non-empty string.", param="model")
    if not isinstance(body.get(required), (str, list)) or not body[required]:
        raise InvalidRequest(f"'{required}' is required: a string or a non-empty list.",
                             param=required)
    settings.check_model(body["model"])
    body, dropped = client_params(body, allowed | frozenset(settings.forward_params))
    route = settings.route(body["model"])
    headers = {"X-Agentmem-Policy": "passthrough"}
    if dropped:
        headers["X-Agentmem-Warning"] = f"fields not forwarded to the provider: {', '.join(dropped)}"
    return litellm_kwargs(body, route.resolved_params() if route else None), headers


def _plain(result: Any) -> dict[str, Any]:
    """litellm's object as OpenAI's JSON (litellm-internal fields removed)."""
    data = result.model_dump(warnings=False) if hasattr(result, "model_dump") else dict(result)
    data.pop("provider_specific_fields", None)
    for choice in data.get("choices") or ():
        choice.pop("reasoning_content", None)
    return data


def _chunk(chunk: Any) -> dict[str, Any]:
    """A streamed completion chunk: litellm gives every chunk a zero usage and the last one a
    null text; OpenAI sends usage only when it has some, and text always."""
    data = _plain(chunk)
    if not (data.get("usage") or {}).get("total_tokens"):
        data.pop("usage", None)
    for choice in data.get("choices") or ():
        if choice.get("text") is None:
            choice["text"] = ""
    return data


async def _sse(chunks: Any) -> AsyncGenerator[bytes, None]:
    """OpenAI's framing; a provider failure mid-stream ends with an ``error`` event."""
    try:
        async for chunk in chunks:
            yield b"data: " + orjson.dumps(_chunk(chunk)) + b"\n\n"
    except AgentmemError as error:
        yield b"data: " + orjson.dumps(error.to_body()) + b"\n\n"
        return
    except Exception as error:  # noqa: BLE001 - a provider failure mid-stream
        yield b"data: " + orjson.dumps(as_upstream_error(error).to_body()) + b"\n\n"
        return
    yield b"data: [DONE]\n\n"
