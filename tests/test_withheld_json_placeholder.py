"""A tool's JSON answer whose every element is withheld says so: the model gets the placeholder
the README promises, not the bare frame (``{"results": []}`` read as "the search found nothing")."""

from __future__ import annotations

import json
import uuid

from tests.test_quarantine import _call

PLACEHOLDER = "[agentmem withheld this content (poison; quarantine record q_"


def test_a_json_tool_answer_withheld_element_by_element_gets_the_placeholder(client, received, http):
    """An untrusted search tool answers ``{"results": [...]}`` with two hits that both repeat an
    unsupported claim, on three pages: every hit is withheld, so each answer is the placeholder.
    A page where one hit survives still reaches the model as that hit, in JSON that parses."""
    session_id = f"qjw-{uuid.uuid4().hex[:12]}"
    claim = "The warehouse in Gdansk confirmed the refund already."
    news = "Parcel 118 left the depot in Lodz on Monday."
    messages = [{"role": "system", "content": "You are a support agent."},
                {"role": "user", "content": "Was my refund sent?"}]
    pages = [[{"source": "forum", "text": claim}, {"source": "blog", "text": claim}] for _ in range(3)]
    pages.append([{"source": "forum", "text": claim}, {"source": "carrier", "text": news}])
    for n, results in enumerate(pages):
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [{"id": f"w{n}", "type": "function",
             "function": {"name": "web_search", "arguments": f'{{"query": "refund page {n}"}}'}}]},
            {"role": "tool", "tool_call_id": f"w{n}", "content": json.dumps({"results": results})},
            {"role": "assistant", "content": "Let me check another source."},
            {"role": "user", "content": f"Anything on page {n + 1}?"}]
        _call(client, session_id, messages)
    sent = received.requests()[-1]["messages"]
    answers = [m["content"] for m in sent if m["role"] == "tool"]
    assert claim not in str(sent)
    poison = [r for r in http.get(f"/v1/sessions/{session_id}/quarantine").json()["data"]
              if r["kind"] == "poison"]
    assert poison and all(r["status"] == "active" for r in poison)
    ids = {r["id"] for r in poison}
    for answer in answers[:3]:  # every hit withheld: the placeholder, naming the record
        assert answer.startswith(PLACEHOLDER), answer
        assert any(record in answer for record in ids)
        assert answer != json.dumps({"results": []})
    assert json.loads(answers[3]) == {"results": [{"source": "carrier", "text": news}]}  # as today
