"""The FastAPI application: routes, error shapes, and the engine's lifetime."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from fastapi import Depends, FastAPI, Request

from agentmem import __version__
from agentmem.api import Hygiene
from agentmem.config import Settings
from agentmem.models.runtime import run_inference
from agentmem.proxy import chat, highlight, metrics, sessions, ui
from agentmem.proxy.auth import tenant_of
from agentmem.proxy.errors import install_error_handlers

log = logging.getLogger("agentmem.proxy")


def create_app(settings: Settings | None = None, *, hygiene: Hygiene | None = None,
               warm_models: bool = True) -> FastAPI:
    settings = settings or Settings.load()
    engine = hygiene or Hygiene(settings=settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        warm = None
        if warm_models and engine.policy.embed:  # load MiniLM now, not on the first request
            warm = asyncio.get_running_loop().create_task(run_inference(engine.embedder.load))
        try:
            yield
        finally:
            if warm is not None:
                with contextlib.suppress(Exception):
                    await warm
            await engine.aclose()
            if hygiene is None:
                engine.connector.close()

    app = FastAPI(title="agentmem", version=__version__, lifespan=lifespan)
    app.state.settings = settings
    app.state.hygiene = engine
    install_error_handlers(app)
    app.include_router(chat.router)
    app.include_router(sessions.router)
    app.include_router(highlight.router)
    app.include_router(metrics.router)
    app.include_router(ui.router)

    @app.get("/v1/models")
    async def models(tenant: str = Depends(tenant_of)):
        return {"object": "list", "data": [
            {"id": route.name, "object": "model", "created": 0, "owned_by": "agentmem"}
            for route in settings.models]}

    @app.get("/healthz")
    async def healthz(request: Request):
        started = time.perf_counter()
        try:
            await engine.store().ping()
            redis_state = "ok"
        except Exception as error:  # noqa: BLE001 - health reports, never raises
            redis_state = f"unavailable: {type(error).__name__}"
        return {"status": "ok" if redis_state == "ok" else "degraded", "redis": redis_state,
                "embedder": "loaded" if engine.embedder.loaded else "not loaded",
                "policy": engine.policy.name, "version": __version__,
                "latency_ms": round((time.perf_counter() - started) * 1000, 3)}

    return app
