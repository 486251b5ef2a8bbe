"""The demo's wait follows the pipeline's progress (deploy/pipeline_progress.py)."""
from __future__ import annotations

from deploy.pipeline_progress import Offsets, ProgressWatch, worker_topics
from services.shared.settings import Settings


def test_a_slow_drain_is_never_a_stall_however_long_it_takes():
    watch = ProgressWatch(stall_s=120, started_at=0.0)
    applied = 0
    for second in range(5, 3600, 5):  # an hour at 2 events/s
        applied += 10
        progress = watch.observe(float(second), Offsets(applied=applied, arrived=20_000))
        assert not watch.stalled(float(second))
    assert progress.applied_per_s == 2.0 and progress.lag == 20_000 - applied


def test_nothing_moving_for_the_stall_time_gives_up():
    watch = ProgressWatch(stall_s=120, started_at=0.0)
    watch.observe(5.0, Offsets(applied=100, arrived=500))
    watch.observe(10.0, Offsets(applied=200, arrived=500))
    for second in range(15, 130, 5):
        progress = watch.observe(float(second), Offsets(applied=200, arrived=500))
        assert not watch.stalled(float(second))
    assert progress.still_for_s == 115.0 and progress.applied_per_s == 0.0
    assert watch.stalled(130.0)


def test_the_relay_still_delivering_the_backlog_is_progress():
    watch = ProgressWatch(stall_s=60, started_at=0.0)
    for second in range(5, 300, 5):  # workers not committing yet, the topics filling
        watch.observe(float(second), Offsets(applied=0, arrived=second * 100))
    assert not watch.stalled(300.0)


def test_offsets_that_cannot_be_read_are_no_progress():
    watch = ProgressWatch(stall_s=120, started_at=0.0)
    assert not watch.stalled(119.0)  # no reading at all since the start ...
    assert watch.stalled(120.0)      # ... is a stall once the stall time has passed


def test_the_wait_reads_the_groups_and_topics_the_workers_consume():
    groups = worker_topics(Settings(topic_prefix="p"))
    assert groups == {"p.fanout": ["p.public.posts", "p.public.follows", "p.public.blocks", "p.public.mutes",
                                   "p.public.users",
                                   "p.rank-key-moves", "p.reader-events", "p.follow-counts"],
                      "p.ranker": ["p.public.likes", "p.rank-features", "p.like-counts"]}
