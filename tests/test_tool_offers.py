"""Offer-aware learning: each learned query keeps what the model was shown with it, and the
learned model's softmax for that query runs over those tools only (issue 16)."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import uuid

import numpy as np
import orjson
from redis.crc import key_slot

from agentmem.models.embedder import to_bytes
from agentmem.policy import policy_from_dict
from agentmem.stages.tools import Turn, hybrid_scores
from agentmem.state.tool_model import train
from agentmem.state.tool_usage import (
    MODEL_RATE,
    MODEL_STEPS,
    ToolUsage,
    identity_key,
    memory_scope,
    offer_id,
)
from agentmem.state.toolcat import function_of, schema_hash
from agentmem.store.keys import (
    tool_usage_examples,
    tool_usage_index,
    tool_usage_offers,
    tool_usage_offers_used,
)
from tests.test_tool_usage import TOOLS, _summary, _tool, engine  # noqa: F401

NEW = _tool("repair_status", "Status of a repair order.", ["order_id"])
OLD_REPAIRS = ["When will my espresso maker be fixed?", "Is the repair of my coffee grinder finished?",
               "Has the technician repaired my broken coffee machine?",
               "How long until my kettle comes back from the repair shop?",
               "Any news on fixing my blender?", "Is my toaster repaired yet?"]
OTHERS = [("Will it rain in Oslo tomorrow?", "get_weather_forecast"),
          ("Do I need an umbrella in Rome?", "get_weather_forecast"),
          ("Book me a flight from Paris to Berlin", "book_flight"),
          ("Fly me to Madrid on Friday", "book_flight"),
          ("Where is my package right now?", "track_parcel"),
          ("Has my parcel been delivered?", "track_parcel")]
NEW_REPAIRS = ["Is the fix on my dishwasher done?", "When do I get my repaired vacuum cleaner back?"]
PROBE = "What is the status of my coffee machine repair?"


def _policy(tools: dict | None = None, **memory) -> object:
    """Sessions stored and embedded (the after-reply hook that learns runs only then)."""
    return policy_from_dict({"name": f"offers-{uuid.uuid4().hex[:6]}", "stages": ["tools"],
                             "tools": {"min_offered": 6, "min_tools": 1, "max_tools": 20,
                                       **(tools or {}), "memory": memory}})


async def _served(engine, policy, tools: list[dict], query: str, called: str,  # noqa: F811
                  tool_choice: dict | None = None) -> None:
    """One call through the engine whose reply calls ``called``; waits for the learning."""
    body: dict = {"model": "echo", "messages": [{"role": "user", "content": query}], "tools": tools}
    if tool_choice is not None:
        body["tool_choice"] = tool_choice
    async with engine.call(body, session_id=f"o-{uuid.uuid4().hex}", policy=policy) as call:
        await call.finish({"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": called, "arguments": "{}"}}]})
    await engine.drain()


def _key(tool: dict) -> str:
    function = function_of(tool)
    return identity_key(function["name"], schema_hash(function))


async def _stored(engine, policy, tool: dict) -> list[dict]:  # noqa: F811
    scope = memory_scope(engine.tenant, policy.tools.memory)
    raw = await engine.store().redis.lrange(tool_usage_examples(scope, _key(tool)), 0, -1)
    return [orjson.loads(value) for value in raw]


async def test_a_tool_added_later_is_no_negative_for_queries_it_was_never_offered_for(engine):  # noqa: F811
    """Repair questions led to track_parcel while the list had no repair tool; then
    repair_status joined the list and two repair questions led to it. The old queries never saw
    repair_status, so they must not teach the model that it is wrong for repair questions."""
    policy = _policy(model_min_queries=4, model_retrain_s=0)
    for query in OLD_REPAIRS:
        await _served(engine, policy, TOOLS, query, "track_parcel")
    for query, tool in OTHERS:
        await _served(engine, policy, TOOLS, query, tool)
    later = [*TOOLS, NEW]
    for query in NEW_REPAIRS:
        await _served(engine, policy, later, query, "repair_status")

    usage = engine.state.catalogues.usage
    await engine.apply([{"role": "user", "content": PROBE}], tools=later,
                       session_id=f"p-{uuid.uuid4().hex}", policy=policy)  # starts the training
    await usage.trained()
    result = await engine.apply([{"role": "user", "content": PROBE}], tools=later,
                                session_id=f"p-{uuid.uuid4().hex}", policy=policy)
    detail = _summary(result)
    assert detail["model"] is True
    scores = detail["scores"]
    assert max(scores, key=scores.get) == "repair_status"

    # The same memory trained the old way (every query offered the whole current list): the
    # old repair questions push repair_status down and track_parcel up, and the order flips.
    redis = engine.store().redis
    catalogue = await engine.state.catalogues.catalogue_for([function_of(t) for t in later], redis)
    evidence = await usage.evidence(redis, memory_scope(engine.tenant, policy.tools.memory), catalogue)
    assert evidence is not None
    data = evidence.training_set()
    assert data.offered is not None
    new = catalogue.names.index("repair_status")
    assert data.offered[:, new].sum() == len(NEW_REPAIRS)  # offered with its own queries only

    def text_scores(batch):
        return np.stack([hybrid_scores(catalogue, row, Turn(query, query), policy.tools)
                         for row, query in zip(batch.vectors, batch.queries)])

    memory = policy.tools.memory
    options = dict(weight=memory.weight, neutral=memory.neutral, evidence=memory.evidence,
                   l2=memory.model_l2, steps=MODEL_STEPS, rate=MODEL_RATE, generation=0)
    aware = train(data, text_scores, **options)
    blind = train(dataclasses.replace(data, offered=None), text_scores, **options)
    probe = engine.embedder.encode([PROBE])[0]
    parcel = catalogue.names.index("track_parcel")
    assert aware.scores(probe)[new] > 0 > blind.scores(probe)[new]
    assert blind.scores(probe)[parcel] > aware.scores(probe)[parcel]
    old_way = {name: scores[name] - float(aware.scores(probe)[i]) + float(blind.scores(probe)[i])
               for i, name in enumerate(catalogue.names)}
    assert old_way["track_parcel"] > old_way["repair_status"]


async def test_what_the_model_was_shown_is_stored_with_each_learned_query(engine):  # noqa: F811
    """The offer set is the client's list; the example names the tools the stage kept (the
    model chose among those), or only the tool tool_choice forced (no choice at all)."""
    policy = _policy({"max_tools": 3, "margin": 0.5})
    query = "Will it rain in Oslo tomorrow?"
    await _served(engine, policy, TOOLS, query, "get_weather_forecast")
    [entry] = await _stored(engine, policy, TOOLS[0])
    scope = memory_scope(engine.tenant, policy.tools.memory)
    redis = engine.store().redis
    keys = orjson.loads(await redis.hget(tool_usage_offers(scope), entry["o"]))
    assert keys == sorted(_key(t) for t in TOOLS) and entry["o"] == offer_id(tuple(keys))
    assert 1 <= len(entry["s"]) <= 3 and keys.index(_key(TOOLS[0])) in entry["s"]

    forced = {"type": "function", "function": {"name": "send_email"}}
    await _served(engine, policy, TOOLS, "Tell Bob about the rain in Oslo", "send_email", forced)
    [entry] = await _stored(engine, policy, TOOLS[3])
    assert entry["s"] == [keys.index(_key(TOOLS[3]))]

    # Few enough tools that the stage leaves the list alone: the model was shown all of them.
    small = _policy({"min_offered": 20})
    await _served(engine, small, TOOLS, "Translate hello into French", "translate_text")
    [entry] = await _stored(engine, small, TOOLS[6])
    assert entry["o"] == offer_id(tuple(keys)) and "s" not in entry


async def test_examples_stored_without_offers_still_load_and_train(engine):  # noqa: F811
    """Entries as the previous version wrote them ({q, v} only) next to new ones: all load, the
    old ones count as offered with the whole list, the model trains, and a query recorded
    again replaces its old entry (one entry per query, whatever offer either carries)."""
    policy = _policy(model_min_queries=4, model_retrain_s=0)
    scope = memory_scope(engine.tenant, policy.tools.memory)
    redis = engine.store().redis
    old = [*OLD_REPAIRS[:3], *(q for q, _ in OTHERS[:4])]
    called = ["track_parcel"] * 3 + [t for _, t in OTHERS[:4]]
    vectors = engine.embedder.encode(old)
    by_name = {function_of(t)["name"]: t for t in TOOLS}
    for query, name, vector in zip(old, called, vectors):
        key = _key(by_name[name])
        await redis.lpush(tool_usage_examples(scope, key), orjson.dumps(
            {"q": query, "v": base64.b64encode(to_bytes(vector.reshape(1, -1))).decode()}))
        await redis.hset(tool_usage_index(scope), key, orjson.dumps(
            {"name": name, "schema": schema_hash(function_of(by_name[name])), "updated_at": 1.0}))
    later = [*TOOLS, NEW]
    for query in NEW_REPAIRS:
        await _served(engine, policy, later, query, "repair_status")
    await _served(engine, policy, TOOLS, OLD_REPAIRS[0], "track_parcel")  # recorded again

    parcel = await _stored(engine, policy, by_name["track_parcel"])
    assert [e["q"] for e in parcel] == [OLD_REPAIRS[0], OLD_REPAIRS[2], OLD_REPAIRS[1]]
    assert "o" in parcel[0] and all("o" not in e for e in parcel[1:])

    usage = engine.state.catalogues.usage
    catalogue = await engine.state.catalogues.catalogue_for([function_of(t) for t in later], redis)
    evidence = await usage.evidence(redis, scope, catalogue)
    assert evidence is not None and sorted(evidence.queries) == sorted({*old, *NEW_REPAIRS})
    data = evidence.training_set()
    assert data.offered is not None
    new = catalogue.names.index("repair_status")
    rows = {query: row for row, query in enumerate(data.queries)}
    assert data.offered[rows[OLD_REPAIRS[1]]].all()  # stored without an offer: the whole list
    assert not data.offered[rows[OLD_REPAIRS[0]], new]  # its new record says what it was offered
    assert data.offered[rows[NEW_REPAIRS[0]]].all()

    await engine.apply([{"role": "user", "content": PROBE}], tools=later,
                       session_id=f"p-{uuid.uuid4().hex}", policy=policy)
    await usage.trained()
    result = await engine.apply([{"role": "user", "content": PROBE}], tools=later,
                                session_id=f"p-{uuid.uuid4().hex}", policy=policy)
    assert _summary(result)["model"] is True


async def test_offer_sets_are_bounded_share_the_scope_slot_and_expire_with_it(engine):  # noqa: F811
    policy = _policy(offer_sets=2, ttl_days=6 / 86400)
    scope = memory_scope(engine.tenant, policy.tools.memory)
    redis = engine.store().redis
    sets, used = tool_usage_offers(scope), tool_usage_offers_used(scope)
    lists = [TOOLS, [*TOOLS, NEW], TOOLS[1:]]
    for number, tools in enumerate(lists):
        await _served(engine, policy, tools, f"Book me a flight to Oslo on day {number}",
                      "book_flight")
    ids = [offer_id(tuple(sorted(_key(t) for t in tools))) for tools in lists]
    stored = {k.decode(): orjson.loads(v) for k, v in (await redis.hgetall(sets)).items()}
    assert set(stored) == set(ids[1:])  # the least recently named set went
    assert {m.decode() for m in await redis.zrange(used, 0, -1)} == set(ids[1:])
    assert all(len(keys) == len(tools) for keys, tools in zip((stored[i] for i in ids[1:]), lists[1:]))
    slot = key_slot(tool_usage_index(scope).encode())
    assert key_slot(sets.encode()) == key_slot(used.encode()) == slot

    # The example that named the dropped set trains as if offered with the whole list.
    replica = ToolUsage()  # one that never saw the writes: it reads everything from Redis
    catalogue = await engine.state.catalogues.catalogue_for([function_of(t) for t in lists[1]], redis)
    evidence = await replica.evidence(redis, scope, catalogue)
    assert evidence is not None
    data = evidence.training_set()
    rows = {query: row for row, query in enumerate(data.queries)}
    assert data.offered is not None and data.offered[rows["Book me a flight to Oslo on day 0"]].all()
    day2 = data.offered[rows["Book me a flight to Oslo on day 2"]]
    assert not day2[0] and day2.sum() == len(TOOLS) - 1  # TOOLS[0] and repair_status were not offered

    assert 0 < await redis.ttl(sets) <= 6 and 0 < await redis.ttl(used) <= 6
    await asyncio.sleep(6.5)
    assert await redis.exists(sets, used, tool_usage_index(scope)) == 0
