"""When the turns the budget stage may not drop are over the prompt budget on their own.

The recent window and the current agent step always go out (the prune stage keeps them
verbatim, the budget stage drops older units only), so an agent that fetched a page larger
than the model's window (a 300,000-character web page is ~70,000 tokens) used to send it
whole and have the provider refuse the call. Here the largest tool outputs of those turns (a
string, or the text parts a Messages or Responses client's tool result arrives in) are
cut until the request fits: the sentences (a JSON answer's records) sharing the most words
with the user's message stay, in their order, the rest go, each cut reported as the prune
stage reports its own. BM25, no model: the page arrived with this call, its sentences have no
vector yet, and reading ~3,000 sentences with the pruner takes minutes on a CPU. A text that
shares no word with the message keeps its beginning. A user's or the system's message is
never cut: the output fits as far as tool outputs can make it, and the report says what is
still over. An agent's page stays in its step: its reading is kept, and its first cut leaves
room for the step's next results, so the later calls send it as first cut (a stable prefix).
"""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentmem.conversation import last_user_index
from agentmem.ingest import message_tokens
from agentmem.lexical import relative_bm25_of, terms
from agentmem.messages import text_of
from agentmem.models.runtime import let_threads_run, yield_to_other_calls
from agentmem.report import Decision
from agentmem.stages.base import Draft, OutgoingMessage, StageContext
from agentmem.stages.prune import kept_content, spans_decision
from agentmem.structured import JsonLayout, message_rows, parses_as_json, tool_layout
from agentmem.text import OFF_LOOP_CHARS, count_tokens

MIN_OUTPUT_TOKENS = 200  # outputs smaller than this are never cut: there is little to gain
YIELD_EVERY = 32  # sentences read between GIL hand-overs off the loop (as the session corpus)


async def fit_tool_outputs(draft: Draft, context: StageContext, pinned: list[OutgoingMessage],
                           tokens: dict[int, int], over: int, budget: int, room: int = 0) -> int:
    """Cut the largest tool outputs among ``pinned`` (the messages that must go out) by
    ``over`` tokens in all, and ``room`` more where they can, largest first; ``tokens``: each
    one's count. Returns what is still over (0 when it fits). A large output is read in a
    thread that hands the GIL over as the session corpus's does (~150 ms for 300,000
    characters: other sessions' calls go on).

    An agent step's later calls send an output as its latest cut while that still fits and
    leaves no more than ``room`` unused: the page the step fetched stays the same from call to
    call (a provider's prompt cache holds through it) until the step's new results outgrow the
    room the first cut left."""
    history = context.history
    last = last_user_index(history)
    query = text_of(history[last]) if last is not None else ""
    # each tool output's texts (a string, or the text parts of a Messages/Responses answer),
    # the largest output first and, within one, its largest part
    outputs = sorted(((m.index, part, text) for m in pinned if m.role == "tool"
                      and tokens[m.index] >= MIN_OUTPUT_TOKENS for part, text in _texts(m.message)),
                     key=lambda found: (-tokens[found[0]], -len(found[2])))
    for index, part, text in outputs:
        if over <= 0:
            break
        want = over + room
        reading = (await asyncio.to_thread(read_output, text, query, True)
                   if len(text) > OFF_LOOP_CHARS else read_output(text, query, False))
        if reading is None or (part is not None and sum(reading.costs) < MIN_OUTPUT_TOKENS):
            continue
        message, before = draft.message_at(index), tokens[index]
        # where the text sits in the message's text as stored (its parts joined, none cut yet)
        offset = 0 if part is None else len(text_of({"content": history[index]["content"][:part]}))
        cut = reading.again(message, part, offset) if room else None  # only an agent's step
        if cut is None or not over <= before - cut.tokens <= want + room:
            # the text's own tokens less what should go (a part: the message's others stay whole)
            allowed = before - want if part is None else sum(reading.costs) - want
            allowed -= allowed // 100  # sentences counted alone sum to a little less than the text
            for _ in range(4):
                cut = reading.cut(message, max(allowed, MIN_OUTPUT_TOKENS // 2), part, offset)
                if cut is None or before - cut.tokens >= want or allowed <= MIN_OUTPUT_TOKENS // 2:
                    break
                allowed -= want - (before - cut.tokens)
        if cut is None:
            continue
        context.run.decisions.append(_decision(index, cut, budget))
        over -= before - cut.tokens
        tokens[index] = cut.tokens
        draft.replace_messages({index: cut.message}, {index: cut.tokens})
    return max(over, 0)


@dataclass
class _Cut:
    message: dict[str, Any]  # the cut copy
    tokens: int
    removed: list[tuple[tuple[int, int], float]]  # each span left out, with its score
    json: bool


@dataclass(frozen=True)
class _Reading:
    """A tool output's sentences (a JSON answer's rows), each one's tokens and its score for
    the query: the query's words (BM25 within the output; a prose sentence also half of its
    better neighbour's), then the earlier sentence."""

    text: str
    layout: JsonLayout | None
    spans: list[tuple[int, int]]
    units: list[bool]  # False: a JSON answer's frame, which goes with what holds it
    costs: list[int]
    order: list[int]  # rows, best first
    score: np.ndarray
    latest: list[list[bool]] = field(default_factory=list)  # the last cut's rows kept (one slot)

    @classmethod
    def of(cls, text: str, query: str, off_loop: bool = False) -> _Reading | None:
        layout = tool_layout(text)
        if layout is None and parses_as_json(text):
            return None  # JSON with nothing to choose among: cut by sentences it would not parse
        found, frame = message_rows(text, "tool")  # what ingest and the corpus cut it into
        spans = [(a, b) for a, b in found]
        if len(spans) < 2:
            return None
        units = [not structural for structural in frame]
        pieces = [text[a:b] for a, b in spans]
        words, costs = [], []
        for number, piece in enumerate(pieces):
            words.append(terms(piece))
            costs.append(count_tokens(piece))
            if off_loop and number % YIELD_EVERY == YIELD_EVERY - 1:
                let_threads_run()
                yield_to_other_calls()
        score = relative_bm25_of(terms(query), words)
        if layout is None:  # prose: the sentence after the one that names the question's words
            score = _with_neighbours(score)  # often holds the answer (records stand alone)
        score = score - 1e-6 * np.arange(len(pieces)) / len(pieces)
        return cls(text, layout, spans, units, costs, np.argsort(-score, kind="stable").tolist(), score)

    def cut(self, message: dict[str, Any], allowed: int, part: int | None = None,
            offset: int = 0) -> _Cut | None:
        """The message with its best sentences within ``allowed`` tokens (in its text part
        number ``part`` when its content is a list, which starts at ``offset`` in the message's
        text), or None when nothing would be left out."""
        keep = [not unit for unit in self.units]
        room = allowed - sum(cost for cost, kept in zip(self.costs, keep) if kept)
        for row in self.order:
            if self.units[row] and self.costs[row] <= room:
                keep[row] = True
                room -= self.costs[row]
        if not any(k and unit for k, unit in zip(keep, self.units)):  # the best one at least
            keep[next(row for row in self.order if self.units[row])] = True
        if all(keep):
            return None
        return self.keeping(message, keep, part, offset)

    def again(self, message: dict[str, Any], part: int | None = None, offset: int = 0
              ) -> _Cut | None:
        """The latest cut of this output made again (the same rows kept), if there was one."""
        return self.keeping(message, self.latest[0], part, offset) if self.latest else None

    def keeping(self, message: dict[str, Any], keep: list[bool], part: int | None,
                offset: int) -> _Cut:
        """The message with the rows ``keep`` marks, remembered for ``again``."""
        self.latest[:] = [keep]
        kept = kept_content(self.text, self.spans, keep, self.layout)
        if part is None:
            cut = {**message, "content": kept}
        else:
            content = list(message["content"])
            content[part] = {**content[part], "text": kept}
            cut = {**message, "content": content}
        removed = [((a + offset, b + offset), float(self.score[row])) for row, ((a, b), kept_row, unit)
                   in enumerate(zip(self.spans, keep, self.units)) if unit and not kept_row]
        return _Cut(cut, message_tokens(cut), removed, self.layout is not None)


@functools.lru_cache(maxsize=8)
def read_output(text: str, query: str, off_loop: bool) -> _Reading | None:
    """``_Reading.of``, kept for the agent step's later calls: the page stays in the step and
    over the budget, so each call cut it again for the same user message (~110-150 ms for
    300,000 characters). A few readings, least recently used evicted; a hit compares the text
    whole, never by a hash alone."""
    return _Reading.of(text, query, off_loop)


def _texts(message: dict[str, Any]) -> list[tuple[int | None, str]]:
    """A tool message's texts that can be cut: its content when a string (part None), else each
    text part of its list (an image or a file part is never cut)."""
    content = message.get("content")
    if isinstance(content, str):
        return [(None, content)]
    if isinstance(content, list):
        return [(number, part["text"]) for number, part in enumerate(content) if isinstance(part, dict)
                and part.get("type") == "text" and isinstance(part.get("text"), str)]
    return []


NEIGHBOUR_SHARE = 0.5  # of the better neighbour's score a sentence is given at least


def _with_neighbours(score: np.ndarray) -> np.ndarray:
    """Each sentence scored at least ``NEIGHBOUR_SHARE`` of its better neighbour's score. A
    long page cut to the sentences that share the question's words: SQuAD dev questions, each
    paragraph among 30 others, cut to 5% / 10% / 20% of the tokens keep 0.885 / 0.916 / 0.938
    of the answer sentences by BM25 alone, 0.932 / 0.963 / 0.988 with this (0.3 and 0.7 within
    0.006; SQuAD train rows: 0.906 / 0.952 -> 0.919 / 0.961)."""
    if len(score) < 2:
        return score
    beside = np.maximum(np.r_[0.0, score[:-1]], np.r_[score[1:], 0.0])
    return np.maximum(score, NEIGHBOUR_SHARE * beside)


def _decision(index: int, cut: _Cut, budget: int) -> Decision:
    return spans_decision(index, cut.removed, f"the turns that always go out are over the prompt "
                          f"budget of {budget} tokens; shares the fewest words with the user's "
                          "message", cut.json)
