"""Lost-in-the-middle ordering of a document list inside one message.

Models read the start and the end of a long context best and the middle worst, so a tool
output that lists several documents (a search tool's hits, a RAG tool's passages) can put
the most relevant at both edges: ranks 1, 3, 5, ... from the front and 2, 4, ... from the
back. Only two shapes count as a document list, and anything else is left alone:

- JSON: an array of at least ``minimum`` objects that each carry a text field (``text``,
  ``content``, ``snippet``, ...), alone or as the one list inside a top-level object
  (``{"results": [...]}``);
- a numbered or bulleted hit list: at least ``minimum`` items that all start with the same
  kind of marker (``1.``, ``1)``, ``[1]``, ``-``, ``*``), numbers counting up from 1; text
  before the first item and after the last item's blank line stays where it was.

Items keep their own numbers (a reply may cite "[2]"); JSON is written back compactly, or
indented by two when the original was indented.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

TEXT_KEYS = ("text", "content", "snippet", "passage", "page_content", "body", "chunk",
             "summary", "description", "abstract")
TITLE_KEYS = ("title", "name", "source", "url")
_MARKER = re.compile(r"^(?:(?P<number>\d{1,3})[.)]|\[(?P<bracket>\d{1,3})\]|(?P<bullet>[-*•]))\s+\S")


@dataclass(frozen=True)
class DocumentList:
    """A message's text seen as documents: ``texts`` to score, ``render(order)`` to rebuild."""

    texts: list[str]
    kind: str  # "json" or "list"
    _head: str
    _items: list[Any]
    _tail: str
    _container: tuple[dict[str, Any], str] | None = None  # JSON: the wrapping object and key
    _indent: int | None = None
    _trim_newline: bool = False

    def render(self, order: Sequence[int]) -> str:
        items = [self._items[i] for i in order]
        if self.kind == "list":
            text = self._head + "".join(items) + self._tail
            return text.removesuffix("\n") if self._trim_newline else text
        value: Any = items
        if self._container is not None:
            wrapper, key = self._container
            value = {**wrapper, key: items}
        return json.dumps(value, ensure_ascii=False, indent=self._indent)


def find_documents(text: str, minimum: int = 3) -> DocumentList | None:
    """The documents of a tool output, or None when it is not a list of documents."""
    if text.strip()[:1] in "[{":
        found = _json_documents(text, minimum)
        if found is not None:
            return found
    return _listed_documents(text, minimum)


def edges_first(relevance: Sequence[float]) -> list[int]:
    """Positions in their new order: the best first, the second best last, the third second,
    and so on, so the least relevant sit in the middle."""
    ranked = sorted(range(len(relevance)), key=lambda i: -relevance[i])
    front, back = ranked[0::2], ranked[1::2]
    return front + back[::-1]


def _document_text(item: Any) -> str | None:
    if not isinstance(item, dict):
        return None
    body = [item[k] for k in TEXT_KEYS if isinstance(item.get(k), str) and item[k].strip()]
    if not body:
        return None
    titles = [item[k] for k in TITLE_KEYS if isinstance(item.get(k), str)][:1]
    return " ".join([*titles, *body])


def _json_documents(text: str, minimum: int) -> DocumentList | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None  # "[1] first hit ..." is a list, not JSON
    container = None
    if isinstance(value, dict):
        lists = [k for k, v in value.items() if isinstance(v, list)]
        if len(lists) != 1:
            return None
        container = (value, lists[0])
        value = value[lists[0]]
    if not isinstance(value, list) or len(value) < minimum:
        return None
    texts = [_document_text(item) for item in value]
    if any(t is None for t in texts):
        return None
    indent = 2 if "\n" in text.strip() else None
    return DocumentList([t for t in texts if t is not None], "json", "", value, "",
                        container, indent)


def _listed_documents(text: str, minimum: int) -> DocumentList | None:
    lines = text.splitlines(keepends=True)
    starts, kinds, numbers = [], set(), []
    for number, line in enumerate(lines):
        match = _MARKER.match(line)
        if match:
            starts.append(number)
            kind = next(k for k in ("number", "bracket", "bullet") if match.group(k))
            kinds.add(kind)
            if kind != "bullet":
                numbers.append(int(match.group(kind)))
    if len(starts) < minimum or len(kinds) != 1:
        return None
    if numbers and numbers != list(range(1, len(numbers) + 1)):
        return None  # numbers that do not count up: something else (steps, a date list)
    head = "".join(lines[: starts[0]])
    items = ["".join(lines[a:b]) for a, b in zip(starts, [*starts[1:], len(lines)])]
    items[-1], tail = _split_tail(items[-1])
    ends_open = not items[-1].endswith("\n")  # the text ends inside the last item
    if ends_open:
        items[-1] += "\n"  # every item ends with a newline, so any order joins cleanly
    return DocumentList([item.strip() for item in items], "list", head, items, tail,
                        _trim_newline=ends_open)


def _split_tail(item: str) -> tuple[str, str]:
    """The last item, and text after it: what follows its first blank line, unless indented."""
    match = re.search(r"\n[ \t]*\n(?=\S)", item)
    if not match:
        return item, ""
    return item[: match.start() + 1], item[match.start() + 1:]
