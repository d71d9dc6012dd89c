"""Every error the proxy returns has OpenAI's shape: ``{"error": {message, type, param, code}}``."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from agentmem.errors import AgentmemError

log = logging.getLogger("agentmem.proxy")


def error_response(status: int, message: str, error_type: str, *, param: str | None = None,
                   code: str | None = None, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": error_type, "param": param,
                                   "code": code}}, status_code=status, headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(AgentmemError)
    async def agentmem_error(request: Request, error: AgentmemError):
        headers = getattr(error, "headers", None)
        return JSONResponse(error.to_body(), status_code=error.status_code, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, error: RequestValidationError):
        first = error.errors()[0] if error.errors() else {"loc": (), "msg": "invalid request"}
        param = ".".join(str(p) for p in first["loc"][1:]) or None
        return error_response(400, f"Invalid value for '{param}': {first['msg']}",
                              "invalid_request_error", param=param)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException):
        kind = {401: "authentication_error", 404: "not_found_error",
                405: "invalid_request_error"}.get(error.status_code, "invalid_request_error")
        detail = error.detail if isinstance(error.detail, str) else str(error.detail)
        if error.status_code == 404:
            detail = f"Unknown path: {request.method} {request.url.path}"
        if error.status_code == 405:
            detail = f"Method {request.method} is not allowed on {request.url.path}"
        return error_response(error.status_code, detail, kind, headers=getattr(error, "headers", None))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, error: Exception):
        log.exception("unhandled error on %s", request.url.path)
        return error_response(500, f"agentmem internal error: {type(error).__name__}",
                              "internal_error")
