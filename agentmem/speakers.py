"""Who said a sentence, as retrieval reads it.

A group chat names its participants: OpenAI's ``name`` on a user or assistant message
("Caroline", "Melanie"). Their questions name people ("What does Melanie paint?") whose own
turns say "I" ("I paint lakes"), so a sentence is searchable with its speaker: the name's
terms are indexed with each of the speaker's sentences (BM25), and the sentence is embedded
as ``"Melanie: I paint lakes."``, the transcript form LoCoMo's own retrieval evaluation
embeds ('Melanie said, "..."'). Messages without a name (the usual one-user chat, agents,
tools) are embedded and indexed exactly as before. A sentence's own terms, which the clash
check compares, stay the sentence's.
"""

from __future__ import annotations

from typing import Any

from agentmem.lexical import terms

MAX_NAME_CHARS = 64  # OpenAI's limit for ``name``


def speaker_of(message: dict[str, Any]) -> str:
    """The participant's name of a user or assistant message, readable ("Bo_Lind" -> "Bo
    Lind"); "" for every other message (a tool's ``name`` is the tool's, not a speaker's)."""
    name = message.get("name")
    if message.get("role") not in {"user", "assistant"} or not isinstance(name, str):
        return ""
    return " ".join(name[:MAX_NAME_CHARS].replace("_", " ").split())


def speaker_terms(speaker: str) -> list[str]:
    """The name's terms, indexed with each of the speaker's sentences."""
    return terms(speaker) if speaker else []


def embedding_text(sentence: str, speaker: str) -> str:
    """What the embedder reads for a sentence of ``speaker`` ("" : the sentence alone)."""
    return f"{speaker}: {sentence}" if speaker else sentence
