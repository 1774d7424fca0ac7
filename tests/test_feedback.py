"""Queries an entry was reported wrong for are never served it again, by exact key or by meaning."""

from __future__ import annotations

import numpy as np

from semcache.entries import NegativeFeedback
from semcache.feedback import SAME_QUERY_COSINE, WrongAnswers


def unit(*values: float) -> np.ndarray:
    vector = np.asarray(values, dtype=np.float32)
    return vector / np.linalg.norm(vector)


def test_an_entry_is_wrong_for_the_reported_query_and_for_queries_that_close_only() -> None:
    wrong = WrongAnswers()
    wrong.add(NegativeFeedback(1, "exact-key", unit(1, 0, 0), 0.93))
    assert wrong.reported_wrong(1, "exact-key", unit(0, 1, 0))  # the same exact key
    assert wrong.reported_wrong(1, "other-key", unit(1, 0.01, 0))  # read alike
    far = unit(1, 0.5, 0)
    assert float(far @ unit(1, 0, 0)) < SAME_QUERY_COSINE
    assert not wrong.reported_wrong(1, "other-key", far)
    assert not wrong.reported_wrong(2, "exact-key", unit(1, 0, 0))  # another entry


def test_loading_replaces_what_was_known() -> None:
    wrong = WrongAnswers()
    wrong.add(NegativeFeedback(1, "old", None, None))
    wrong.load([NegativeFeedback(2, "new", None, None)])
    assert not wrong.reported_wrong(1, "old", unit(1, 0))
    assert wrong.reported_wrong(2, "new", unit(1, 0))
