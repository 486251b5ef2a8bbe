"""The ranking formula (services/common/ranking.py, docs/ranking.md)."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from services.common.ranking import (HALF_LIFE_S, Candidate, after_boundary, engagement_score,
                                     rank_at, rank_candidates)

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


def test_ties_are_broken_by_post_id_newest_first_and_duplicates_collapse():
    items = [Candidate(5, NOW), Candidate(9, NOW), Candidate(7, NOW), Candidate(9, NOW)]
    assert [r.post_id for r in rank_candidates(items, NOW)] == [9, 7, 5]


def test_items_after_a_boundary_are_strictly_after_it():
    ranked = rank_candidates([Candidate(i, NOW - i * HOUR_MS) for i in range(1, 6)], NOW)
    boundary = (ranked[1].rank, ranked[1].post_id)
    assert [r.post_id for r in after_boundary(ranked, boundary)] == [r.post_id for r in ranked[2:]]
