"""A tool call answered again supersedes its older answer: through the real proxy, the older
answer is withheld whole with a note naming its record, the record can be released, and two
different answers to one call (the parts of a page, a partial view of a state) are both kept."""

from __future__ import annotations

import json
import uuid

import pytest

from agentmem.quarantine.superseded import _keeps_fields, call_key, overlap

CONFIG = "\n".join(["# service settings", "name: billing", "region: eu-west-1", "replicas: 3",
                    "timeout_seconds: 30", "retries: 2", "log_level: info", "queue: invoices",
                    "database: billing-main", "cache_ttl_seconds: 600"])
EDITED = CONFIG.replace("timeout_seconds: 30", "timeout_seconds: 90")


def _call(call_id, name, arguments):
    return {"role": "assistant", "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]}


def _answer(call_id, content):
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def _send(client, session_id, messages):
    client.chat.completions.create(model="echo", messages=messages, extra_headers={
        "X-Session-Id": session_id, "X-Agentmem-Policy": "default"})


def _reads(first, second, *, name="read_file", arguments=None, later_arguments=None):
    arguments = arguments if arguments is not None else {"path": "config/billing.yaml"}
    return [{"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Raise the billing service's timeout to 90 seconds."},
            _call("c1", name, arguments), _answer("c1", first),
            _call("c2", "edit_file", {"path": "config/billing.yaml", "old": "30", "new": "90"}),
            _answer("c2", "Edited config/billing.yaml."),
            _call("c3", name, later_arguments if later_arguments is not None else arguments),
            _answer("c3", second)]


def test_a_file_read_again_after_an_edit_withholds_the_older_read(client, received, http):
    session_id = f"superseded-{uuid.uuid4().hex[:8]}"
    messages = _reads(CONFIG, EDITED)
    _send(client, session_id, messages[:4])
    assert received.requests()[-1]["messages"] == messages[:4]  # one read: nothing to supersede
    _send(client, session_id, messages)
    sent = received.requests()[-1]["messages"]
    assert "timeout_seconds: 30" not in json.dumps(sent)  # the stale value does not reach the model
    assert sent[7]["content"] == EDITED and sent[2] == messages[2]  # the call still has its answer
    records = http.get(f"/v1/sessions/{session_id}/quarantine").json()["data"]
    assert [(r["kind"], r["detector"], r["source"]) for r in records] == [
        ("clash", "repeated_call", "tool:read_file")]
    assert records[0]["id"] in sent[3]["content"] and "answered again" in sent[3]["content"]
    assert records[0]["reason"].startswith("superseded: read_file was called again")

    released = http.post(f"/v1/sessions/{session_id}/quarantine/{records[0]['id']}/release")
    assert released.json()["status"] == "released"
    received.clear()
    _send(client, session_id, messages)
    assert received.requests()[-1]["messages"] == messages  # exactly what the client sent


@pytest.mark.parametrize("case", ["other part", "other arguments", "partial view"])
def test_different_answers_to_one_call_and_other_calls_are_both_kept(case, client, received, http):
    session_id = f"not-superseded-{uuid.uuid4().hex[:8]}"
    if case == "other part":  # scroll_down {} twice: two parts of a page, not two versions
        messages = _reads(CONFIG, "\n".join(f"Invoice {i}: paid on day {i}." for i in range(10)),
                          name="scroll_down", arguments={})
    elif case == "other arguments":
        messages = _reads(CONFIG, EDITED, later_arguments={"path": "config/billing.prod.yaml"})
    else:  # the state read again without its bag: the bag the first read listed may still hold
        state = {"location": "Lavender Town", "badges": ["Boulder", "Cascade"], "party": ["Ivysaur"]}
        messages = _reads(json.dumps({**state, "bag": ["Potion x4", "Escape Rope"]}),
                          json.dumps({**state, "location": "Route 10"}), name="read_state", arguments={})
    _send(client, session_id, messages)
    assert received.requests()[-1]["messages"] == messages
    records = http.get(f"/v1/sessions/{session_id}/quarantine").json()["data"]
    assert not [r for r in records if r["detector"] == "repeated_call"]


def test_a_call_is_the_tool_and_its_arguments_and_overlap_counts_what_is_still_there():
    assert call_key("read", '{"path": "a", "lines": 10}') == call_key("read", '{"lines":10,"path":"a"}')
    assert call_key("read", '{"path": "a"}') != call_key("read", '{"path": "b"}')
    assert call_key("read", '{"path": "a"}') != call_key("cat", '{"path": "a"}')
    assert call_key("run", "ls -la") == call_key("run", " ls -la ")  # not JSON: the text
    assert overlap(CONFIG, CONFIG) == 1.0
    assert 0.85 < overlap(CONFIG, EDITED) < 1.0  # one line of ten changed
    assert overlap(CONFIG, "a different file\nwith other\nlines in it") == 0.0
    assert overlap("42 open orders", "42 open orders now") == 1.0  # a line or two: its words
    assert _keeps_fields('{"a": 1, "b": 2}', '{"b": 3, "a": 1, "c": 4}')
    assert not _keeps_fields('{"a": 1, "b": 2}', '{"a": 1}')
    assert _keeps_fields('[1, 2]', '[1]') and _keeps_fields("{not json", "{")
