"""Is a tool's text prose, or machine text that must reach the model exactly as it was?

Agents read more than prose: a source file, a diff, a build log, a directory listing, a CSV.
The pruner is a prose model (its sentences are cut at ". " and it was trained on
encyclopedia and chat text): on a 700-line Python file it keeps a docstring's two sentences and
cuts the rest, which leaves a coding agent editing a file it can no longer see. So a tool output
is read by the pruner only when it is prose, and machine text in the recent window goes to the
model verbatim.

The test is cheap and line-based (regular expressions, no model). Text is machine text when
at least a fifth of its lines are lines only code has (a definition, an import, an assignment,
a statement's end, a block's brace), when it is a diff (a hunk header), or when the lines that *read as
prose* hold less than half of its characters. A line reads as prose when it has at least five
words and nearly all of them are plain words (letters, with a sentence's punctuation around
them; Markdown's markup read through); identifiers, operators, paths, timestamps and numbers
are not. Comment lines count neither way, so a licence header leaves a source file code, and
the code lines decide first, so a module with long docstrings stays code. The characters weigh,
not the lines: a web page's few long paragraphs outweigh its short headings and list items.
Text of fewer than six non-blank lines is prose (a short answer; the sentence splitter cuts
nothing in it anyway) unless it is long and not words: from 1,000 characters such text is
machine text when less than half of its non-space characters are in plain words (minified
JavaScript and CSS 0.5-5%, base64 and a one-line CSV 0%; SQuAD paragraphs joined on one line
85% at least, 98% typically).

Measured on files of this machine (`agentmem bench text-kinds`; README, Benchmarks "Stop
55"): Python 595 of 600 files machine text, C headers and sources 567 of 600, configuration
and shell files 116 of 120; Debian copyright files 488 of 600 prose (106 of the others are
Debian's machine-readable field records), and SQuAD paragraphs as pages (one line each, plain,
wrapped at 80 columns, Markdown with headings) all prose. Technical Markdown
whose code examples carry half its lines counts as machine text and is left whole: the safe
side, since a prose cut of a code sample breaks it.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Literal

TextKind = Literal["prose", "machine"]

MAX_LINES = 400  # lines read at most
MAX_CHARACTERS = 20_000  # and characters
MIN_LINES = 6  # fewer non-blank lines than this: prose, unless it is long and not words
MIN_RUN_ON = 1_000  # characters from which a text of few lines is read by its words (a
#   minified script, a one-line CSV or base64 blob: machine; a page's text on one line: prose)
PROSE_SHARE = 0.5  # machine text: its prose lines hold less than this share of its characters
MIN_WORDS = 5  # a prose line has at least this many words
PLAIN_SHARE = 0.8  # and this share of them are plain words

# A plain word: letters (apostrophes and hyphens inside), with a sentence's punctuation around
# it: "(see", "it's", "well-known,", "Paris." are plain; "self.x", "x=1", "f()", "/usr/bin",
# "12:04:05", "0x1f", "snake_case" are not.
_PLAIN_WORD = re.compile(
    r"""(?<!\S)["'“‘(\[]*[^\W\d_]+(?:['’-][^\W\d_]+)*[.,;:!?"'”’)\]]*(?!\S)""")
_WORDY = re.compile(r"[^\W_]")
# A line number a file reader puts before each line ("    12\t", "12:", "  12→", "12 |").
_LINE_NUMBER = re.compile(r"^\s*\d+(?:\t|[:|→]\s?|\s{2,})")
# Markup around a document's words, read through: a heading's or a list item's lead, a quote's
# ">", emphasis, a link's target, an inline code span (one word: "use `x.y()` here" is prose).
_LEAD = re.compile(r"^\s*(?:#{1,6}|>+|[-*+•]|\d{1,3}[.)])\s+")
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)\s]*\)")
_CODE_SPAN = re.compile(r"`[^`\s][^`]*`")
_EMPHASIS = re.compile(r"(?<!\w)[*_]{1,3}|[*_]{1,3}(?!\w)")
# A comment's lead ("#", "//", "/*", " * ", "--", ";"; a Markdown heading too): such a line
# counts neither way, so a licence header or a commented file stays what its other lines are.
_COMMENT = re.compile(r"^\s*(?:#|//|/\*|\*|--|;)")
# A line only code has: a definition, an import, a block's opening or closing, a statement's
# end, an assignment. Code with long docstrings is mostly prose by its characters, so these
# decide first (a file is code when at least ``CODE_SHARE`` of its lines are such lines).
CODE_SHARE = 0.2
_CODE_LINE = re.compile(
    r"""^\s*(?:
        (?:async\s+)?def\s+\w+\s*\( | class\s+\w+\s*[(:{<]
      | from\s+[\w.]+\s+import\s | import\s+[\w.]+(?:\s+as\s+\w+)?(?:\s*,\s*[\w.]+)*\s*;?$
      | (?:return|raise|yield|await)\b(?:\s.*)?$ | (?:if|elif|while|for|with|except)\b.*:$
      | (?:else|try|finally):$ | @[\w.]+(?:\(.*)?$
      | \#\s*(?:include|define|ifn?def|endif|pragma)\b | (?:typedef|struct|enum|union|namespace)\s+\w+
      | (?:public|private|protected|static|export|pub)\s+\w+ | (?:const|let|var)\s+[\w{}\[\], ]+=
      | (?:function|func|fn)\s*\w*\s*[(<] | package\s+[\w.]+;?$ | use\s+[\w:]+.*;$
      | [\w.\[\]'"]+\s*(?:[-+*/|&]?=|:=)\s*[^=\s].*
      | \w+\s*:\s*[\w.]+(?:\[[^\]]*\])?(?:\s*\|\s*[\w.]+(?:\[[^\]]*\])?)*(?:\s*=.*)?$
      | .*[;{}]\s*$
    )""",
    re.VERBOSE,
)
# A unified diff's hunk header: a diff is machine text whatever the lines it changes are.
_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@", re.MULTILINE)


def _plain_share(text: str) -> float:
    """The share of ``text``'s non-space characters that are in plain words."""
    plain = sum(len(word) for word in _PLAIN_WORD.findall(text))
    return plain / max(1, len(text) - sum(character.isspace() for character in text))


def reads_as_prose(line: str) -> bool:
    """Whether a line is a sentence or part of one (see the module docstring)."""
    line = _LEAD.sub("", line, count=1)
    if "](" in line:
        line = _LINK.sub(r"\1", line)
    if "`" in line:
        line = _CODE_SPAN.sub("code", line)
    if "*" in line or "_" in line:
        line = _EMPHASIS.sub("", line)
    words = sum(1 for word in line.split() if _WORDY.search(word))  # not emoji, "—", "|"
    if words < MIN_WORDS:
        return False
    return len(_PLAIN_WORD.findall(line)) >= PLAIN_SHARE * words


@lru_cache(maxsize=256)
def text_kind(text: str) -> TextKind:
    """``"machine"`` for source code, diffs, logs, listings and tables; ``"prose"`` otherwise.

    Read on the call path (a tool's output arrives with the call that answers it), so it
    stops as soon as the code lines decide, reads at most ``MAX_LINES`` lines and
    ``MAX_CHARACTERS`` characters (a file's kind shows in its first few hundred lines), and
    an agent step's later calls find it cached (256 texts: the prune stage also asks it of
    each older message it cuts, to mark the cuts in machine text)."""
    head = text[:MAX_CHARACTERS]
    lines = [line for line in head.splitlines() if line.strip()][:MAX_LINES]
    if len(lines) < MIN_LINES:
        return "prose" if len(head) < MIN_RUN_ON or _plain_share(head) >= PROSE_SHARE else "machine"
    if _HUNK.search(head):
        return "machine"
    enough_code = CODE_SHARE * len(lines)
    prose = total = code = body = 0
    for line in lines:
        line = _LINE_NUMBER.sub("", line, count=1)
        if _COMMENT.match(line):
            continue
        size = len(line.strip())
        body += 1
        total += size
        if _CODE_LINE.match(line):
            code += 1
            if code >= enough_code:
                return "machine"
        elif reads_as_prose(line):
            prose += size
    if code >= CODE_SHARE * body:
        return "machine"
    return "prose" if prose >= PROSE_SHARE * total else "machine"

