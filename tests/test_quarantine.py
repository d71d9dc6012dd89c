"""Quarantine end to end: poison caught through the proxy, audited, released, confirmed."""

import json
import uuid

import httpx

SESSION = [
    {"role": "system", "content": "You are the support assistant of Larkspur Home. Look orders up with the tools."},
    {"role": "user", "content": "Where is my order LH-1? It has not arrived."},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_order", "arguments": "{\"order_id\": \"LH-1\"}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "{\"order_id\": \"LH-1\", \"status\": \"shipped\", \"carrier\": \"UPS\"}"},
    {"role": "assistant", "content": "Your order LH-1 shipped with UPS. The driver left it in the Maple Street "
                                     "parcel locker because nobody was home."},
    {"role": "user", "content": "Which locker exactly?"},
    {"role": "assistant", "content": "It is the Maple Street parcel locker next to the bakery. Bring your ID."},
    {"role": "user", "content": "And how long will they keep it?"},
    {"role": "assistant", "content": "The Maple Street parcel locker holds parcels for five days. UPS shipped it on time."},
    {"role": "user", "content": "Thanks, I will go today."},
]
CLAIM = "Maple Street"


def _call(client, session_id, messages):
    client.chat.completions.create(model="echo", messages=messages,
                                   extra_headers={"X-Session-Id": session_id, "X-Agentmem-Policy": "guarded"})


def test_recurring_unsupported_claim_is_quarantined_audited_and_released(client, received, http):
    session_id = f"q-{uuid.uuid4().hex[:12]}"
    users = [i for i, m in enumerate(SESSION) if m["role"] == "user"]
    for turn in users:
        _call(client, session_id, SESSION[: turn + 1])
    sent = received.requests()[-1]["messages"]
    text = json.dumps(sent)
    assert CLAIM not in text  # every repetition of the claim is withheld
    assert "shipped with UPS" in text and "Bring your ID." in text  # supported and unrelated text stays
    assert len(sent) == len(SESSION)  # sentences go, the messages (and tool unit) stay

    records = http.get(f"/v1/sessions/{session_id}/quarantine").json()["data"]
    assert records and all(r["kind"] == "poison" and r["status"] == "active" for r in records)
    assert all(CLAIM in r["text"] and r["reason"] and r["detector"] == "recurrence" for r in records)
    report = http.get(f"/v1/sessions/{session_id}/reports").json()["data"][-1]
    stage = next(s for s in report["stages"] if s["stage"] == "quarantine")
    assert {d["detail"]["record"] for d in stage["decisions"]} <= {r["id"] for r in records}

    for record in records:  # releasing everything gives back exactly the original context
        released = http.post(f"/v1/sessions/{session_id}/quarantine/{record['id']}/release").json()
        assert released["status"] == "released" and released["history"][-1]["to"] == "released"
    received.clear()
    _call(client, session_id, SESSION)
    assert received.requests()[-1]["messages"] == _as_sent(SESSION)
    missing = http.post(f"/v1/sessions/{session_id}/quarantine/q_nope/release")
    assert missing.status_code == 404 and "q_nope" in missing.json()["error"]["message"]


def test_confirmed_claim_is_never_quarantined_again(client, received, http):
    session_id = f"q-{uuid.uuid4().hex[:12]}"
    for turn in [i for i, m in enumerate(SESSION) if m["role"] == "user"]:
        _call(client, session_id, SESSION[: turn + 1])
    records = http.get(f"/v1/sessions/{session_id}/quarantine").json()["data"]
    assert records
    confirmed = http.post(f"/v1/sessions/{session_id}/quarantine/{records[0]['id']}/confirm")
    assert confirmed.json()["status"] == "confirmed"
    for record in records[1:]:
        http.post(f"/v1/sessions/{session_id}/quarantine/{record['id']}/release")
    received.clear()
    again = [*SESSION, {"role": "assistant", "content": "Again, the Maple Street parcel locker has it for five days."},
             {"role": "user", "content": "OK, thanks."}]
    _call(client, session_id, again)  # one more repetition arrives: still not quarantined
    sent = received.requests()[-1]["messages"]
    assert sent == _as_sent(again)
    fresh = [r for r in http.get(f"/v1/sessions/{session_id}/quarantine", params={"status": "active"}).json()["data"]]
    assert fresh == []


def test_quarantine_api_is_tenant_scoped(tenant_proxy):
    session_id = f"q-{uuid.uuid4().hex[:12]}"
    alpha = {"Authorization": "Bearer key-alpha", "X-Session-Id": session_id}
    body = {"model": "echo", "messages": [{"role": "user", "content": "hello"}]}
    assert httpx.post(f"{tenant_proxy.url}/v1/chat/completions", json=body, headers=alpha, timeout=60).status_code == 200
    mine = httpx.get(f"{tenant_proxy.url}/v1/sessions/{session_id}/quarantine", headers=alpha)
    assert mine.status_code == 200 and mine.json()["data"] == []
    theirs = httpx.get(f"{tenant_proxy.url}/v1/sessions/{session_id}/quarantine",
                       headers={"Authorization": "Bearer key-beta"})
    assert theirs.status_code == 404


def test_a_general_assistant_keeps_its_own_answers_under_the_default_policy(client, received, http):
    """A chat assistant with a role prompt and no tools, through the proxy with `default`: its
    recommendations recur with the topic the user asked about (Alfama, tram 28) and every one
    of them reaches the model on the last call; none is taken for a poisoned claim."""
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "agentmem" / "bench" / "data" / "poison_agentmem_general.jsonl"
    record = next(json.loads(line) for line in path.read_text().splitlines() if '"am-general-01"' in line)
    messages, session_id = record["messages"], f"q-{uuid.uuid4().hex[:12]}"
    for turn in [i for i, m in enumerate(messages) if m["role"] == "user"]:
        client.chat.completions.create(model="echo", messages=messages[: turn + 1],
                                       extra_headers={"X-Session-Id": session_id})
    assert received.requests()[-1]["messages"] == _as_sent(messages)
    assert http.get(f"/v1/sessions/{session_id}/quarantine").json()["data"] == []


def _as_sent(messages):
    """The messages as the openai client serialises them (None fields dropped)."""
    return [{k: v for k, v in m.items() if v is not None} for m in messages]


async def test_user_changing_their_mind_quarantines_the_older_statement(tmp_path):
    from agentmem.api import Hygiene
    from agentmem.config import Settings
    from agentmem.policy import policy_from_dict

    history = [
        {"role": "user", "content": "I am vegetarian, so please no meat. Plan three dinners for me."},
        {"role": "assistant", "content": "Here are three dinners: lentil curry, mushroom risotto and bean chili."},
        {"role": "user", "content": "I eat meat every day. Change the plan."},
    ]
    hygiene = Hygiene("guarded", settings=Settings(data_dir=tmp_path))
    try:
        result = await hygiene.apply(history, session_id=f"clash-{uuid.uuid4().hex[:8]}")
        first = result.messages[0]["content"]
        assert "I am vegetarian" not in first and first == "Plan three dinners for me."
        assert result.messages[1:] == history[1:]  # the newest message and the rest untouched
        [decision] = [d for s in result.report.stages for d in s.decisions if d.action == "quarantine"]
        assert decision.detail["kind"] == "clash" and decision.score >= 0.85
        assert "I eat meat every day." in decision.reason
        keep_both = policy_from_dict({"name": "both", "stages": ["quarantine"],
                                      "quarantine": {"resolution": "keep_both"}})
        result = await hygiene.apply(history, session_id=f"clash-{uuid.uuid4().hex[:8]}", policy=keep_both)
        assert result.messages[0] is history[0]  # nothing withheld; the record only adds a note later
    finally:
        await hygiene.aclose()
        hygiene.connector.close()


async def test_caller_appending_to_its_history_list_does_not_confuse_the_engine(upstream, received, tmp_path):
    """Library users append the reply to the list they passed while background work still runs."""
    from agentmem.api import Hygiene
    from agentmem.config import Settings

    hygiene = Hygiene("guarded", settings=Settings(data_dir=tmp_path))
    session_id, history = f"mind-{uuid.uuid4().hex[:8]}", []
    try:
        for text in ["I am vegetarian, so please no meat. Plan three dinners for me.",
                     "Can you add a dessert to the second one?", "I eat meat every day. Change the plan."]:
            history.append({"role": "user", "content": text})
            reply = await hygiene.acompletion("openai/echo", history, session_id=session_id,
                                              api_base=upstream.url + "/v1", api_key="sk-local")
            history.append(reply.choices[0].message.model_dump(exclude_none=True))
            await hygiene.drain()
        sent = received.requests()[-1]["messages"]
        assert sent[0]["content"] == "Plan three dinners for me."  # the older statement withheld
        assert sent[-1]["content"] == "I eat meat every day. Change the plan."
        corpus = hygiene.state.corpora._cache[f"default\x00{session_id}"]
        assert len(corpus.sources) == corpus.covered == len(corpus.rows_of)
        assert corpus.position.tolist() == sorted(corpus.position.tolist())
        assert len(corpus.position) == sum(len(r) for r in corpus.rows_of)
    finally:
        await hygiene.aclose()
        hygiene.connector.close()


async def test_poison_in_our_stored_replies_is_found_after_the_reply(tmp_path):
    """The usual flow: the replies are stored by us, each call brings only the user's message.
    Detection runs after the reply (off the call path); the next call applies the records."""
    from agentmem.api import Hygiene
    from agentmem.config import Settings
    from agentmem.quarantine import QuarantineStore

    hygiene = Hygiene("guarded", settings=Settings(data_dir=tmp_path))
    session_id, history = f"bg-{uuid.uuid4().hex[:8]}", list(SESSION[:4])  # up to the tool result
    replies = [m for m in SESSION[4:] if m["role"] == "assistant"]
    users = [m for m in SESSION[4:] if m["role"] == "user"]
    try:
        for number, (reply, user) in enumerate(zip(replies, users)):
            call = await hygiene.prepare({"model": "echo", "messages": history}, session_id=session_id)
            assert call.report.ingest.new_turns == (4 if number == 0 else 1)  # ours, not resent
            await call.finish(reply)
            await hygiene.drain()
            history += [reply, user]
        handle = call.handle
        records = await QuarantineStore(hygiene.store()).all(handle)
        assert len(records) == 1 and len(records[0].keys) == 3  # one claim, found after reply 3
        assert all(CLAIM in o["text"] for o in records[0].occurrences) and CLAIM in records[0].text
        result = await hygiene.apply(history, session_id=session_id)
        assert CLAIM not in json.dumps(result.messages) and "Bring your ID." in json.dumps(result.messages)
        again = await QuarantineStore(hygiene.store()).all(handle)
        assert sorted(r.id for r in again) == sorted(r.id for r in records)  # one record per claim
    finally:
        await hygiene.aclose()
        hygiene.connector.close()


async def test_records_found_after_the_reply_do_not_bring_a_deleted_session_back(tmp_path,
                                                                              monkeypatch):
    """The session is deleted while the after-reply detectors run (a DELETE between the reply
    and the end of its background work): what they find is not written, and no key of the
    session comes back."""
    from agentmem.api import Hygiene
    from agentmem.config import Settings
    from agentmem.stages import quarantine as stage

    found: list[list] = []
    detect = stage.run_detectors

    async def deleted_first(scope, *rest):
        if any(CLAIM in text for text in scope.statements.texts) and handle is not None:
            assert await hygiene.store().delete(handle)
            found.append(await detect(scope, *rest))
            return found[-1]
        return await detect(scope, *rest)

    hygiene = Hygiene("guarded", settings=Settings(data_dir=tmp_path))
    session_id, history = f"del-{uuid.uuid4().hex[:8]}", list(SESSION[:4])
    replies = [m for m in SESSION[4:] if m["role"] == "assistant"]
    users = [m for m in SESSION[4:] if m["role"] == "user"]
    handle = None
    try:
        for number, (reply, user) in enumerate(zip(replies, users)):
            call = await hygiene.prepare({"model": "echo", "messages": history}, session_id=session_id)
            if number == 2:  # the reply that makes the claim recur a third time
                handle = call.handle
                monkeypatch.setattr(stage, "run_detectors", deleted_first)
            await call.finish(reply)
            await hygiene.drain()
            history += [reply, user]
        assert found and found[-1]  # the detectors did find the claim, after the delete
        assert not await hygiene.store().redis.exists(*handle.keys.data_keys())
    finally:
        await hygiene.aclose()
        hygiene.connector.close()


async def _applied_once(data_dir, history: list[dict]):
    """``default`` applied to one request of a new session, on an engine of its own."""
    from agentmem.api import Hygiene
    from agentmem.config import Settings

    hygiene = Hygiene("default", settings=Settings(data_dir=data_dir))
    try:
        return await hygiene.apply(history, session_id=f"q-{uuid.uuid4().hex[:8]}")
    finally:
        await hygiene.aclose()
        hygiene.connector.close()


async def test_a_large_superseded_result_keeps_its_placeholder_through_the_prune_stage(tmp_path):
    """An agent calls Glob twice with the same arguments: the older answer is withheld whole
    (superseded) and says so. Large and among the recent exchanges, it is also a tool output
    the prune stage reads; with every sentence withheld it must leave the placeholder, not
    send the model an empty result ("the command printed nothing")."""
    listing = "Glob result: " + " ".join(f"item{i} status ok" for i in range(400))
    def glob(call_id: str) -> dict:
        return {"role": "assistant", "content": None, "tool_calls": [{
            "id": call_id, "type": "function",
            "function": {"name": "Glob", "arguments": json.dumps({"pattern": "src/**/*.py"})}}]}

    history = [{"role": "user", "content": "Which billing modules do we have? List them."},
               glob("g1"), {"role": "tool", "tool_call_id": "g1", "content": listing},
               glob("g2"), {"role": "tool", "tool_call_id": "g2", "content": listing},
               {"role": "assistant", "content": "There are 400 billing items, all fine."},
               {"role": "user", "content": "Good. Now draft the release note for the billing team."}]
    result = await _applied_once(tmp_path, history)
    older = next(m for m in result.messages if m.get("tool_call_id") == "g1")
    assert older["content"].startswith("[agentmem withheld this older result")
    assert next(m for m in result.messages if m.get("tool_call_id") == "g2")["content"] == listing


async def test_an_opening_user_turn_withheld_whole_stays_as_its_placeholder(tmp_path):
    """The user's first message is all contradicted later: dropped, the request would open with
    the assistant's turn (providers refuse it, and the outgoing check then sends the request
    unchanged, withholding nothing). It stays as the placeholder instead."""

    history = [{"role": "system", "content": "You plan meals."},
               {"role": "user", "content": "I am vegetarian."},
               {"role": "assistant", "content": "Noted, no meat then."},
               {"role": "user", "content": "I eat meat every day. Plan three dinners."}]
    result = await _applied_once(tmp_path, history)
    assert not result.report.warnings
    assert [m["role"] for m in result.messages] == ["system", "user", "assistant", "user"]
    assert result.messages[1]["content"].startswith("[agentmem withheld this content (clash")


async def test_a_value_the_user_gave_is_no_poison_when_the_assistant_repeats_it(tmp_path):
    """A delivery bot (role prompt, tools) confirms the user's new address three times. The
    poison group on the address starts with the old one, and support from the user was looked
    up only before that: the new address, said by the user before any repeat, read as "from
    no user" and the confirmations were withheld (audit 11). Now the user counts before the
    detail itself was first said."""
    from agentmem.api import Hygiene
    from agentmem.config import Settings
    from agentmem.quarantine import QuarantineStore

    tools = [{"type": "function", "function": {"name": name, "description": f"{name} for an order.",
                                               "parameters": {"type": "object", "properties": {}}}}
             for name in ("lookup_order", "update_address")]
    history = [{"role": "system", "content": "You are the account assistant for a grocery "
                "delivery service. Deliveries run 8am-8pm. Delivery fee $3.99, free over $50."}]
    exchanges = [
        ("Hi, set up weekly delivery. My address is 14 Birch Lane, Apt 2, Springfield.",
         "Got it: weekly delivery to 14 Birch Lane, Apt 2, Springfield."),
        ("Oh wait, I'm moving next week. My new address is 88 Cedar Road, Springfield.",
         "Thanks! I've updated your address to 88 Cedar Road, Springfield, starting next week."),
        ("Keep Tuesdays.", "Tuesdays stay the same, now delivered to 88 Cedar Road."),
        ("What address do you have for me now?", "Your delivery address is 88 Cedar Road, Springfield.")]
    hygiene = Hygiene("default", settings=Settings(data_dir=tmp_path))
    session_id = f"addr-{uuid.uuid4().hex[:8]}"
    try:
        for user, reply in exchanges:
            history.append({"role": "user", "content": user})
            call = await hygiene.prepare({"model": "echo", "messages": history, "tools": tools},
                                         session_id=session_id)
            await call.finish({"role": "assistant", "content": reply})
            await hygiene.drain()
            history.append({"role": "assistant", "content": reply})
        history.append({"role": "user", "content": "Great, thanks."})
        result = await hygiene.apply(history, model="echo", tools=tools, session_id=session_id)
        records = await QuarantineStore(hygiene.store()).all(call.handle)
    finally:
        await hygiene.aclose()
        hygiene.connector.close()
    assert not [r for r in records if r.kind == "poison"], [r.reason for r in records]
    sent = json.dumps(result.messages)
    assert "updated your address to 88 Cedar Road" in sent
    assert "Your delivery address is 88 Cedar Road" in sent


async def test_the_call_path_check_reads_text_and_embeds_nothing(tmp_path):
    """The clash rules on the call path read text: a new user message is checked without
    a single embedding on the call path (its vectors come from background work)."""
    import threading

    from agentmem.api import Hygiene
    from agentmem.config import Settings
    from agentmem.models.embedder import Embedder, default_embedder

    class CountingEmbedder(Embedder):
        def __init__(self) -> None:
            super().__init__(default_embedder().path)
            self.texts: list[str] = []

        def encode(self, texts):
            if not threading.current_thread().name.startswith("agentmem-background"):
                self.texts += texts
            return super().encode(texts)

    embedder = CountingEmbedder()
    hygiene = Hygiene("default", settings=Settings(data_dir=tmp_path), embedder=embedder)
    session = f"clash-{uuid.uuid4().hex[:8]}"
    history = [{"role": "user", "content": "I am vegetarian, so please no meat. Plan three dinners."}]
    try:
        async with hygiene.call({"model": "m", "messages": history}, session_id=session) as call:
            await call.finish({"role": "assistant", "content": "Lentil curry, risotto and chili."})
        await hygiene.drain()
        history += [{"role": "assistant", "content": "Lentil curry, risotto and chili."},
                    {"role": "user", "content": "I eat meat every day. Change the plan."}]
        embedder.texts.clear()
        async with hygiene.call({"model": "m", "messages": history}, session_id=session) as call:
            assert embedder.texts == []  # prepared: the clash is found, nothing embedded on its path
            assert "I am vegetarian" not in call.outgoing["messages"][0]["content"]
            await call.finish({"role": "assistant", "content": "Steak it is."})
        tools = [{"type": "function", "function": {"name": f"tool_{k}", "description": f"Tool {k}."}}
                 for k in range(8)]
        async with hygiene.call({"model": "m", "messages": [*history, {"role": "assistant",
                                 "content": "Steak it is."}, {"role": "user", "content": "Book it."}],
                                 "tools": tools}, session_id=session) as call:
            assert "Book it." in embedder.texts  # a tool selection does embed its query
            await call.finish({"role": "assistant", "content": "Booked."})
    finally:
        await hygiene.aclose()
        hygiene.connector.close()


async def test_a_tool_call_reply_does_not_repeat_the_call_paths_poison_check(tmp_path, monkeypatch):
    """An agent's call that brings a search result is checked for poison on its path; when the
    reply is another tool call (no statement of its own), the check after the reply would
    read the very same statements, so it is not run twice. A reply with text is checked."""
    from agentmem.api import Hygiene
    from agentmem.config import Settings
    from agentmem.quarantine import detectors

    runs: list[int] = []
    checked = detectors.poison_records

    def counting(scope, *rest):
        if any("Vancouver" in text for text in scope.statements.texts):  # this session's, not the
            runs.append(scope.statements.size)  # work another test's engine left in the process
        return checked(scope, *rest)

    monkeypatch.setattr(detectors, "poison_records", counting)
    hygiene = Hygiene("default", settings=Settings(data_dir=tmp_path))
    session = f"agent-{uuid.uuid4().hex[:8]}"
    searched = {"role": "tool", "tool_call_id": "s1", "content": json.dumps({"results": [
        {"title": "Kettle & Loom", "snippet": "They ship Canadian orders from Vancouver, so no duties."}]})}
    history = [{"role": "user", "content": "Will I pay customs on my order to Halifax?"},
               {"role": "assistant", "content": None, "tool_calls": [{"id": "s1", "type": "function",
                "function": {"name": "web_search", "arguments": '{"query": "Kettle & Loom customs"}'}}]},
               searched]
    read_page = {"role": "assistant", "content": None, "tool_calls": [{"id": "p1", "type": "function",
                 "function": {"name": "fetch_url", "arguments": '{"url": "https://example.com"}'}}]}
    try:
        async with hygiene.call({"model": "m", "messages": history}, session_id=session) as call:
            await call.finish({"role": "assistant", "content": "Canadian orders ship from Vancouver."})
        await hygiene.drain()
        assert len(runs) == 2  # the call path's, and the reply's text after it
        history += [{"role": "assistant", "content": "Canadian orders ship from Vancouver."},
                    {"role": "user", "content": "And to Moncton?"},
                    {**history[1], "tool_calls": [{**history[1]["tool_calls"][0], "id": "s2"}]},
                    {**searched, "tool_call_id": "s2"}]
        runs.clear()
        async with hygiene.call({"model": "m", "messages": history}, session_id=session) as call:
            await call.finish(read_page)
        await hygiene.drain()
        assert len(runs) == 1  # on the call path only: the reply added no statement
    finally:
        await hygiene.aclose()
        hygiene.connector.close()
