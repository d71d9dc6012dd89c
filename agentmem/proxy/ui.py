"""The inspection page at ``/ui``: three static files that read the JSON APIs in the browser.

The page holds no data and needs no key to load; every session, report and quarantine record
is fetched by its script from the tenant-scoped ``/v1/sessions`` APIs with the key the user
types. The files are served from an allow-list (no directory serving) with a strict
Content-Security-Policy, because the page shows untrusted text: model output, tool results
and user messages. Inline script and styles are refused, so even a rendering bug that let
markup through could not run code.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, RedirectResponse

from agentmem.errors import NotFound
from agentmem.report import Action

STATIC = Path(__file__).parent / "static"

CSP = "; ".join([
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self'",
    "connect-src 'self'",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
])
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",  # small files; a proxy upgrade must not leave a stale script
}
ASSETS = {  # the only files served: name -> media type
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
}

router = APIRouter(include_in_schema=False)


@router.get("/ui")
async def page() -> FileResponse:
    return FileResponse(STATIC / "index.html", media_type="text/html; charset=utf-8",
                        headers=HEADERS)


@router.get("/v1/agentmem/actions")
async def actions() -> dict[str, dict[str, str]]:
    """The values ``Decision.action`` takes, by name: the page switches on these."""
    return {"actions": {action.name: action.value for action in Action}}


@router.get("/ui/")
async def page_slash() -> RedirectResponse:
    """One address for the page, so its absolute asset paths and the hash state agree."""
    return RedirectResponse("/ui", status_code=308)


@router.get("/ui/{name}")
async def asset(name: str) -> FileResponse:
    if name not in ASSETS:
        raise NotFound(f"No UI file {name!r}.", param="name")
    return FileResponse(STATIC / name, media_type=ASSETS[name], headers=HEADERS)
