"""The FastAPI application: routes, error shapes, and the engine's lifetime."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time

from fastapi import Depends, FastAPI, Request

from agentmem import __version__
from agentmem.api import Hygiene
from agentmem.config import Settings
from agentmem.loop_executor import install as install_loop_executor
from agentmem.models.array_cache import ArrayCache
from agentmem.models.backend import configure as configure_runtime
from agentmem.models.runtime import favour_latency, freeze_startup_objects
from agentmem.proxy import (
    chat,
    highlight,
    messages_api,
    metrics,
    passthrough,
    responses,
    sessions,
    tools_feedback,
    ui,
)
from agentmem.proxy.auth import tenant_of
from agentmem.proxy.errors import install_error_handlers
from agentmem.upstream import LitellmUpstream

log = logging.getLogger("agentmem.proxy")

HIGHLIGHT_VECTORS = 8192  # sentence vectors /v1/highlight keeps (384 float32 each: 12.6 MB)
SHUTDOWN_GRACE_S = 3.0  # for calls' writes after uvicorn's own grace (see ``agentmem serve``)


def create_app(settings: Settings | None = None, *, hygiene: Hygiene | None = None,
               warm_models: bool = True) -> FastAPI:
    settings = settings or Settings.load()
    if settings.model_runtime != "auto":  # process-wide, like the models it loads
        configure_runtime(settings.model_runtime)
    # The proxy sends litellm's response on as JSON, so litellm's price of it is never read.
    engine = hygiene or Hygiene(settings=settings, upstream=LitellmUpstream(
        settings.route, prices_responses=False))

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        favour_latency()
        install_loop_executor()  # litellm's request building without a thread hop
        # Serve at once; what first calls would pay (litellm's set-up, the token tables, MiniLM)
        # loads meanwhile, and calls that arrive before MiniLM is in skip the stages needing it.
        warm = asyncio.get_running_loop().create_task(
            engine.warm_up(models=warm_models and engine.policy.embed))
        warm.add_done_callback(lambda _: freeze_startup_objects())
        stopping = asyncio.Event()
        _resume_after(engine, warm, stopping)  # jobs a stopped or crashed server left behind
        try:
            yield
        finally:
            stopping.set()
            await _shut_down(engine, warm, close_store=hygiene is None)

    app = FastAPI(title="agentmem", version=__version__, lifespan=lifespan)
    app.state.settings = settings
    app.state.hygiene = engine
    # sentence vectors of highlighted texts (query-independent; keyed per tenant)
    app.state.highlight_vectors = ArrayCache(HIGHLIGHT_VECTORS)
    install_error_handlers(app)
    app.include_router(chat.router)
    app.include_router(responses.router)
    app.include_router(passthrough.router)
    app.include_router(messages_api.router)
    app.include_router(sessions.router)
    app.include_router(highlight.router)
    app.include_router(metrics.router)
    app.include_router(ui.router)
    app.include_router(tools_feedback.router)

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
                "process": os.getpid(),  # which worker answered (serve --workers N)
                "background": engine.background_pending,
                "latency_ms": round((time.perf_counter() - started) * 1000, 3)}

    return app


def app_from_environment() -> FastAPI:
    """The app of one ``agentmem serve --workers N`` worker: settings from the file and the
    ``AGENTMEM_*`` variables its supervisor set, the engine's logs configured as the
    supervisor's, and ``/metrics`` summed over all workers (prometheus_client's multiprocess
    mode, in the directory ``PROMETHEUS_MULTIPROC_DIR`` the supervisor made for this run)."""
    from agentmem.metrics import MULTIPROCESS_DIR, configure_worker_logging

    _end_with_parent()
    configure_worker_logging()
    app = create_app(Settings.load())
    shared = os.environ.get(MULTIPROCESS_DIR)
    if shared:
        app.state.hygiene.metrics.share(shared)
    return app


def _end_with_parent() -> None:
    """Linux: a worker gets SIGTERM when its supervisor dies, even by kill -9, rather than
    serve on orphaned (and be started again next to itself by the next supervisor)."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)


def _resume_after(engine: Hygiene, warm: asyncio.Task, stopping: asyncio.Event) -> None:
    """Start redoing orphaned jobs once the models are loaded: loading two transformers models
    at once from two threads races in their lazy imports ("cannot import name ...")."""
    def loaded(task: asyncio.Task) -> None:
        if not stopping.is_set():  # the server may have begun shutting down meanwhile
            engine.resume_pending()

    warm.add_done_callback(loaded)


async def _shut_down(engine: Hygiene, warm: asyncio.Task, *, close_store: bool) -> None:
    """Quick and losing nothing: uvicorn has stopped accepting and given in-flight calls their
    grace; their writes get ``SHUTDOWN_GRACE_S`` more; the work after replies is not waited for
    (a large paste's embeddings take minutes) but stays recorded in Redis, where the next start
    or another replica picks it up. A model still loading is left to the process exit."""
    if warm.done():
        with contextlib.suppress(Exception, asyncio.CancelledError):
            warm.result()
    else:
        warm.cancel()
    await engine.aclose(drain=False, grace_s=SHUTDOWN_GRACE_S)
    if close_store:
        await asyncio.to_thread(engine.connector.close)
