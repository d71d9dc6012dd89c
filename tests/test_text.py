"""Sentence splitting with spans, message hashing and units."""

from agentmem.messages import canonical, message_hash, tool_call_units
from agentmem.text import count_tokens, sentences, split_sentences


def test_spans_point_into_the_text():
    text = "  Dr. Smith arrived at 3.30 p.m. Then he left!  Was it John F. Kennedy? Yes.\n\n- one\n- two"
    spans = split_sentences(text)
    assert [text[s.start:s.end] for s in spans] == sentences(text)
    # "p.m." is ambiguous: it ends the sentence because a sentence opener ("Then") follows.
    assert sentences(text) == ["Dr. Smith arrived at 3.30 p.m.", "Then he left!", "Was it John F. Kennedy?",
                               "Yes.", "- one", "- two"]


def test_a_long_run_of_lines_is_cut_between_lines():
    """A test log's 200 lines with no blank line between them were one span: kept or cut
    whole, the one FAILED line with them. Now runs of whole lines of up to LONGEST_SPAN
    characters; a long sentence of prose stays one span."""
    from agentmem.text import LONGEST_SPAN, split_sentences

    lines = [f"tests/test_mod{i}.py::test_case_{i} PASSED [{i // 2}%]" for i in range(200)]
    lines[120] = "tests/test_pricing.py::test_apply_discount FAILED [60%]"
    log = "=== test session starts ===\n" + "\n".join(lines)
    spans = split_sentences(log)
    assert len(spans) > 10 and all(end - start <= LONGEST_SPAN for start, end in spans)
    texts = [log[start:end] for start, end in spans]
    assert "\n".join(texts) == log  # whole lines, nothing lost between runs
    assert sum("FAILED" in text for text in texts) == 1
    prose = "The harbour office opens at nine, " + "and the ferry leaves at ten, " * 40 + "daily."
    assert len(split_sentences(prose)) == 1


def test_abbreviations_numbers_and_quotes():
    assert sentences("We met at 5 p.m. yesterday. Fine.") == ["We met at 5 p.m. yesterday.", "Fine."]
    assert sentences("It costs $3.50 per item, e.g. apples. Buy some.") == [
        "It costs $3.50 per item, e.g. apples.", "Buy some."]
    assert sentences('He said "Stop." The car stopped.') == ['He said "Stop."', "The car stopped."]
    assert sentences("See No. 5 in the list. It matters.") == ["See No. 5 in the list.", "It matters."]
    assert sentences("The U.S. The country.") == ["The U.S.", "The country."]
    assert sentences("") == [] and sentences("   ") == []
    assert sentences("no terminal punctuation") == ["no terminal punctuation"]


def test_token_counting_is_offline_and_sane():
    assert count_tokens("hello world") == 2
    assert count_tokens("") == 0


def test_echoed_assistant_message_hashes_like_the_stored_one():
    stored = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}
    echoed = {"role": "assistant", "content": "", "refusal": None, "audio": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"arguments": "{}", "name": "f"}}]}
    assert message_hash(stored) == message_hash(echoed)
    parts = {"role": "user", "content": [{"type": "text", "text": "hi"}]}
    assert canonical(parts) == canonical({"role": "user", "content": "hi"})
    assert message_hash({"role": "user", "content": "hi"}) != message_hash({"role": "user", "content": "hi!"})


def test_reserialised_tool_arguments_hash_like_the_stored_ones():
    """Anthropic and LangChain clients hand a call's arguments back as an object, re-dumped."""
    def call(arguments: str) -> dict:
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}]}
    spaced, compact = call('{"city": "Paris", "days": 2}'), call('{"city":"Paris","days":2}')
    assert message_hash(spaced) == message_hash(compact)
    assert message_hash(call('{"city": "Paris"}')) != message_hash(call('{"city": "Rome"}'))
    assert message_hash(call("not json")) != message_hash(call("not json!"))


def test_tool_call_units():
    messages = [{"role": "user", "content": "x"},
                {"role": "assistant", "tool_calls": [{"id": "a"}, {"id": "b"}]},
                {"role": "tool", "tool_call_id": "a"}, {"role": "tool", "tool_call_id": "b"},
                {"role": "assistant", "content": "done"}]
    assert tool_call_units(messages) == [[0], [1, 2, 3], [4]]
