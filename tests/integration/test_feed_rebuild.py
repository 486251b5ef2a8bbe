"""The inbox rebuild command refills a reader's inbox from the author partitions."""
from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from services.shared.settings import Settings
from tests.support.api_server import new_user_id
from tests.support.feed_world import FeedWorld, utc_now

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _inbox(world: FeedWorld, reader: int) -> list[int]:
    rows = world.session.execute("SELECT post_id FROM feed_inbox WHERE reader_id=%s", (reader,))
    return [r.post_id for r in rows]


def _rebuild(settings: Settings, *readers: int) -> str:
    env = dict(os.environ, FEED_CASSANDRA_KEYSPACE=settings.cassandra_keyspace,
               FEED_TOPIC_PREFIX=settings.topic_prefix, FEED_PG_DATABASE=settings.pg_database)
    done = subprocess.run([sys.executable, "-m", "services.fanout.jobs.rebuild_inbox",
                           *map(str, readers)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_rebuild_restores_eligible_posts_and_nothing_else(settings: Settings,
                                                          world: FeedWorld) -> None:
    reader, author, star, blocker, someone = (new_user_id() for _ in range(5))
    now = utc_now()
    world.follow(reader, author, since=now - timedelta(hours=2))
    world.follow(reader, blocker)
    world.follow(reader, star)
    world.make_celebrity(star)
    kept = [world.write(author, at=now - timedelta(minutes=m), inbox_of=[someone]) for m in (1, 2)]
    deleted = world.write(author, at=now - timedelta(minutes=3), inbox_of=[someone])
    world.delete(deleted)
    world.write(author, at=now - timedelta(hours=3), inbox_of=[someone])  # before the follow
    world.write(blocker, inbox_of=[someone])
    world.block(blocker, reader)
    world.write(star)  # celebrity posts stay in the author partition
    assert _inbox(world, reader) == []
    out = _rebuild(settings, reader)
    assert _inbox(world, reader) == [p.post_id for p in kept]
    assert f"reader {reader}: 2 inbox rows" in out
    _rebuild(settings, reader)  # idempotent
    assert _inbox(world, reader) == [p.post_id for p in kept]
