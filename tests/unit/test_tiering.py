"""The tier policy: measured cost against the freshness target, with hysteresis."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from services.fanout.tiering import (CapacityEstimate, Tier, TierPolicy, TierState, decide_tier,
                                     fanout_cost_s)

T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
POLICY = TierPolicy(freshness_target_s=1.5, promote_share=0.5, demote_share=0.25, min_dwell_s=600)
CAPACITY = 10_000.0  # rows/s: promote above 7500 followers, demote below 3750


def test_cost_is_followers_over_capacity():
    assert fanout_cost_s(5000, 10_000) == 0.5


def test_ordinary_author_is_promoted_when_one_post_would_take_over_half_the_budget():
    d = decide_tier(TierState(), 7501, CAPACITY, T0, POLICY)
    assert d.tier is Tier.CELEBRITY and d.changed


def test_author_exactly_at_the_promote_line_stays_ordinary():
    assert not decide_tier(TierState(), 7500, CAPACITY, T0, POLICY).changed


def test_author_between_the_thresholds_keeps_its_tier_either_way():
    for tier in Tier:
        d = decide_tier(TierState(tier, T0 - timedelta(days=1)), 5000, CAPACITY, T0, POLICY)
        assert d.tier is tier and not d.changed


def test_celebrity_is_demoted_below_the_lower_threshold():
    d = decide_tier(TierState(Tier.CELEBRITY, T0 - timedelta(hours=1)), 3749, CAPACITY, T0, POLICY)
    assert d.tier is Tier.ORDINARY and d.changed


def test_dwell_time_holds_a_change_until_it_has_passed():
    recent = TierState(Tier.CELEBRITY, T0 - timedelta(seconds=599))
    assert decide_tier(recent, 10, CAPACITY, T0, POLICY).tier is Tier.CELEBRITY
    assert decide_tier(recent, 10, CAPACITY, T0 + timedelta(seconds=1), POLICY).tier is Tier.ORDINARY


def test_author_oscillating_around_the_line_does_not_flap():
    state, changes = TierState(), 0
    now = T0
    for followers in [7600, 7400, 7600, 7400, 3800, 7600] * 3:
        now += timedelta(hours=1)
        d = decide_tier(state, followers, CAPACITY, now, POLICY)
        if d.changed:
            changes += 1
            state = TierState(d.tier, now)
    assert changes == 1  # promoted once, never below 3750 again


def test_faster_store_raises_the_boundary():
    slow = decide_tier(TierState(), 6000, 5_000, T0, POLICY)
    fast = decide_tier(TierState(), 6000, 20_000, T0, POLICY)
    assert slow.tier is Tier.CELEBRITY and fast.tier is Tier.ORDINARY


def test_policy_rejects_thresholds_without_hysteresis():
    with pytest.raises(ValueError):
        TierPolicy(promote_share=0.3, demote_share=0.3)


def test_capacity_is_an_ewma_of_large_fanouts_starting_from_the_floor():
    cap = CapacityEstimate(floor_rows_per_s=1000)
    assert cap.rows_per_s == 1000
    cap.observe(rows=10, seconds=1.0)  # too small to measure throughput: ignored
    assert cap.ewma_rows_per_s is None
    cap.observe(rows=10_000, seconds=1.0)
    assert cap.rows_per_s == 10_000
    cap.observe(rows=5_000, seconds=1.0)
    assert cap.rows_per_s == pytest.approx(9_000)  # moves a fifth of the way
    cap.observe(rows=200, seconds=10.0)
    assert cap.rows_per_s >= 1000


def test_pinned_capacity_overrides_the_measurement():
    cap = CapacityEstimate(floor_rows_per_s=1000, pinned_rows_per_s=10)
    cap.observe(rows=10_000, seconds=1.0)
    assert cap.rows_per_s == 10


def test_a_store_timeout_halves_the_estimate_down_to_the_floor():
    cap = CapacityEstimate(floor_rows_per_s=1000)
    cap.observe(rows=8_000, seconds=1.0)
    cap.overloaded()
    assert cap.rows_per_s == 4_000
    cap.overloaded()
    cap.overloaded()
    assert cap.rows_per_s == 1000  # never below the floor
    cap.observe(rows=5_000, seconds=1.0)
    assert cap.rows_per_s == pytest.approx(1000 + 0.2 * 4000)  # samples move it back up


def test_an_overloaded_store_sheds_the_largest_audiences():
    cap = CapacityEstimate(floor_rows_per_s=1000)
    cap.observe(rows=10_000, seconds=1.0)
    before = decide_tier(TierState(), 5_000, cap.rows_per_s, T0, POLICY)
    cap.overloaded()
    after = decide_tier(TierState(), 5_000, cap.rows_per_s, T0, POLICY)
    assert before.tier is Tier.ORDINARY and after.tier is Tier.CELEBRITY


def test_a_slow_store_moves_the_boundary_below_the_floor():
    # The store takes 300 rows/s; the floor assumes 2,000. An author with 1,000 followers
    # then costs 3.3 s a post at what the store can take, over the 0.75 s promote line:
    # planned at the floor (0.5 s) it would have stayed ordinary and overrun every post.
    cap = CapacityEstimate(floor_rows_per_s=2000)
    author = 1_000
    assert decide_tier(TierState(), author, cap.rows_per_s, T0, POLICY).tier is Tier.ORDINARY
    cap.observe(rows=300, seconds=1.0)
    # One slow sample moves the assumption a fifth of the way down, no further.
    assert cap.rows_per_s == pytest.approx(2000 + 0.2 * (300 - 2000))
    for _ in range(30):
        cap.observe(rows=600, seconds=2.0)
    assert cap.rows_per_s == pytest.approx(300, rel=0.01)
    decision = decide_tier(TierState(), author, cap.rows_per_s, T0, POLICY)
    assert decision.tier is Tier.CELEBRITY and decision.changed
    assert decision.cost_s == pytest.approx(author / 300, rel=0.01)
    # And the boundary comes back up with the store: demoted once it is fast again.
    for _ in range(40):
        cap.observe(rows=20_000, seconds=1.0)
    later = T0 + timedelta(seconds=POLICY.min_dwell_s)
    back = decide_tier(TierState(Tier.CELEBRITY, T0), author, cap.rows_per_s, later, POLICY)
    assert back.tier is Tier.ORDINARY and back.changed


def test_an_overload_does_not_lift_an_estimate_measured_below_the_floor():
    cap = CapacityEstimate(floor_rows_per_s=2000)
    for _ in range(30):
        cap.observe(rows=500, seconds=1.0)
    measured = cap.rows_per_s
    assert measured < 600
    cap.overloaded()  # a guess stops at the floor, but never raises a measurement to it
    assert cap.rows_per_s == pytest.approx(measured)


def test_a_fast_first_sample_is_taken_whole():
    cap = CapacityEstimate(floor_rows_per_s=2000)
    cap.observe(rows=9_000, seconds=1.0)
    assert cap.rows_per_s == 9_000


def test_a_restored_estimate_replaces_the_floor_until_samples_move_it():
    # A restarted worker: without the estimate it had measured, an author of 1,649
    # followers costs 0.82 s at the floor and is promoted before the first sample.
    cap = CapacityEstimate(floor_rows_per_s=2000)
    assert cap.measured is None
    assert decide_tier(TierState(), 1_649, cap.rows_per_s, T0, POLICY).tier is Tier.CELEBRITY
    assert cap.restore(20_000)
    assert cap.measured == 20_000
    assert decide_tier(TierState(), 1_649, cap.rows_per_s, T0, POLICY).tier is Tier.ORDINARY
    cap.observe(rows=10_000, seconds=1.0)  # an EWMA step from it, not a first sample
    assert cap.rows_per_s == pytest.approx(20_000 + 0.2 * (10_000 - 20_000))


def test_a_restore_never_overrides_this_process_measurement():
    cap = CapacityEstimate(floor_rows_per_s=2000)
    cap.observe(rows=5_000, seconds=1.0)
    assert not cap.restore(50_000)
    assert cap.rows_per_s == 5_000
    assert not CapacityEstimate(floor_rows_per_s=2000).restore(0.0)
    assert not CapacityEstimate(floor_rows_per_s=2000).restore(float("inf"))
    assert not CapacityEstimate(floor_rows_per_s=2000).restore(float("nan"))


def test_an_overload_alone_is_not_a_measurement():
    cap = CapacityEstimate(floor_rows_per_s=2000)
    cap.overloaded()
    assert cap.measured is None  # nothing to save for a restarted process
    assert cap.restore(8_000)
    assert cap.rows_per_s == 8_000
