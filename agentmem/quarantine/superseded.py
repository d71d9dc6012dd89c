"""Superseded tool results: the same call made again, its older answer withheld.

An agent reads a file, edits it and reads it again; runs the tests, fixes a bug and runs them
again; polls an order's status. Each later answer to the *same call* (the same tool with the
same arguments) is a newer version of the same thing, and the older one is a clash waiting to
happen: both versions reach the model, and the stale one can win (an agent that read a
setting before and after its own edit was sent both values). So, when a call is answered
again, the older answer is quarantined whole: a record of kind ``clash``, detector
``repeated_call``, releasable like any other, and the tool message stays in place (its call
needs an answer) with a one-line note that names the record.

Only versions of one thing are superseded, never two different things that happen to share a
call: ``scroll_down {}`` or ``next_page {}`` answer with different parts of a page, and ``ls``
after a ``cd`` lists another folder. The older answer is superseded only when most of it (by
characters, ``supersede_overlap``) is still in the newer one: its lines for text of several
lines (a file, a test run, pretty-printed JSON), its words for a line or two. A JSON object
must also keep every field of the older one: a game's state read again without its
``"bag"`` is a partial view, not a newer version, and the bag the older answer listed may
still hold. No model: the test is set arithmetic on the two texts, 0.4 ms for two versions
of a 743-line module.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import orjson

from agentmem.messages import answered_tool_calls, call_arguments, text_of
from agentmem.quarantine.records import QuarantineRecord

DETECTOR = "repeated_call"
HEAD_CHARACTERS = 300  # of an answer, kept in its record for people (the turn holds the rest)
MIN_LINES = 3  # fewer lines than this: the words are compared instead


def call_key(name: str, arguments: Any) -> str:
    """The call's identity: its tool and its arguments as JSON values (``call_arguments``, as
    the session's hashes read them), so key order and spacing do not make two calls differ."""
    if isinstance(arguments, str):
        return _text_call_key(name, arguments)
    return f"{name}\x00{orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS).decode()}"


@lru_cache(maxsize=8192)
def _text_call_key(name: str, arguments: str) -> str:
    """Cached: every call resends the session's earlier calls, whose arguments are read once
    (1,000 earlier calls cost ~15 ms a call to parse again)."""
    value = call_arguments(arguments)
    if isinstance(value, str):  # not JSON: the text itself
        return f"{name}\x00{value.strip()}"
    return call_key(name, value)


def overlap(older: str, newer: str) -> float:
    """The share of ``older``'s characters in lines (or, for short text, words) that
    ``newer`` has too."""
    if older == newer:
        return 1.0
    lines = [line.strip() for line in older.splitlines() if line.strip()]
    if len(lines) >= MIN_LINES:
        units, theirs = lines, {line.strip() for line in newer.splitlines()}
    else:
        units, theirs = older.split(), set(newer.split())
    total = sum(len(unit) for unit in units)
    return sum(len(unit) for unit in units if unit in theirs) / total if total else 0.0


def answered_calls(history: Sequence[dict[str, Any]]) -> list[tuple[int, int, str, str]]:
    """Each answered tool call in order: (its assistant message's position, its answer's
    position, the tool's name, its call key)."""
    out = []
    for unit, answer, function in answered_tool_calls(history):
        name = str(function.get("name", ""))
        out.append((unit, answer, name, call_key(name, function.get("arguments", ""))))
    return out


def superseded_records(history: Sequence[dict[str, Any]], turn_ids: Sequence[int], *,
                       since: int, min_overlap: float) -> list[QuarantineRecord]:
    """Records for answers that a later answer to the same call supersedes, where the later
    answer is at ``since`` or after (the turns this call brings; older ones were looked at
    when they arrived)."""
    latest: dict[str, tuple[int, int]] = {}  # key -> (unit, answer) of the newest answer
    pairs = []
    for unit, answer, name, key in answered_calls(history):
        previous = latest.get(key)
        if previous is not None and previous[0] != unit and answer >= since:
            pairs.append((previous[1], answer, name))
        latest[key] = (unit, answer)
    records = []
    for older, newer, name in pairs:
        old_text, new_text = text_of(history[older]), text_of(history[newer])
        if not old_text.strip() or older >= len(turn_ids) or newer >= len(turn_ids):
            continue
        share = overlap(old_text, new_text)
        if share < min_overlap or not _keeps_fields(old_text, new_text):
            continue  # another part, another folder, a partial view: both stay
        what = "the same answer" if old_text == new_text else f"a newer version ({share:.0%} of this one's text)"
        records.append(QuarantineRecord(
            kind="clash", detector=DETECTOR, turn_id=turn_ids[older], position=older,
            span=(0, len(old_text)), text=_head(old_text), source=f"tool:{name}",
            score=round(share, 4),
            reason=f"superseded: {name} was called again with the same arguments and returned "
                   f"{what}",
            related=[{"turn_id": turn_ids[newer], "span": [0, len(new_text)], "text": _head(new_text)}]))
    return records


def _keeps_fields(older: str, newer: str) -> bool:
    """Whether ``newer`` has every top-level field of ``older`` when both are JSON objects
    (always true otherwise)."""
    if not (older.lstrip().startswith("{") and newer.lstrip().startswith("{")):
        return True
    try:
        old, new = orjson.loads(older), orjson.loads(newer)
    except ValueError:
        return True
    return not (isinstance(old, dict) and isinstance(new, dict)) or old.keys() <= new.keys()


def _head(text: str) -> str:
    return text if len(text) <= HEAD_CHARACTERS else text[:HEAD_CHARACTERS] + "…"
