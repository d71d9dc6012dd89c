"""Pairs of written general-assistant chats for the NLI model: the cascade's own candidate pairs
as consistent, the chat's written self-contradiction as a contradiction, and the slip's newer
sentence kept out of the consistent ones; in training, every contradiction is kept under the cap
and each pair is also trained swapped."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from agentmem.bench.chats import chat_messages
from agentmem.train.chat_pairs import _pairs
from agentmem.train.nli_data import CONTRADICTION, build_training_set, read_pairs
from tests.nli_folders import nli_data_folder

SLIP = "Then dust the tins with plain wheat flour so the cake releases cleanly."
CHAT = {
    "id": "t-01", "system": None,  # no prompt: every pair of the assistant's may reach NLI
    "messages": [
        {"role": "user", "content": "I need a gluten-free birthday cake for my niece."},
        {"role": "assistant", "content": "This almond sponge is completely gluten-free as written. "
                                         "Bake it at 170C for 35 minutes."},
        {"role": "user", "content": "Great, how do I stop it sticking to the tins?"},
        {"role": "assistant", "content": "Line the tins with baking paper and grease the sides. "
                                         + SLIP},
        {"role": "user", "content": "And how long does the sponge keep?"},
        {"role": "assistant", "content": "The sponge keeps for 3 days in a tin. "
                                         "Bake the sponge a day ahead if you like."},
    ],
    "contradictions": [{"speaker": "assistant", "older": "This almond sponge is completely "
                        "gluten-free as written.", "newer": SLIP, "kind": "property"}],
}


def test_a_chat_gives_its_candidate_pairs_and_its_written_contradiction():
    rows = asyncio.run(_pairs([CHAT]))
    contradictions = [r for r in rows if r["label"] == "contradiction"]
    assert [(r["older"], r["newer"], r["kind"]) for r in contradictions] == [
        ("This almond sponge is completely gluten-free as written.", SLIP, "general_property")]
    consistent = [r for r in rows if r["label"] == "consistent"]
    assert consistent, "the cascade sends this chat's later statements to NLI"
    assert all(r["kind"] == "general_chat" and r["chat"] == "t-01" for r in consistent)
    assert SLIP not in {r["newer"] for r in consistent}  # the slip may contradict more than one
    texts = {s for r in consistent for s in (r["older"], r["newer"])}
    assert "The sponge keeps for 3 days in a tin." in texts


def test_the_role_prompt_goes_first():
    messages = chat_messages({**CHAT, "system": "You are a friendly baking assistant."})
    assert messages[0] == {"role": "system", "content": "You are a friendly baking assistant."}
    assert [m["role"] for m in messages[1:]] == ["user", "assistant"] * 3
    assert chat_messages(CHAT)[0]["role"] == "user"


def _nli_folder(tmp_path: Path, rows: list[dict]) -> tuple[Path, Path]:
    """A data folder with one pair in each shared NLI file, and a chat-pair file."""
    nli_data_folder(tmp_path)
    pairs = tmp_path / "chat_pairs.jsonl"
    pairs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path, pairs


def test_training_keeps_every_contradiction_under_the_cap_and_swaps(tmp_path: Path):
    rows = [{"older": f"Simmer it for {i} hours.", "newer": f"It keeps for {i} days.",
             "label": "consistent", "kind": "general_chat"} for i in range(200)]
    rows += [{"older": f"The cake {i} is nut-free.", "newer": f"Top cake {i} with pistachios.",
              "label": "contradiction", "kind": "general_property"} for i in range(40)]
    data, pairs = _nli_folder(tmp_path, rows)
    trained = read_pairs(pairs, source="general_chat")
    contradictions = sum(e.allowed == CONTRADICTION for e in trained)
    examples = build_training_set(data, chat_pairs=pairs, chat_max=20, swap_fraction=0.0)
    chat = [e for e in examples if e.source == "general_chat"]
    swapped = [e for e in examples if e.source == "general_chat-swap"]
    assert sum(e.allowed == CONTRADICTION for e in chat) == contradictions > 30
    assert sum(e.allowed != CONTRADICTION for e in chat) == 20
    assert len(swapped) == len(chat)
    assert {(e.premise, e.hypothesis) for e in swapped} == {(e.hypothesis, e.premise) for e in chat}
