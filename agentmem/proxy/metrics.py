"""``GET /metrics``: the engine's counters and histograms in Prometheus' text format.

Unauthenticated like most scrape targets: it carries counts and latencies only, no tenant
names, session ids or content.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from agentmem.metrics import CONTENT_TYPE

router = APIRouter()


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    return Response(request.app.state.hygiene.metrics.exposition(), media_type=CONTENT_TYPE)
