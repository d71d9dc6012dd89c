"""Operator mistakes in the settings are refused when they load, with the field named, and a
Redis password never reaches a banner or a log line."""

from __future__ import annotations

import pytest

from agentmem.config import Settings, redacted_url
from agentmem.errors import PolicyError
from agentmem.store import RedisConnector


@pytest.mark.parametrize("url", ["redis//127.0.0.1:6379", "http://127.0.0.1:6379", "127.0.0.1:6379"])
def test_a_redis_url_no_client_takes_is_refused(tmp_path, url):
    with pytest.raises(PolicyError, match=r"redis_url: .*expected a URL starting redis://"):
        Settings.load(redis_url=url, data_dir=tmp_path)


@pytest.mark.parametrize("url", ["redis://127.0.0.1:6379/0", "rediss://h:6380", "unix:///tmp/r.sock",
                                 "redis+cluster://127.0.0.1:7000"])
def test_the_redis_urls_the_store_takes_are_accepted(tmp_path, url):
    assert Settings.load(redis_url=url, data_dir=tmp_path).redis_url == url


def test_a_model_name_routed_twice_is_refused(tmp_path):
    route = {"name": "fast", "litellm_params": {"model": "openai/echo"}}
    with pytest.raises(PolicyError, match=r"models: .*given more than once: \['fast'\]"):
        Settings.load(data_dir=tmp_path,
                      models=[route, {**route, "litellm_params": {"model": "openai/gpt-4o"}}])


def test_a_redis_password_is_hidden_wherever_the_url_is_shown(tmp_path):
    url = "redis://:s3cretPW@127.0.0.1:16391/0"
    assert redacted_url(url) == "redis://***@127.0.0.1:16391/0"
    assert redacted_url("redis://user:pw@h:1") == "redis://***@h:1"
    assert redacted_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"
    assert "s3cretPW" not in RedisConnector(url).description
    with pytest.raises(PolicyError) as refused:
        Settings.load(redis_url="http://:s3cretPW@h:1", data_dir=tmp_path)
    assert "s3cretPW" not in str(refused.value)
