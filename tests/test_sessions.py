"""Ingest, history matching, stateful mode, concurrency, tenants and the sessions API."""

from __future__ import annotations

import concurrent.futures
import contextlib

import httpx
import numpy as np
import openai
import pytest

from agentmem.store.keys import SessionKeys
from agentmem.text import sentences


def _ask(client, session_id, messages, **headers):
    return client.chat.completions.create(model="echo", messages=messages,
                                          extra_headers={"X-Session-Id": session_id, **headers})


def _reply(completion):
    return completion.choices[0].message.model_dump(exclude_none=True)


def test_resent_history_is_stored_once(client, http, session_id):
    history = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "First question."}]
    for turn in range(4):
        history.append(_reply(_ask(client, session_id, history)))
        history.append({"role": "user", "content": f"Follow-up number {turn}."})
    _ask(client, session_id, history)
    session = http.get(f"/v1/sessions/{session_id}").json()
    assert session["turn_count"] == len(history) + 1 == session["stored_turn_count"]
    assert [t["message"] for t in session["turns"][:-1]] == history
    assert [t["position"] for t in session["turns"]] == list(range(len(history) + 1))
    assert session["calls"] == 5


def test_sentence_embeddings_are_cached_at_ingest(client, proxy, session_id):
    text = "Paris is the capital of France. It has many museums. The Louvre is the largest."
    _ask(client, session_id, [{"role": "user", "content": text}])
    store_client = proxy.server.config.app.state.hygiene.connector.client()
    import asyncio

    async def read():
        try:  # embeddings are written in the background, right after the reply
            for _ in range(200):
                raw = await store_client.hget(SessionKeys("default", session_id).embeddings, "0")
                if raw:
                    return raw
                await asyncio.sleep(0.05)
        finally:
            await store_client.aclose()

    raw = asyncio.run(read())
    matrix = np.frombuffer(raw, dtype=np.float16).reshape(-1, 384).astype(np.float32)
    assert matrix.shape == (len(sentences(text)), 384) == (3, 384)
    assert np.allclose(np.linalg.norm(matrix, axis=1), 1.0, atol=1e-2)
    from agentmem.models.embedder import default_embedder

    fresh = default_embedder().encode(sentences(text))  # row i is the embedding of sentence i
    assert np.allclose(np.sum(matrix * fresh, axis=1), 1.0, atol=1e-2)
    assert not np.allclose(matrix[0], matrix[1])


async def test_vectors_stored_by_an_older_cut_are_not_read_and_go_with_the_session(data_dir):
    """Stored vectors are one per row of the cut that made them, matched to today's rows by
    position; a version that cut messages differently (a tool's JSON answer by sentences,
    before records) left vectors under its own key, which is never read and is deleted with
    the session."""
    import asyncio
    import uuid

    from agentmem import Hygiene
    from agentmem.config import Settings
    from agentmem.models.embedder import to_bytes
    from agentmem.store.sessions import SessionHandle

    engine = Hygiene("default", settings=Settings(data_dir=data_dir))
    session = f"cut-{uuid.uuid4().hex}"
    history = [{"role": "user", "content": "Where is my parcel? It left Paris on Monday."}]
    async with engine.call({"model": "echo", "messages": history}, session_id=session) as call:
        await call.finish({"role": "assistant", "content": "In Lyon."})
    store, handle = engine.store(), SessionHandle("default", session)
    try:
        for _ in range(200):  # written in the background, right after the reply
            stored = await store.embeddings(handle, [0, 1])
            if len(stored) == 2:
                break
            await asyncio.sleep(0.05)
        assert len(stored) == 2
        older = f"agentmem:{{default:{session}}}:emb"  # version 1's key
        assert older in handle.keys.stale_embeddings and older != handle.keys.embeddings
        garbage = to_bytes(np.ones((2, 384), np.float32) / np.sqrt(384))
        await store.redis.hset(older, mapping={"0": garbage, "1": garbage})
        assert await store.embeddings(handle, [0, 1]) == stored  # today's, never the older cut's
        assert await store.delete(handle)
        assert not await store.redis.exists(older, handle.keys.embeddings)
    finally:
        await engine.aclose()


def test_diverging_history_keeps_superseded_turns(client, http, session_id):
    base = [{"role": "user", "content": "Plan a trip to Rome."}]
    first = _reply(_ask(client, session_id, base))
    _ask(client, session_id, base + [first, {"role": "user", "content": "Make it 3 days."}])
    # The client edits its second question (a regenerate/edit): the old branch is kept, inactive.
    _ask(client, session_id, base + [first, {"role": "user", "content": "Make it 5 days."}])
    session = http.get(f"/v1/sessions/{session_id}", params={"include_superseded": True}).json()
    active = [t["message"]["content"] for t in session["turns"] if t["active"]]
    inactive = [t["message"]["content"] for t in session["turns"] if not t["active"]]
    assert active == ["Plan a trip to Rome.", first["content"], "Make it 5 days.", "echo: Make it 5 days."]
    assert inactive == ["Make it 3 days.", "echo: Make it 3 days."]
    report = http.get(f"/v1/sessions/{session_id}/reports").json()["data"][-1]
    assert report["ingest"]["diverged_at"] == 2 and report["ingest"]["superseded"] == 2


def test_stateful_mode_rebuilds_history(client, received, session_id):
    _ask(client, session_id, [{"role": "system", "content": "S."}, {"role": "user", "content": "One."}])
    _ask(client, session_id, [{"role": "user", "content": "Two."}], **{"X-Agentmem-Stateful": "true"})
    sent = received.requests()[-1]["messages"]
    assert [m["content"] for m in sent] == ["S.", "One.", "echo: One.", "Two."]


def test_stateful_tool_reply_answers_a_stored_call(client, http, session_id):
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    first = client.chat.completions.create(
        model="echo", tools=tools, messages=[{"role": "user", "content": "find [[tool:lookup {}]]"}],
        extra_headers={"X-Session-Id": session_id})
    call_id = first.choices[0].message.tool_calls[0].id
    follow = client.chat.completions.create(
        model="echo", tools=tools,
        messages=[{"role": "tool", "tool_call_id": call_id, "content": "found it"}],
        extra_headers={"X-Session-Id": session_id, "X-Agentmem-Stateful": "1"})
    assert follow.choices[0].message.content == "tool results: found it"
    with pytest.raises(openai.BadRequestError, match="does not answer a tool call"):
        client.chat.completions.create(
            model="echo", messages=[{"role": "tool", "tool_call_id": "call_unknown", "content": "x"}],
            extra_headers={"X-Session-Id": session_id, "X-Agentmem-Stateful": "1"})
    assert http.get(f"/v1/sessions/{session_id}").json()["turn_count"] == 4


def test_concurrent_calls_on_one_session_are_serialised(client, http, session_id):
    """Stateful clients firing at once: every turn lands exactly once, none is lost."""
    _ask(client, session_id, [{"role": "user", "content": "start"}])

    def send(i):
        return _ask(client, session_id, [{"role": "user", "content": f"parallel message {i} [[slow:30]]"}],
                    **{"X-Agentmem-Stateful": "true"})

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(send, range(8)))
    turns = http.get(f"/v1/sessions/{session_id}").json()["turns"]
    users = [t["message"]["content"] for t in turns if t["role"] == "user"]
    assert len(turns) == 18
    assert sorted(users[1:]) == sorted(f"parallel message {i} [[slow:30]]" for i in range(8))
    roles = [t["role"] for t in turns]
    assert roles == ["user", "assistant"] * 9  # each reply directly follows its own question
    for question, answer in zip(turns[::2], turns[1::2]):
        assert answer["message"]["content"] == "echo: " + question["message"]["content"].replace(
            " [[slow:30]]", "")


def test_sessions_api_list_reports_delete(client, http, session_id):
    _ask(client, session_id, [{"role": "user", "content": "hello"}])
    listed = http.get("/v1/sessions", params={"limit": 1000}).json()["data"]
    assert session_id in [s["id"] for s in listed]
    reports = http.get(f"/v1/sessions/{session_id}/reports").json()["data"]
    assert len(reports) == 1 and reports[0]["status"] == "ok" and reports[0]["tokens_before"] > 0
    one = http.get(f"/v1/sessions/{session_id}/reports/{reports[0]['id']}").json()
    assert one == reports[0]
    assert http.delete(f"/v1/sessions/{session_id}").json()["deleted"] is True
    assert http.get(f"/v1/sessions/{session_id}").status_code == 404
    listed = http.get("/v1/sessions", params={"limit": 1000}).json()["data"]
    assert session_id not in [s["id"] for s in listed]


def test_tenants_are_isolated(tenant_proxy, session_id):
    url = f"{tenant_proxy.url}/v1"
    alpha = openai.OpenAI(base_url=url, api_key="key-alpha", max_retries=0)
    beta = openai.OpenAI(base_url=url, api_key="key-beta", max_retries=0)
    alpha.chat.completions.create(model="echo", messages=[{"role": "user", "content": "secret"}],
                                  extra_headers={"X-Session-Id": session_id})
    beta.chat.completions.create(model="echo", messages=[{"role": "user", "content": "other"}],
                                 extra_headers={"X-Session-Id": session_id})
    as_alpha = {"Authorization": "Bearer key-alpha"}
    as_beta = {"Authorization": "Bearer key-beta"}
    a = httpx.get(f"{url}/sessions/{session_id}", headers=as_alpha).json()
    b = httpx.get(f"{url}/sessions/{session_id}", headers=as_beta).json()
    assert a["turns"][0]["message"]["content"] == "secret"
    assert b["turns"][0]["message"]["content"] == "other"
    httpx.delete(f"{url}/sessions/{session_id}", headers=as_beta)
    assert httpx.get(f"{url}/sessions/{session_id}", headers=as_beta).status_code == 404
    assert httpx.get(f"{url}/sessions/{session_id}", headers=as_alpha).status_code == 200
    beta_only = f"{session_id}-beta"
    beta.chat.completions.create(model="echo", messages=[{"role": "user", "content": "x"}],
                                 extra_headers={"X-Session-Id": beta_only})
    assert beta_only not in [s["id"] for s in httpx.get(f"{url}/sessions", headers=as_alpha,
                                                        params={"limit": 1000}).json()["data"]]
    for method in ("get", "delete"):
        assert getattr(httpx, method)(f"{url}/sessions/{beta_only}", headers=as_alpha).status_code == 404
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=url, api_key="wrong", max_retries=0).chat.completions.create(
            model="echo", messages=[{"role": "user", "content": "x"}])
    assert httpx.get(f"{url}/sessions").status_code == 401


async def test_the_lock_reads_the_stored_prefix_in_the_same_round_trip(data_dir):
    """``locked`` pipelines the prefix probe after its SET; ``match_prefix`` uses it once, for
    that holder only, and gives what its own reads give."""
    import uuid

    from agentmem import Hygiene
    from agentmem.config import Settings
    from agentmem.ingest import chain_hashes
    from agentmem.store.sessions import SessionHandle

    engine = Hygiene("off", settings=Settings(data_dir=data_dir))
    session = f"probe-{uuid.uuid4().hex}"
    history = [{"role": "user", "content": "Where is my parcel?"}]
    async with engine.call({"model": "echo", "messages": history}, session_id=session) as call:
        await call.finish({"role": "assistant", "content": "In Lyon."})
    chains = chain_hashes([*history, {"role": "assistant", "content": "In Lyon."}])
    store, handle = engine.store(), SessionHandle("default", session)
    try:
        async with store.locked(handle, timeout=5, wait=1) as lock:
            assert store._take_probe(handle, b"another holder's token") is None  # never stale
            async with store.locked(SessionHandle("default", session + "-b"), timeout=5, wait=1):
                pass
        async with store.locked(handle, timeout=5, wait=1) as lock:
            assert handle.keys.lock in store._probes
            probed = await store.match_prefix(handle, chains, lock)
            assert handle.keys.lock not in store._probes  # used once
            read = await store.match_prefix(handle, chains, lock)  # its own round trip now
        assert probed == read and probed.matched == probed.stored == 2
        assert handle.keys.lock not in store._probes
    finally:
        await engine.aclose()
        engine.connector.close()


async def test_after_reply_work_is_counted_until_it_is_done(data_dir):
    """``background_pending`` (``/healthz``'s ``background``) counts the after-reply jobs a
    call left, so an operator or the scaling bench can tell when an import has settled."""
    import uuid

    from agentmem import Hygiene
    from agentmem.config import Settings

    engine = Hygiene("default", settings=Settings(data_dir=data_dir))
    history = [{"role": "user", "content": f"Fact {i}: the kettle is blue and ships to Lyon."}
               for i in range(3)]
    try:
        assert engine.background_pending == 0
        async with engine.call({"model": "echo", "messages": history},
                               session_id=f"bg-{uuid.uuid4().hex}") as call:
            await call.finish({"role": "assistant", "content": "Noted."})
        assert engine.background_pending >= 1  # embeddings and detection, after the reply
        await engine.drain()
        assert engine.background_pending == 0
    finally:
        await engine.aclose()
        engine.connector.close()


def test_a_tenant_name_cannot_reach_into_another_tenants_keys(monkeypatch, tmp_path):
    """A session's Redis keys join tenant and session with ':', so tenant "acme:payroll" with
    session "salaries" and tenant "acme" with session "payroll:salaries" named the same keys:
    one tenant could read, continue and delete the other's session. A tenant name may not hold
    ':' (or '=', which ends a key in AGENTMEM_API_KEYS): refused when the settings load, and by
    the library; a base64 key's '=' padding is still part of the key."""
    from agentmem import Hygiene
    from agentmem.config import Settings
    from agentmem.errors import InvalidRequest, PolicyError

    with pytest.raises(PolicyError, match="acme:payroll"):
        Settings.load(api_keys={"k1": "acme", "k2": "acme:payroll"}, data_dir=tmp_path)
    with pytest.raises(PolicyError, match="team a"):
        Settings.load(api_keys={"k1": "team a"}, data_dir=tmp_path)
    monkeypatch.setenv("AGENTMEM_API_KEYS", "abc==,c2stMQ===team-1, plain=acme")
    assert Settings.load(data_dir=tmp_path).api_keys == {
        "abc==": "default", "c2stMQ==": "team-1", "plain": "acme"}
    with pytest.raises(ValueError, match="no ':'"):
        Hygiene("off", data_dir=str(tmp_path), tenant="acme:payroll")
    engine = Hygiene("off", data_dir=str(tmp_path))
    try:
        with pytest.raises(InvalidRequest, match="no ':'"):
            engine.run_sync(engine.prepare({"model": "echo", "messages": [
                {"role": "user", "content": "hi"}]}, tenant="acme:payroll", session_id="s"))
    finally:
        engine.close()


@contextlib.asynccontextmanager
async def _one_stored_session(data_dir):
    """A session with one stored call: its handle and the engine's store."""
    import uuid

    from agentmem import Hygiene, Policy
    from agentmem.config import Settings
    from agentmem.store import SessionHandle

    engine = Hygiene(settings=Settings(data_dir=data_dir))
    plain = Policy(name="plain", stages=[], embed=False)
    handle = SessionHandle("default", f"del-{uuid.uuid4().hex[:8]}")
    try:
        await engine.apply([{"role": "user", "content": "Keep me for a moment."}],
                           session_id=handle.session_id, policy=plain)
        yield handle, engine.store()
    finally:
        await engine.aclose()
        engine.connector.close()


async def test_embeddings_that_land_after_a_delete_do_not_bring_the_session_back(data_dir):
    """After-reply work can finish after the session was deleted (a large paste's embeddings):
    its write must not recreate a key of a session that no longer exists."""
    async with _one_stored_session(data_dir) as (handle, store):
        await store.add_embeddings(handle, {0: b"\x00" * 8}, ttl=600)  # the session is there
        assert await store.redis.hlen(handle.keys.embeddings) == 1
        assert await store.delete(handle)
        await store.add_embeddings(handle, {0: b"\x00" * 8}, ttl=600)  # landing after the delete
        assert not await store.redis.exists(*handle.keys.data_keys())


async def test_quarantine_records_found_after_a_delete_do_not_bring_the_session_back(data_dir):
    """The after-reply detectors can finish after the session was deleted: their records must
    not recreate its quarantine hash. A new record never overwrites one already there (a
    released record stays released); a grown claim group does."""
    from agentmem.quarantine import QuarantineRecord, QuarantineStore

    def record(reason: str) -> QuarantineRecord:
        return QuarantineRecord(kind="clash", detector="rules", turn_id=0, position=0, span=(0, 9),
                                text="Keep me.", source="user", reason=reason)

    async with _one_stored_session(data_dir) as (handle, store):
        records = QuarantineStore(store)
        await records.add(handle, [record("first")], ttl=600, after_reply=True)
        await records.add(handle, [record("second")], ttl=600, after_reply=True)
        assert [r.reason for r in await records.all(handle)] == ["first"]  # kept as it was
        await records.save(handle, [record("grown")], ttl=600, after_reply=True)
        assert [r.reason for r in await records.all(handle)] == ["grown"]
        assert 0 < await store.redis.ttl(handle.keys.quarantine) <= 600
        assert await store.delete(handle)
        await records.add(handle, [record("late")], ttl=600, after_reply=True)
        await records.save(handle, [record("late")], ttl=600, after_reply=True)
        assert not await store.redis.exists(*handle.keys.data_keys())

