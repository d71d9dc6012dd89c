"""The sessions API: list, read turns and reports, delete. Always scoped to the caller's tenant.

Another tenant's session answers 404, exactly like a session that does not exist.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query, Request

from agentmem.errors import HygieneUnavailable, NotFound
from agentmem.identity import checked_id
from agentmem.proxy.auth import tenant_of
from agentmem.store import SessionHandle, StoreUnavailable

router = APIRouter(prefix="/v1/sessions")


def _store(request: Request):
    try:
        return request.app.state.hygiene.store()
    except StoreUnavailable as error:
        raise HygieneUnavailable(f"session store unavailable: {error}") from None


async def _existing(request: Request, tenant: str, session_id: str) -> tuple[Any, SessionHandle, dict]:
    handle = SessionHandle(tenant, checked_id(session_id, "session_id"))
    store = _store(request)
    try:
        meta = await store.meta(handle)
    except StoreUnavailable as error:
        raise HygieneUnavailable(f"session store unavailable: {error}") from None
    if meta is None:
        raise NotFound(f"No session {session_id!r}.", param="session_id")
    return store, handle, meta


@router.get("")
async def list_sessions(request: Request, tenant: str = Depends(tenant_of),
                        limit: int = Query(100, ge=1, le=1000), offset: int = Query(0, ge=0, le=10**9)):
    try:
        sessions = await _store(request).list_sessions(tenant, limit=limit, offset=offset)
    except StoreUnavailable as error:
        raise HygieneUnavailable(f"session store unavailable: {error}") from None
    return {"object": "list", "data": [{"object": "session", "id": s["session_id"], **s}
                                       for s in sessions]}


@router.get("/{session_id}")
async def get_session(request: Request, session_id: str, tenant: str = Depends(tenant_of),
                      include_superseded: bool = False):
    store, handle, meta = await _existing(request, tenant, session_id)
    if include_superseded:
        active = {t.id for t in await store.active_turns(handle)}
        turns = [dict(t.model_dump(), active=t.id in active) for t in await store.all_turns(handle)]
    else:
        turns = [dict(t.model_dump(), active=True) for t in await store.active_turns(handle)]
    return {"object": "session", "id": session_id, **meta, "turns": turns}


@router.get("/{session_id}/reports")
async def get_reports(request: Request, session_id: str, tenant: str = Depends(tenant_of),
                      limit: int = Query(100, ge=1, le=1000)):
    store, handle, _ = await _existing(request, tenant, session_id)
    reports = await store.reports(handle, limit=limit)
    return {"object": "list", "data": [r.model_dump() for r in reports]}


@router.get("/{session_id}/reports/{report_id}")
async def get_report(request: Request, session_id: str, report_id: str,
                     tenant: str = Depends(tenant_of)):
    store, handle, _ = await _existing(request, tenant, session_id)
    report = await store.report(handle, report_id)
    if report is None:
        raise NotFound(f"No report {report_id!r} in session {session_id!r}.", param="report_id")
    return report.model_dump()


@router.delete("/{session_id}")
async def delete_session(request: Request, session_id: str, tenant: str = Depends(tenant_of)):
    store, handle, _ = await _existing(request, tenant, session_id)
    await store.delete(handle)
    request.app.state.hygiene.forget_session(handle.tenant, handle.session_id)
    return {"object": "session.deleted", "id": session_id, "deleted": True}


@router.get("/{session_id}/quarantine")
async def list_quarantine(request: Request, session_id: str, tenant: str = Depends(tenant_of),
                          status: str | None = Query(None, pattern="^(active|released|confirmed)$")):
    from agentmem.quarantine import QuarantineStore

    store, handle, _ = await _existing(request, tenant, session_id)
    records = await QuarantineStore(store).all(handle)
    return {"object": "list", "data": [{"object": "quarantine.record", **r.model_dump()}
                                       for r in records if status is None or r.status == status]}


async def _set_status(request: Request, tenant: str, session_id: str, record_id: str, status: str):
    from agentmem.quarantine import QuarantineStore

    store, handle, _ = await _existing(request, tenant, session_id)
    record = await QuarantineStore(store).set_status(
        handle, checked_id(record_id, "record_id"), status, by=f"api:{tenant}")
    if record is None:
        raise NotFound(f"No quarantine record {record_id!r} in session {session_id!r}.",
                       param="record_id")
    return {"object": "quarantine.record", **record.model_dump()}


@router.post("/{session_id}/quarantine/{record_id}/release")
async def release_quarantine(request: Request, session_id: str, record_id: str,
                             tenant: str = Depends(tenant_of)):
    """The sentence returns to the context on the next call; the record stays, marked."""
    return await _set_status(request, tenant, session_id, record_id, "released")


@router.post("/{session_id}/quarantine/{record_id}/confirm")
async def confirm_quarantine(request: Request, session_id: str, record_id: str,
                             tenant: str = Depends(tenant_of)):
    """Like release, and the claim counts as confirmed: it is never quarantined again."""
    return await _set_status(request, tenant, session_id, record_id, "confirmed")
