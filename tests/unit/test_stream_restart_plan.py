"""Where a restarted stream consumer resumes: replay the gap, or resync every stream."""
from __future__ import annotations

from services.api.stream.restart_plan import plan_restart

A, B = ("author-events", 0), ("author-events", 1)
LOG_START = {A: 0, B: 0}


def test_a_first_start_begins_at_the_end_and_resyncs_nobody() -> None:
    plan = plan_restart({}, LOG_START, {A: 40, B: 7}, max_replay=100)
    assert plan.seek_to == {} and not plan.resync


def test_a_restart_replays_from_the_offsets_after_the_last_event_handed_to_the_hub() -> None:
    plan = plan_restart({A: 30, B: 7}, LOG_START, {A: 40, B: 9}, max_replay=100)
    assert plan.seek_to == {A: 30, B: 7} and plan.gap == 12 and not plan.resync


def test_a_restart_with_nothing_missed_replays_nothing_and_resyncs_nobody() -> None:
    plan = plan_restart({A: 40, B: 9}, LOG_START, {A: 40, B: 9}, max_replay=0)
    assert plan.seek_to == {A: 40, B: 9} and plan.gap == 0 and not plan.resync


def test_a_gap_longer_than_the_replay_limit_resyncs() -> None:
    assert not plan_restart({A: 0, B: 0}, LOG_START, {A: 60, B: 40}, max_replay=100).resync
    plan = plan_restart({A: 0, B: 0}, LOG_START, {A: 60, B: 41}, max_replay=100)
    assert plan.resync and plan.seek_to == {} and "101 events" in plan.reason


def test_a_gap_partly_gone_from_the_log_resyncs() -> None:
    plan = plan_restart({A: 30, B: 7}, {A: 31, B: 0}, {A: 40, B: 9}, max_replay=100)
    assert plan.resync and "retention" in plan.reason


def test_an_offset_past_the_end_of_a_truncated_or_recreated_log_resyncs() -> None:
    plan = plan_restart({A: 30, B: 7}, LOG_START, {A: 12, B: 9}, max_replay=100)
    assert plan.resync and "past the end" in plan.reason


def test_a_partition_the_consumer_never_read_resyncs() -> None:
    plan = plan_restart({A: 30}, LOG_START, {A: 30, B: 5}, max_replay=100)
    assert plan.resync and "new" in plan.reason
