"""A conversation's statements as the engine's corpus cuts them, for detection tests that
call the detectors directly (no Redis, no proxy): ``message_rows`` cuts a tool's JSON answer
by its records and frame and other text by sentence, MiniLM embeds each row."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np

from agentmem.ingest import source_of
from agentmem.lexical import terms
from agentmem.messages import text_of
from agentmem.quarantine.statements import statements_of
from agentmem.speakers import speaker_of
from agentmem.structured import message_rows


def statements_for(messages: list[dict], encode: Any, untrusted_tools: list[str]) -> Any:
    positions, spans, texts, sources, frame = [], [], [], [], []
    for position, message in enumerate(messages):
        text = text_of(message)
        sources.append(source_of(message, messages[:position]))
        found, structural = message_rows(text, message.get("role", ""))
        frame += structural
        for span in found:
            positions.append(position)
            spans.append((span.start, span.end))
            texts.append(text[span.start:span.end])
    corpus = SimpleNamespace(position=np.asarray(positions, np.int64), spans=spans, texts=texts,
                             sources=sources, speakers=[speaker_of(m) for m in messages],
                             vectors=encode(texts), words=[terms(t) for t in texts],
                             frame=np.asarray(frame, np.bool_))
    return statements_of(corpus, messages, len(messages), untrusted_tools)
