"""Tenants: each configured proxy API key is a tenant; with no keys there is one tenant.

The key is the client's ``Authorization: Bearer`` token, or its ``x-api-key`` header (what
the Anthropic SDKs and Claude Code send with an API key). It is never forwarded to a
provider: provider keys come from the environment or the model routes in the config.
"""

from __future__ import annotations

import hmac

from fastapi import Request

from agentmem.config import TENANT_PATTERN
from agentmem.errors import AuthenticationFailed


async def tenant_of(request: Request) -> str:
    """The request's tenant. A coroutine on purpose: FastAPI runs a plain ``def`` dependency in
    its thread pool, a hop that cost every call a thread switch and GIL hand-overs."""
    settings = request.app.state.settings
    if not settings.api_keys:
        return settings.default_tenant
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        token = request.headers.get("x-api-key", "")
    if not token:
        raise AuthenticationFailed("Missing proxy API key: send 'Authorization: Bearer <key>' "
                                   "(or 'x-api-key: <key>').", code="missing_api_key")
    for key, tenant in settings.api_keys.items():
        if hmac.compare_digest(key.encode(), token.strip().encode()):
            if not TENANT_PATTERN.match(tenant):  # also refused when the settings load
                raise AuthenticationFailed("This key's tenant name is not valid.")
            return tenant
    raise AuthenticationFailed("Invalid proxy API key.", code="invalid_api_key")
