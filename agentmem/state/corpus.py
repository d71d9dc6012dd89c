"""A session's sentences, ready for query-time scoring, kept in process between calls.

Everything here is query-independent: sentence spans, token counts, MiniLM vectors (read
from the ones stored at ingest) and BM25 postings. A call only extends the corpus with the
turns that are new since the last call, so the call path pays for new turns once and then
does query-dependent work only (one query embedding, a matrix-vector product, a few BM25
postings). Entries are validated by chain hash: a corpus is reused only when the client's
history still starts with exactly the turns it covers, so a cache hit can never be stale.
One ``CorpusCache`` per engine, bounded in bytes.

Model work on the call path is bounded: a call embeds at most ``call_budget`` new sentences,
all of its stages together, each stage's request the newest first among the rows it asked for
(the prune stage's older turns; the quarantine's whole history, and then all or none, since its
poison check reads every sentence or waits for the reply). Rows past the budget
have no vector yet (``Corpus.embedded`` is False; stages score them without it and say so),
and a background fill per session embeds them at low priority, in chunks, so a later call
finds them here; after the reply, ``turn_vectors`` hands them to the store. A call never
waits for that background work: what it needs now it computes itself, within its budget.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from agentmem.episodes import opens_with_date
from agentmem.ingest import chain_hashes, source_of
from agentmem.lexical import BM25Index, terms
from agentmem.messages import text_of
from agentmem.models.embedder import DIMENSION, from_bytes
from agentmem.models.runtime import (
    embed,
    in_background,
    is_background,
    let_threads_run,
    yield_to_other_calls,
)
from agentmem.speakers import embedding_text, speaker_of, speaker_terms
from agentmem.state.queries import QueryVectors
from agentmem.structured import message_rows
from agentmem.text import OFF_LOOP_CHARS, count_tokens

if TYPE_CHECKING:
    from agentmem.stages.base import StageContext
    from agentmem.store.sessions import TurnRecord

log = logging.getLogger("agentmem")
YIELD_EVERY = 32  # sentences of pure-Python work between GIL hand-overs (let_threads_run)
FILL_BATCH = 256  # rows the background fill embeds and patches per round


@dataclass
class Corpus:
    """Sentence rows of history[:covered]; ``rows_of[p]`` is the row range of position p.

    Append-only: a call computes the new rows first (awaiting Redis and the embedder) and
    appends them in one synchronous step, so concurrent calls never see half an extension.
    """

    chains: list[str] = field(default_factory=list)
    rows_of: list[range] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)  # per position: user, system, assistant, tool:NAME
    speakers: list[str] = field(default_factory=list)  # per position: its participant's name, or
    # "" (agentmem.speakers: indexed and embedded with each of its sentences)
    position: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    spans: list[tuple[int, int]] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)  # per row: the sentence
    words: list[list[str]] = field(default_factory=list)  # per row: its terms (lexical.terms)
    tokens: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    vectors: np.ndarray = field(default_factory=lambda: np.zeros((0, DIMENSION), np.float32))
    embedded: np.ndarray = field(default_factory=lambda: np.zeros(0, np.bool_))  # per row
    frame: np.ndarray = field(default_factory=lambda: np.zeros(0, np.bool_))  # per row: JSON frame
    lexical: BM25Index = field(default_factory=BM25Index)
    room: np.ndarray | None = None  # ``vectors`` is a view of its first rows (see _append)
    sums: np.ndarray = field(default_factory=lambda: np.zeros((0, DIMENSION), np.float32))
    sums_room: np.ndarray | None = None  # ``sums`` is a view of its first rows (turn_sums)
    chars: int = -1  # characters of ``texts``, kept as rows are added (-1: not counted yet)
    dated: list[bool] = field(default_factory=list)  # per position: opens a sitting (dated_turns)

    @property
    def covered(self) -> int:
        return len(self.chains)

    def embedding_text(self, row: int) -> str:
        """What the embedder reads for the row: its sentence, with its speaker when named."""
        return embedding_text(self.texts[row], self.speakers[int(self.position[row])])

    def turn_sums(self) -> np.ndarray:
        """Per position, the sum of its sentence vectors (a row without a vector yet counts
        zero; ``_patch`` adds it when it lands). Query-independent, so kept: a call sums only
        the positions added since the last one."""
        have, covered = len(self.sums), self.covered
        if have < covered:
            first = self.rows_of[have].start
            new = np.zeros((covered - have, DIMENSION), np.float32)
            counts = np.asarray([len(self.rows_of[p]) for p in range(have, covered)])
            nonempty = np.flatnonzero(counts)
            if len(nonempty):
                starts = np.asarray([self.rows_of[have + p].start for p in nonempty]) - first
                new[nonempty] = np.add.reduceat(self.vectors[first:], starts)
            self.sums, self.sums_room = _grown(self.sums, self.sums_room, new)
        return self.sums

    def dated_turns(self) -> np.ndarray:
        """Per position, whether its turn opens with a date stamp (``agentmem.episodes``: a new
        sitting of the conversation). Query-independent, so kept: a call reads only the turns
        added since the last one."""
        for position in range(len(self.dated), self.covered):
            span = self.rows_of[position]
            self.dated.append(bool(len(span)) and opens_with_date(self.texts[span.start]))
        return np.asarray(self.dated[: self.covered], dtype=np.bool_)

    @property
    def missing(self) -> int:
        """Rows without a vector yet (past a call's budget; the background fill is on it)."""
        return len(self.embedded) - int(self.embedded.sum())

    @property
    def nbytes(self) -> int:
        if self.chars < 0:  # counted once; _append keeps it (every call's eviction asks)
            self.chars = sum(len(t) for t in self.texts)
        return self.vectors.nbytes + 64 * len(self.spans) + self.chars


def _cache_key(context: StageContext) -> str:
    if context.session is not None:
        return f"{context.session.tenant}\x00{context.session.session_id}"
    return f"\x00{context.chains[0] if context.chains else ''}"


class CorpusCache:
    """Per-session corpora of one engine, least recently used evicted past ``max_bytes``;
    ``call_budget``: new sentences one call may embed on its path."""

    def __init__(self, queries: QueryVectors, max_bytes: int = 512 * 1024 * 1024,
                 call_budget: int = 64) -> None:
        self.queries = queries
        self.max_bytes = max_bytes
        self.call_budget = call_budget
        self._cache: OrderedDict[str, Corpus] = OrderedDict()
        self._fills: dict[str, asyncio.Task[None]] = {}

    async def corpus_for(self, context: StageContext, upto: int, *, vectors: bool = True,
                         whole: bool = False) -> Corpus:
        """The corpus of history[:upto], extended (or rebuilt on divergence) as needed; with
        ``vectors=False`` the call embeds nothing (new rows wait for the background fill).

        With ``vectors``, the rows this call added (``Channels.corpus_from`` on) that
        history[:upto] holds get their vectors within what is left of the call's budget, the
        newest first; a stage that asks for fewer positions (the prune stage: the older turns)
        gets its own rows embedded, not the newest turn's that it never scores. ``whole``:
        only if that leaves no row of history[:upto] without one (a check that reads every
        sentence or none: a 300,000-character web page is not half-embedded for nothing)."""
        if not context.chains:  # the store is off: hash here (the store path hashed at ingest)
            context.chains = chain_hashes(context.history)
        key, chains = _cache_key(context), context.chains
        if len(chains) < upto:  # never pair rows with the wrong turns' hashes
            chains = chain_hashes(context.history[:upto])
        cache = self._cache
        for _ in range(3):  # another call (or a background task) may extend it while we await
            corpus = cache.get(key)
            if corpus is None:
                corpus = cache[key] = Corpus()
            elif not _consistent(corpus, chains):
                # A retry, an edit or a new question in place of the last turn: keep the shared
                # prefix (its tokens and vectors are the expensive part), rebuild the rest.
                corpus = cache[key] = _truncated(corpus, _shared_prefix(corpus, chains))
            cache.move_to_end(key)
            if corpus.covered < upto:
                start = corpus.covered
                rows = await self._new_rows(context, start, upto)
                if corpus.covered != start or cache.get(key) is not corpus:
                    continue
                _append(corpus, rows, chains[start:upto])
                context.channels.added_from(start)
                self._evict()
            if vectors:
                await self._embed_added(context, corpus, upto, whole)
            return self._filled(key, corpus)
        corpus = Corpus()  # persistent contention: a private corpus, correct if not cached
        _append(corpus, await self._new_rows(context, 0, upto), chains[:upto])
        context.channels.added_from(0)
        if vectors:
            await self._embed_added(context, corpus, upto, whole)
        return corpus

    async def _embed_added(self, context: StageContext, corpus: Corpus, upto: int,
                           whole: bool = False) -> None:
        """Vectors for the rows of history[:upto] this call added and still lacking one,
        within what is left of the call's budget (``call_budget`` sentences a call, all of
        its stages together), the newest turns first (what the stages check now; older turns
        are usually stored with vectors); the rest is the background fill's. In the
        background (after the reply) rows were embedded as they were added."""
        first = context.channels.corpus_from
        if is_background() or first is None or first >= min(upto, corpus.covered):
            return
        lo, hi = corpus.rows_of[first].start, corpus.rows_of[min(upto, corpus.covered) - 1].stop
        missing = (np.flatnonzero(~corpus.embedded[lo:hi]) + lo).tolist()
        if not missing:
            return
        room = max(self.call_budget - context.channels.embedded, 0)
        if whole and (len(missing) > room or not corpus.embedded[:lo].all()):
            return
        self.queries.ready_or_raise()
        now = sorted(missing, key=lambda row: -int(corpus.position[row]))[:room]
        texts = [corpus.embedding_text(row) for row in now]
        context.channels.embedded += len(now)
        for row, text, vector in zip(now, texts, await embed(self.queries.embedder.encode, texts)):
            if vector is not None:
                _patch(corpus, row, text, vector)
        if len(missing) > len(now):
            context.report.warnings.append(
                f"{context.run.stage}: {len(missing) - len(now):,} new sentences past the call's "
                f"embedding budget ({self.call_budget}); embedding them in the background")

    def _filled(self, key: str, corpus: Corpus) -> Corpus:
        """The corpus; rows it lacks vectors for are embedded in the background (one fill
        per session at a time; it loops until none is missing or its work is shed)."""
        if corpus.missing:
            running = self._fills.get(key)
            loop = asyncio.get_running_loop()
            if running is None or running.done() or running.get_loop() is not loop:
                with in_background():
                    task = loop.create_task(self._fill(key))
                self._fills[key] = task
                task.add_done_callback(lambda done: _forget_fill(self._fills, key, done))
        return corpus

    async def _fill(self, key: str) -> None:
        """Embed the cached corpus's missing rows, at background priority in the session's
        lane, ``FILL_BATCH`` at a time: each batch is patched in place as it lands (by row and
        text, so a rebuilt corpus is patched too), and a forgotten session stops the fill."""
        while (corpus := self._cache.get(key)) is not None and corpus.missing:
            rows = np.flatnonzero(~corpus.embedded)[:FILL_BATCH].tolist()
            texts = [corpus.embedding_text(row) for row in rows]
            vectors = await embed(self.queries.embedder.encode, texts, lane=key)
            for row, text, vector in zip(rows, texts, vectors):
                current = self._cache.get(key)
                if vector is not None and current is not None:
                    _patch(current, row, text, vector)
            if any(vector is None for vector in vectors):
                return  # shed: the queue is full; the next call that finds them starts again

    def missing(self, tenant: str, session_id: str) -> int:
        """Rows of the session's cached corpus still without a vector (0 when not cached)."""
        corpus = self._cache.get(f"{tenant}\x00{session_id}")
        return corpus.missing if corpus is not None else 0

    def covered(self, tenant: str, session_id: str) -> int:
        """History positions the session's cached corpus holds (0 when not cached)."""
        corpus = self._cache.get(f"{tenant}\x00{session_id}")
        return corpus.covered if corpus is not None else 0

    async def settled(self, tenant: str, session_id: str) -> None:
        """Wait for the session's background fill, if one runs (background code only: a call
        never waits for background work)."""
        task = self._fills.get(f"{tenant}\x00{session_id}")
        if task is not None and task.get_loop() is asyncio.get_running_loop():
            await asyncio.shield(task)

    async def turn_vectors(self, tenant: str, session_id: str,
                           turns: list[TurnRecord]) -> dict[int, np.ndarray]:
        """Sentence vectors of the turns (turn id -> rows), to store after the reply: the
        corpus's rows where a call or the fill computed them, the rest embedded here (background
        priority, the session's lane). A turn with rows shed is left out: whoever needs it
        later recomputes it on demand."""
        key = f"{tenant}\x00{session_id}"
        await self.settled(tenant, session_id)
        corpus = self._cache.get(key)
        wanted = {turn.id: _turn_rows(corpus, turn) for turn in turns}
        speakers = {turn.id: speaker_of(turn.message) for turn in turns}
        todo = [(turn_id, k) for turn_id, rows in wanted.items()
                for k, (_, vector, _) in enumerate(rows) if vector is None]
        texts = [embedding_text(wanted[turn_id][k][0], speakers[turn_id]) for turn_id, k in todo]
        with in_background():
            fresh = await embed(self.queries.embedder.encode, texts, lane=key)
        for (turn_id, k), text, vector in zip(todo, texts, fresh):
            sentence, _, row = wanted[turn_id][k]
            wanted[turn_id][k] = (sentence, vector, row)
            if vector is not None and row is not None and corpus is not None:
                _patch(corpus, row, text, vector)  # the next call finds it here too
        out = {}
        for turn_id, rows in wanted.items():
            vectors = [vector for _, vector, _ in rows if vector is not None]
            if rows and len(vectors) == len(rows):
                out[turn_id] = np.vstack(vectors).astype(np.float32)
        return out

    def forget(self, tenant: str, session_id: str) -> None:
        """Drop a session's corpus (after the session is deleted)."""
        self._cache.pop(f"{tenant}\x00{session_id}", None)

    def _evict(self) -> None:
        total = sum(c.nbytes for c in self._cache.values())
        while total > self.max_bytes and len(self._cache) > 1:
            _, oldest = self._cache.popitem(last=False)
            total -= oldest.nbytes

    async def _new_rows(self, context: StageContext, start: int, upto: int) -> _Rows:
        """The rows of history[start:upto]: text work (sentences, terms, token counts) off the
        event loop when it is large, vectors from the store or the query's prefetch (each
        taken from the call's budget); in the background (after the reply) the rest are
        embedded here, on the call path within the budget once added (``_embed_added``)."""
        history = context.history
        stored = await _stored_vectors(context, start, upto)
        if sum(len(text_of(history[p])) for p in range(start, upto)) > OFF_LOOP_CHARS:
            rows = await asyncio.to_thread(_text_rows, history, start, upto, True)
        else:
            rows = _text_rows(history, start, upto)
        vectors = _stored_rows(rows, stored, start)
        for i, vector in enumerate(vectors):  # the newest message's sentences were prefetched
            if vector is None:
                found = await self.queries.prefetched(rows.embedding_text(i))
                if found is not None:
                    vectors[i] = found
                    context.channels.embedded += 1
        if is_background():
            missing = [i for i, v in enumerate(vectors) if v is None]
            fresh = await embed(self.queries.embedder.encode, [rows.embedding_text(i) for i in missing])
            for i, row in zip(missing, fresh):
                vectors[i] = row
        for i, vector in enumerate(vectors):
            if vector is not None:
                rows.vectors[i] = vector
                rows.embedded[i] = True
        return rows


def _shared_prefix(corpus: Corpus, chains: list[str]) -> int:
    """How many leading positions the corpus and the history share (chain hashes cover whole
    prefixes, so agreement at a position means agreement before it: binary search)."""
    low, high = 0, min(corpus.covered, len(chains))
    while low < high:
        middle = (low + high + 1) // 2
        if corpus.chains[middle - 1] == chains[middle - 1]:
            low = middle
        else:
            high = middle - 1
    return low


def _truncated(corpus: Corpus, keep: int) -> Corpus:
    """A new corpus of the first ``keep`` positions of ``corpus`` (which stays as it is, for
    anyone still reading it); the BM25 postings are rebuilt from the kept rows' terms."""
    rows = corpus.rows_of[keep - 1].stop if keep else 0
    out = Corpus(chains=corpus.chains[:keep], rows_of=corpus.rows_of[:keep],
                 sources=corpus.sources[:keep], speakers=corpus.speakers[:keep],
                 position=corpus.position[:rows].copy(),
                 spans=corpus.spans[:rows], texts=corpus.texts[:rows], words=corpus.words[:rows],
                 tokens=corpus.tokens[:rows].copy(), vectors=corpus.vectors[:rows].copy(),
                 embedded=corpus.embedded[:rows].copy(), frame=corpus.frame[:rows].copy())
    names = [speaker_terms(speaker) for speaker in out.speakers]
    for row_words, position in zip(out.words, out.position.tolist()):
        out.lexical.add(row_words + names[position])
    return out


def _consistent(corpus: Corpus, chains: list[str]) -> bool:
    """Whether the corpus describes this history as far as both go (chain hashes cover whole
    prefixes, so comparing the last shared position is enough)."""
    shared = min(corpus.covered, len(chains))
    return shared == 0 or corpus.chains[shared - 1] == chains[shared - 1]


@dataclass
class _Rows:
    sources: list[str]
    speakers: list[str]  # per position
    sentences_per_position: list[int]
    position: list[int]
    spans: list[tuple[int, int]]
    texts: list[str]
    words: list[list[str]]
    tokens: np.ndarray
    vectors: np.ndarray  # zero rows until filled
    embedded: np.ndarray
    frame: np.ndarray  # per row: JSON frame (agentmem.structured.message_rows)
    postings: BM25Index  # the rows' BM25 postings, built with them (off the loop when large)
    first: int  # the position of ``speakers[0]``

    def embedding_text(self, i: int) -> str:
        return embedding_text(self.texts[i], self.speakers[self.position[i] - self.first])


def _text_rows(history: list[dict[str, Any]], start: int, upto: int, off_loop: bool = False
               ) -> _Rows:
    """Sentences, terms and token counts of history[start:upto] (pure CPU: a 1 MB paste takes
    seconds, so large inputs run this in a thread, ``off_loop``, and the event loop keeps
    serving calls; there it also pauses while other calls are prepared)."""
    counts, positions, spans, texts, sources, frame = [], [], [], [], [], []
    speakers: list[str] = []
    for position in range(start, upto):
        text = text_of(history[position])
        sources.append(source_of(history[position], history[:position]))
        speakers.append(speaker_of(history[position]))
        found, structural = message_rows(text, history[position].get("role", ""))
        frame += structural
        counts.append(len(found))
        for a, b in found:
            positions.append(position)
            spans.append((a, b))
            texts.append(text[a:b])
    words, tokens, postings = [], [], BM25Index()
    names = [speaker_terms(speaker) for speaker in speakers]
    for number, sentence in enumerate(texts):
        words.append(terms(sentence))
        postings.add(words[-1] + names[positions[number] - start])
        tokens.append(count_tokens(sentence))
        if number % YIELD_EVERY == YIELD_EVERY - 1:
            let_threads_run()
        if off_loop and number % (8 * YIELD_EVERY) == 8 * YIELD_EVERY - 1:
            yield_to_other_calls()
    return _Rows(sources, speakers, counts, positions, spans, texts, words, np.asarray(tokens, np.int64),
                 np.zeros((len(texts), DIMENSION), np.float32), np.zeros(len(texts), np.bool_),
                 np.asarray(frame, np.bool_), postings, start)


def _stored_rows(rows: _Rows, stored: dict[int, np.ndarray], start: int) -> list[np.ndarray | None]:
    """Per row, its ingest-time vector when the store has its turn's (same sentence count)."""
    out: list[np.ndarray | None] = []
    for offset, count in enumerate(rows.sentences_per_position):
        cached = stored.get(start + offset)
        usable = cached is not None and cached.shape[0] == count
        out.extend(cached[k] if usable and cached is not None else None for k in range(count))
    return out


def _patch(corpus: Corpus, row: int, text: str, vector: np.ndarray) -> None:
    """Give a row its vector, if the corpus still holds that sentence there (``text``: as
    embedded, with its speaker) without one."""
    if row < len(corpus.texts) and not corpus.embedded[row] and corpus.embedding_text(row) == text:
        corpus.vectors[row] = vector
        corpus.embedded[row] = True
        position = int(corpus.position[row])
        if position < len(corpus.sums):
            corpus.sums[position] += vector


def _forget_fill(fills: dict[str, asyncio.Task[None]], key: str, done: asyncio.Task[None]) -> None:
    if fills.get(key) is done:
        del fills[key]
    if not done.cancelled() and done.exception() is not None:
        log.warning("background embedding of session corpus failed: %s", done.exception())


_TurnRow = tuple[str, "np.ndarray | None", "int | None"]  # sentence, vector, corpus row


def _turn_rows(corpus: Corpus | None, turn: TurnRecord) -> list[_TurnRow]:
    """A turn's sentences, each with its corpus row and vector when the corpus holds exactly
    that turn (matched by chain hash, so never another turn's) cut the same way (its stored
    spans are the corpus rows' spans: a turn stored by an older cut may have as many sentences
    as today's rows and still not the same ones)."""
    text = text_of(turn.message)
    sentences = [text[a:b] for a, b in turn.sentences]
    if corpus is None or turn.position >= corpus.covered or corpus.chains[turn.position] != turn.chain \
            or [tuple(corpus.spans[row]) for row in corpus.rows_of[turn.position]] \
            != [tuple(span) for span in turn.sentences]:
        return [(sentence, None, None) for sentence in sentences]
    return [(sentence, corpus.vectors[row] if corpus.embedded[row] else None, row)
            for sentence, row in zip(sentences, corpus.rows_of[turn.position])]


def _append(corpus: Corpus, rows: _Rows, chains: list[str]) -> None:
    first = len(corpus.spans)
    corpus.sources.extend(rows.sources)
    corpus.speakers.extend(rows.speakers)
    for count in rows.sentences_per_position:
        corpus.rows_of.append(range(first, first + count))
        first += count
    corpus.lexical.extend(rows.postings)  # built with the rows: one step here, on the loop
    corpus.words.extend(rows.words)
    if corpus.chars >= 0:
        corpus.chars += sum(len(t) for t in rows.texts)
    corpus.texts.extend(rows.texts)
    corpus.spans.extend(rows.spans)
    corpus.position = np.concatenate([corpus.position, np.asarray(rows.position, np.int64)])
    corpus.tokens = np.concatenate([corpus.tokens, rows.tokens])
    corpus.vectors, corpus.room = _grown(corpus.vectors, corpus.room, rows.vectors)
    corpus.embedded = np.concatenate([corpus.embedded, rows.embedded])
    corpus.frame = np.concatenate([corpus.frame, rows.frame])
    corpus.chains.extend(chains)


async def _stored_vectors(context: StageContext, start: int, upto: int) -> dict[int, np.ndarray]:
    """Ingest-time vectors of the stored positions in [start, upto), by position."""
    store, session = context.store, context.session
    end = min(upto, context.stored_positions)
    if store is None or session is None or end <= start:
        return {}
    ids = (await store.active_ids(session))[start:end]
    raw = await store.embeddings(session, ids)
    return {start + offset: from_bytes(raw[turn]) for offset, turn in enumerate(ids) if turn in raw}


def _grown(rows: np.ndarray, room: np.ndarray | None,
           new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``rows`` with ``new`` rows after them (and the buffer they are a view of), in a buffer
    that grows by half again when full: a call adds a turn's few rows, and stacking a
    2,000-turn session's matrix (~9 MB) anew each time cost the call path milliseconds. Views
    handed out earlier stay valid."""
    have, add = len(rows), len(new)
    if room is None or rows.base is not room or len(room) < have + add:
        room = np.empty((max(64, have + add, (have + add) * 3 // 2), DIMENSION), np.float32)
        room[:have] = rows
    room[have:have + add] = new
    return room[:have + add], room
