"""What counts as a request to sum up the conversation (agentmem/recaps.py)."""

import json
import os
from pathlib import Path

import pytest

from agentmem.recaps import asks_for_recap


@pytest.mark.parametrize("text", [
    "Can you summarise everything we discussed so far?", "Write up our whole conversation as notes.",
    "Summarize this chat for me", "Give me a recap of what we decided", "tl;dr of our conversation?",
    "Could you sum up what we've talked about?", "Make notes of everything we covered",
    "recap so far please", "Please go over everything above"])
def test_a_recap_of_the_conversation_itself(text):
    assert asks_for_recap(text)


@pytest.mark.parametrize("text", [
    "How long should I knead pizza dough?", "What did Caroline and Melanie discuss about adoption?",
    "Summarize the article", "What is a summary statistic?", "Write a summary of the French Revolution",
    "Can you give me an overview of pandas groupby?", "So far so good, next step?"])
def test_a_question_about_one_thing_is_not_a_recap(text):
    assert not asks_for_recap(text)


def test_no_question_of_the_history_dev_file_is_a_recap():
    """LoCoMo's questions ask about things said in the conversation ("What did they discuss
    about ..."), never for the conversation itself: the history bench is unchanged."""
    shared = Path(os.environ.get("AGENTMEM_SHARED_DATA",
                                 Path(__file__).resolve().parents[2] / "shared" / "data"))
    path = shared / "history" / "locomo_dev.json"
    if not path.exists():
        if os.environ.get("CI"):
            pytest.fail(f"LoCoMo dev file not found at {path} (set AGENTMEM_SHARED_DATA)")
        pytest.skip(f"LoCoMo dev file not found at {path}")
    questions = [qa["question"] for sample in json.loads(path.read_text()) for qa in sample["qa"]]
    assert len(questions) > 900 and not any(map(asks_for_recap, questions))
