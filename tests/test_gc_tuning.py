"""A server freezes its startup objects once warm, so full collections stop walking them
(on a 2,000-turn session they added 250-400 ms to every eighth call)."""

from __future__ import annotations

import gc
import time

import pytest

from agentmem.config import Settings
from agentmem.models.runtime import GC_THRESHOLDS
from agentmem.proxy import create_app
from tests.conftest import echo_routes
from tests.servers import ThreadServer

DEFAULT_THRESHOLDS = (700, 10, 10)


@pytest.fixture
def pristine_gc():
    gc.unfreeze()
    gc.set_threshold(*DEFAULT_THRESHOLDS)
    yield
    gc.unfreeze()
    gc.set_threshold(*DEFAULT_THRESHOLDS)


def _start(upstream, data_dir) -> ThreadServer:
    settings = Settings(data_dir=data_dir, models=echo_routes(upstream.url))
    return ThreadServer(create_app(settings, warm_models=False)).start()


def test_a_warm_server_freezes_its_startup_objects_and_collects_young_ones_less_often(
        upstream, data_dir, pristine_gc):
    assert gc.get_freeze_count() == 0
    server = _start(upstream, data_dir)
    try:
        deadline = time.time() + 30
        while gc.get_freeze_count() == 0 and time.time() < deadline:
            time.sleep(0.05)
        assert gc.get_freeze_count() > 10_000  # the imports' objects at least
        assert gc.get_threshold() == GC_THRESHOLDS
    finally:
        server.stop()


def test_the_operator_can_leave_the_collector_alone(upstream, data_dir, pristine_gc, monkeypatch):
    monkeypatch.setenv("AGENTMEM_GC_FREEZE", "0")
    server = _start(upstream, data_dir)
    try:
        time.sleep(1.0)  # the warm-up (no models) is done well within this
        assert gc.get_freeze_count() == 0
        assert gc.get_threshold() == DEFAULT_THRESHOLDS
    finally:
        server.stop()
