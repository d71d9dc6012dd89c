"""The OpenAI-compatible HTTP proxy (FastAPI)."""

from agentmem.proxy.app import create_app

__all__ = ["create_app"]
