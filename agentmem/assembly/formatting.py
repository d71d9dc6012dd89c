"""XML-tagged rendering of kept context, with a one-line note of what was removed.

A model that sees "42 older turns omitted" knows the conversation is longer than what it
reads and that silence about a topic is not evidence; tags tell it which text is an earlier
turn and which is a document from a tool. Text inside the tags is left as it is (models read
it as text; escaping would change quotes and ampersands in code and JSON); attribute values
are escaped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape


@dataclass(frozen=True)
class Piece:
    """One earlier message as the block shows it."""

    role: str  # user, assistant, tool
    position: int  # its position in the conversation
    text: str
    source: str | None = None  # tool:NAME for a tool's output


def attributes(**values: object) -> str:
    return "".join(f' {key}="{escape(str(value), quote=True)}"' for key, value in values.items()
                   if value is not None)


def document(text: str, source: str, position: int, note: str | None = None) -> str:
    """``<document source="tool:web_search" turn="12" note="...">text</document>``."""
    return f"<document{attributes(source=source, turn=position, note=note)}>\n{text}\n</document>"


def omission_note(omitted: int, shortened: int) -> str:
    """The one line that says what was removed from the earlier turns."""
    parts = [f"{omitted} older turn{'s' if omitted != 1 else ''} omitted"]
    if shortened:
        parts.append(f"{shortened} shortened to {'its' if shortened == 1 else 'their'} "
                     "relevant sentences")
    return ", ".join(parts) + "."


def earlier_turns(pieces: Sequence[Piece], omitted: int, shortened: int) -> str:
    """The kept earlier turns as one block, oldest first, the note on top."""
    lines = ["<earlier_turns>", f"<note>{omission_note(omitted, shortened)}</note>"]
    for piece in pieces:
        if piece.role == "tool":
            lines.append(document(piece.text, piece.source or "tool", piece.position))
        else:
            lines.append(f"<turn{attributes(role=piece.role, turn=piece.position)}>{piece.text}"
                         "</turn>")
    lines.append("</earlier_turns>")
    return "\n".join(lines)
