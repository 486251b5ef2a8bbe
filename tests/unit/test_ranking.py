"""The ranking formula (services/shared/domain/ranking.py, docs/ranking.md)."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.shared.domain.ranking import HALF_LIFE_S, Ranked, engagement_score, rank_at, sort_key

NOW = 1_800_000_000_000
HOUR_MS = 3_600_000


@given(st.integers(0, 10**9), st.integers(1, 10**6))
def test_score_is_monotonic_in_likes(likes, more):
    assert engagement_score(likes + more) > engagement_score(likes)


def test_no_likes_no_features_scores_zero():
    assert engagement_score(0) == 0.0 and engagement_score(0, {}) == 0.0


def test_rank_halves_its_weight_every_half_life():
    fresh = rank_at(3.0, NOW, NOW)
    assert fresh - rank_at(3.0, NOW - int(HALF_LIFE_S * 1000), NOW) == 1.0
    assert 2 ** rank_at(3.0, NOW - int(2 * HALF_LIFE_S * 1000), NOW) == 2 ** fresh / 4


@given(st.integers(0, 30 * 24), st.integers(1, 24))
def test_rank_decays_with_age(age_h, older_by_h):
    assert rank_at(1.0, NOW - age_h * HOUR_MS, NOW) > rank_at(1.0, NOW - (age_h + older_by_h) * HOUR_MS, NOW)


def test_a_post_from_the_future_is_not_boosted():
    assert rank_at(1.0, NOW + HOUR_MS, NOW) == rank_at(1.0, NOW, NOW)


def test_known_features_weigh_unknown_ones_do_not_and_values_are_clamped():
    assert engagement_score(0, {"quality": 1.0}) == 2.0
    assert engagement_score(0, {"spam": 1.0}) == -8.0
    assert engagement_score(0, {"something_new": 5.0}) == 0.0
    assert engagement_score(0, {"quality": 1e9}) == engagement_score(0, {"quality": 10.0})
    assert engagement_score(0, {"quality": float("nan")}) == 0.0


def test_affinity_lifts_a_post_by_at_most_one_unit():
    assert rank_at(0.0, NOW, NOW, affinity=1.0) - rank_at(0.0, NOW, NOW) == 1.0
    assert rank_at(0.0, NOW, NOW, affinity=7.0) == rank_at(0.0, NOW, NOW, affinity=1.0)


def test_feed_order_is_rank_then_post_id_newest_first():
    items = [Ranked(1.0, 5, None), Ranked(1.0, 9, None), Ranked(2.0, 3, None), Ranked(1.0, 7, None)]
    assert [r.post_id for r in sorted(items, key=lambda r: sort_key(r.rank, r.post_id))] == [3, 9, 7, 5]


@given(st.floats(-5, 20), st.integers(0, 10**10), st.floats(-5, 20), st.integers(0, 10**10),
       st.integers(0, 10**10))
def test_rank_keys_order_posts_as_ranks_do_at_any_time(s1, t1, s2, t2, later):
    """The stored key is time-invariant: comparing keys is comparing ranks, now or later."""
    from services.shared.domain.ranking import rank_key, rank_of_key
    created1, created2 = NOW - t1, NOW - t2
    now = NOW + later
    k1, k2 = rank_key(s1, created1), rank_key(s2, created2)
    assert rank_of_key(k1, now) == pytest.approx(rank_at(s1, created1, now), abs=1e-6)
    if abs(k1 - k2) > 1e-6:
        assert (k1 > k2) == (rank_at(s1, created1, now) > rank_at(s2, created2, now))


def test_rows_move_only_when_the_key_moves_by_the_threshold():
    from services.shared.domain.ranking import MOVE_THRESHOLD, needs_move
    assert needs_move(None, 3.0)
    assert not needs_move(3.0, 3.0 + MOVE_THRESHOLD * 0.99)
    assert needs_move(3.0, 3.0 - MOVE_THRESHOLD)


def test_a_ranker_move_is_coalesced_and_never_made_for_a_hidden_post():
    from services.ranker.rank_keys import planned_move
    from services.ranker.store import KeyState
    from services.shared.domain.ranking import rank_key
    key0 = rank_key(0.0, NOW)
    state = KeyState(author_id=5, created_at_ms=NOW, alive=True, rank_key=key0,
                     rank_key_next=None, key_ts=1_000)
    assert planned_move(9, state, 0.3, now_us=2_000) is None             # within the threshold
    move = planned_move(9, state, 1.0, now_us=500)                        # a like: one unit up
    assert move is not None and move.to_key == pytest.approx(key0 + 1.0)
    assert move.from_keys == (key0,) and move.key_ts == 1_001             # after the key's time
    mid_move = KeyState(5, NOW, True, key0, key0 + 1.0, 1_000)
    assert planned_move(9, mid_move, 3.0, 5_000).from_keys == (key0, key0 + 1.0)
    hidden = KeyState(5, NOW, False, key0, None, 1_000)
    assert planned_move(9, hidden, 5.0, 5_000) is None
