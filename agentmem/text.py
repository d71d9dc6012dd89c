"""Offline sentence splitting with character spans, and token counting.

Every stage works on the same sentences, so splitting happens once per turn at ingest and
the spans are stored with the turn. The splitter is a deterministic regex splitter with the
rules of the benchmark data (see ../shared/data/README.md): a boundary is ``.``, ``!`` or ``?``
(plus closing quotes or brackets) followed by whitespace and an upper-case letter or digit,
with abbreviations, initials and decimals guarded. Newline-separated blocks (lists, tool
output, code) are split at blank lines and line breaks first. We wrote it instead of using
nltk (needs data files that pip does not ship) or pysbd (unmaintained, ~50x slower), and so
that the pruner sees sentences cut the way its training data was cut.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any, NamedTuple

_ABBREVIATIONS = frozenset(
    """mr mrs ms dr prof sr jr st mt ft gen col capt lt sgt rev hon gov sen rep pres
    e.g i.e vs cf al approx dept est fig jan feb mar apr jun jul aug sep sept oct nov dec
    lit ca viz inc ltd co corp etc u.s u.k a.m p.m no nos vol vols pp p c d b ed eds""".split()
)
_NUMBER_ABBREVIATIONS = frozenset({"no", "nos", "vol", "vols", "pp", "p", "c", "d", "b", "fig"})
_AMBIGUOUS = frozenset({"etc", "inc", "ltd", "co", "corp", "jr", "u.s", "u.k", "a.m", "p.m", "al"})
_SENTENCE_OPENERS = frozenset(
    "The A An In On At However But And This That These Those It He She They We I You "
    "There Then When While After Before As If Although Because Since So Thus Meanwhile".split()
)

# Candidate boundary: terminal punctuation, optional closers, whitespace, then a capital/digit
# (or an opening quote/bracket before one).
_BOUNDARY = re.compile(r"""[.!?]+["'”’)\]]*(?=\s+["'“‘(\[]?[A-Z0-9])""")
_BLOCK = re.compile(r"[^\n]+(?:\n(?!\s*\n)[ \t]*(?![-*•]|\d+[.)]\s)[^\n]+)*")


class Span(NamedTuple):
    """A sentence as a half-open character range into the text it came from."""

    start: int
    end: int


OFF_LOOP_CHARS = 100_000  # text past this is read (split, counted, indexed) in a thread: up
# to a second of CPU for 1 MB that would stall every other session's call on the event loop


def split_sentences(text: str) -> list[Span]:
    """Split ``text`` into sentence spans; ``text[s.start:s.end]`` is the trimmed sentence."""
    if len(text) >= OFF_LOOP_CHARS:  # a paste: ingest and the corpus both split it (up to 1 s of
        return list(_split_long(text))  # CPU for 1 MB on a loaded core), so split it once
    return _split(text)


@lru_cache(maxsize=4)
def _split_long(text: str) -> tuple[Span, ...]:
    return tuple(_split(text))


def _split(text: str) -> list[Span]:
    spans: list[Span] = []
    for block in _BLOCK.finditer(text):
        _split_block(text, block.start(), block.end(), spans)
    if any(end - start > LONGEST_SPAN for start, end in spans):
        spans = [piece for span in spans for piece in _line_runs(text, span)]
    return spans


LONGEST_SPAN = 600  # characters; a longer span of several lines is cut between its lines


def _line_runs(text: str, span: Span) -> list[Span]:
    """A long span of several lines (a test log's 200 lines without a blank one, a listing) as
    runs of whole lines of up to ``LONGEST_SPAN`` characters: as one span it was kept or cut
    whole (the one FAILED line went with 200 PASSED ones), and its vector read only its head
    (the embedder reads 256 tokens). A long line, or prose, stays one span."""
    start, end = span
    if end - start <= LONGEST_SPAN or "\n" not in text[start:end]:
        return [span]
    runs: list[Span] = []
    run_start = start
    line_start = start
    while line_start < end:
        newline = text.find("\n", line_start, end)
        line_end = end if newline < 0 else newline
        if line_end - run_start > LONGEST_SPAN and line_start > run_start:
            _append_trimmed(text, run_start, line_start, runs)
            run_start = line_start
        line_start = line_end + 1
    _append_trimmed(text, run_start, end, runs)
    return runs


def sentences(text: str) -> list[str]:
    return [text[s.start : s.end] for s in split_sentences(text)]


def _split_block(text: str, start: int, end: int, out: list[Span]) -> None:
    cursor = start
    for match in _BOUNDARY.finditer(text, start, end):
        if (match.group().startswith(".") and len(match.group().rstrip("\"'”’)]")) == 1
                and not _is_real_period(text, cursor, match.start(), match.end())):
            continue
        _append_trimmed(text, cursor, match.end(), out)
        cursor = match.end()
    _append_trimmed(text, cursor, end, out)


def _is_real_period(text: str, sentence_start: int, dot: int, after: int) -> bool:
    word_match = re.search(r"([\w.]+)$", text[sentence_start:dot])
    if not word_match:
        return True
    word = word_match.group(1)
    lower = word.lower()
    next_word = re.match(r"\s*[\"'“‘(\[]?(\w+)", text[after : after + 40])
    following = next_word.group(1) if next_word else ""
    if re.fullmatch(r"\d+", word) and following.isdigit():
        return True  # "in 1990. 2001 was" is rare; keep the split
    if lower in _NUMBER_ABBREVIATIONS:
        return not following[:1].isdigit() and lower not in {"no", "vol", "pp", "fig"}
    if re.fullmatch(r"[A-Z]", word):  # an initial: "John F. Kennedy"
        return False
    if lower in _AMBIGUOUS or re.fullmatch(r"(?:[a-z]\.)+[a-z]", lower):
        return following in _SENTENCE_OPENERS
    return lower not in _ABBREVIATIONS


def _append_trimmed(text: str, start: int, end: int, out: list[Span]) -> None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    if end > start:
        out.append(Span(start, end))


def kept_text(text: str, spans: Sequence[tuple[int, int]], keep: Iterable[bool], *,
              mark_gaps: bool = False) -> str:
    """The kept sentences, each with the whitespace that came before it in the text.

    A paragraph break stays a paragraph break and a kept line of a list or a table keeps its
    line and indentation, instead of everything run together on one line; sentences that
    stood side by side stay one space apart.

    ``mark_gaps`` (machine text: code, a log, a listing) puts a line such as ``[... 12 lines
    not sent ...]`` where lines were cut: read as contiguous, a file with a gap says that an
    import or a function is not there, and an edit made from it can break what it cannot see.
    Prose needs no mark (Provence drops sentences silently)."""
    parts: list[str] = []
    previous = None
    gap_from: int | None = None  # where the current run of dropped spans starts
    gap_to = 0
    for (a, b), k in zip(spans, keep):
        if not k:
            if mark_gaps and gap_from is None:
                gap_from = a
            gap_to = b
            previous = b
            continue
        if gap_from is not None:
            parts.append(_gap_before(text, gap_from, parts))
            parts.append(gap_mark(text[gap_from:gap_to]))
            gap_from = None
        if parts:
            gap = text[previous:a] if previous is not None else ""
            parts.append(gap if gap and gap.isspace() else " ")
        parts.append(text[a:b])
        previous = b
    if gap_from is not None and parts:
        parts.append(_gap_before(text, gap_from, parts))
        parts.append(gap_mark(text[gap_from:gap_to]))
    return "".join(parts)


GAP_MARK_TOKENS = 10  # a mark and the line break before it (gpt-4o's encoding: 9-10 tokens)
GAP_MARK = re.compile(r"\[\.\.\. \d+ lines? not sent \.\.\.\]")  # what gap_mark writes


def gap_mark(cut: str) -> str:
    lines = cut.count("\n") + 1
    return f"[... {lines} line{'s' if lines != 1 else ''} not sent ...]"


def gap_marks(text: str) -> int:
    """How many cuts ``kept_text(..., mark_gaps=True)`` marked in ``text``."""
    return len(GAP_MARK.findall(text)) if "not sent ...]" in text else 0


def _gap_before(text: str, start: int, parts: list[str]) -> str:
    """A cut's mark starts a line of its own when the text broke a line there."""
    if not parts:
        return ""
    space = start
    while space > 0 and text[space - 1].isspace():
        space -= 1
    return "\n" if "\n" in text[space:start] else " "


DEFAULT_TOKENIZER_MODEL = "gpt-4o"


@lru_cache(maxsize=1)
def _encode():
    from agentmem.upstream import litellm  # configures litellm for offline use first

    return litellm.encode


@lru_cache(maxsize=32)
def _tokenizer(model: str) -> Any:
    """litellm's tokenizer choice for the model, made once: ``litellm.encode`` otherwise
    repeats it on every call, half of the cost of counting a short sentence (a 300,000-character
    page is ~2,000 sentences, counted as it arrives)."""
    from agentmem.upstream import litellm  # configures litellm for offline use first

    return litellm.utils.select_tokenizer(model=model)


def count_tokens(text: str, model: str | None = None) -> int:
    """Tokens of a plain text with litellm's tokenizer for the model (tiktoken for OpenAI-style
    models). ``litellm.encode`` gives the same count as ``litellm.token_counter(text=...)`` at
    half the cost per call, which matters when a session's sentences are counted; with the
    tokenizer chosen once per model (``_tokenizer``) half again."""
    if not text:
        return 0
    model = model or DEFAULT_TOKENIZER_MODEL
    return len(_encode()(model=model, text=text, custom_tokenizer=_tokenizer(model)))


MESSAGE_OVERHEAD_TOKENS = 3  # role and separators per message, as OpenAI's cookbook counts them
