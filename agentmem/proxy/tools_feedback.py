"""The tools feedback API: teach the tool loadout, and see what it learned. Tenant-scoped.

``POST /v1/tools/feedback`` adds labelled examples (``{query, tool[, parameters]}`` or
``{examples: [...]}``, up to 10,000: an import) to the caller's usage memory, the one the tools
stage fills from traffic; ``GET /v1/tools/memory`` (also ``GET /v1/tools/feedback``) lists it
per tool; ``DELETE /v1/tools/memory?tool=NAME`` forgets a tool. The tenant comes from the API
key, like every route, and the server policy decides whether it shares a catalogue's memory.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query, Request

from agentmem.errors import NotFound
from agentmem.proxy.auth import tenant_of
from agentmem.proxy.body import read_json
from agentmem.tools_memory import add_tool_examples, forget_tool, parse_feedback, tool_memory

router = APIRouter(prefix="/v1/tools")


@router.post("/feedback")
async def add_feedback(request: Request, tenant: str = Depends(tenant_of)):
    state = request.app.state
    examples = parse_feedback(await read_json(request, state.settings.max_body_bytes))
    result = await add_tool_examples(state.hygiene, examples, tenant=tenant)
    return {"object": "tools.feedback", **result}


@router.get("/memory")
@router.get("/feedback")
async def list_memory(request: Request, tenant: str = Depends(tenant_of),
                      tool: str | None = Query(None, min_length=1, max_length=200),
                      limit: int = Query(20, ge=0, le=1000)):
    data = await tool_memory(request.app.state.hygiene, tenant=tenant, tool=tool, limit=limit)
    return {"object": "list", "data": data}


@router.delete("/memory")
async def delete_memory(request: Request, tenant: str = Depends(tenant_of),
                        tool: str = Query(..., min_length=1, max_length=200)):
    removed = await forget_tool(request.app.state.hygiene, tool, tenant=tenant)
    if not removed:
        raise NotFound(f"The tool memory holds nothing for {tool!r}.", param="tool")
    return {"object": "tools.memory.deleted", "tool": tool, "deleted": removed}
