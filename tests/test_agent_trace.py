"""A 50-turn agent trace with parallel tool calls round-trips under the default policy: what
arrives is what was sent, except sentences a quarantine decision of that call names."""

from __future__ import annotations

import json

from agentmem.messages import canonical, check_conversation, tool_call_units
from agentmem.stages import Draft
from agentmem.validate import validate_outgoing

TOOLS = [
    {"type": "function", "function": {
        "name": name, "description": f"{name} tool",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}
    for name in ("lookup_docs", "read_file", "run_tests", "get_ticket")
]


def test_fifty_turn_agent_trace(client, http, received, session_id):
    messages = [{"role": "system", "content": "You are a coding agent. Use tools when helpful."},
                {"role": "user", "content": "Fix the failing build."}]
    sent_requests = []
    step = 0
    while len(messages) < 50:
        step += 1
        if messages[-1]["role"] == "user" or step % 3 == 0:
            directive = (f'[[tool:lookup_docs {{"q": "error {step}"}}]] '
                         f'[[tool:read_file {{"q": "src/{step}.py"}}]]'
                         if step % 2 else f'[[tool:run_tests {{"q": "suite {step}"}}]]')
            messages.append({"role": "user", "content": f"Step {step}: investigate. {directive}"})
        sent_requests.append(json.loads(json.dumps(messages)))
        completion = client.chat.completions.create(model="echo", messages=messages, tools=TOOLS,
                                                    extra_headers={"X-Session-Id": session_id})
        reply = completion.choices[0].message
        messages.append(reply.model_dump(exclude_none=True))
        for call in reply.tool_calls or []:
            messages.append({"role": "tool", "tool_call_id": call.id,
                             "content": f"{call.function.name} output for {call.function.arguments}. "
                                        "Line 12 raised ValueError. The fix is in parser.py."})
    units = tool_call_units(messages)
    assert sum(len(u) >= 3 for u in units) >= 5  # parallel calls: an assistant plus 2 replies

    # What reached the provider is, request by request, what the client sent (bar the text a
    # quarantine decision of that call withheld, each one on record), and valid.
    upstream_requests = received.requests()
    assert len(upstream_requests) == len(sent_requests)
    call_reports = http.get(f"/v1/sessions/{session_id}/reports", params={"limit": 1000}).json()["data"]
    for sent, arrived, report in zip(sent_requests, upstream_requests, call_reports):
        check_conversation(arrived["messages"])
        withheld = {d["message_index"] for stage in report["stages"] for d in stage["decisions"]
                    if d["action"] == "quarantine"}
        assert len(arrived["messages"]) == len(sent)
        for index, (got, want) in enumerate(zip(arrived["messages"], sent)):
            if index in withheld:
                assert {**got, "content": None} == {**want, "content": None}
            else:
                assert got == want
        validate_outgoing(sent, Draft.of(arrived["messages"], arrived.get("tools")))
        assert [t["function"]["name"] for t in arrived["tools"]] == [t["function"]["name"] for t in TOOLS]

    session = http.get(f"/v1/sessions/{session_id}").json()
    stored = [canonical(t["message"]) for t in session["turns"]]
    assert stored == [canonical(m) for m in messages[: len(stored)]]
    assert session["turn_count"] >= len(messages) - 2  # the last tool replies are not sent yet
    reports = http.get(f"/v1/sessions/{session_id}/reports", params={"limit": 1000}).json()["data"]
    assert len(reports) == len(sent_requests)
    assert all(r["status"] == "ok" and r["policy"] == "default" for r in reports)
    assert all(r["ingest"]["diverged_at"] is None for r in reports)
    # Each call stored only what was new: never more than the new user/tool turns.
    assert sum(r["ingest"]["new_turns"] for r in reports) + len(reports) == session["stored_turn_count"]
