"""The poison detection's clause cosines carried from one detection to the next
(``agentmem.quarantine.poison.cosines``): the same matrix and close pairs as the full
product, for windows that grow, slide, change in the middle, or have nothing in common."""

from __future__ import annotations

import numpy as np
import pytest

from agentmem.quarantine.poison import cosines
from agentmem.quarantine.poison.cosines import clause_cosines, close_pairs

BAR = 0.5


def _unit(rng: np.random.Generator, n: int) -> np.ndarray:
    # Clustered, so that many pairs pass the bar (random 8-d vectors rarely would).
    centres = rng.normal(size=(12, 8))
    vectors = centres[rng.integers(0, 12, size=n)] + 0.6 * rng.normal(size=(n, 8))
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(autouse=True)
def _fresh():
    cosines.forget()
    yield
    cosines.forget()


def _check(window: np.ndarray) -> None:
    made = clause_cosines(window, BAR)
    full = window @ window.T
    np.testing.assert_allclose(made.similarity, full, atol=1e-6)
    assert np.array_equal(made.pairs, close_pairs(full, BAR))


def test_windows_that_grow_slide_and_change_reuse_the_kept_rows():
    rng = np.random.default_rng(5)
    vectors = _unit(rng, 500)
    steps = [  # (window, expected (offset into the kept window, rows reused))
        (vectors[:200], None),  # nothing kept yet
        (vectors[:260], (0, 200)),  # a reply appended its clauses
        (vectors[30:300], (30, 230)),  # past the window: the oldest fell off, more appended
    ]
    changed = vectors[30:300].copy()
    changed[150] = _unit(rng, 1)[0]  # a clause re-embedded differently mid-window
    steps.append((changed, (0, 150)))
    for window, expected in steps:
        window = np.asarray(window, np.float32)
        base, offset, reused = cosines._reusable(window, cosines.row_keys(window), BAR)
        assert (None if base is None else (offset, reused)) == expected
        _check(window)


def test_nothing_in_common_a_short_window_or_another_bar_computes_afresh():
    rng = np.random.default_rng(9)
    first, other = _unit(rng, 150), _unit(rng, 150)
    _check(first)

    def reusable(window: np.ndarray, bar: float = BAR):
        return cosines._reusable(window, cosines.row_keys(window), bar)

    assert reusable(other)[0] is None
    assert reusable(first[:cosines.MIN_REUSED - 1])[0] is None
    assert reusable(first, 0.7)[0] is None
    _check(other)
    _check(first[10:])  # the first window is still kept beside the other


def test_a_repeated_clause_and_equal_keys_of_unequal_rows(monkeypatch):
    """A clause said at every turn (a status line) is a candidate offset at each of them: the
    longest run wins. Rows whose keys are equal but whose values are not end the run there."""
    rng = np.random.default_rng(4)
    status = _unit(rng, 1)[0]
    vectors = _unit(rng, 300)
    vectors[::3] = status  # every third clause is the same
    _check(vectors[:240])
    window = vectors[30:300]
    assert cosines._reusable(window, cosines.row_keys(window), BAR)[1:] == (30, 210)
    _check(window)

    cosines.forget()
    monkeypatch.setattr(cosines, "row_keys", lambda v: np.zeros(len(v), dtype=np.uint64))
    _check(vectors[:200])
    changed = vectors[:260].copy()
    changed[100] = _unit(rng, 1)[0]
    keys = cosines.row_keys(changed)
    assert cosines._reusable(changed, keys, BAR)[1:] == (0, 100)  # the values decide
    _check(changed)


def test_the_kept_matrices_stay_within_their_byte_bound(monkeypatch):
    rng = np.random.default_rng(2)
    monkeypatch.setattr(cosines, "KEPT_BYTES", 3 * 200 * 200 * 4)
    for _ in range(6):
        clause_cosines(_unit(rng, 200), BAR)
    assert 1 <= len(cosines._kept) <= 2
    assert sum(e.nbytes for e in cosines._kept) <= cosines.KEPT_BYTES


def test_kept_arrays_are_read_only():
    made = clause_cosines(_unit(np.random.default_rng(1), 100), BAR)
    with pytest.raises(ValueError):
        made.similarity[0, 0] = 2.0
