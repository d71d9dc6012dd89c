"""Records people can read: a recurring claim is one record with every occurrence, a tool
result withheld whole says so, and the poisoning example's release command works."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import uuid
from pathlib import Path

from tests.test_quarantine import CLAIM, SESSION, _call

ROOT = Path(__file__).resolve().parents[1]


def test_a_recurring_claim_is_one_record_with_its_occurrences(client, received, http):
    session_id = f"qr-{uuid.uuid4().hex[:12]}"
    for turn in [i for i, m in enumerate(SESSION) if m["role"] == "user"]:
        _call(client, session_id, SESSION[: turn + 1])
    records = http.get(f"/v1/sessions/{session_id}/quarantine").json()["data"]
    poison = [r for r in records if r["kind"] == "poison"]
    assert len(poison) == 1  # one card for one claim, not one per repetition
    texts = [poison[0]["text"], *(o["text"] for o in poison[0]["occurrences"])]
    assert len(texts) >= 3 and all(CLAIM in t for t in texts)
    assert CLAIM not in str(received.requests()[-1]["messages"])  # every occurrence withheld
    http.post(f"/v1/sessions/{session_id}/quarantine/{poison[0]['id']}/release")
    received.clear()
    _call(client, session_id, SESSION)
    assert str(received.requests()[-1]["messages"]).count(CLAIM) == 3  # all back at once


def test_a_tool_result_withheld_whole_says_so(client, received, http):
    session_id = f"qt-{uuid.uuid4().hex[:12]}"
    claim = "The warehouse in Gdansk confirmed the refund already."
    messages = [{"role": "system", "content": "You are a support agent."},
                {"role": "user", "content": "Was my refund sent?"}]
    for n in range(4):  # an untrusted tool repeating the same unsupported claim
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [{"id": f"w{n}", "type": "function",
             "function": {"name": "web_lookup", "arguments": f'{{"page": {n}}}'}}]},
            {"role": "tool", "tool_call_id": f"w{n}", "content": claim},
            {"role": "assistant", "content": "Let me check another source."},
            {"role": "user", "content": f"Anything on page {n + 1}?"}]
        _call(client, session_id, messages)
    sent = received.requests()[-1]["messages"]
    withheld = [m for m in sent if m["role"] == "tool" and m["content"].startswith("[agentmem withheld")]
    assert withheld and all("quarantine record q_" in m["content"] for m in withheld)
    assert claim not in str(sent)


def test_the_poisoning_example_prints_a_release_command_that_works(tmp_path):
    env = {**os.environ, "AGENTMEM_DATA_DIR": str(tmp_path)}
    run = subprocess.run([sys.executable, str(ROOT / "examples" / "poisoning_agent.py")],
                         capture_output=True, text=True, timeout=180, env=env, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    line = next(x for x in run.stdout.splitlines() if x.startswith("release it with: "))
    words = shlex.split(line.removeprefix("release it with: "))
    assert words[0] == f"AGENTMEM_DATA_DIR={tmp_path}" and words[1] == "agentmem"
    released = subprocess.run([sys.executable, "-m", "agentmem", *words[2:]], capture_output=True,
                              text=True, timeout=120, env=env, cwd=ROOT)
    assert released.returncode == 0 and "released" in released.stdout, released.stdout + released.stderr


def test_a_claim_withheld_from_a_json_tool_answer_leaves_json_that_parses(client, received, http):
    """An untrusted tool's JSON answer repeating an unsupported claim: the claim's record is
    withheld and the rest of the answer reaches the model as JSON that still parses (a
    sentence-level cut of a JSON text used to leave fragments)."""
    session_id = f"qj-{uuid.uuid4().hex[:12]}"
    claim = {"source": "forum", "text": "The warehouse in Gdansk confirmed the refund already."}
    messages = [{"role": "system", "content": "You are a support agent."},
                {"role": "user", "content": "Was my refund sent?"}]
    news = ["Parcel 118 left the depot in Lodz on Monday.", "Customs cleared a pallet of shoes for Berlin.",
            "A courier van broke down near Poznan at noon.", "Storms delayed the Baltic ferry by a day."]
    for n in range(4):
        page = {"page": n, "results": [claim, {"source": "carrier", "text": news[n]}]}
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [{"id": f"w{n}", "type": "function",
             "function": {"name": "web_lookup", "arguments": f'{{"page": {n}}}'}}]},
            {"role": "tool", "tool_call_id": f"w{n}", "content": json.dumps(page)},
            {"role": "assistant", "content": "Let me check another source."},
            {"role": "user", "content": f"Anything on page {n + 1}?"}]
        _call(client, session_id, messages)
    sent = received.requests()[-1]["messages"]
    answers = [json.loads(m["content"]) for m in sent if m["role"] == "tool"]
    assert claim["text"] not in str(sent)
    assert [a["results"] for a in answers] == [[{"source": "carrier", "text": text}] for text in news]
    poison = [r for r in http.get(f"/v1/sessions/{session_id}/quarantine").json()["data"]
              if r["kind"] == "poison"]
    assert len(poison) == 1
