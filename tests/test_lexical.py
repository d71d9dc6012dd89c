"""The BM25 within one passage (``relative_bm25``) keeps only the query's postings: the same
scores as an index of every term, since a document's length is what the others add."""

from __future__ import annotations

import numpy as np

from agentmem.lexical import BM25Index, relative_bm25, terms

TEXTS = [
    "Robert Boulter is an English film, television and theatre actor.",
    "He had a guest-starring role on the television series The Bill in 2000.",
    "In 2006 Boulter starred alongside Whishaw in the play Citizenship.",
    "He appeared on a 2006 episode of the television series Doctors.",
    "The studies of harbours and ferries were published later.",
    "",
]


def _full(query: str, texts: list[str]) -> np.ndarray:
    index = BM25Index()
    for text in texts:
        index.add(terms(text))
    scores = index.scores(terms(query))
    return scores / scores.max() if scores.max() > 0 else scores


def test_the_query_only_index_scores_as_the_full_one():
    for query in ("When did Robert Boulter appear in Doctors?", "television series",
                  "harbour studies published", "nothing shared here"):
        np.testing.assert_allclose(relative_bm25(query, TEXTS), _full(query, TEXTS), rtol=1e-6)
    # the lengths count: the same shared word in a longer text scores lower
    short, long_ = relative_bm25("ferries", ["ferries", "ferries and many other long words here"])
    assert short == 1.0 and 0 < long_ < short


def test_folding_is_unchanged_by_its_cache():
    assert terms("Studies showed the ferries docking at harbours") == [
        "study", "show", "ferry", "dock", "harbour"]
