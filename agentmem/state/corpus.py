"""A session's sentences, ready for query-time scoring, kept in process between calls.

Everything here is query-independent: sentence spans, token counts, MiniLM vectors (read
from the ones stored at ingest) and BM25 postings. A call only extends the corpus with the
turns that are new since the last call, so the call path pays for new turns once and then
does query-dependent work only (one query embedding, a matrix-vector product, a few BM25
postings). Entries are validated by chain hash: a corpus is reused only when the client's
history still starts with exactly the turns it covers, so a cache hit can never be stale.
One ``CorpusCache`` per engine, bounded in bytes.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from agentmem.ingest import chain_hashes, source_of
from agentmem.lexical import BM25Index, terms
from agentmem.messages import text_of
from agentmem.models.embedder import DIMENSION, from_bytes
from agentmem.models.runtime import run_inference
from agentmem.state.queries import QueryVectors
from agentmem.text import count_tokens, split_sentences

if TYPE_CHECKING:
    from agentmem.stages.base import StageContext


@dataclass
class Corpus:
    """Sentence rows of history[:covered]; ``rows_of[p]`` is the row range of position p.

    Append-only: a call computes the new rows first (awaiting Redis and the embedder) and
    appends them in one synchronous step, so concurrent calls never see half an extension.
    """

    chains: list[str] = field(default_factory=list)
    rows_of: list[range] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)  # per position: user, system, assistant, tool:NAME
    position: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    spans: list[tuple[int, int]] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)  # per row: the sentence
    words: list[list[str]] = field(default_factory=list)  # per row: its terms (lexical.terms)
    tokens: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    vectors: np.ndarray = field(default_factory=lambda: np.zeros((0, DIMENSION), np.float32))
    lexical: BM25Index = field(default_factory=BM25Index)

    @property
    def covered(self) -> int:
        return len(self.chains)

    @property
    def nbytes(self) -> int:
        return self.vectors.nbytes + 64 * len(self.spans) + sum(len(t) for t in self.texts)


def _cache_key(context: StageContext) -> str:
    if context.session is not None:
        return f"{context.session.tenant}\x00{context.session.session_id}"
    return f"\x00{context.chains[0] if context.chains else ''}"


class CorpusCache:
    """Per-session corpora of one engine, least recently used evicted past ``max_bytes``."""

    def __init__(self, queries: QueryVectors, max_bytes: int = 512 * 1024 * 1024) -> None:
        self.queries = queries
        self.max_bytes = max_bytes
        self._cache: OrderedDict[str, Corpus] = OrderedDict()

    async def corpus_for(self, context: StageContext, upto: int) -> Corpus:
        """The corpus of history[:upto], extended (or rebuilt on divergence) as needed."""
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
            if corpus.covered >= upto:
                return corpus
            start = corpus.covered
            rows = await self._new_rows(context, start, upto)
            if corpus.covered == start and cache.get(key) is corpus:
                _append(corpus, rows, chains[start:upto])
                self._evict()
                return corpus
        corpus = Corpus()  # persistent contention: a private corpus, correct if not cached
        _append(corpus, await self._new_rows(context, 0, upto), chains[:upto])
        return corpus

    def known_vectors(self, tenant: str, session_id: str, turns: list[Any]) -> dict[int, np.ndarray]:
        """Vectors a call already computed for these turns (turn id -> rows), so the background
        ingest does not embed them twice. Matched by chain hash, so never another turn's."""
        corpus = self._cache.get(f"{tenant}\x00{session_id}")
        if corpus is None:
            return {}
        out = {}
        for turn in turns:
            if turn.position < corpus.covered and corpus.chains[turn.position] == turn.chain:
                rows = corpus.rows_of[turn.position]
                if len(rows) == len(turn.sentences):
                    out[turn.id] = corpus.vectors[rows.start: rows.stop]
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
        history = context.history
        stored = await _stored_vectors(context, start, upto)
        counts, positions, spans, texts, sources = [], [], [], [], []
        vectors: list[np.ndarray | None] = []
        for position in range(start, upto):
            text = text_of(history[position])
            sources.append(source_of(history[position], history[:position]))
            found = [(s.start, s.end) for s in split_sentences(text)]
            cached = stored.get(position)
            usable = cached is not None and cached.shape[0] == len(found)
            counts.append(len(found))
            for number, (a, b) in enumerate(found):
                positions.append(position)
                spans.append((a, b))
                texts.append(text[a:b])
                vectors.append(cached[number] if usable and cached is not None else None)
        for i, vector in enumerate(vectors):  # the newest message's sentences were prefetched
            if vector is None:
                vectors[i] = await self.queries.prefetched(texts[i])
        missing = [i for i, v in enumerate(vectors) if v is None]
        if missing:
            fresh = await run_inference(self.queries.embedder.encode, [texts[i] for i in missing])
            for i, row in zip(missing, fresh):
                vectors[i] = row
        filled = cast("list[np.ndarray]", vectors)  # every None slot was filled just above
        matrix = (np.vstack(filled).astype(np.float32) if filled
                  else np.zeros((0, DIMENSION), np.float32))
        return _Rows(sources, counts, positions, spans, texts, matrix)


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
                 sources=corpus.sources[:keep], position=corpus.position[:rows].copy(),
                 spans=corpus.spans[:rows], texts=corpus.texts[:rows], words=corpus.words[:rows],
                 tokens=corpus.tokens[:rows].copy(), vectors=corpus.vectors[:rows].copy())
    for row_words in out.words:
        out.lexical.add(row_words)
    return out


def _consistent(corpus: Corpus, chains: list[str]) -> bool:
    """Whether the corpus describes this history as far as both go (chain hashes cover whole
    prefixes, so comparing the last shared position is enough)."""
    shared = min(corpus.covered, len(chains))
    return shared == 0 or corpus.chains[shared - 1] == chains[shared - 1]


@dataclass
class _Rows:
    sources: list[str]
    sentences_per_position: list[int]
    position: list[int]
    spans: list[tuple[int, int]]
    texts: list[str]
    vectors: np.ndarray


def _append(corpus: Corpus, rows: _Rows, chains: list[str]) -> None:
    first = len(corpus.spans)
    corpus.sources.extend(rows.sources)
    for count in rows.sentences_per_position:
        corpus.rows_of.append(range(first, first + count))
        first += count
    words = [terms(text) for text in rows.texts]
    for row_words in words:
        corpus.lexical.add(row_words)
    corpus.words.extend(words)
    corpus.texts.extend(rows.texts)
    corpus.spans.extend(rows.spans)
    corpus.position = np.concatenate([corpus.position, np.asarray(rows.position, np.int64)])
    tokens = np.asarray([count_tokens(t) for t in rows.texts], np.int64)
    corpus.tokens = np.concatenate([corpus.tokens, tokens])
    corpus.vectors = np.vstack([corpus.vectors, rows.vectors])
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
