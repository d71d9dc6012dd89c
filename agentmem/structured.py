"""A tool's JSON answer as rows the stages can keep or drop without breaking the JSON.

Agents' tools mostly answer in JSON: search hits, database rows, API listings, a fetched page
as ``{"url": ..., "content": ...}``. Read as prose, compact JSON has no sentence boundary, so
the whole output is one "sentence" the pruner reads (over a second for a few thousand tokens
on two cores) and can only keep; pretty-printed JSON is a "sentence" per line, and keeping some
lines leaves fragments that no longer parse.

Here a JSON text's units are what a question picks among: the elements of its arrays (records),
and the sentences of its long strings (a page's text, a hit's snippet). A record larger than
``record_characters`` is walked into, so its arrays and long strings give the units and the
record is kept while any of them is (a search hit keeps its title and URL with its relevant
sentences). The text between units (keys, a record's short fields) is *frame*: rows too, so
it stays findable, but never dropped on its own. Each row is a character span of the original
text, so a subset of units can be kept with everything else (keys, scalars, whitespace,
escapes) byte for byte, and the result parses. Ingest, the session corpus, the prune stage and
quarantine all cut a tool message by ``message_rows``, so the rows line up everywhere. The
standard library's decoder finds where each value ends (``raw_decode``); only the walk between
values is ours.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from agentmem.text import Span, split_sentences

# The cut of messages into rows that ingest embeds: a stored turn's vectors are one per row of
# the cut that made them, and a reader matches them to today's rows by position. So the store
# keys sentence vectors by this version (``SessionKeys.embeddings``), and a change to how
# ``message_rows`` cuts any message must bump it: vectors of an older cut are then not read
# (re-embedded on demand) rather than paired with rows they were not made from. Version 2:
# a tool's JSON answer by records (version 1 cut it as prose).
ROWS_VERSION = 2
RECORD_CHARACTERS = 600  # a larger array element is walked into for finer units
LONG_STRING_CHARACTERS = 300  # a string this long (raw) is split into its sentences
_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")
_WORDY = re.compile(r"[^\W_]")
_PUNCTUATION = frozenset(" \t\n\r,[]{}:")


@dataclass
class _Split:
    """An array's elements or a string's sentences, the text between ``open`` and ``close``.

    ``units[i]`` is element i's unit number, or None when element i was walked into: then
    ``inner[i]`` holds its splits and ``ranges[i]`` its units, and it is kept while one is."""

    open: int
    close: int
    elements: list[Span]
    units: list[int | None] = field(default_factory=list)
    inner: dict[int, list[_Split]] = field(default_factory=dict)
    ranges: dict[int, range] = field(default_factory=dict)


@dataclass(frozen=True)
class JsonLayout:
    """A JSON text as rows in text order: its units (``record``, ``sentence``) and the text
    around them (``frame``: keys, scalars, a record's short fields; only stretches with a
    letter or digit). Units are kept or dropped; the frame goes wherever what holds it goes
    (the top level's always), and is a row so that what it says (an order's status) stays
    findable by the stages that read rows."""

    text: str
    spans: tuple[Span, ...]
    kinds: tuple[str, ...]  # per row: "frame", "record" or "sentence"
    _splits: tuple[_Split, ...]  # the outermost splits, in text order

    def keep(self, keep: Sequence[bool]) -> str:
        """The text with only the kept units (and the records holding them), the frame
        whatever its flags say, everything verbatim; it parses."""
        if len(keep) != len(self.spans):
            raise ValueError(f"{len(keep)} keep flags for {len(self.spans)} rows")
        units = [k for k, kind in zip(keep, self.kinds) if kind != "frame"]
        return self._render(0, len(self.text), self._splits, units)

    def reading(self, row: int, limit: int = 1200) -> str:
        """Row ``row`` as the pruner and the embedder read it: on one line, a sentence with
        its escapes decoded; cut at ``limit`` characters."""
        span = self.spans[row]
        raw = self.text[span.start:span.end]
        if self.kinds[row] == "sentence":
            with contextlib.suppress(ValueError):  # escapes decoded for reading only
                raw = json.loads(f'"{raw}"')
        flat = " ".join(raw.split())
        return flat[:limit]

    def _render(self, start: int, end: int, splits: Sequence[_Split], keep: Sequence[bool]) -> str:
        parts, cursor = [], start
        for split in splits:
            parts.append(self.text[cursor:split.open])
            parts.append(self._inner(split, keep))
            cursor = split.close
        parts.append(self.text[cursor:end])
        return "".join(parts)

    def _inner(self, split: _Split, keep: Sequence[bool]) -> str:
        elements = split.elements
        texts = []
        for i, (span, unit) in enumerate(zip(elements, split.units)):
            if unit is not None:
                if keep[unit]:
                    texts.append(self.text[span.start:span.end])
            elif any(keep[u] for u in split.ranges[i]):
                texts.append(self._render(span.start, span.end, split.inner[i], keep))
        if not texts:
            return ""
        leading = self.text[split.open:elements[0].start]
        trailing = self.text[elements[-1].end:split.close]
        separator = self.text[elements[0].end:elements[1].start] if len(elements) > 1 else ", "
        return leading + separator.join(texts) + trailing


def parses_as_json(text: str) -> bool:
    """Whether ``text`` is a JSON object or array (what a tool's JSON answer is)."""
    stripped = text.strip()
    if not stripped or stripped[0] not in "[{":
        return False
    try:
        json.loads(stripped)
    except (ValueError, RecursionError):  # nested past the decoder's depth: read as text
        return False
    return True


def json_layout(text: str, min_elements: int = 2, record_characters: int = RECORD_CHARACTERS,
                long_string: int = LONG_STRING_CHARACTERS) -> JsonLayout | None:
    """The layout of ``text`` if it is a JSON object or array with something to choose among
    (an array of ``min_elements`` or more, or a long string of two or more sentences); None
    for anything else (prose, a scalar, invalid JSON, a short record)."""
    start = _skip(text, 0)
    if start >= len(text) or text[start] not in "[{":
        return None
    walk = _Walk(text, min_elements, record_characters, long_string)
    try:
        splits, end = walk.value(start)
    except (ValueError, IndexError, RecursionError):  # not JSON, or nested too deep to walk
        return None
    if not walk.units or text[end:].strip():
        return None
    spans, kinds, cursor = [], [], 0
    for unit, kind in zip([*walk.units, Span(len(text), len(text))], [*walk.kinds, ""]):
        frame = _trimmed(text, cursor, unit.start)
        if frame is not None:
            spans.append(frame)
            kinds.append("frame")
        if kind:
            spans.append(unit)
            kinds.append(kind)
        cursor = unit.end
    return JsonLayout(text, tuple(spans), tuple(kinds), tuple(splits))


def _trimmed(text: str, start: int, end: int) -> Span | None:
    """The stretch of frame between two units, trimmed; None when it says nothing (no letter
    or digit: brackets, commas, quotes, whitespace)."""
    found = _WORDY.search(text, start, end)
    if found is None:
        return None
    while start < end and text[start] in _PUNCTUATION:
        start += 1
    while end > start and text[end - 1] in _PUNCTUATION:
        end -= 1
    return Span(start, end)


class _Walk:
    def __init__(self, text: str, min_elements: int, record_characters: int,
                 long_string: int) -> None:
        self.text, self.min_elements = text, min_elements
        self.record_characters, self.long_string = record_characters, long_string
        self.units: list[Span] = []
        self.kinds: list[str] = []

    def value(self, index: int) -> tuple[list[_Split], int]:
        """The splits inside the value at ``index`` (outermost first) and the value's end."""
        opener = self.text[index]
        if opener == "{":
            return self._object(index)
        if opener == "[":
            return self._array(index)
        end = _DECODER.raw_decode(self.text, index)[1]
        if opener == '"' and end - index - 2 >= self.long_string:
            return self._string(index + 1, end - 1), end
        return [], end

    def _object(self, index: int) -> tuple[list[_Split], int]:
        text, found = self.text, list[_Split]()
        index = _skip(text, index + 1)
        if text[index] == "}":
            return found, index + 1
        while True:
            if text[index] != '"':
                raise ValueError("expected a key")
            index = _skip(text, _DECODER.raw_decode(text, index)[1])
            if text[index] != ":":
                raise ValueError("expected ':'")
            splits, index = self.value(_skip(text, index + 1))
            found += splits
            index = _skip(text, index)
            if text[index] == "}":
                return found, index + 1
            if text[index] != ",":
                raise ValueError("expected ',' or '}'")
            index = _skip(text, index + 1)

    def _array(self, index: int) -> tuple[list[_Split], int]:
        text = self.text
        open_at, elements = index + 1, []
        index = _skip(text, open_at)
        if text[index] != "]":
            while True:
                end = _DECODER.raw_decode(text, index)[1]
                elements.append(Span(index, end))
                index = _skip(text, end)
                if text[index] == "]":
                    break
                if text[index] != ",":
                    raise ValueError("expected ',' or ']'")
                index = _skip(text, index + 1)
        close = index
        if len(elements) < self.min_elements:  # nothing to choose among here: look inside
            return [s for span in elements for s in self.value(span.start)[0]], close + 1
        split = _Split(open_at, close, elements)
        for i, span in enumerate(elements):
            first = len(self.units)
            inner = self.value(span.start)[0] if span.end - span.start > self.record_characters \
                else []
            if inner:
                split.units.append(None)
                split.inner[i] = inner
                split.ranges[i] = range(first, len(self.units))
            else:  # (a walk that finds no split adds no unit)
                split.units.append(len(self.units))
                self.units.append(span)
                self.kinds.append("record")
        return [split], close + 1

    def _string(self, start: int, end: int) -> list[_Split]:
        """A long string's sentences (spans inside the literal; a cut never splits an escape,
        since a sentence boundary is punctuation then real whitespace)."""
        spans = [Span(start + s.start, start + s.end)
                 for s in split_sentences(self.text[start:end])]
        if len(spans) < 2:
            return []
        split = _Split(start, end, spans)
        for span in spans:
            split.units.append(len(self.units))
            self.units.append(span)
            self.kinds.append("sentence")
        return [split]


def _skip(text: str, index: int) -> int:
    return _SPACE.match(text, index).end()  # type: ignore[union-attr]


def message_units(text: str, role: str) -> list[Span]:
    """What a message is kept or dropped by, everywhere (ingest, the session corpus, the
    prune stage): a tool's JSON answer's rows (``tool_layout``), any other text's sentences.
    Only tool messages are read as JSON: a user pasting JSON asks about all of it."""
    return message_rows(text, role)[0]


def message_rows(text: str, role: str) -> tuple[list[Span], list[bool]]:
    """``message_units`` and, per row, whether it is JSON frame (keys and short fields around
    the records: searchable and support, but never a claim of its own, since a search API's
    keys and URL pattern recur in every answer)."""
    layout = tool_layout(text) if role == "tool" else None
    if layout is None:
        spans = split_sentences(text)
        return spans, [False] * len(spans)
    return list(layout.spans), [kind == "frame" for kind in layout.kinds]


def tool_layout(text: str) -> JsonLayout | None:
    """``json_layout`` with the defaults, for a tool message's text. Cached for the few
    latest texts: ingest, the session corpus and the prune stage each ask for the same
    output, and a 2 MB answer takes ~0.7 s to walk (about what splitting it into sentences
    takes)."""
    if text.lstrip()[:1] not in ("[", "{"):
        return None
    return _cached_layout(text)


@lru_cache(maxsize=8)
def _cached_layout(text: str) -> JsonLayout | None:
    return json_layout(text)
