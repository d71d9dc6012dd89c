"""Token-level compression inside kept sentences, in the LLMLingua-2 manner.

When whole-sentence pruning leaves more than the budget allows, the words of a kept sentence
still differ in value: "the", "which was", "basically" carry little, names and numbers carry
the answer. The Provence pruner already gives every token a keep probability against the
query (its token head, the one sentence decisions are averaged from); a word's value is the
largest probability of its tokens, and the least valuable words go first.

Never touched: words with a digit (numbers, ids, dates), capitalised words (names), words in
quotes or looking like a JSON key, sentences with code (backticks, braces, ``=``, ``;``
endings), and text that parses as JSON. The caller never passes the newest user message.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentmem.structured import parses_as_json

_WORD = re.compile(r"\S+")
_CODE = re.compile(r"`|[{}]|\w\(.*\)|\s=\s|;\s*$|^\s*(?:def|class|import|return|SELECT)\b",
                   re.MULTILINE)


@dataclass(frozen=True)
class Word:
    start: int
    end: int
    value: float  # the largest keep probability of its tokens
    protected: bool


def is_compressible(text: str) -> bool:
    """Prose, not code or JSON: only prose is compressed."""
    return not _CODE.search(text) and not parses_as_json(text)


def protected(word: str) -> bool:
    """Numbers, names, quoted strings and key-like words keep their place."""
    core = word.strip(".,;:!?()[]")
    return (any(ch.isdigit() for ch in word) or core[:1].isupper() or '"' in word or "'" in core
            or word.endswith(":") or "_" in word or "/" in word or "@" in word)


def words_of(text: str, offsets: Sequence[tuple[int, int]], probabilities: Sequence[float]
             ) -> list[Word]:
    """The whitespace words of ``text`` with the largest probability of their tokens
    (``offsets``: each token's characters in ``text``)."""
    words = []
    cursor = 0
    spans = list(zip(offsets, probabilities))
    for match in _WORD.finditer(text):
        start, end = match.span()
        values = []
        while cursor < len(spans) and spans[cursor][0][0] < end:
            (_, token_end), value = spans[cursor]
            if token_end > start:
                values.append(float(value))
            cursor += 1
        words.append(Word(start, end, max(values, default=1.0), protected(match.group())))
    return words


def compress(text: str, words: Sequence[Word], keep_rate: float, min_words: int = 6) -> str:
    """``text`` without its least valuable unprotected words: at most ``1 - keep_rate`` of
    them go, never the last (it carries the sentence's end); a sentence of fewer than
    ``min_words`` words is left whole."""
    if len(words) < min_words:
        return text
    free = [i for i, word in enumerate(words[:-1]) if not word.protected]  # the last ends it
    drop = set(sorted(free, key=lambda i: words[i].value)[: int(len(free) * (1 - keep_rate))])
    if not drop:
        return text
    return " ".join(text[w.start:w.end] for i, w in enumerate(words) if i not in drop)


def token_words(tokenizer: Any, sentences: Sequence[str],
                token_probabilities: Sequence[Any], first: int = 0) -> list[list[Word]]:
    """Per sentence, its words valued by the pruner's token head (``token_probabilities``:
    ``SentenceScores.kept_fraction_by_threshold``). The pruner tokenises every sentence but
    the block's first as ``" " + sentence`` (``Pruner._blocks``); offsets are taken on the
    same string so the probabilities line up. ``first``: the position of ``sentences[0]``
    among the sentences the pruner scored (1 when a title came before)."""
    out = []
    for index, (sentence, probabilities) in enumerate(zip(sentences, token_probabilities)):
        shown = sentence if first + index == 0 else " " + sentence
        encoded = tokenizer(shown, add_special_tokens=False, return_offsets_mapping=True)
        shift = len(shown) - len(sentence)
        offsets = [(a - shift, b - shift) for a, b in encoded["offset_mapping"]]
        if len(offsets) != len(probabilities):  # cut by the block size, or no offsets: keep it
            out.append([Word(m.start(), m.end(), 1.0, True) for m in _WORD.finditer(sentence)])
            continue
        out.append(words_of(sentence, offsets, probabilities))
    return out


_FENCE = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)


def is_compressible_message(content: str) -> bool:
    """A message is compressed unless it is JSON (keys and values are data, not prose)."""
    return not parses_as_json(content)


def prose_sentences(content: str) -> list[tuple[int, int, str]]:
    """The sentences of a message outside fenced code blocks, with their character spans."""
    from agentmem.text import split_sentences

    out, cursor = [], 0
    for fence in [*_FENCE.finditer(content), None]:
        end = fence.start() if fence else len(content)
        for sentence in split_sentences(content[cursor:end]):
            text = content[cursor + sentence.start: cursor + sentence.end]
            out.append((cursor + sentence.start, cursor + sentence.end, text))
        cursor = fence.end() if fence else len(content)
    return out


def rebuild(content: str, sentences: Sequence[tuple[int, int, str]],
            words: Sequence[Sequence[Word]], keep_rate: float, min_words: int) -> str:
    """``content`` with each compressible sentence compressed; the text between sentences
    (whitespace, code blocks) as it was."""
    parts, cursor = [], 0
    for (start, end, text), sentence_words in zip(sentences, words):
        parts.append(content[cursor:start])
        parts.append(compress(text, sentence_words, keep_rate, min_words)
                     if is_compressible(text) else text)
        cursor = end
    parts.append(content[cursor:])
    return "".join(parts)
