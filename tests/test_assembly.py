"""Context assembly: lost-in-the-middle ordering and XML-tagged formatting (README: Context
assembly), as units and through the real proxy to the echo upstream."""

from __future__ import annotations

import json
import time

import pytest

from agentmem.assembly.formatting import omission_note
from agentmem.assembly.ordering import edges_first, find_documents
from agentmem.errors import PolicyError
from agentmem.policy import policy_from_dict
from agentmem.text import split_sentences

HITS = [{"title": "Kettle descaling", "snippet": "Descale a kettle with citric acid every month."},
        {"title": "Train times", "snippet": "The 9:15 train to Lyon leaves from platform 4."},
        {"title": "Weather", "snippet": "Sunny in Madrid tomorrow, 31 degrees."},
        {"title": "Order 5512 tracking", "snippet": "Order 5512 with the blue kettle ships to Lyon "
                                                    "on Friday."},
        {"title": "Poems", "snippet": "A short poem about the sea and its gulls."}]
QUESTION = "When does my blue kettle order 5512 arrive in Lyon?"
LISTED = ("Search results:\n1. Weather: sunny in Madrid tomorrow.\n"
          "2. Order 5512 with the blue kettle ships to Lyon on Friday.\n   Tracking: FR-22.\n"
          "3. A short poem about the sea.\n4. Train times to Paris.\n\nShowing 4 of 120 hits.")


def _agent_step(content: str, earlier: list[dict] | None = None) -> list[dict]:
    return [{"role": "system", "content": "You are a shopping assistant."}, *(earlier or []),
            {"role": "user", "content": QUESTION},
            {"role": "assistant", "tool_calls": [{
                "id": "c1", "type": "function",
                "function": {"name": "web_search", "arguments": "{\"q\": \"order 5512\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": content}]


def test_document_lists_are_found_in_their_shapes_and_nothing_else():
    documents = find_documents(json.dumps(HITS))
    assert documents and documents.kind == "json" and documents.texts[3].startswith("Order 5512")
    wrapped = find_documents(json.dumps({"results": HITS, "total": 5}, indent=2))
    assert wrapped and json.loads(wrapped.render([4, 3, 2, 1, 0])) == {
        "results": HITS[::-1], "total": 5}
    assert "\n  " in wrapped.render(range(5))  # indented stays indented
    listed = find_documents(LISTED)
    assert listed and listed.texts[1] == ("2. Order 5512 with the blue kettle ships to Lyon on "
                                          "Friday.\n   Tracking: FR-22.")
    assert listed.render([1, 0, 3, 2]) == (
        "Search results:\n2. Order 5512 with the blue kettle ships to Lyon on Friday.\n"
        "   Tracking: FR-22.\n1. Weather: sunny in Madrid tomorrow.\n4. Train times to Paris.\n"
        "3. A short poem about the sea.\n\nShowing 4 of 120 hits.")
    assert find_documents("[1] a\n[2] b\n[3] c").render([2, 1, 0]) == "[3] c\n[2] b\n[1] a"
    assert find_documents("- a\n- b\n- c\n").render([1, 2, 0]) == "- b\n- c\n- a\n"
    for other in ["Just a sentence. And another one.", "1. a\n3. b\n4. c",  # numbers skip
                  "- a\n1. b\n- c", "1. a\n2. b",  # mixed markers; fewer than three
                  json.dumps([{"id": 1}, {"text": "x"}, {"text": "y"}]),  # one has no text
                  json.dumps({"a": HITS, "b": HITS}), "[1, 2, 3]", "{not json"]:
        assert find_documents(other) is None, other
    assert edges_first([0.1, 0.9, 0.5, 0.7, 0.3]) == [1, 2, 0, 4, 3]  # 1st 3rd 5th 4th 2nd


def test_settings_are_strict():
    with pytest.raises(PolicyError, match=r"assembly\.ordering\.enabeld"):
        policy_from_dict({"name": "x", "assembly": {"ordering": {"enabeld": True}}})
    with pytest.raises(PolicyError, match="must run before 'assembly'"):
        policy_from_dict({"name": "x", "stages": ["assembly", "prune"]})
    assert omission_note(1, 0) == "1 older turn omitted."
    assert omission_note(42, 3) == "42 older turns omitted, 3 shortened to their relevant sentences."


@pytest.fixture(scope="module")
def policies(policy_dir):
    stages = "stages: [prune, assembly]\nembed: true\n"
    (policy_dir / "asm-off.yaml").write_text(f"name: asm-off\n{stages}")
    (policy_dir / "asm-order.yaml").write_text(
        f"name: asm-order\n{stages}assembly: {{ordering: {{enabled: true}}}}\n")
    (policy_dir / "asm-format.yaml").write_text(
        f"name: asm-format\n{stages}prune: {{history_floor_tokens: 0, history_fraction: 0.3, "
        "keep_recent_exchanges: 1}\nassembly: {formatting: {earlier_turns: true, documents: true}}\n")


def _send(client, received, session_id: str, policy: str, messages: list[dict]) -> list[dict]:
    received.clear()
    client.chat.completions.create(model="echo", messages=messages, extra_headers={
        "X-Session-Id": session_id, "X-Agentmem-Policy": policy})
    [body] = received.requests()
    return body["messages"]


def test_ordering_through_the_proxy(client, received, session_id, policies):
    request = _agent_step(json.dumps({"results": HITS}))
    assert _send(client, received, session_id + "-off", "asm-off", request) == request  # option off
    sent = _send(client, received, session_id, "asm-order", request)
    assert sent[:-1] == request[:-1]  # only the document list changed
    hits = json.loads(sent[-1]["content"])["results"]
    assert sorted(map(json.dumps, hits)) == sorted(map(json.dumps, HITS))  # same documents
    assert hits[0]["title"] == "Order 5512 tracking"  # the most relevant first
    assert hits[-1]["title"] in {"Kettle descaling", "Train times"}  # the next best last
    assert hits[2]["title"] in {"Weather", "Poems"}  # the least relevant in the middle

    sent = _send(client, received, session_id + "-list", "asm-order", _agent_step(LISTED))
    lines = sent[-1]["content"].splitlines()
    assert lines[0] == "Search results:" and lines[1].startswith("2. Order 5512")
    assert lines[2] == "   Tracking: FR-22." and lines[-1] == "Showing 4 of 120 hits."
    prose = _agent_step("Order 5512 ships on Friday. It goes to Lyon. The kettle is blue.")
    assert _send(client, received, session_id + "-prose", "asm-order", prose) == prose


def test_formatting_through_the_proxy(client, received, session_id, policies):
    earlier = []
    for number in range(8):
        earlier += [{"role": "user", "content": f"Tell me about my garden, part {number}. "
                                                 f"The bees visit the lavender bed {number}."},
                    {"role": "assistant", "content": f"Garden part {number} is lovely. Bees like "
                                                      f"lavender. Water it weekly."}]
    earlier += [{"role": "user", "content": "I ordered a blue kettle, order 5512, to Lyon."},
                {"role": "assistant", "content": "Noted: order 5512, a blue kettle, to Lyon."}]
    request = _agent_step(json.dumps(HITS), earlier)
    sent = _send(client, received, session_id, "asm-format", request)
    assert sent[0] == request[0] and sent[-3:-1] == request[-3:-1]  # system, the current step
    [block] = [m for m in sent if m.get("content") and m["content"].startswith("<earlier_turns>")]
    assert block["role"] == "user" and block["content"].endswith("</earlier_turns>")
    note = block["content"].splitlines()[1]
    omitted = 18 - block["content"].count("<turn ")
    assert note.startswith(f"<note>{omitted} older turns omitted") and omitted > 0
    assert '<turn role="user" turn="17">I ordered a blue kettle, order 5512, to Lyon.</turn>' \
        in block["content"]
    assert len(sent) == 5  # system, the block, and the current step's three messages
    tool = sent[-1]
    assert tool["role"] == "tool" and tool["tool_call_id"] == "c1"
    assert tool["content"].startswith('<document source="tool:web_search" turn="21">\n')
    assert json.loads(tool["content"].split("\n", 1)[1].rsplit("\n", 1)[0]) == HITS


PROSE = ("Well, to be honest, I think that basically the kettle that I ordered last week from "
         "the shop in Lyon was actually quite a lot more expensive than the one that my "
         "neighbour Marie bought, which cost 42 euros. ")
CODE = "```python\ndef total(prices):\n    return sum(prices)  # the basically simple sum\n```"


def test_compression_through_the_proxy(client, received, session_id, policy_dir):
    from agentmem.ingest import messages_tokens
    from agentmem.models.pruner import cached_pruner
    from agentmem.models.registry import default_pruner_path

    # Loaded here first, once the proxy's warm-up thread has finished importing transformers:
    # a first import racing it sees a half-initialised module ("cannot import name
    # 'AutoTokenizer'"), in a call as here (test_prune_stage's tool-output test meets it too).
    deadline = time.monotonic() + 120
    while True:
        try:
            cached_pruner(default_pruner_path())
            break
        except ImportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)

    history = [{"role": "system", "content": "You are a shopping assistant."}]
    for number in range(6):
        history += [{"role": "user", "content": PROSE * 2 + f"Order {5500 + number} is mine."},
                    {"role": "assistant", "content": f"I see, so it was basically a rather "
                     f"pricey purchase for you this time, number {number}. {CODE}"}]
    history += [{"role": "user", "content": json.dumps(HITS)},
                {"role": "assistant", "content": "Those are the search results."},
                {"role": "user", "content": "So which kettle was basically the cheapest one, "
                                            "honestly?"}]
    total = messages_tokens(history)
    (policy_dir / "asm-compress.yaml").write_text(
        f"name: asm-compress\nstages: [assembly, budget]\nbudget: {{max_prompt_tokens: "
        f"{int(total * 0.85)}}}\nprune: {{keep_recent_exchanges: 1}}\n"
        "assembly: {compression: {enabled: true, keep_rate: 0.6}}\n")
    sent = _send(client, received, session_id, "asm-compress", history)
    assert len(sent) == len(history)  # words went instead of whole messages
    assert messages_tokens(sent) <= int(total * 0.85)
    assert sent[0] == history[0] and sent[-1] == history[-1]  # system, newest user: untouched
    assert sent[-3] == history[-3]  # JSON is data: untouched
    shortened = [(before, after) for before, after in zip(history, sent) if before != after]
    assert shortened and all(len(a["content"]) < len(b["content"]) for b, a in shortened)
    for before, after in shortened:  # words inside sentences went, no sentence did
        assert len(split_sentences(after["content"])) == len(split_sentences(before["content"]))
        assert len(after["content"].split()) < 0.9 * len(before["content"].split())
    for before, after in shortened:  # numbers, names and code blocks stay
        for keep in ("42", "Marie", "Lyon", "Order", CODE, *[w for w in before["content"].split()
                                                             if any(c.isdigit() for c in w)]):
            if keep in before["content"]:
                assert keep in after["content"], (keep, after["content"])
    received.clear()  # under the budget nothing changes, even with the option on
    (policy_dir / "asm-compress-roomy.yaml").write_text(
        "name: asm-compress-roomy\nstages: [assembly, budget]\nbudget: {max_prompt_tokens: "
        f"{total + 10}}}\nassembly: {{compression: {{enabled: true}}}}\n")
    assert _send(client, received, session_id + "-roomy", "asm-compress-roomy", history) == history
