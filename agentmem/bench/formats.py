"""Readers for the benchmark formats of ../shared/bench/FORMATS.md.

Each record is validated with pydantic; a bad line is reported with its file and line
number. Extra keys (``notes``, ``in_metatool_dev_jsonl``, ...) are ignored, as the formats say.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

T = TypeVar("T", bound=BaseModel)


class _Record(BaseModel):
    model_config = ConfigDict(extra="ignore")


class PruneRecord(_Record):
    id: str
    question: str
    title: str | None = None
    sentences: list[str]
    labels: list[int]

    @model_validator(mode="after")
    def _aligned(self):
        if len(self.labels) != len(self.sentences):
            raise ValueError("labels and sentences differ in length")
        return self


class ToolsRecord(_Record):
    id: str
    query: str
    messages: list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]]
    gold: list[str]


class ClashTurn(_Record):
    speaker: str
    text: str


class ClashRecord(_Record):
    id: str
    turns: list[ClashTurn]
    label: bool
    contradicting_turns: list[int] | None = None
    kind: str | None = None  # optional: the clash or hard-negative kind, for per-kind results


class PoisonClaim(_Record):
    text: str
    status: str
    occurrences: list[int]


class PoisonRecord(_Record):
    id: str
    messages: list[dict[str, Any]]
    claims: list[PoisonClaim]


class ChatContradiction(_Record):
    speaker: str
    older: str
    newer: str
    kind: str | None = None


class ChatRecord(_Record):
    """A whole chat for ``agentmem bench chats`` (``agentmem/bench/chats.py``)."""

    id: str
    system: str | None = None
    messages: list[dict[str, Any]]
    contradictions: list[ChatContradiction] = []


class LocomoTurn(_Record):
    speaker: str
    dia_id: str
    text: str


class LocomoQA(_Record):
    question: str
    answer: Any = None
    evidence: list[str] = []
    category: int | None = None


class LocomoSample(_Record):
    conversation: dict[str, Any]
    qa: list[LocomoQA]


class BenchDataError(ValueError):
    pass


def read_jsonl(path: str | Path, model: type[T]) -> list[T]:
    records = []
    for number, line in _lines(path):
        try:
            records.append(model.model_validate(orjson.loads(line)))
        except (orjson.JSONDecodeError, ValidationError) as error:
            raise BenchDataError(f"{path}:{number}: not a valid {model.__name__}: {error}") from None
    if not records:
        raise BenchDataError(f"{path}: no records")
    return records


def read_locomo(path: str | Path) -> list[LocomoSample]:
    try:
        data = orjson.loads(Path(path).read_bytes())
        if not isinstance(data, list):
            raise BenchDataError(f"{path}: expected a JSON list of LoCoMo samples")
        return [LocomoSample.model_validate(sample) for sample in data]
    except (OSError, orjson.JSONDecodeError, ValidationError) as error:
        raise BenchDataError(f"{path}: not LoCoMo JSON: {error}") from None


def _lines(path: str | Path) -> Iterator[tuple[int, str]]:
    try:
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if line.strip():
                    yield number, line
    except OSError as error:
        raise BenchDataError(f"cannot read {path}: {error}") from None


READERS = {
    "prune": lambda p: read_jsonl(p, PruneRecord),
    "tools": lambda p: read_jsonl(p, ToolsRecord),
    "clash": lambda p: read_jsonl(p, ClashRecord),
    "poison": lambda p: read_jsonl(p, PoisonRecord),
    "history": read_locomo,
}
