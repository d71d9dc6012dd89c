"""The prune stage with the shipped checkpoint, the highlight endpoint, and `bench prune`."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import uuid

import httpx
import numpy as np
import pytest

from agentmem import Hygiene
from agentmem.config import Settings
from agentmem.conversation import continues_step, query_of, recent_start
from agentmem.models.registry import default_pruner_path
from agentmem.policy import policy_from_dict
from agentmem.stages.prune import expand
from tests.block_reads import SENTENCES, record_threads
from tests.conversations import SHOPPING_HISTORY as HISTORY


@pytest.fixture(scope="module")
def hygiene(data_dir):
    engine = Hygiene("default", settings=Settings(data_dir=data_dir))
    # Loaded as on a ready server: a call while MiniLM loads skips the stage by design, and
    # whether the first call saw the load under way depended on how soon its prefetch started.
    engine.embedder.load()
    yield engine
    engine.connector.close()


def _policy(**prune):
    prune = {"history_floor_tokens": 0, "history_fraction": 0.4, **prune}
    return policy_from_dict({"name": "prune-test", "stages": ["prune"], "embed": False, "prune": prune})


async def test_a_request_to_sum_up_the_conversation_leaves_the_history_whole(hygiene):
    """"Summarise everything we discussed" needs every older turn; scored against it they all
    look alike, and the budget's share would be all the summary could cover. The same history
    with a question about one thing in it is still pruned; the setting turns the rule off."""
    from agentmem.stages.prune import RECAP

    recap = [*HISTORY[:-1], {"role": "user", "content": "Can you summarise everything we discussed so far?"}]
    result = await hygiene.apply(recap, session_id=f"pr-{uuid.uuid4().hex}", policy=_policy())
    assert result.messages == recap and result.report.stages[0].skipped == RECAP
    assert not result.report.stages[0].decisions
    off = await hygiene.apply(recap, session_id=f"pr-{uuid.uuid4().hex}",
                              policy=_policy(keep_history_for_recaps=False))
    assert off.report.tokens_after < off.report.tokens_before and not off.report.stages[0].skipped
    asked = await hygiene.apply(HISTORY, session_id=f"pr-{uuid.uuid4().hex}", policy=_policy())
    assert asked.report.tokens_after < asked.report.tokens_before


async def test_prune_keeps_what_the_question_needs(hygiene):
    result = await hygiene.apply(HISTORY, session_id=f"pr-{uuid.uuid4().hex}", policy=_policy())
    sent = [m.get("content") for m in result.messages]
    report = result.report
    assert not report.warnings and report.stages[0].stage == "prune"
    assert any("5512" in (c or "") and "Lyon" in (c or "") for c in sent)  # the evidence survives
    assert not any("spaghetti" in (c or "") for c in sent)  # the irrelevant exchange does not
    assert report.tokens_after < report.tokens_before
    # system and the last two exchanges are still there, in order; the unrelated inventory
    # call went as a whole unit (its textless call message with its result)
    assert result.messages[0] is HISTORY[0]
    assert result.messages[-3:] == HISTORY[-3:]
    roles = [m["role"] for m in result.messages]
    assert roles.count("tool") == 0 and not any(m.get("tool_calls") for m in result.messages)
    decisions = report.stages[0].decisions
    assert decisions and all(d.reason and d.score is not None for d in decisions)
    assert report.tokens_after <= 0.4 * report.tokens_before + 80  # the 40% history budget held
    assert {d.action for d in decisions} <= {"drop_message", "prune_spans"}


async def test_the_older_history_never_opens_with_the_assistants_turn(hygiene):
    """Bedrock's Claude and Gemini refuse a conversation whose first turn is the assistant's.
    When the cut keeps an answer but not the question before it, that question comes back
    with its best sentence; the answer stays and so does the cut elsewhere."""
    filler = [("Could you recommend a good book about sailing?",
               "Try 'The Riddle of the Sands'; it is a classic sailing story."),
              ("What should I cook for dinner tonight?",
               "A simple risotto with mushrooms and parmesan would be lovely."),
              ("Any tips for keeping houseplants alive in winter?",
               "Water less often, keep them away from radiators and give them light."),
              ("How do I clean a cast iron pan?",
               "Rinse it with hot water, dry it well and rub in a thin layer of oil.")] * 3
    history = [{"role": "system", "content": "You are a helpful assistant."},
               {"role": "user", "content": "Hello there, I hope your day is going well."},
               {"role": "assistant", "content": "The harbour lantern is lit by the keeper Ada "
                "at six in the evening every day."}]
    for question, answer in filler:
        history += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
    history.append({"role": "user", "content": "When does the keeper light the harbour lantern?"})
    result = await hygiene.apply(history, session_id=f"pr-{uuid.uuid4().hex}",
                                 policy=_policy(history_fraction=0.15))
    sent = result.messages
    assert any("six in the evening" in (m.get("content") or "") for m in sent)  # the evidence
    assert len(sent) < len(history)  # the older history was cut
    assert sent[0]["role"] == "system" and sent[1]["role"] == "user"
    assert sent[1]["content"] == history[1]["content"]


async def test_a_tool_call_the_stage_cannot_drop_does_not_open_the_history(hygiene):
    """An old tool call whose result the stage does not read (a screenshot's parts) goes out
    whole with its call: the question that asked for it comes back before it, or the request
    would open with the assistant's turn (Anthropic refuses that; audit 9)."""
    call = {"role": "assistant", "content": None, "tool_calls": [{
        "id": "shot", "type": "function",
        "function": {"name": "screenshot", "arguments": json.dumps({"page": "checkout"})}}]}
    shot = {"role": "tool", "tool_call_id": "shot", "content": [
        {"type": "text", "text": "Screenshot of the checkout page."},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]}
    history = [{"role": "system", "content": "You are a helpful assistant."},
               {"role": "user", "content": "Take a screenshot of the checkout page please."},
               call, shot, {"role": "assistant", "content": "Here is the checkout page."}]
    for number in range(12):
        history += [{"role": "user", "content": f"Tell me fact number {number} about the moon "
                     "and its craters, orbit and tides in detail."},
                    {"role": "assistant", "content": f"Fact {number}: the moon's craters and "
                     "orbit shape the tides on the coast every day of the year."}]
    history.append({"role": "user", "content": "Which fact mentioned the tides on the coast?"})
    result = await hygiene.apply(history, session_id=f"pr-{uuid.uuid4().hex}",
                                 policy=_policy(history_fraction=0.15))
    sent = result.messages
    assert len(sent) < len(history) and shot in sent  # cut, and the screenshot kept whole
    assert sent[0]["role"] == "system" and sent[1]["role"] == "user"
    assert sent[2] == call


async def test_the_failing_line_of_an_older_test_log_is_kept_and_the_rest_cut(hygiene):
    """A test run's log read three exchanges ago: "which test failed?" keeps the FAILED line
    (with a mark where lines were cut), not the 200 PASSED lines around it, and not nothing
    (one 10,000-character span went whole or not at all; audit 8)."""
    lines = [f"tests/test_mod{i}.py::test_case_{i} PASSED [{i // 2}%]" for i in range(200)]
    lines[120] = "tests/test_pricing.py::test_apply_discount FAILED [60%]"
    call = {"role": "assistant", "content": None, "tool_calls": [{
        "id": "run", "type": "function",
        "function": {"name": "bash", "arguments": json.dumps({"command": "pytest"})}}]}
    history = [{"role": "system", "content": "You are a coding agent."},
               {"role": "user", "content": "Run the test suite please."}, call,
               {"role": "tool", "tool_call_id": "run", "content": "\n".join(lines)},
               {"role": "assistant", "content": "One test failed; the others passed."}]
    for topic in ("lunch", "the weather", "a good book"):
        history += [{"role": "user", "content": f"Unrelated: any ideas for {topic}?"},
                    {"role": "assistant", "content": f"Some thoughts about {topic} follow here."}]
    history.append({"role": "user", "content": "Which test failed in that run?"})
    result = await hygiene.apply(history, session_id=f"pr-{uuid.uuid4().hex}",
                                 policy=_policy(history_fraction=0.15))
    log = next(m["content"] for m in result.messages if m.get("role") == "tool")
    assert "test_apply_discount FAILED" in log and "lines not sent" in log
    assert len(log) < len(history[3]["content"]) / 2


async def test_two_stage_mode_lets_the_pruner_rescore_recalled_turns(hygiene):
    result = await hygiene.apply(HISTORY, session_id=f"pr-{uuid.uuid4().hex}",
                                 policy=_policy(rerank_turns=3, rerank_weight=2.0))
    assert not result.report.warnings and result.report.stages[0].error is None
    sent = " ".join(m.get("content") or "" for m in result.messages)
    assert "5512" in sent and "Lyon" in sent and "spaghetti" not in sent


async def test_recent_window_and_off_switches(hygiene):
    everything = _policy(keep_recent_exchanges=10)
    result = await hygiene.apply(HISTORY, session_id=f"pr-{uuid.uuid4().hex}", policy=everything)
    assert result.messages is HISTORY  # nothing old enough to prune: the request is untouched
    generous = _policy(history_fraction=1.0)
    result = await hygiene.apply(HISTORY, session_id=f"pr-{uuid.uuid4().hex}", policy=generous)
    assert result.messages is HISTORY
    small = _policy(history_floor_tokens=4096)  # short histories are never pruned
    result = await hygiene.apply(HISTORY, session_id=f"pr-{uuid.uuid4().hex}", policy=small)
    assert result.messages is HISTORY


def _inventory_step(output: str) -> list[dict]:
    """An agent step asking about the red mugs, its inventory call and the tool's ``output``."""
    return [HISTORY[0], {"role": "user", "content": "How many red mugs are in stock? [[tool:inventory]]"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "inventory", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": output}]


def _mug_lookup(log_lines: int) -> tuple[str, list[dict], list[dict]]:
    """A tool output hiding one fact in the middle of ``log_lines`` log lines; the agent step
    that fetched it (the output is the step's own), and the history one exchange later (the
    output then sits in the recent window, where the stage prunes it)."""
    noise = [f"Log line {i}: the nightly backup of server {i} finished without errors."
             for i in range(log_lines)]
    fact = ["Warehouse Rotterdam reports 14 red mugs in stock on shelf B4."]
    output = " ".join(noise[:log_lines // 2] + fact + noise[log_lines // 2:])
    step = _inventory_step(output)
    later = [*step, {"role": "assistant", "content": "Let me check that."},
             {"role": "user", "content": "So how many red mugs are in stock?"}]
    return output, step, later


async def test_large_tool_output_in_the_recent_window_is_pruned_by_provence(hygiene):
    output, _, history = _mug_lookup(60)
    result = await hygiene.apply(history, session_id=f"pr-{uuid.uuid4().hex}",
                                 policy=_policy(keep_recent_exchanges=2, large_tool_output_tokens=200))
    tool = next(m for m in result.messages if m["role"] == "tool")
    assert "14 red mugs" in tool["content"] and len(tool["content"]) < len(output) / 3
    assert len(result.messages) == len(history)  # the unit and every message stay
    [decision] = [d for d in result.report.stages[0].decisions if d.message_index == 3]
    assert decision.action == "prune_spans" and "pruner" in decision.reason
    assert len(decision.spans) == len(decision.span_scores) > 40


def _file_read(request: str, path: str, output: str) -> list[dict]:
    """A session whose agent read a file for the user's request."""
    return [HISTORY[0], {"role": "user", "content": request},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "r1", "type": "function",
                 "function": {"name": "read_file", "arguments": json.dumps({"path": path})}}]},
            {"role": "tool", "tool_call_id": "r1", "content": output}]


async def test_a_file_an_agent_read_in_the_recent_window_reaches_the_model_verbatim(hygiene):
    """Source code is machine text: the prose pruner cut this 700-line module to a docstring's
    two sentences (387 of 42,000 characters), leaving a coding agent to edit a file it could
    no longer see. The same call still prunes a prose output of the same size."""
    import inspect

    import agentmem.stages.prune as module

    source = inspect.getsource(module)
    prose, _, _ = _mug_lookup(400)
    for output, verbatim in ((source, True), (prose, False)):
        history = [*_file_read("Why does the stage keep the recent exchanges?", "prune.py", output),
                   {"role": "user",
                    "content": "Fix the bug in _score_windows: why are the recent exchanges kept?"}]
        result = await hygiene.apply(history, session_id=f"pr-{uuid.uuid4().hex}",
                                     policy=_policy(keep_recent_exchanges=2, large_tool_output_tokens=200))
        tool = next(m for m in result.messages if m["role"] == "tool")
        assert (tool["content"] == output) is verbatim
        assert verbatim or len(tool["content"]) < len(output) / 3


async def test_a_code_read_cut_in_older_history_marks_where_lines_are_missing(hygiene):
    """Behind the recent window a file read is cut to the blocks the question needs; read as
    contiguous, the cut file says an import or a function is not there. Each cut is marked,
    and between the marks is the file's own text in order; a prose output is cut without marks."""
    import inspect
    import re

    import agentmem.stages.prune as module

    source = inspect.getsource(module)
    prose, _, _ = _mug_lookup(400)
    filler = [{"role": "user", "content": "Did the build pass?"},
              {"role": "assistant", "content": "Yes."}] * 3
    for output, marked in ((source, True), (prose, False)):
        history = [*_file_read("Have a look at prune.py.", "prune.py", output),
                   {"role": "assistant", "content": "Read it."}, *filler,
                   {"role": "user", "content": "What does _shrink do with the kept sentences?"}]
        result = await hygiene.apply(history, session_id=f"pr-{uuid.uuid4().hex}",
                                     policy=_policy(keep_recent_exchanges=2, history_fraction=0.2))
        tool = next(m for m in result.messages if m["role"] == "tool")["content"]
        assert 0 < len(tool) < len(output) / 2
        assert ("lines not sent ...]" in tool) is marked
        if marked:  # between the marks: the file's own text, in order
            at = 0
            for piece in re.split(r"\[\.\.\. \d+ lines? not sent \.\.\.\]", tool):
                at = source.index(piece.strip(), at) + len(piece.strip())


def _tool(name: str, **properties: dict) -> dict:
    return {"type": "function", "function": {
        "name": name, "parameters": {"type": "object", "properties": properties}}}


async def test_a_prose_file_read_by_path_goes_out_whole_when_the_agent_can_edit_files(hygiene):
    """A README the agent read is prose, and the pruner would cut it to the sentences about the
    question; the edit that follows needs its exact text. Sent whole only when the call named
    a local file and the request offers a tool that edits files: the same text fetched by URL,
    or read by an agent that cannot edit, or with the setting off, is pruned as before."""
    document, _, _ = _mug_lookup(400)
    read, edit = _tool("read_file", path={"type": "string"}), _tool("edit_file", path={"type": "string"})
    shell, patch = _tool("shell", command={"type": "array"}), _tool("apply_patch", input={"type": "string"})
    cases = [  # (call name, arguments, tools offered, setting, sent whole)
        ("read_file", {"path": "docs/inventory.md"}, [read, edit], True, True),
        ("shell", {"command": ["bash", "-lc", "cat docs/inventory.md"]}, [shell, patch], True, True),
        ("read_file", {"path": "docs/inventory.md"}, [read], True, False),
        ("fetch", {"url": "https://example.org/inventory.md"}, [read, edit], True, False),
        ("read_file", {"path": "docs/inventory.md"}, [read, edit], False, False),
    ]
    for name, arguments, tools, setting, whole in cases:
        history = [HISTORY[0], {"role": "user", "content": "Have a look at the inventory notes."},
                   {"role": "assistant", "content": None, "tool_calls": [
                       {"id": "f1", "type": "function",
                        "function": {"name": name, "arguments": json.dumps(arguments)}}]},
                   {"role": "tool", "tool_call_id": "f1", "content": document},
                   {"role": "assistant", "content": "I read them."},
                   {"role": "user", "content": "Correct the number of red mugs in the notes."}]
        result = await hygiene.apply(history, tools=tools, session_id=f"pr-{uuid.uuid4().hex}",
                                     policy=_policy(keep_recent_exchanges=2, large_tool_output_tokens=200,
                                                    file_reads_as_read=setting))
        tool = next(m for m in result.messages if m["role"] == "tool")
        assert (tool["content"] == document) is whole, (name, arguments, setting)
        assert whole or ("14 red mugs" in tool["content"] and len(tool["content"]) < len(document) / 3)


async def test_tool_output_floor_keeps_a_share_whatever_the_threshold(hygiene):
    lines = [f"Record {i}: the shipment to depot {i} left on time with {i + 3} pallets." for i in range(40)]
    output = " ".join(lines)
    history = [HISTORY[0], {"role": "user", "content": "Which shipments left late? [[tool:log]]"},
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "c2", "type": "function", "function": {"name": "log", "arguments": "{}"}}]},
               {"role": "tool", "tool_call_id": "c2", "content": output},
               {"role": "user", "content": "So which shipments left late?"}]
    shares = {}
    for floor, most in ((0.0, None), (0.3, 100_000), (0.3, 60)):
        policy = _policy(keep_recent_exchanges=2, large_tool_output_tokens=200, threshold=1.0,
                         floor=floor, floor_tokens=most)
        result = await hygiene.apply(history, session_id=f"pr-{uuid.uuid4().hex}", policy=policy)
        tool = next(m for m in result.messages if m["role"] == "tool")
        shares[floor, most] = len(tool["content"]) / len(output)
    assert shares[0.0, None] < 0.05  # threshold 1 keeps nothing: only the one best sentence survives
    assert 0.28 <= shares[0.3, 100_000] < 0.4  # the floor: 30% of the tokens (measured in characters)
    assert 0.05 < shares[0.3, 60] < 0.15  # ... but at most 60 tokens of the ~700 (floor_tokens)


async def test_tool_output_cosines_come_from_its_stored_vectors_once_ingest_embedded_it(hygiene):
    """The keep rule needs each sentence's cosine to the query. A tool output from an earlier
    exchange was embedded after that reply: the stage reads those vectors (no encode of the
    output's sentences on the call path) and decides exactly as when it embeds them itself."""
    output, step, later = _mug_lookup(40)
    policy = policy_from_dict({"name": "prune-embed-test", "stages": ["prune"], "prune": {
        "history_floor_tokens": 0, "keep_recent_exchanges": 2, "large_tool_output_tokens": 200}})
    encoded: list[int] = []
    encode = hygiene.embedder.encode

    def counting(texts, *args, **kwargs):
        encoded.append(len(texts))
        return encode(texts, *args, **kwargs)

    stored, fresh = f"pr-{uuid.uuid4().hex}", f"pr-{uuid.uuid4().hex}"
    await hygiene.apply(step, session_id=stored, policy=policy)  # the output arrives (current step)
    await hygiene.drain()  # ... and is embedded after that call
    hygiene.embedder.encode = counting
    try:
        from_store = await hygiene.apply(later, session_id=stored, policy=policy)
        during_call = list(encoded)
        embedded_now = await hygiene.apply(later, session_id=fresh, policy=policy)
    finally:
        hygiene.embedder.encode = encode
    assert all(n < 40 for n in during_call)  # at most the query, never the output's 41
    assert any(n > 40 for n in encoded[len(during_call):])  # a new session embeds them
    tool = next(m for m in from_store.messages if m["role"] == "tool")
    assert "14 red mugs" in tool["content"] and len(tool["content"]) < len(output) / 3
    assert tool == next(m for m in embedded_now.messages if m["role"] == "tool")


async def test_a_recent_tool_output_unrelated_to_the_question_is_not_read(hygiene, monkeypatch):
    """Every sentence of the output is under the keep rule's least cosine to the question, so
    the rule could keep nothing but its floor whatever the model said: the pruner does not read
    it (its ~250 ms read on two cores), and the message keeps what a read would have kept. A
    related question still has it read."""
    from agentmem.models.keep_rule import KeepRule
    from agentmem.models.pruner import cached_pruner

    output, _, history = _mug_lookup(60)
    unrelated = [*history[:-1], {"role": "user", "content": "Can you recommend a pasta recipe?"}]
    policy = _policy(keep_recent_exchanges=2, large_tool_output_tokens=200)
    pruner = cached_pruner(default_pruner_path())
    blocks: list[int] = []
    forward = pruner.forward_blocks

    def counting(chunk, *args, **kwargs):
        blocks.append(len(chunk))
        return forward(chunk, *args, **kwargs)

    monkeypatch.setattr(pruner, "forward_blocks", counting)
    skipped = await hygiene.apply(unrelated, session_id=f"pr-{uuid.uuid4().hex}", policy=policy)
    assert blocks == []  # not read
    [decision] = [d for d in skipped.report.stages[0].decisions if d.message_index == 3]
    assert decision.action == "prune_spans" and "not read by the pruner" in decision.reason
    assert max(decision.span_scores) < 0.3  # each removed sentence's query cosine
    tool = next(m for m in skipped.messages if m["role"] == "tool")
    assert 0 < len(tool["content"]) < len(output) / 10  # the floor: ~40 tokens

    monkeypatch.setattr(KeepRule, "out_of_reach", lambda self, similarities: False)
    read = await hygiene.apply(unrelated, session_id=f"pr-{uuid.uuid4().hex}", policy=policy)
    assert sum(blocks) >= 2  # ~1,000 tokens: read in two or more blocks
    assert next(m for m in read.messages if m["role"] == "tool") == tool  # the same keep
    monkeypatch.undo()

    blocks.clear()
    monkeypatch.setattr(pruner, "forward_blocks", counting)
    related = await hygiene.apply(history, session_id=f"pr-{uuid.uuid4().hex}", policy=policy)
    assert sum(blocks) >= 2  # the mug question is related: read
    assert "14 red mugs" in next(m for m in related.messages if m["role"] == "tool")["content"]


async def test_an_agent_steps_later_calls_get_the_same_older_history(hygiene):
    """The step's second call holds its tool result, which would steer the older history
    elsewhere (the pasta exchange); with ``step_stable`` (the default) the history before the
    step is what the step's first call sent, byte for byte (a provider's prompt cache keeps
    serving it), and the stage's decisions are replayed, not recomputed."""
    step = [{"role": "assistant", "content": None, "tool_calls": [
                {"id": "t9", "type": "function", "function": {"name": "recipes", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "t9",
             "content": "Spaghetti aglio e olio: pasta, garlic, olive oil, chili flakes, parsley."}]
    first_call, second_call = HISTORY, [*HISTORY, *step]
    before_step = len(HISTORY) - 1

    def prefix(result):
        return [m for i, m in zip(result.kept_indices, result.messages) if i < before_step]

    outgoing = {}
    for stable in (True, False):
        policy = _policy(keep_recent_exchanges=1, history_fraction=0.3, step_stable=stable)
        session = f"pr-{uuid.uuid4().hex}"
        first = await hygiene.apply(first_call, session_id=session, policy=policy)
        await hygiene.drain()
        second = await hygiene.apply(second_call, session_id=session, policy=policy)
        [run] = [r for r in second.report.stages if r.stage == "prune"]
        assert run.replayed is stable
        assert bool(run.decisions) and (run.decisions == first.report.stages[0].decisions) is stable
        outgoing[stable] = prefix(first), prefix(second)
    assert outgoing[True][0] == outgoing[True][1]  # the same prefix, byte for byte
    assert outgoing[False][0] != outgoing[False][1]  # decided anew: the pasta turns come back
    assert any("spaghetti" in json.dumps(m).lower() for m in outgoing[False][1])
    assert not any("spaghetti" in json.dumps(m).lower() for m in outgoing[True][1])

    # a new step (another user message) decides anew
    policy = _policy(keep_recent_exchanges=1, history_fraction=0.3)
    session = f"pr-{uuid.uuid4().hex}"
    await hygiene.apply(first_call, session_id=session, policy=policy)
    await hygiene.drain()
    later = [*second_call, {"role": "assistant", "content": "Found a recipe."},
             {"role": "user", "content": "And my kettle order number?"}]
    result = await hygiene.apply(later, session_id=session, policy=policy)
    assert not next(r for r in result.report.stages if r.stage == "prune").replayed


async def test_an_agent_steps_later_call_does_not_embed_its_query_when_it_replays(hygiene, monkeypatch):
    """A step's later call replays the first call's decisions, so its query (which holds the
    new tool result) is not embedded: before, the prefetch took a core from the call's other
    work for nothing. When there is no first call to replay (another session), the stage
    embeds the query itself and prunes as it would have with the prefetch."""
    from agentmem.stages.prune import PruneStage

    step = [{"role": "assistant", "content": None, "tool_calls": [
                {"id": "t7", "type": "function", "function": {"name": "recipes", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "t7",
             "content": "Shakshuka: eggs poached in a tomato and pepper sauce with cumin."}]
    second_call = [*HISTORY, *step]
    query = query_of(second_call)
    policy = _policy(keep_recent_exchanges=1, history_fraction=0.3)
    assert PruneStage().wants_query(policy, {"messages": HISTORY}) == [query_of(HISTORY)]
    assert PruneStage().wants_query(policy, {"messages": second_call}) == []
    unstable = _policy(keep_recent_exchanges=1, history_fraction=0.3, step_stable=False)
    assert PruneStage().wants_query(unstable, {"messages": second_call}) == [query]

    embedded: list[str] = []
    encode = hygiene.embedder.encode

    def recording(texts):
        embedded.extend(texts)
        return encode(texts)

    monkeypatch.setattr(hygiene.embedder, "encode", recording)
    session = f"pr-{uuid.uuid4().hex}"
    await hygiene.apply(HISTORY, session_id=session, policy=policy)
    await hygiene.drain()
    embedded.clear()
    replayed = await hygiene.apply(second_call, session_id=session, policy=policy)
    assert next(r for r in replayed.report.stages if r.stage == "prune").replayed
    assert query not in embedded

    alone = await hygiene.apply(second_call, session_id=f"pr-{uuid.uuid4().hex}", policy=policy)
    [run] = [r for r in alone.report.stages if r.stage == "prune"]
    assert not run.replayed and run.decisions
    assert query in embedded  # embedded by the stage, on demand
    hygiene.state.queries._done.pop(query, None)  # as if prefetched: the same decisions
    prefetched = await hygiene.apply(second_call, session_id=f"pr-{uuid.uuid4().hex}", policy=unstable)
    assert [d.model_dump() for d in run.decisions] == \
        [d.model_dump() for d in next(r for r in prefetched.report.stages if r.stage == "prune").decisions]


def test_helpers():
    assert recent_start(HISTORY, 2) == 9 and recent_start(HISTORY, 1) == 11
    called = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "t1", "type": "function", "function": {"name": "stock", "arguments": "{}"}}]}
    legacy = {"role": "assistant", "content": None, "function_call": {"name": "stock", "arguments": "{}"}}
    assert not continues_step(HISTORY)  # the step's first call
    assert continues_step([*HISTORY, called, {"role": "tool", "tool_call_id": "t1", "content": "3"}])
    assert continues_step([*HISTORY, legacy, {"role": "function", "name": "stock", "content": "3"}])
    assert not continues_step([called, {"role": "tool", "tool_call_id": "t1", "content": "3"}])  # no user
    assert not continues_step([*HISTORY, called, {"role": "user", "content": "And the mugs?"}])
    assert expand([False, True, False, False], 1) == [True, True, True, False]
    agent_step = HISTORY[:6] + [HISTORY[6], HISTORY[7]]
    query = query_of(agent_step)
    assert query.startswith("Also check the stock") and "inventory" in query and "14 in stock" in query


def test_highlight_endpoint(proxy):
    text = "My order number is 5512. The weather in Madrid is sunny. Pasta takes fifteen minutes."
    response = httpx.post(f"{proxy.url}/v1/highlight", json={"query": "What is my order number?",
                                                            "text": text}, timeout=120)
    assert response.status_code == 200, response.text
    data = response.json()
    sentences = data["sentences"]
    assert [text[s["start"]:s["end"]] for s in sentences] == [s["text"] for s in sentences]
    assert sentences[0]["kept"] and sentences[0]["probability"] == max(s["probability"] for s in sentences)
    assert data["highlighted"].startswith("My order number is 5512.")
    bad = httpx.post(f"{proxy.url}/v1/highlight", json={"query": "q", "text": "t", "sentences": ["s"]})
    assert bad.status_code == 400 and "exactly one" in bad.json()["error"]["message"]
    assert data["floor"] == 0.0 or data["floor"] > 0  # the checkpoint's calibrated floor, reported
    from agentmem.models.pruner import cached_pruner
    from agentmem.models.registry import default_pruner_path

    pruner = cached_pruner(default_pruner_path())
    assert data["floor_tokens"] == pruner.floor_tokens and data["bridge"] == pruner.bridge  # its rule
    assert (data["fuse_cosine"], data["fuse_lexical"], data["margin"], data["name_bridge"]) == (
        pruner.fuse_cosine, pruner.fuse_lexical, pruner.margin, pruner.name_bridge)
    assert pruner.name_bridge > 0  # the shipped rule follows a second hop's name


def test_highlight_floor_keeps_the_best_sentences_whatever_the_threshold(proxy):
    sentences = ["My order number is 5512.", "The weather in Madrid is sunny today.",
                 "Pasta takes fifteen minutes.", "The kettle is blue."]
    body = {"query": "What is my order number?", "sentences": sentences, "threshold": 1.0}
    none = httpx.post(f"{proxy.url}/v1/highlight", json={**body, "floor": 0.0}, timeout=120).json()
    assert none["highlighted"] == "" and none["floor"] == 0.0
    some = httpx.post(f"{proxy.url}/v1/highlight", json={**body, "floor": 0.2}, timeout=120).json()
    kept = [s for s in some["sentences"] if s["kept"]]
    assert [s["text"] for s in kept] == ["My order number is 5512."]  # the best, enough for 20%
    assert some["threshold"] == 1.0 and some["floor"] == 0.2
    bad = httpx.post(f"{proxy.url}/v1/highlight", json={**body, "floor": 1.5})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "floor"
    tokens = httpx.post(f"{proxy.url}/v1/highlight", json={**body, "token_scores": True},
                        timeout=120).json()["sentences"]
    first = tokens[0]["tokens"]  # MiniLM word pieces of "My order number is 5512."
    assert [t["token"] for t in first][:3] == ["my", "order", "number"]
    assert first[0]["probability"] != first[-1]["probability"] or len(first) == 1
    assert abs(sum(t["probability"] for t in first) / len(first) - tokens[0]["probability"]) < 1e-5
    assert "tokens" not in some["sentences"][0]  # only when asked


def test_highlight_reads_a_long_text_on_several_workers_as_process_decides(proxy, monkeypatch):
    """A long text's blocks are read by idle workers in parallel, as the stage reads a large
    tool output, and the answer is what ``process`` answers reading the text in one pass."""
    from agentmem.models.embedder import default_embedder
    from agentmem.models.keep_rule import KeepRule
    from agentmem.models.pruner import cached_pruner
    from agentmem.models.runtime import scheduler

    text, query = " ".join(SENTENCES), "Which database stores the sessions?"
    pruner = cached_pruner(default_pruner_path())
    [(_, read)] = pruner.passages(query, text, title=None)
    assert len(pruner.blocks(query, read)) >= 3
    threads = record_threads(monkeypatch, pruner)
    data = httpx.post(f"{proxy.url}/v1/highlight", json={"query": query, "text": text},
                      timeout=120).json()
    monkeypatch.undo()
    fields = {name: data[name] for name in KeepRule.__dataclass_fields__}
    one_pass = pruner.process(query, text, title=None, encode=default_embedder().encode,
                              keep_rule=KeepRule(**fields))
    assert [s["kept"] for s in data["sentences"]] == [s["kept"] for s in one_pass["sentences"]]
    np.testing.assert_allclose([s["probability"] for s in data["sentences"]],
                               [s["probability"] for s in one_pass["sentences"]], atol=1e-4)
    assert data["highlighted"] == one_pass["pruned_context"]
    assert "Redis" in data["highlighted"]
    if scheduler().call_path.workers >= 2:
        assert len(threads) >= 2


def test_highlight_embeds_a_text_seen_before_only_for_the_new_query():
    """Sentence vectors do not depend on the query: a text highlighted again embeds only the
    query (per tenant: another tenant's identical text is embedded anew), with the decisions
    of a highlight that embeds everything."""
    from agentmem.models.array_cache import ArrayCache
    from agentmem.models.embedder import default_embedder
    from agentmem.models.pruner import cached_pruner
    from agentmem.proxy.highlight import highlight_passage

    pruner, embedder = cached_pruner(default_pruner_path()), default_embedder()
    rule, cache, embedded = pruner.keep_rule(), ArrayCache(100), []

    def encode(texts):
        embedded.extend(texts)
        return embedder.encode(texts)

    text = " ".join(SENTENCES[36:46])
    first, second = "Which database stores the sessions?", "Which host got build 38?"

    async def highlights():
        out = []
        for query, scope in ((first, "alpha"), (second, "alpha"), (second, "beta")):
            embedded.clear()
            result = await highlight_passage(pruner, encode, query, text, rule, cache=cache,
                                             scope=scope)
            out.append((result, list(embedded)))
        return out, await highlight_passage(pruner, encode, second, text, rule)

    [(_, cold), (again, warm), (_, other_tenant)], uncached = asyncio.run(highlights())
    assert sorted(cold) == sorted([first, *SENTENCES[36:46]])
    assert warm == [second]  # the sentences' vectors came from the cache
    assert sorted(other_tenant) == sorted([second, *SENTENCES[36:46]])
    assert again == uncached and "host-3" in again["pruned_context"]


def test_bench_prune_runs_on_a_prune_file(tmp_path):
    rows = [
        {"id": "1", "question": "In what country is Normandy located?", "title": "Normans",
         "sentences": ["The Normans gave their name to Normandy, a region in France.",
                       "They were descended from Norse raiders.", "Their leader was Rollo."],
         "labels": [1, 0, 0]},
        {"id": "2", "question": "Who was the first king of Poland?", "title": "Warsaw",
         "sentences": ["Warsaw is the capital of Poland.", "It lies on the Vistula river."],
         "labels": [0, 0]},
    ]
    data = tmp_path / "prune.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = tmp_path / "result.json"
    run = subprocess.run([sys.executable, "-m", "agentmem", "bench", "prune", "--data", str(data),
                          "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    result = json.loads(out.read_text())
    assert {"n", "precision", "recall", "f1", "micro_f1", "negative_keep_rate", "compression",
            "threshold"} <= set(result)
    assert result["n"] == 2 and "embedding_cosine" in result["baselines"]
    assert default_pruner_path().endswith("pruner-minilm")


async def test_budget_keeps_order_units_and_the_most_relevant(hygiene):
    from agentmem.ingest import messages_tokens

    old = []
    topics = ["the weather in Madrid is sunny", "a pasta recipe with garlic", "football results",
              "my order 5512 ships to Lyon", "a poem about the sea", "the price of train tickets"]
    for topic in topics:
        old += [{"role": "user", "content": f"Tell me about {topic}. Please be detailed."},
                {"role": "assistant", "content": f"Here is what I know about {topic}. It is interesting."}]
    # the tool-call exchange is old here, so the budget may drop it, but only as a whole
    history = [HISTORY[0], *HISTORY[5:9], *old, {"role": "user", "content": "Where does order 5512 ship to?"}]
    pinned = messages_tokens([history[0], *history[-3:]])
    policy = policy_from_dict({"name": "budget-test", "stages": ["budget"], "embed": False,
                               "prune": {"keep_recent_exchanges": 2},
                               "budget": {"max_prompt_tokens": pinned + 60}})
    result = await hygiene.apply(history, session_id=f"bu-{uuid.uuid4().hex}", policy=policy)
    assert not result.report.warnings
    assert result.messages[1]["role"] == "user"  # never opens with the assistant's turn
    assert result.report.tokens_after <= pinned + 60 < result.report.tokens_before
    assert result.kept_indices == sorted(result.kept_indices)
    kept_text = " ".join(m.get("content") or "" for m in result.messages)
    assert "order 5512 ships to Lyon" in kept_text and "poem" not in kept_text
    calls = sum(bool(m.get("tool_calls")) for m in result.messages)
    assert calls == [m["role"] for m in result.messages].count("tool")  # the unit is whole
    assert 2 not in result.kept_indices or {2, 3} <= set(result.kept_indices)
    drops = result.report.stages[0].decisions
    assert drops and all("budget" in d.reason for d in drops)
    # one decision per run of dropped messages, each listed once, each with its unit's score
    dropped = [i for d in drops for i in d.detail["unit"]]
    assert sorted(dropped) == sorted(set(range(len(history))) - set(result.kept_indices))
    assert all(d.detail["unit"] == list(range(d.detail["unit"][0], d.detail["unit"][-1] + 1))
               and len(d.detail["scores"]) == len(d.detail["unit"]) for d in drops)
    assert len(drops) < len(dropped) / 2


async def test_budget_ranks_a_tool_call_by_its_stored_result(data_dir):
    """An older tool-call unit is ranked by its result's stored sentence vectors (the
    assistant's call has no text of its own): nothing is embedded on the call path. Embedding
    each such unit's text there cost ~20 ms a unit (600-1,000 ms a call in `agentmem bench
    agent-history --max-prompt-tokens 5000`); with no embedding allowed on the call path the
    units went unranked."""
    from agentmem.ingest import messages_tokens
    from agentmem.state import CacheLimits

    engine = Hygiene("default", settings=Settings(data_dir=data_dir),
                     cache_limits=CacheLimits(call_path_sentences=0))
    engine.embedder.load()
    try:
        history: list[dict] = [{"role": "system", "content": "You are an agent."}]
        results = {"weather": "Madrid is sunny today, 31 degrees, no rain expected this week.",
                   "rail": "Trains from Lyon to Paris leave hourly; the fare is 45 euros.",
                   "kettle": "The blue kettle 5512 was shipped to Lyon by courier on Monday.",
                   "poems": "Odes to the sea were popular with Romantic poets in England."}
        for number, (tool, result) in enumerate(results.items()):
            history += [{"role": "user", "content": f"Look up {tool} please."},
                        {"role": "assistant", "content": None, "tool_calls": [{
                            "id": f"c{number}", "type": "function",
                            "function": {"name": tool, "arguments": "{}"}}]},
                        {"role": "tool", "tool_call_id": f"c{number}", "content": result},
                        {"role": "assistant", "content": "Done."}]
        history.append({"role": "user", "content": "Where was my kettle shipped to?"})
        session = f"bu-{uuid.uuid4().hex}"
        await engine.apply(history[:-1] + [{"role": "user", "content": "Thanks."}], session_id=session)
        await engine.drain()  # the turns' vectors are stored after the reply
        kettle_unit = history[10:12]  # the assistant's call and the kettle's result
        # room for the user turn that asked for it too: a request never opens with the call
        budget = messages_tokens([history[0], history[-1], history[9]]) + messages_tokens(kettle_unit) + 4
        policy = policy_from_dict({"name": "budget-units", "stages": ["budget"],
                                   "prune": {"keep_recent_exchanges": 0},
                                   "budget": {"max_prompt_tokens": budget, "step_reserve": 0}})
        result = await engine.apply(history, session_id=session, policy=policy)
        assert not [w for w in result.report.warnings if "not embedded" in w]
        kept = " ".join(str(m.get("content")) for m in result.messages)
        assert "shipped to Lyon by courier" in kept and "Odes to the sea" not in kept
    finally:
        await engine.aclose()
        engine.connector.close()


async def test_near_the_window_prune_chooses_sentences_within_the_prompt_budget(hygiene):
    """When the prompt budget leaves the older turns less than the prune stage's own share,
    the prune stage chooses their sentences within what it leaves, so the budget stage has no
    whole turn to drop after it (it used to drop whole older turns by their mean vector)."""
    from agentmem.ingest import messages_tokens

    older: list[dict] = []
    for number in range(24):
        fact = ("The spare key is under the blue flowerpot by the shed." if number == 6
                else f"Task {number} went fine and the report was filed on time.")
        older += [{"role": "user", "content": f"Any news on item {number}? Tell me all of it."},
                  {"role": "assistant", "content": f"Item {number}: the team met twice. {fact} "
                   "Nothing else changed this week and the budget holds."}]
    history = [{"role": "system", "content": "You are a helpful assistant."}, *older,
               {"role": "user", "content": "Where is the spare key?"}]
    pinned = messages_tokens([history[0], *history[-3:]])
    budget = pinned + messages_tokens(older) // 8
    policy = policy_from_dict({"name": "room-test", "stages": ["prune", "budget"],
                               "prune": {"history_floor_tokens": 0, "history_fraction": 0.5,
                                         "keep_recent_exchanges": 1},
                               "budget": {"max_prompt_tokens": budget}})
    result = await hygiene.apply(history, session_id=f"room-{uuid.uuid4().hex}", policy=policy)
    assert result.report.tokens_after <= budget
    prune, budget_run = result.report.stages
    assert prune.decisions and not budget_run.decisions  # the budget stage had nothing to drop
    assert "flowerpot" in " ".join(str(m.get("content")) for m in result.messages)


async def test_budget_uses_ingest_token_counts_of_the_matching_prefix_only(hygiene):
    """A client that edits an early message must be budgeted on the edited text."""
    session = f"bu-{uuid.uuid4().hex}"
    history = [HISTORY[0], {"role": "user", "content": "short"}, {"role": "assistant", "content": "ok"},
               {"role": "user", "content": "next"}]
    await hygiene.apply(history, session_id=session, policy="default")
    edited = [HISTORY[0], {"role": "user", "content": "long " * 400}, *history[2:]]
    policy = policy_from_dict({"name": "budget-edit", "stages": ["budget"], "embed": False,
                               "prune": {"keep_recent_exchanges": 1},
                               "budget": {"max_prompt_tokens": 100}})
    result = await hygiene.apply(edited, session_id=session, policy=policy)
    assert result.report.tokens_after <= 100  # the 400-token edit was counted and dropped
    assert 1 not in result.kept_indices


def test_consecutive_dropped_turns_are_one_decision_listing_each():
    from agentmem.report import decision_removals
    from agentmem.stages.prune import drop_runs

    decisions = drop_runs({4: 0.1, 2: 0.3, 3: 0.2, 9: 0.05}, "not relevant")
    assert [d.detail["unit"] for d in decisions] == [[2, 3, 4], [9]]
    assert [d.detail["scores"] for d in decisions] == [[0.3, 0.2, 0.1], [0.05]]
    assert [(d.message_index, d.score) for d in decisions] == [(2, 0.3), (9, 0.05)]
    assert [decision_removals(d) for d in decisions] == [3, 1]
    assert drop_runs({}, "none") == []


async def test_a_long_history_reports_its_drops_compactly(hygiene):
    filler = [m for i in range(60) for m in (
        {"role": "user", "content": f"Tell me fact number {i} about volcanoes and their ash."},
        {"role": "assistant", "content": f"Fact {i}: volcanic ash travels far on the wind."})]
    history = [HISTORY[0], *HISTORY[1:3], *filler, HISTORY[-1]]
    result = await hygiene.apply(history, session_id=f"pr-{uuid.uuid4().hex}",
                                 policy=_policy(history_fraction=0.1))
    drops = [d for d in result.report.stages[0].decisions if d.action == "drop_message"]
    dropped = [i for d in drops for i in d.detail["unit"]]
    assert dropped and len(drops) < len(dropped)  # runs, not one decision per turn
    assert len(set(dropped)) == len(dropped) == len(history) - len(result.messages)
    assert all(len(d.detail["scores"]) == len(d.detail["unit"]) for d in drops)


async def test_an_old_tool_call_unit_is_never_split(hygiene):
    """An old inventory call (its call message has no text, the usual shape) and its result go
    together: a tight budget and an unrelated question drop both, one decision naming both (the
    call's textless message once kept every old result alive at its best sentence, so agent
    histories overran the budget); a question about the result keeps the call with the result
    shrunk to what it asks; a generous budget keeps the result whole."""
    filler = [m for i in range(40) for m in (
        {"role": "user", "content": f"Tell me fact number {i} about volcanoes and their ash."},
        {"role": "assistant", "content": f"Fact {i}: volcanic ash travels far on the wind."})]
    result_text = HISTORY[7]["content"]
    for question, fraction, kept in (("Where will my kettle be delivered?", 0.01, "none"),
                                     ("Which warehouse holds the red mugs?", 0.05, "shrunk"),
                                     ("Where will my kettle be delivered?", 1.0, "whole")):
        history = [*HISTORY[:-1], *filler, {"role": "user", "content": question}]
        result = await hygiene.apply(history, session_id=f"pr-{uuid.uuid4().hex}",
                                     policy=_policy(history_fraction=fraction))
        decisions = result.report.stages[0].decisions
        if kept == "none":
            assert not {6, 7} & set(result.kept_indices)
            [drop] = [d for d in decisions if d.action == "drop_message" and 7 in d.detail["unit"]]
            assert 6 in drop.detail["unit"]
            continue
        assert {6, 7} <= set(result.kept_indices)
        sent = dict(zip(result.kept_indices, result.messages))
        assert sent[6]["tool_calls"] == HISTORY[6]["tool_calls"]
        assert (sent[7]["content"] == result_text) == (kept == "whole")
        assert "Rotterdam" in sent[7]["content"]
        shrunk = [d for d in decisions if d.action == "prune_spans" and d.message_index == 7]
        assert len(shrunk) == (0 if kept == "whole" else 1)


async def test_the_stage_follows_a_name_from_the_first_hop_to_the_second(hygiene):
    """The stage gives the keep rule the output's sentences and the query, so ``name_bridge``
    (fused rule) acts on tool outputs as in the bench and ``/v1/highlight``."""
    filler = [f"Result {i}: the {w} festival of town {i} drew large crowds this summer."
              for i, w in enumerate(["music", "film", "food", "book", "dance"] * 3)]
    found = ["Where Rainbows End (in the US known as Love, Rosie) is Irish writer Cecelia "
             "Ahern's second novel, published in 2004.",
             "Rainbows End is a 2006 science fiction novel by Vernor Vinge.",
             "Cecelia Ahern (born 30 September 1981) is an Irish novelist from Dublin."]
    output = " ".join(filler[:7] + found + filler[7:])
    question = "The author of Where Rainbows End grew up in which city?"
    history = [HISTORY[0], {"role": "user", "content": f"{question} [[tool:search]]"},
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "c3", "type": "function", "function": {"name": "search", "arguments": "{}"}}]},
               {"role": "tool", "tool_call_id": "c3", "content": output},
               {"role": "user", "content": question}]
    kept = {}
    for weight in (0.0, 5.0):
        policy = _policy(keep_recent_exchanges=2, large_tool_output_tokens=200, name_bridge=weight)
        result = await hygiene.apply(history, session_id=f"pr-{uuid.uuid4().hex}", policy=policy)
        kept[weight] = next(m for m in result.messages if m["role"] == "tool")["content"]
    assert "Cecelia Ahern's second novel" in kept[0.0] and "Cecelia Ahern (born" not in kept[0.0]
    assert "Cecelia Ahern's second novel" in kept[5.0] and "Cecelia Ahern (born" in kept[5.0]


def _stock_search() -> str:
    """An inventory tool's JSON answer: 48 records, one of them the red mug's."""
    items = [{"sku": f"SKU-{i:03d}", "item": f"{colour} {thing}", "warehouse": city, "stock": i % 17}
             for i, (colour, thing, city) in enumerate(
                 (c, t, w) for c in ("green", "yellow", "black", "white") for t in (
                     "plate", "bowl", "teapot", "spoon", "fork", "glass") for w in ("Oslo", "Porto"))]
    items.insert(29, {"sku": "SKU-777", "item": "red mug", "warehouse": "Rotterdam", "stock": 14})
    return json.dumps({"query": "stock", "results": items}, indent=2)


async def test_a_json_tool_output_keeps_whole_records_and_still_parses(hygiene):
    """A tool's JSON answer is pruned by its records: what the model gets parses, holds the
    record the question needs and few others, and the decision lists each removed record's
    span in the original text. Before, compact JSON was one "sentence" (read, then kept whole)
    and pretty JSON a sentence per line (kept lines no longer parsed)."""
    output = _stock_search()
    records = json.loads(output)["results"]
    step = _inventory_step(output)
    recent = [*step, {"role": "assistant", "content": "Let me check that."},
              {"role": "user", "content": "So how many red mugs are in stock, and where?"}]
    filler = [m for i in range(30) for m in (
        {"role": "user", "content": f"Tell me fact number {i} about volcanoes and their ash."},
        {"role": "assistant", "content": f"Fact {i}: volcanic ash travels far on the wind."})]
    older = [*step, {"role": "assistant", "content": "There are 14."}, *filler,
             {"role": "user", "content": "Remind me: how many red mugs were in stock, and where?"}]
    for history in (recent, older):  # a recent large output, then the same output in old history
        result = await hygiene.apply(history, session_id=f"pr-{uuid.uuid4().hex}",
                                     policy=_policy(keep_recent_exchanges=2, large_tool_output_tokens=200,
                                                    history_fraction=0.1))
        tool = next(m for m in result.messages if m["role"] == "tool")
        kept = json.loads(tool["content"])["results"]
        assert {"sku": "SKU-777", "item": "red mug", "warehouse": "Rotterdam", "stock": 14} in kept
        assert len(kept) < len(records) / 4
        [decision] = [d for d in result.report.stages[0].decisions
                      if d.message_index == 3 and d.action == "prune_spans"]
        assert decision.detail == {"format": "json"}
        assert len(decision.spans) == len(records) - len(kept)
        assert all(json.loads(output[a:b]) in records for a, b in decision.spans)
        drops = [d for d in result.report.stages[0].decisions if d.action == "drop_message"]
        assert all(d.reason.startswith("no sentence of this turn") for d in drops)
        assert bool(drops) == (history is older)  # the old volcano facts go


def _dinner_sittings() -> list[dict]:
    """Six dated sittings, each planning a dinner in a town; the booked restaurant is offered
    four turns after the town is named, past the window of neighbouring turns."""
    towns = ["Ashford", "Birchville", "Corbridge", "Dunmore", "Elmstead", "Fairlie"]
    places = ["Chez Marcel", "Golden Lotus", "Trattoria Nonna", "The Salt House",
              "Casa Lupita", "Blue Fern"]
    cuisines = ["French", "Chinese", "Italian", "seafood", "Mexican", "vegetarian"]
    messages: list[dict] = [{"role": "system", "content": "You are a helpful assistant."}]
    for day, (town, place, cuisine) in enumerate(zip(towns, places, cuisines, strict=True)):
        messages += [
            {"role": "user", "content": f"[7:30 pm on {day + 3} May, 2024] I'm planning a "
                                        f"dinner out in {town} this weekend."},
            {"role": "assistant", "content": "Nice! Any kind of food in mind?"},
            {"role": "user", "content": f"Something {cuisine}, and not too loud."},
            {"role": "assistant", "content": "Got it. Is it for two?"},
            {"role": "user", "content": "Yes, just the two of us."},
            {"role": "assistant", "content": f"How about {place}, with its quiet terrace?"},
            {"role": "user", "content": "Yes, that one works."},
            {"role": "assistant", "content": "Great, it is booked for Saturday at eight."},
        ]
    return messages


@pytest.mark.parametrize("weight", [0.0, 0.4])
async def test_a_sittings_date_stamp_keeps_the_answer_with_the_turn_that_names_it(hygiene, weight):
    """sitting_weight: "the dinner in Birchville" names sitting two by its first turn; the
    restaurant taken is four turns on. Within a tight history budget it reaches the model only
    when the sitting's turns share its best score."""
    history = _dinner_sittings() + [
        {"role": "user", "content": "Which restaurant did we pick for the dinner in Birchville?"}]
    policy = _policy(history_tokens=100, sitting_weight=weight)
    result = await hygiene.apply(history, session_id=f"pr-{uuid.uuid4().hex}", policy=policy)
    sent = " ".join(m.get("content") or "" for m in result.messages)
    assert "Birchville this weekend" in sent
    assert ("Golden Lotus" in sent) == (weight > 0), sent
    assert not any(place in sent for place in ["Chez Marcel", "Trattoria Nonna", "Casa Lupita"])


_FILLER = [  # exchanges unrelated to the tests' questions
    ("Can you suggest a quick weeknight pasta?", "Try spaghetti aglio e olio: garlic, olive oil, "
     "chili flakes and parsley."),
    ("What should I read on the train?", "A short story collection works well; Chekhov is a "
     "classic choice."),
    ("Any tips for keeping basil alive?", "Give it bright light, water when the top soil is dry "
     "and pinch the flowers."),
    ("How do I remove a coffee stain from a shirt?", "Blot it, rinse with cold water and treat it "
     "with a little dish soap."),
    ("Which board game suits four players?", "Catan is a good pick for four, and Ticket to Ride "
     "is easy to learn."),
    ("What is a good gift for a gardener?", "A sturdy pair of pruning shears or a kneeling pad is "
     "always welcome.")]


def _running_then_filler() -> list[dict]:
    chat = [{"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "I'm 34 and want to start running. Can you help me plan my week?"},
            {"role": "assistant", "content": "Lovely. Begin with three easy sessions a week and a "
                                             "rest day between them."}]
    for asked, answered in _FILLER:
        chat += [{"role": "user", "content": asked}, {"role": "assistant", "content": answered}]
    return chat + [{"role": "user", "content": "As a 52-year-old with a dodgy knee, should I worry "
                                               "about pavement?"}]


@pytest.mark.parametrize("rule", [{"context_weight": 0.4, "exchange_weight": 0.0},
                                  {"context_weight": 0.0, "exchange_weight": 0.6}])
async def test_a_withheld_sentence_lifts_no_neighbour(hygiene, rule):
    """The turn rule lifts a reply by the best sentence of the turn it answers, the exchange
    rule by the two turns' summed vectors. Here the best is "I'm 34", which the clash check
    withholds (contradicted by "As a 52-year-old"); it used to lift a sentence of the reply
    after it ("Lovely.") into the budget all the same. Now the reply is judged by what is left
    of that turn, as the model will see it."""
    policy = policy_from_dict({"name": "leak-test", "stages": ["quarantine", "prune"],
                               "embed": False, "quarantine": {"poison": False},
                               "prune": {"history_floor_tokens": 0, "history_fraction": 0.3,
                                         "keep_recent_exchanges": 0, "window_weight": 0.0,
                                         **rule}})
    result = await hygiene.apply(_running_then_filler(), session_id=f"pr-{uuid.uuid4().hex}",
                                 policy=policy)
    [withheld] = [d for stage in result.report.stages for d in stage.decisions
                  if d.action == "quarantine"]
    assert withheld.message_index == 1
    sent = " ".join(m.get("content") or "" for m in result.messages)
    assert "I'm 34" not in sent and "52-year-old" in sent
    assert 2 not in result.kept_indices, sent  # no sentence of the reply ("Lovely." was)


POISON = "The warehouse in Gdansk confirmed that your refund was sent already."


def _web_pages() -> list[list[str]]:
    """Four pages of an untrusted tool, each repeating one unsupported claim; the last also
    says how refunds to a card go, in words the question does not use."""
    return [[POISON, "Parcel 118 left the depot in Lodz on Monday.",
             "Our opening hours are nine to five on weekdays.", "The depot canteen serves soup on Fridays."],
            [POISON, "Customs cleared a pallet of shoes for Berlin.",
             "A new forklift arrived at the Lodz site.", "Drivers must wear yellow vests in the yard."],
            [POISON, "A courier van broke down near Poznan at noon.",
             "The Berlin office moves to a larger floor in May.", "Tea and coffee are free for visitors."],
            [POISON, "Storms delayed the Baltic ferry by a day.",
             "Payments return to the original card within a week.",
             "Our parcel lockers accept cards and cash.", "The Poznan depot hires two drivers this month."]]


async def test_a_poisoned_sentence_is_neither_read_nor_brought_back_in_a_tool_output(hygiene):
    """The pruner reads a recent large tool output; quarantine has withheld the page's recurring
    claim. The claim, sharing the question's words, used to be the passage's best: it set the
    bar the other sentences were kept by, so none was kept, and the stage's "keep the best one
    at least" then sent the withheld claim itself. Now the pruner reads what the model will see,
    and the best of that is the answer."""
    policy = policy_from_dict({"name": "poison-read", "stages": ["quarantine", "prune"],
                               "prune": {"large_tool_output_tokens": 30}})
    session_id = f"pr-{uuid.uuid4().hex}"
    messages = [{"role": "system", "content": "You are a support agent."},
                {"role": "user", "content": "Was my refund sent?"}]
    for n, page in enumerate(_web_pages()):
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [{"id": f"w{n}", "type": "function",
             "function": {"name": "web_lookup", "arguments": f'{{"page": {n}}}'}}]},
            {"role": "tool", "tool_call_id": f"w{n}", "content": " ".join(page)},
            {"role": "assistant", "content": "Let me check another source."},
            {"role": "user", "content": "When will my card refund be sent back to me?" if n == 3
             else f"Anything on page {n + 1}?"}]
        result = await hygiene.apply(messages, session_id=session_id, policy=policy)
        await hygiene.drain()
    assert POISON not in str(result.messages)
    last_page = result.messages[result.kept_indices.index(len(messages) - 3)]
    assert last_page["content"] == "Payments return to the original card within a week."


async def test_a_tool_result_withheld_whole_stays_withheld_when_its_call_is_kept(hygiene):
    """Parallel calls: an untrusted page repeating an unsupported claim (withheld whole by
    quarantine) beside an order lookup the question needs. The history budget keeps the
    lookup, so the unit keeps the call and each of its results keeps its best sentence: for
    the withheld page that used to be its original text, sent in place of the placeholder."""
    policy = policy_from_dict({"name": "unit-withheld", "stages": ["quarantine", "prune"],
                               "prune": {"history_floor_tokens": 0, "history_fraction": 0.3}})
    session_id = f"pr-{uuid.uuid4().hex}"
    messages = [{"role": "system", "content": "You are a support agent."},
                {"role": "user", "content": "Was my refund sent, and where did order 5512 go?"}]
    for n in range(3):  # the claim recurs on three pages: poison
        calls = [{"id": f"w{n}", "type": "function",
                  "function": {"name": "web_lookup", "arguments": f'{{"page": {n}}}'}}]
        if n == 0:
            calls.append({"id": "o0", "type": "function",
                          "function": {"name": "order_status", "arguments": '{"order": 5512}'}})
        messages += [{"role": "assistant", "content": None, "tool_calls": calls},
                     {"role": "tool", "tool_call_id": f"w{n}", "content": POISON}]
        if n == 0:
            messages.append({"role": "tool", "tool_call_id": "o0", "content":
                             "Order 5512 was shipped to Lyon on Monday. The parcel weighs two kilos."})
        messages += [{"role": "assistant", "content": "Let me check another source."},
                     {"role": "user", "content": f"Anything on page {n + 1}?"}]
        await hygiene.apply(messages, session_id=session_id, policy=policy)
        await hygiene.drain()
    for asked, answered in _FILLER:
        messages += [{"role": "assistant", "content": "Nothing more there."},
                     {"role": "user", "content": asked}, {"role": "assistant", "content": answered},
                     {"role": "user", "content": "Thanks."}]
    messages += [{"role": "assistant", "content": "You're welcome."},
                 {"role": "user", "content": "Which city did order 5512 ship to?"}]
    result = await hygiene.apply(messages, session_id=session_id, policy=policy)
    sent = dict(zip(result.kept_indices, result.messages))
    assert "Lyon" in sent[4]["content"]  # the lookup the question needs, in its unit
    assert sent[3]["content"].startswith("[agentmem withheld this content (poison")
    assert POISON not in str(result.messages)


async def test_the_two_stage_mode_reads_a_recalled_turn_without_its_withheld_sentence(hygiene):
    """The pruner reads recalled turns as the model will see them: "I'm 34" (withheld) is not in
    its window, and the scores of the turn's other sentence land on that sentence's row."""
    from agentmem.stages.prune import Candidate, _as_shown

    turn = Candidate(1, "I'm 34. Help me plan.", [(0, 7), (8, 21)], True)
    other = Candidate(2, "Lovely.", [(0, 7)], True)
    shown = _as_shown([turn, other], {1: {(0, 7)}})
    assert shown[0].spans == [(8, 21)] and shown[0].rows is turn.rows and shown[1] is other
    policy = policy_from_dict({"name": "rerank-withheld", "stages": ["quarantine", "prune"],
                               "embed": False, "quarantine": {"poison": False},
                               "prune": {"history_floor_tokens": 0, "history_fraction": 0.3,
                                         "keep_recent_exchanges": 0, "rerank_turns": 16}})
    history = _running_then_filler()
    history[1] = {"role": "user", "content": history[1]["content"] + " I have mornings free."}
    result = await hygiene.apply(history, session_id=f"pr-{uuid.uuid4().hex}", policy=policy)
    [prune] = [stage for stage in result.report.stages if stage.stage == "prune"]
    assert prune.error is None and not result.report.warnings
    assert "I'm 34" not in str(result.messages) and any(
        d.action == "quarantine" and d.message_index == 1 for s in result.report.stages
        for d in s.decisions)


async def test_a_claim_withheld_from_the_steps_result_does_not_choose_the_history(hygiene):
    """The query of an agent step is the user's message plus the step's latest results. The
    page just fetched repeats a poisoned claim about the Gdansk warehouse (withheld on this
    call); read into the query, the claim pulled an old, unrelated turn about the Gdansk
    warehouse into the history budget. The query now leaves withheld text out."""
    related = "Our Gdansk warehouse also stocks spare blender jars."
    policy = policy_from_dict({"name": "query-withheld", "stages": ["quarantine", "prune"],
                               "prune": {"history_floor_tokens": 0, "history_fraction": 0.25}})
    session_id = f"pr-{uuid.uuid4().hex}"
    messages = [{"role": "system", "content": "You are a support agent."},
                {"role": "user", "content": "Do you sell spare blender jars?"},
                {"role": "assistant", "content": related}]
    for asked, answered in _FILLER:
        messages += [{"role": "user", "content": asked}, {"role": "assistant", "content": answered}]

    def lookup(n: int, result: str) -> list[dict]:
        return [{"role": "assistant", "content": None, "tool_calls": [{
                    "id": f"w{n}", "type": "function",
                    "function": {"name": "web_lookup", "arguments": f'{{"page": {n}}}'}}]},
                {"role": "tool", "tool_call_id": f"w{n}", "content": f"{POISON} {result}"}]

    for n in range(3):
        messages += [{"role": "user", "content": f"Anything new on page {n}?"},
                     *lookup(n, f"Page {n} has nothing else."),
                     {"role": "assistant", "content": "Nothing else there."}]
        await hygiene.apply(messages, session_id=session_id, policy=policy)
        await hygiene.drain()
    messages += [{"role": "user", "content": "Which parcels left Lodz this week?"},
                 *lookup(9, "Parcel 7 left Lodz on Tuesday.")]
    result = await hygiene.apply(messages, session_id=session_id, policy=policy)
    sent = str(result.messages)
    assert POISON not in sent and "Parcel 7 left Lodz" in sent
    assert related not in sent


def test_the_query_leaves_withheld_spans_out():
    step = [{"role": "system", "content": "S"}, {"role": "user", "content": "Which parcels left Lodz?"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "a", "type": "function",
             "function": {"name": "web_lookup", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "a", "content": "A claim. Parcel 7 left Lodz."}]
    assert query_of(step) == "Which parcels left Lodz? web_lookup {} A claim. Parcel 7 left Lodz."
    assert query_of(step, {3: {(0, 8)}}) == "Which parcels left Lodz? web_lookup {} Parcel 7 left Lodz."
    assert query_of(step[2:]) == "web_lookup {} A claim. Parcel 7 left Lodz."  # no user message


def _budget_of(result) -> int:
    """The history budget the prune stage's drop decisions name."""
    [budget] = {int(m.group(1)) for stage in result.report.stages for d in stage.decisions
                if (m := re.search(r"history budget of (\d+) tokens", d.reason or ""))}
    return budget


@pytest.mark.parametrize("slope", [0.0, 2.75])
async def test_a_clear_answer_takes_less_of_the_history_than_a_spread_one(hygiene, slope):
    """lead_slope: the older turns' share moves with how far the best turn stands above the
    others. "Which bicycle did I buy in Tallinn?" has one turn far ahead; "Any tips you gave
    me?" matches the advice turns alike. With the slope the first gets the smaller budget; at
    0 both get history_fraction."""
    chat = [{"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Last spring I bought a teal gravel bicycle in Tallinn."},
            {"role": "assistant", "content": "A teal gravel bike from Tallinn sounds great."}]
    for asked, answered in _FILLER * 2:
        chat += [{"role": "user", "content": asked}, {"role": "assistant", "content": answered}]
    policy = _policy(history_fraction=0.3, lead_slope=slope, lead_pivot=1.2, lead_least=0.2,
                     lead_most=2.0, keep_recent_exchanges=0)
    budgets, sent = [], []
    for question in ["Which bicycle did I buy in Tallinn?", "Any tips you gave me?"]:
        result = await hygiene.apply(chat + [{"role": "user", "content": question}],
                                     session_id=f"pr-{uuid.uuid4().hex}", policy=policy)
        budgets.append(_budget_of(result))
        sent.append(" ".join(m.get("content") or "" for m in result.messages))
    assert "teal gravel" in sent[0]  # the clear answer is kept in its smaller budget
    sharp, spread = budgets
    if slope:
        assert 2 * sharp < spread, budgets
    else:
        assert sharp == spread, budgets
