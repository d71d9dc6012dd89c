"""Errors that carry an OpenAI-shaped body, so every caller sees the same contract.

The proxy renders them as ``{"error": {"message", "type", "param", "code"}}`` with the
status below; the library raises them as ordinary exceptions.
"""

from __future__ import annotations

from typing import Any


class AgentmemError(Exception):
    """Base class: a message for humans plus the OpenAI error fields."""

    status_code = 500
    error_type = "internal_error"
    headers: dict[str, str] | None = None  # response headers the proxy adds (set per call)

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code

    def to_body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code,
            }
        }


class InvalidRequest(AgentmemError):
    """The client sent something no provider would accept; nothing of it is stored."""

    status_code = 400
    error_type = "invalid_request_error"


class PayloadTooLarge(InvalidRequest):
    status_code = 413


class UnsupportedMediaType(InvalidRequest):
    status_code = 415


class AuthenticationFailed(AgentmemError):
    status_code = 401
    error_type = "authentication_error"


class NotFound(AgentmemError):
    """Also used for another tenant's session, so existence never leaks across tenants."""

    status_code = 404
    error_type = "not_found_error"


class ModelNotFound(AgentmemError):
    """The proxy's configured ``models:`` are an allow-list and the request names another."""

    status_code = 404
    error_type = "invalid_request_error"

    def __init__(self, model: str):
        super().__init__(f"The model `{model}` does not exist or you do not have access to it.",
                         param="model", code="model_not_found")


class SessionBusy(AgentmemError):
    """Another request on the same session held the lock for longer than we wait."""

    status_code = 409
    error_type = "conflict_error"
    code_default = "session_busy"


class UpstreamError(AgentmemError):
    """The provider answered with an error: its status and message pass through."""

    error_type = "upstream_error"

    def __init__(self, message: str, *, status_code: int, error_type: str | None = None,
                 param: str | None = None, code: str | None = None):
        super().__init__(message, param=param, code=code)
        self.status_code = status_code
        if error_type:
            self.error_type = error_type


class HygieneUnavailable(AgentmemError):
    """A part of agentmem itself (Redis, a model) failed and the policy says not to pass through."""

    status_code = 503
    error_type = "agentmem_unavailable"


class ServerShuttingDown(AgentmemError):
    """The server is stopping and ended a stream before its grace ran out: the reply so far
    is stored, marked partial; the client may ask again (another replica, or after the start)."""

    status_code = 503
    error_type = "server_shutting_down"


class PolicyError(AgentmemError):
    """A policy file or object is invalid; the message names the field."""

    status_code = 400
    error_type = "invalid_request_error"
