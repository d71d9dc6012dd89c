"""Turns that always go out but are over the prompt budget on their own (agentmem/stages/overflow.py).

An agent that fetched a page larger than the model's window used to send it whole and have
the provider refuse the call. Real parts: the engine with the `default` stages on an embedded
Redis, MiniLM; the budget given as `max_prompt_tokens` (what the model's window sets otherwise).
"""

from __future__ import annotations

import json
import random
import uuid

import pytest

from agentmem import Hygiene
from agentmem.config import Settings
from agentmem.policy import load_policy, policy_from_dict
from agentmem.store import SessionHandle
from agentmem.text import split_sentences

WORDS = ("harbour kettle station meeting migration snapshot supplier warehouse pallet audit river "
         "garden ticket payment holiday violin recipe engine bridge lantern market signal").split()
FACT = "The lighthouse keeper Ada Lovelock painted the ferry green in 1921."


@pytest.fixture(scope="module")
def hygiene(data_dir):
    engine = Hygiene("default", settings=Settings(data_dir=data_dir))
    yield engine
    engine.connector.close()


def _policy(max_prompt_tokens: int):
    settings = load_policy("default").model_dump()
    settings.update(name=f"overflow-{max_prompt_tokens}", budget={"max_prompt_tokens": max_prompt_tokens})
    return policy_from_dict(settings)


def _page(sentences: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    lines = [f"Paragraph {i} is about the " + " ".join(rng.choice(WORDS) for _ in range(16)) + "."
             for i in range(sentences)]
    lines[sentences * 2 // 3] = FACT
    return " ".join(lines)


def _step(question: str, name: str, output: str) -> list[dict]:
    call = {"id": "f1", "type": "function", "function": {"name": name, "arguments": '{"q": "ferry"}'}}
    return [{"role": "system", "content": "You are a research assistant."},
            {"role": "user", "content": question},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "f1", "content": output}]


async def test_a_page_over_the_models_window_is_cut_to_fit_and_kept_whole_in_the_store(hygiene):
    session = f"of-{uuid.uuid4().hex[:8]}"
    page = _page(400)
    history = _step("Who painted the ferry green, and when?", "web_fetch", page)
    result = await hygiene.apply(history, session_id=session, policy=_policy(1500))
    report = result.report
    assert report.tokens_before > 5000 and report.tokens_after <= 1500
    assert not any(w.startswith("budget:") for w in report.warnings), report.warnings
    assert [m["role"] for m in result.messages] == ["system", "user", "assistant", "tool"]
    sent = result.messages[-1]["content"]
    assert FACT in sent and len(sent) < len(page) / 3
    assert result.messages[1] == history[1]  # the user's message goes out as sent
    cuts = [d for run in report.stages for d in run.decisions if d.action == "prune_spans"]
    assert len(cuts) == 1 and cuts[0].message_index == 3 and "prompt budget of 1500" in cuts[0].reason
    # nothing is deleted: the stored turn is the page the tool returned
    turns = await hygiene.store().active_turns(SessionHandle(hygiene.tenant, session))
    assert turns[-1].message["content"] == page
    # within the budget the same page goes out whole
    whole = await hygiene.apply(history, session_id=f"of-{uuid.uuid4().hex[:8]}", policy=_policy(100_000))
    assert whole.messages[-1]["content"] == page
    await hygiene.drain()


async def test_a_json_answer_over_the_window_keeps_whole_records_and_parses(hygiene):
    rng = random.Random(4)
    results = [{"title": f"Result {i}", "url": f"https://example.org/{i}",
                "snippet": " ".join(rng.choice(WORDS) for _ in range(40))} for i in range(150)]
    results[97]["snippet"] = FACT
    answer = json.dumps({"query": "ferry", "results": results})
    history = _step("Who painted the ferry green?", "web_search", answer)
    result = await hygiene.apply(history, session_id=f"of-{uuid.uuid4().hex[:8]}", policy=_policy(1200))
    assert result.report.tokens_after <= 1200 < result.report.tokens_before
    sent = json.loads(result.messages[-1]["content"])  # still parses
    assert sent["query"] == "ferry" and 0 < len(sent["results"]) < 150
    assert {"title": "Result 97", "url": "https://example.org/97", "snippet": FACT} in sent["results"]
    assert all(record in results for record in sent["results"])  # whole records, verbatim
    await hygiene.drain()


async def test_a_users_own_paste_over_the_window_is_sent_as_is_and_said(hygiene):
    paste = _page(300, seed=1)
    history = [{"role": "user", "content": "Summarise this: " + paste}]
    result = await hygiene.apply(history, session_id=f"of-{uuid.uuid4().hex[:8]}", policy=_policy(1000))
    assert result.messages == history
    assert any(w.startswith("budget: ") and "over the prompt budget of 1000" in w
               for w in result.report.warnings), result.report.warnings
    await hygiene.drain()


def test_through_the_proxy_the_provider_gets_a_request_that_fits(client, received, policy_dir,
                                                                 session_id):
    """The real openai client and proxy, the loopback echo upstream as the provider."""
    (policy_dir / "overflow-proxy.yaml").write_text(
        "name: overflow-proxy\nextends: default\nbudget:\n  max_prompt_tokens: 1500\n")
    page = _page(400, seed=2)
    reply = client.chat.completions.with_raw_response.create(
        model="echo", messages=_step("Who painted the ferry green, and when?", "web_fetch", page),
        extra_headers={"X-Session-Id": session_id, "X-Agentmem-Policy": "overflow-proxy"})
    assert int(reply.headers["x-agentmem-tokens-after"]) <= 1500
    [sent] = received.requests()
    output = sent["messages"][-1]
    assert output["role"] == "tool" and output["tool_call_id"] == "f1"
    assert FACT in output["content"] and len(output["content"]) < len(page) / 3
    assert sent["messages"][-2]["tool_calls"][0]["id"] == "f1"  # the call goes with its answer


async def test_a_json_page_in_one_field_is_cut_by_its_sentences_and_parses(hygiene):
    """One record whose text field holds the page: its sentences are what is chosen among
    (agentmem.structured), so the cut keeps the record's frame and still parses."""
    page = _page(150, seed=3)
    answer = json.dumps({"title": "Ferry log", "text": page})
    history = _step("Who painted the ferry green?", "web_fetch", answer)
    result = await hygiene.apply(history, session_id=f"of-{uuid.uuid4().hex[:8]}", policy=_policy(600))
    assert result.report.tokens_after <= 600 < result.report.tokens_before
    sent = json.loads(result.messages[-1]["content"])
    assert sent["title"] == "Ferry log" and FACT in sent["text"] and len(sent["text"]) < len(page) / 3
    await hygiene.drain()


async def test_the_sentence_after_the_one_with_the_questions_words_comes_along(hygiene):
    """The answer often follows the sentence that names what was asked ("... painted the ferry
    green." / "She was the keeper's daughter, Ada Lovelock."), sharing none of its words."""
    sentences = _page(400, seed=6).split(". ")
    sentences[300] = "In the spring someone painted the ferry green"
    sentences[301] = "It was the keeper's daughter, Ada Lovelock, with a borrowed brush"
    page = ". ".join(sentences)
    history = _step("Who painted the ferry green?", "web_fetch", page)
    result = await hygiene.apply(history, session_id=f"of-{uuid.uuid4().hex[:8]}", policy=_policy(1500))
    sent = result.messages[-1]["content"]
    assert "painted the ferry green" in sent and "Ada Lovelock, with a borrowed brush" in sent
    await hygiene.drain()


async def test_a_page_in_text_parts_is_cut_in_its_part(hygiene):
    """A Messages or Responses client's tool result arrives as text parts (Claude Code's
    results are text blocks): the large part is cut, the others go as they are, and each cut
    span is where it is in the message's text (the parts joined, as stored)."""
    page = _page(400, seed=5)
    head = "Fetched https://example.org/ferry (200 OK)."
    history = _step("Who painted the ferry green, and when?", "web_fetch", "")
    history[-1] = {**history[-1], "content": [{"type": "text", "text": head}, {"type": "text", "text": page}]}
    result = await hygiene.apply(history, session_id=f"of-{uuid.uuid4().hex[:8]}", policy=_policy(1500))
    assert result.report.tokens_after <= 1500, result.report.warnings
    parts = result.messages[-1]["content"]
    assert parts[0] == {"type": "text", "text": head}
    assert FACT in parts[1]["text"] and len(parts[1]["text"]) < len(page) / 3
    [cut] = [d for run in result.report.stages for d in run.decisions if d.action == "prune_spans"]
    joined = head + page
    removed = [joined[a:b] for a, b in cut.spans]
    assert removed and all(text in page and text not in parts[1]["text"] for text in removed)
    await hygiene.drain()


async def test_two_pages_in_parts_are_both_cut_with_spans_of_the_stored_text(hygiene):
    """The larger part is cut first; the other's spans still count from the stored text's
    start (its parts joined as sent, none of them cut)."""
    first, second = _page(400, seed=6), _page(200, seed=7)
    history = _step("Who painted the ferry green, and when?", "web_fetch", "")
    history[-1] = {**history[-1], "content": [{"type": "text", "text": first},
                                             {"type": "text", "text": second}]}
    result = await hygiene.apply(history, session_id=f"of-{uuid.uuid4().hex[:8]}", policy=_policy(1200))
    assert result.report.tokens_after <= 1200, result.report.warnings
    parts = [part["text"] for part in result.messages[-1]["content"]]
    assert len(parts[0]) < len(first) and len(parts[1]) < len(second)
    cuts = [d for run in result.report.stages for d in run.decisions if d.action == "prune_spans"]
    assert len(cuts) == 2
    joined = first + second
    sentences = {text[s.start:s.end] for text in (first, second) for s in split_sentences(text)}
    spans = sorted(span for cut in cuts for span in cut.spans)
    assert any(a >= len(first) for a, _ in spans)  # the second part's spans past the first's end
    for a, b in spans:
        removed = joined[a:b]
        assert removed in sentences and removed not in parts[0] + parts[1], removed
    await hygiene.drain()


async def test_a_steps_later_call_cuts_its_page_from_the_first_calls_reading(hygiene):
    """The page stays in the agent step and over the budget, so each of the step's calls cuts
    it for the same user message: the later calls reuse the first call's reading of it (its
    sentences, their tokens and scores) and cut it to what the step leaves."""
    from agentmem.stages.overflow import read_output

    session = f"of-{uuid.uuid4().hex[:8]}"
    history = _step("Who painted the ferry green, and when?", "web_fetch", _page(400, seed=7))
    first = await hygiene.apply(history, session_id=session, policy=_policy(1500))
    hits = read_output.cache_info().hits
    call = {"id": "f2", "type": "function", "function": {"name": "web_fetch", "arguments": "{}"}}
    history += [{"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "f2", "content": "No further pages on the ferry."}]
    second = await hygiene.apply(history, session_id=session, policy=_policy(1500))
    assert read_output.cache_info().hits == hits + 1
    assert FACT in first.messages[3]["content"] and FACT in second.messages[3]["content"]
    assert second.report.tokens_after <= 1500 and second.messages[-1] == history[-1]


async def test_an_agents_page_goes_out_as_first_cut_while_its_step_fits(hygiene):
    """An agent step with a page over the budget: the first cut leaves the budget stage's
    fixed share free, so the step's next small result goes out after the same page (a
    provider's prompt cache holds through it); a result larger than that room cuts it again."""
    tools = [{"type": "function", "function": {"name": "web_fetch", "description": "Fetch a page.",
                                               "parameters": {"type": "object", "properties": {}}}}]
    session = f"of-{uuid.uuid4().hex[:8]}"
    history = _step("Who painted the ferry green, and when?", "web_fetch", _page(400, seed=11))

    def more(number: int, result: str) -> list[dict]:
        call = {"id": f"f{number}", "type": "function", "function": {"name": "web_fetch", "arguments": "{}"}}
        return [{"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": f"f{number}", "content": result}]

    first = await hygiene.apply(history, tools=tools, session_id=session, policy=_policy(1500))
    history += more(2, "No further pages on the ferry.")
    second = await hygiene.apply(history, tools=tools, session_id=session, policy=_policy(1500))
    history += more(3, _page(14, seed=12))  # ~300 tokens: more than a tenth of the budget
    third = await hygiene.apply(history, tools=tools, session_id=session, policy=_policy(1500))
    page = first.messages[3]["content"]
    assert FACT in page and first.report.tokens_after <= 1500 - 150  # the room kept free
    assert second.messages[3] == first.messages[3]  # the same cut, byte for byte
    assert second.messages[-1] == history[-3] and second.report.tokens_after <= 1500
    assert len(third.messages[3]["content"]) < len(page) and third.report.tokens_after <= 1500
    assert FACT in third.messages[3]["content"]
