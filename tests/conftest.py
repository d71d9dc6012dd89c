"""Fixtures: a real echo upstream, proxies on the embedded Redis, Debian's redis-server."""

from __future__ import annotations

import os
import uuid

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import httpx
import openai
import pytest

from agentmem.config import Settings
from agentmem.echo import create_echo_app
from agentmem.proxy import create_app
from tests.servers import RedisServer, ThreadServer, require_redis_server


@pytest.fixture(scope="session")
def upstream():
    server = ThreadServer(create_echo_app()).start()
    yield server
    server.stop()


class Upstream:
    """What the echo upstream received, for asserting what reached the provider."""

    def __init__(self, url: str):
        self.url = url

    def clear(self) -> None:
        httpx.delete(f"{self.url}/_echo/requests")

    def requests(self) -> list[dict]:
        return httpx.get(f"{self.url}/_echo/requests").json()


@pytest.fixture
def received(upstream):
    probe = Upstream(upstream.url)
    probe.clear()
    return probe


def echo_routes(upstream_url: str) -> list[dict]:
    return [{"name": "echo", "litellm_params": {"model": "openai/echo", "api_base": f"{upstream_url}/v1",
                                                  "api_key": "sk-test"}}]


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("agentmem-data")


@pytest.fixture(scope="session")
def policy_dir(tmp_path_factory):
    """The proxy's ``policy_dirs`` folder: a test writes NAME.yaml here and sends NAME."""
    return tmp_path_factory.mktemp("policies")


@pytest.fixture(scope="session")
def proxy(upstream, data_dir, policy_dir):
    settings = Settings(data_dir=data_dir, models=echo_routes(upstream.url), policy_dirs=[policy_dir])
    server = ThreadServer(create_app(settings)).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def tenant_proxy(upstream, data_dir):
    settings = Settings(data_dir=data_dir, models=echo_routes(upstream.url),
                        api_keys={"key-alpha": "alpha", "key-beta": "beta"})
    server = ThreadServer(create_app(settings, warm_models=False)).start()
    yield server
    server.stop()


@pytest.fixture
def client(proxy):
    return openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="unused", max_retries=0)


@pytest.fixture
def http(proxy):
    with httpx.Client(base_url=proxy.url, timeout=60) as session:
        yield session


@pytest.fixture
def session_id():
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    if not RedisServer.available():
        if require_redis_server():
            pytest.fail("redis-server is required (AGENTMEM_REQUIRE_REDIS_SERVER=1) but not installed")
        pytest.skip("Debian redis-server is not installed")
    server = RedisServer(tmp_path_factory.mktemp("redis-server")).start()
    yield server
    server.stop()
