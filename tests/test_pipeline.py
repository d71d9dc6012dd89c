"""The stage interface, the validator, and the library facade on the embedded Redis."""

from __future__ import annotations

import uuid

import pytest

from agentmem import Hygiene, load_policy
from agentmem.config import Settings
from agentmem.policy import policy_from_dict
from agentmem.stages import Draft, Stage, register_stage, unregister_stage
from agentmem.validate import OutgoingInvalid, validate_outgoing

HISTORY = [
    {"role": "system", "content": "Be helpful."},
    {"role": "user", "content": "Find the invoice. It is urgent."},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}},
        {"id": "c2", "type": "function", "function": {"name": "fetch", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "Invoice 17 is unpaid."},
    {"role": "tool", "tool_call_id": "c2", "content": "The weather is sunny."},
    {"role": "assistant", "content": "Invoice 17 is unpaid."},
    {"role": "user", "content": "Pay it."},
]


class DropToolUnits(Stage):
    """A real stage for the tests: drops every tool-call unit (never the last user turn)."""

    name = "test-drop-tool-units"

    async def apply(self, draft, context):
        for unit in draft.units():
            if unit[0].message.get("tool_calls"):
                draft.drop_unit(unit)
                context.run.decisions.append(
                    _decision(unit[0].index, "tool exchange not needed"))


class SplitUnit(Stage):
    """A buggy stage: drops one tool reply but keeps its call. The validator must catch it."""

    name = "test-split-unit"

    async def apply(self, draft, context):
        draft.messages = [m for m in draft.messages if m.index != 4]


class Explodes(Stage):
    name = "test-explodes"

    async def apply(self, draft, context):
        raise RuntimeError("boom")


@pytest.fixture(autouse=True, scope="module")
def _test_stages():
    """Registered for this module's tests only: the registry is left as it was found."""
    for stage in (DropToolUnits, SplitUnit, Explodes):
        register_stage(stage)
    yield
    for stage in (DropToolUnits, SplitUnit, Explodes):
        unregister_stage(stage.name)


def _decision(index, reason):
    from agentmem.report import Decision

    return Decision(action="drop_message", reason=reason, message_index=index)


def _policy(*stages, **fields):
    return policy_from_dict({"name": f"test-{'-'.join(stages) or 'none'}", "stages": list(stages),
                             "embed": False, **fields})


@pytest.fixture(scope="module")
def hygiene(data_dir):
    engine = Hygiene("default", settings=Settings(data_dir=data_dir))
    yield engine
    engine.connector.close()


async def test_stage_drops_whole_units_and_reports(hygiene):
    result = await hygiene.apply(HISTORY, model="gpt-4o", session_id=f"p-{uuid.uuid4().hex}",
                                 policy=_policy("test-drop-tool-units"))
    assert [m["role"] for m in result.messages] == ["system", "user", "assistant", "user"]
    assert result.messages[0] is HISTORY[0]  # kept messages are the client's own objects
    run = result.report.stages[0]
    assert run.stage == "test-drop-tool-units" and run.decisions[0].message_index == 2
    assert result.report.tokens_after < result.report.tokens_before
    assert result.report.messages_before == 7 and result.report.messages_after == 4


async def test_validator_rejects_split_unit_and_request_passes_unchanged(hygiene):
    result = await hygiene.apply(HISTORY, session_id=f"p-{uuid.uuid4().hex}",
                                 policy=_policy("test-split-unit"))
    assert result.messages is HISTORY
    assert any("tool-call unit" in w for w in result.report.warnings)


async def test_failing_stage_falls_back_or_errors_by_policy(hygiene):
    result = await hygiene.apply(HISTORY, session_id=f"p-{uuid.uuid4().hex}",
                                 policy=_policy("test-drop-tool-units", "test-explodes"))
    assert result.messages is HISTORY and "stage test-explodes failed" in result.report.warnings[0]
    from agentmem.errors import HygieneUnavailable

    with pytest.raises(HygieneUnavailable):
        await hygiene.apply(HISTORY, session_id=f"p-{uuid.uuid4().hex}",
                            policy=_policy("test-explodes", on_fault="error"))


def test_validator_rules():
    def draft(indices, replace=None):
        d = Draft.of(HISTORY, None)
        d.messages = [m for m in d.messages if m.index in indices]
        for index, message in (replace or {}).items():
            d.replace_message(index, message)
        return d

    validate_outgoing(HISTORY, draft([0, 1, 5, 6]))
    validate_outgoing(HISTORY, draft(range(7), {3: {**HISTORY[3], "content": "Invoice 17."}}))
    cases = {
        "order": Draft([draft(range(7)).messages[i] for i in (0, 1, 6, 5)], None),
        "split": draft([0, 1, 2, 3, 5, 6]),
        "system": draft([1, 5, 6]),
        "last user": draft([0, 1, 5]),
        "edited user": draft(range(7), {6: {"role": "user", "content": "Pay half."}}),
        "role change": draft(range(7), {5: {"role": "user", "content": "x"}}),
        "empty": draft([]),
        "opens with the assistant": draft([0, 5, 6]),
    }
    for bad in cases.values():
        with pytest.raises(OutgoingInvalid):
            validate_outgoing(HISTORY, bad)


async def test_off_policy_is_identity(hygiene):
    body_tools = [{"type": "function", "function": {"name": "search"}}]
    result = await hygiene.apply(HISTORY, tools=body_tools, session_id=f"p-{uuid.uuid4().hex}",
                                 policy="off", temperature=0.1)
    assert result.messages is HISTORY and result.tools is body_tools
    assert result.request["temperature"] == 0.1


async def test_library_acompletion_and_completion(hygiene, upstream, received):
    session = f"lib-{uuid.uuid4().hex}"
    messages = [{"role": "user", "content": "library call"}]
    response = await hygiene.acompletion("openai/echo", messages, session_id=session,
                                         api_base=f"{upstream.url}/v1", api_key="sk-test")
    assert response.choices[0].message.content == "echo: library call"
    assert response._hidden_params["agentmem"]["X-Agentmem-Session"] == session
    stream = await hygiene.acompletion("openai/echo", messages + [
        {"role": "assistant", "content": "echo: library call"}, {"role": "user", "content": "and streamed"}],
        session_id=session, stream=True, api_base=f"{upstream.url}/v1", api_key="sk-test")
    assert stream._hidden_params["agentmem"]["X-Agentmem-Session"] == session
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == "echo: and streamed"
    turns = await hygiene.store().active_turns(hygiene_handle(session))
    assert [t.message["content"] for t in turns] == [
        "library call", "echo: library call", "and streamed", "echo: and streamed"]


async def test_an_async_stream_left_early_frees_its_session_when_closed(hygiene, upstream):
    """``async with`` the stream (or ``aclose()``) finishes its call as partial at once; the
    next call on the session need not wait for the garbage collector."""
    import asyncio

    session, route = f"lib-left-{uuid.uuid4().hex}", {"api_base": f"{upstream.url}/v1", "api_key": "sk-test"}
    stream = await hygiene.acompletion("openai/echo", [{"role": "user", "content": "one two three"}],
                                       session_id=session, stream=True, **route)
    async with stream:
        async for _ in stream:
            break
    reply = await asyncio.wait_for(hygiene.acompletion(
        "openai/echo", [{"role": "user", "content": "again"}], session_id=session, **route), 20)
    assert reply.choices[0].message.content == "echo: again"
    await hygiene.drain()
    turns = await hygiene.store().all_turns(hygiene_handle(session))
    assert [(t.role, t.partial) for t in turns][:2] == [("user", False), ("assistant", True)]


def test_sync_completion(data_dir, upstream):
    engine = Hygiene("default", settings=Settings(data_dir=data_dir))
    try:
        session = f"sync-{uuid.uuid4().hex}"
        reply = engine.completion("openai/echo", [{"role": "user", "content": "sync"}], session_id=session,
                                  api_base=f"{upstream.url}/v1", api_key="sk-test")
        assert reply.choices[0].message.content == "echo: sync"
        chunks = list(engine.completion("openai/echo", [{"role": "user", "content": "sync stream"}],
                                        session_id=session + "-s", stream=True,
                                        api_base=f"{upstream.url}/v1", api_key="sk-test"))
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "echo: sync stream"
    finally:
        engine.close()


def test_a_sync_stream_left_early_is_stored_partial_and_frees_its_session(data_dir, upstream):
    """Closing (or dropping) a sync stream after its first chunk finishes its call on the
    engine's loop: the reply is stored partial with the reason, and the session takes the next
    call at once. It used to be torn down on a thread with no loop and leave no trace."""
    engine = Hygiene("default", settings=Settings(data_dir=data_dir))
    route = {"api_base": f"{upstream.url}/v1", "api_key": "sk-test"}
    session = f"sync-left-{uuid.uuid4().hex}"
    try:
        stream = engine.completion("openai/echo", [{"role": "user", "content": "one two three four"}],
                                   session_id=session, stream=True, **route)
        assert stream._hidden_params["agentmem"]["X-Agentmem-Session"] == session
        next(iter(stream))
        stream.close()
        reply = engine.completion("openai/echo", [{"role": "user", "content": "again"}],
                                  session_id=session, **route, timeout=20)
        assert reply.choices[0].message.content == "echo: again"

        async def stored():
            store, handle = engine.store(), hygiene_handle(session)
            return await store.all_turns(handle), await store.reports(handle)

        turns, reports = engine.run_sync(stored())
        assert [(t.role, t.partial) for t in turns[:2]] == [("user", False), ("assistant", True)]
        assert turns[1].error == "the client disconnected before the stream ended"
        assert sorted(r.status for r in reports) == ["ok", "partial"]
    finally:
        engine.close()


def hygiene_handle(session):
    from agentmem.store import SessionHandle

    return SessionHandle("default", session)


def test_policy_presets_and_errors(tmp_path):
    assert load_policy("off").name == "off" and load_policy("off").is_passthrough
    assert load_policy("default").embed is True
    from agentmem.errors import PolicyError

    bad = {"stages": ["prune-everything"], "ttl_seconds": 5, "colour": "red"}
    path = tmp_path / "bad.yaml"
    path.write_text("name: bad\nstages: [prune-everything]\nttl_seconds: 5\ncolour: red\n")
    with pytest.raises(PolicyError) as caught:
        load_policy(path)
    message = caught.value.message
    assert "stages" in message and "prune-everything" in message
    assert "ttl_seconds" in message and "colour" in message
    with pytest.raises(PolicyError, match="unknown policy 'nope'"):
        load_policy("nope")
    with pytest.raises(PolicyError) as from_dict:  # the same fields fail from a dict
        policy_from_dict({"name": "bad", **bad})
    assert all(field in from_dict.value.message for field in ("stages", "ttl_seconds", "colour"))
    with pytest.raises(PolicyError, match="on_fault"):
        policy_from_dict({"name": "x", "on_fault": "explode"})


async def test_litellm_callbacks_still_hear_every_call(hygiene, upstream):
    """agentmem skips litellm's success logging only while nobody listens: a CustomLogger a
    user registers gets the success event (with litellm's standard payload) as before."""
    import asyncio

    import litellm
    from litellm.integrations.custom_logger import CustomLogger

    from agentmem.upstream import litellm_logs_anything

    class Heard(CustomLogger):
        def __init__(self):
            super().__init__()
            self.successes: list[dict] = []

        async def async_log_success_event(self, kwargs, response_obj, start_time, end_time):
            self.successes.append(kwargs)

    assert not litellm_logs_anything()
    heard = Heard()
    litellm.callbacks = [heard]
    try:
        assert litellm_logs_anything()
        await hygiene.acompletion("openai/echo", [{"role": "user", "content": "heard?"}],
                                  session_id=f"cb-{uuid.uuid4().hex}", policy="off",
                                  api_base=f"{upstream.url}/v1", api_key="sk-test")
        for _ in range(100):  # litellm logs in a task of its own
            if heard.successes:
                break
            await asyncio.sleep(0.02)
        assert len(heard.successes) == 1
        assert heard.successes[0]["standard_logging_object"]["model"] == "echo"
    finally:
        _forget_litellm_callbacks()


async def test_the_proxy_upstream_skips_litellm_pricing_only_while_nobody_can_read_it(upstream):
    """litellm prices each response into ``_hidden_params``. The proxy's upstream
    (``prices_responses=False``) skips that while no litellm callback is registered; the
    library's keeps it, and a registered callback gets the price back."""
    import litellm
    from litellm.integrations.custom_logger import CustomLogger

    from agentmem.upstream import LitellmUpstream

    request = {"model": "openai/gpt-4o-mini", "api_base": f"{upstream.url}/v1",
               "api_key": "sk-test", "messages": [{"role": "user", "content": "price me"}]}
    library = await LitellmUpstream().complete(dict(request))
    assert library._hidden_params["response_cost"] > 0
    proxy = LitellmUpstream(prices_responses=False)
    assert (await proxy.complete(dict(request)))._hidden_params["response_cost"] is None
    litellm.callbacks = [CustomLogger()]
    try:
        assert (await proxy.complete(dict(request)))._hidden_params["response_cost"] > 0
    finally:
        _forget_litellm_callbacks()
    assert (await LitellmUpstream().complete(dict(request)))._hidden_params["response_cost"] > 0


def _forget_litellm_callbacks() -> None:
    """litellm copies a registered callback into its internal lists on the next call; a test
    that registered one leaves none behind anywhere."""
    import litellm

    from agentmem.upstream import _CALLBACK_LISTS

    for name in _CALLBACK_LISTS:
        setattr(litellm, name, [])
