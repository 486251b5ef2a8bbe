"""The visibility verifier and the repair command on real Postgres, Cassandra and Kafka
(services/fanout/verifier.py, copy_audit.py, jobs/repair.py).

No pipeline runs: Postgres's rows are written directly (the triggers log the entries, as
for the API's writes) and the copies through the fan-out's own ``CopyStore``, at a WAL
position from before the change, as a relay event would have carried it. The truth and
the copies then differ the way a dead-lettered event or a lost unfollow leaves them.

The module has a Postgres database of its own (the session's Cassandra keyspace and
topics): the verifier walks and deletes every entry of its database, which must not be
another module's. The settle time runs on a clock the tests move; repair_after is
measured by Postgres, so the tests sleep past it.
"""
from __future__ import annotations

import asyncio
import json
import secrets
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any, Coroutine, TypeVar

import pytest
from prometheus_client import REGISTRY

from deploy.migrate import migrate_postgres
from services.fanout.account_events import AccountCopy
from services.fanout.audience import PostFields
from services.fanout.copies import CopyStore
from services.fanout.copy_audit import CopyAudit, count_sink
from services.fanout.inbox import InboxStore
from services.fanout.jobs import repair as repair_job
from services.fanout.verifier import Verifier
from services.shared.clients import cql, pg
from services.shared.contracts import edge_counts
from services.shared.contracts.serving_changes import NO_NOTICES
from services.shared.contracts.topics import follow_counts_topic, serving_changes_topic
from services.shared.domain import ids
from services.shared.domain.owned_counts import write_time
from services.shared.domain.ranking import rank_key
from services.shared.domain.rules import VISIBLE
from services.shared.settings import Settings
from services.shared.stores.cql_async import CqlRunner
from services.shared.worker.event_publisher import EventPublisher
from services.shared.worker.notices import Notices
from tests.support.api_server import new_user_id
from tests.support.kafka_topics import read_topic
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration
T = TypeVar("T")


class ManualClock:
    """The verifier's monotonic clock, moved by the test (the settle time)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Scene:
    """The stores, the verifiers made in a test, and helpers to make truth and copies differ."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.loop = asyncio.new_event_loop()
        self.session = cql.session(settings)
        runner = CqlRunner(self.session)
        self.publisher = EventPublisher(settings)
        self.run(self.publisher.start())
        notices = Notices(self.publisher, serving_changes_topic(settings.topic_prefix))
        self.copies = CopyStore(self.session, runner, 500, notices)
        self.inbox = InboxStore(self.session, runner, max_in_flight=16, cap=500, trim_every=1_000_000,
                                notices=NO_NOTICES)
        self.account_copy = AccountCopy(self.session, runner)
        self.audit = CopyAudit(self.session, runner, self.copies,
                               count_sink(self.publisher, settings.topic_prefix),
                               accounts=self.account_copy)
        self.pg = pg.connect(settings, autocommit=True)
        self.clock = ManualClock()
        self.verifiers: list[Verifier] = []
        self._offset = 0

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def close(self) -> None:
        for v in self.verifiers:
            self.run(v.close())
        self.run(self.publisher.stop())
        self.loop.close()
        self.session.cluster.shutdown()
        self.pg.close()

    def reset(self) -> None:
        """An empty log and marks at 0: each test walks its own entries only."""
        for v in self.verifiers:
            self.run(v.close())
        self.verifiers.clear()
        self.pg.execute("TRUNCATE visibility_changes")
        self.pg.execute("UPDATE visibility_verified SET upto = 0, checked = 0")

    # -- the verifier ----------------------------------------------------------------------
    def verifier(self, *, repair_after_s: float, settle_s: float = 60.0) -> Verifier:
        s = self.settings
        settings = Settings(pg_database=s.pg_database, cassandra_keyspace=s.cassandra_keyspace,
                            topic_prefix=s.topic_prefix, visibility_repair_after_s=repair_after_s,
                            visibility_settle_s=settle_s, visibility_verify_batch=2,
                            # The API's cache hold, under the short settle time.
                            cache_ttl_s=settle_s / 2, cache_stale_if_error_s=0)
        v = Verifier(settings, self.audit, clock=self.clock)
        self.verifiers.append(v)
        return v

    def tick(self, v: Verifier) -> None:
        self.run(v.tick())
        assert v.failures == 0, "the walk failed (its warning is in the log)"

    # -- Postgres --------------------------------------------------------------------------
    def users(self, n: int) -> list[int]:
        out = [new_user_id() for _ in range(n)]
        for u in out:
            self.pg.execute("INSERT INTO users (user_id) VALUES (%s)", (u,))
        return out

    def lsn(self) -> int:
        """Postgres's WAL position now: what a change made from here on is written above."""
        return int(self.pg.execute("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint").fetchone()[0])

    def entries(self, kind: str, subject: int, obj: int) -> list[int]:
        return [r[0] for r in self.pg.execute(
            "SELECT seq FROM visibility_changes WHERE kind = %s AND subject_id = %s AND object_id = %s"
            " ORDER BY seq", (kind, subject, obj))]

    def marks(self) -> tuple[int, int]:
        upto, checked = self.pg.execute("SELECT upto, checked FROM visibility_verified").fetchone()
        return int(upto), int(checked)

    def post(self, author: int, created: datetime, *, deleted: bool = False) -> int:
        post_id = ids.compose(int(created.timestamp() * 1000), secrets.randbelow(ids.MAX_NODE + 1),
                              secrets.randbelow(ids.MAX_SEQUENCE + 1))
        self.pg.execute("INSERT INTO posts (post_id, author_id, created_at, text, deleted_at)"
                        " VALUES (%s, %s, %s, 'hi', %s)",
                        (post_id, author, created, datetime.now(timezone.utc) if deleted else None))
        return post_id

    # -- Cassandra -------------------------------------------------------------------------
    def post_copy(self, post_id: int, author: int, created: datetime, lsn: int, *,
                  fanned_out: bool = False, timeline: bool = False) -> float:
        """A visible copy, keyed and (``timeline``) with its author-timeline row."""
        self.run(self.copies.write_post(PostFields(post_id, author, created, "hi", [], VISIBLE, False), lsn))
        key = rank_key(None, int(created.timestamp() * 1000))
        key_ts = int(created.timestamp() * 1_000_000)
        self.run(self.copies.set_rank_key(post_id, key, key_ts))
        if fanned_out:
            self.run(self.copies.mark_fanned_out(post_id, True, lsn))
        if timeline:
            self.run(self.copies.add_author_post(author, post_id, key, key_ts))
        return key

    def count_edge(self, follower: int, followed: int, following: bool) -> None:
        """The follower count's edge, as its owner writes it (an owned write time, later
        than the one before)."""
        self._offset += 1
        self.session.execute("UPDATE follow_edges USING TIMESTAMP %s SET following = %s, lsn = 1"
                             " WHERE followed_id = %s AND follower_id = %s",
                             (write_time(1, self._offset), following, followed, follower))

    def following(self, follower: int, followed: int) -> tuple[datetime | None, datetime | None]:
        """following_since of the reader-side and the author-side copies (None: no row)."""
        a = self.session.execute("SELECT following_since FROM following WHERE follower_id=%s AND followed_id=%s",
                                 (follower, followed)).one()
        b = self.session.execute("SELECT following_since FROM followers WHERE followed_id=%s AND follower_id=%s",
                                 (followed, follower)).one()
        return tuple(None if r is None else r.following_since.replace(tzinfo=timezone.utc)  # type: ignore[return-value]
                     for r in (a, b))

    def block_rows(self, blocker: int, blocked: int) -> set[tuple[int, int, str]]:
        rows = set()
        for user, other in ((blocker, blocked), (blocked, blocker)):
            rows |= {(user, other, r.direction) for r in self.session.execute(
                "SELECT direction FROM blocks WHERE user_id=%s AND other_id=%s", (user, other))}
        return rows

    def muted_in_copy(self, muter: int) -> set[int]:
        """Whom the muter's ``blocks`` partition mutes (its 'mute' rows)."""
        return {r.other_id for r in self.session.execute(
            "SELECT other_id, direction FROM blocks WHERE user_id=%s", (muter,)) if r.direction == "mute"}

    def inbox_rows(self, reader: int) -> set[int]:
        return {r.post_id for r in self.session.execute(
            "SELECT post_id FROM feed_inbox WHERE reader_id = %s", (reader,))}

    def timeline(self, author: int) -> frozenset[int]:
        return self.run(self.audit.timeline_posts(author))

    def counted(self, followed: int, follower: int) -> list[edge_counts.EdgeCounted]:
        """The edge's records published to the follow-counts topic."""
        records = [edge_counts.parse(v) for _, v in
                   read_topic(self.settings, follow_counts_topic(self.settings.topic_prefix))]
        return [r for r in records if r is not None and (r.counted, r.edge) == (followed, follower)]


@pytest.fixture(scope="module")
def db(settings: Settings) -> Iterator[Settings]:
    """A database of this module's own, migrated; the session's keyspace and topics."""
    name = f"{settings.pg_database}_verifier"
    with pg.connect(settings, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    s = Settings(pg_database=name, cassandra_keyspace=settings.cassandra_keyspace,
                 topic_prefix=settings.topic_prefix)
    migrate_postgres(s)
    yield s
    with pg.connect(settings, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(scope="module")
def module_scene(db: Settings) -> Iterator[Scene]:
    scene = Scene(db)
    yield scene
    scene.close()


@pytest.fixture
def scene(module_scene: Scene) -> Scene:
    module_scene.reset()
    return module_scene


def counter(name: str, kind: str) -> float:
    return REGISTRY.get_sample_value(name, {"kind": kind}) or 0.0


def test_a_lost_unfollow_is_repaired_after_repair_after_then_released_after_the_settle(scene: Scene):
    reader, author = scene.users(2)
    since = datetime.now(timezone.utc) - timedelta(days=1)
    stale = scene.lsn()
    scene.pg.execute("INSERT INTO follows VALUES (%s, %s, %s)", (reader, author, since))
    scene.run(scene.copies.apply_follow(reader, author, since, stale))
    scene.count_edge(reader, author, True)
    # The unfollow commits; its event never reaches Cassandra (a slot lost and re-snapshotted).
    scene.pg.execute("DELETE FROM follows WHERE follower_id = %s AND followed_id = %s", (reader, author))
    [seq] = scene.entries("follow", reader, author)
    repairs = counter("feed_visibility_repairs_total", "follow")
    v = scene.verifier(repair_after_s=0.3, settle_s=60)
    time.sleep(0.4)

    scene.tick(v)
    assert v.active
    assert counter("feed_visibility_repairs_total", "follow") == repairs + 1
    assert scene.following(reader, author) == (None, None)
    [record] = scene.counted(author, reader)
    assert record.active is False and record.lsn > stale
    assert scene.marks() == (0, seq)                      # checked, settling
    assert scene.entries("follow", reader, author) == [seq]

    scene.clock.advance(59)
    scene.tick(v)
    assert scene.marks() == (0, seq)
    scene.clock.advance(1)
    scene.tick(v)
    assert scene.marks() == (seq, seq)                    # settled: released and deleted
    assert scene.entries("follow", reader, author) == []
    assert counter("feed_visibility_repairs_total", "follow") == repairs + 1


def test_a_deleted_post_and_a_block_whose_events_were_lost_are_repaired(scene: Scene):
    author, blocker = scene.users(2)
    created = datetime.now(timezone.utc) - timedelta(hours=1)
    post_id = scene.post(author, created)
    stale = scene.lsn()
    scene.post_copy(post_id, author, created, stale)
    scene.pg.execute("UPDATE posts SET deleted_at = now() WHERE post_id = %s", (post_id,))
    scene.pg.execute("INSERT INTO blocks (blocker_id, blocked_id) VALUES (%s, %s)", (blocker, author))
    [post_seq] = scene.entries("post", post_id, author)
    [block_seq] = scene.entries("block", blocker, author)
    before = {k: counter("feed_visibility_repairs_total", k) for k in ("post", "block")}
    v = scene.verifier(repair_after_s=0.3)
    time.sleep(0.4)

    scene.tick(v)
    assert {k: counter("feed_visibility_repairs_total", k) - n for k, n in before.items()} == \
        {"post": 1, "block": 1}
    copy = scene.run(scene.copies.read_post(post_id))
    assert copy is not None and copy.deleted is True and not copy.alive
    assert scene.block_rows(blocker, author) == {(blocker, author, "out"), (author, blocker, "in")}
    assert scene.marks() == (0, max(post_seq, block_seq))


def test_a_mute_and_an_unmute_whose_events_were_lost_are_repaired_before_release(scene: Scene):
    muter, muted, unmuted = scene.users(3)
    # The pipeline applied a mute of `unmuted` but lost its unmute, and lost the mute of `muted`.
    scene.pg.execute("INSERT INTO mutes (muter_id, muted_id) VALUES (%s, %s)", (muter, unmuted))
    scene.run(scene.copies.add_mute(muter, unmuted, scene.lsn()))
    scene.pg.execute("DELETE FROM mutes WHERE muter_id = %s AND muted_id = %s", (muter, unmuted))
    scene.pg.execute("INSERT INTO mutes (muter_id, muted_id) VALUES (%s, %s)", (muter, muted))
    [mute_seq] = scene.entries("mute", muter, muted)
    assert len(scene.entries("mute", muter, unmuted)) == 2
    assert scene.muted_in_copy(muter) == {unmuted}
    before = counter("feed_visibility_repairs_total", "mute")
    v = scene.verifier(repair_after_s=0.3, settle_s=5.0)
    time.sleep(0.4)

    scene.tick(v)
    assert counter("feed_visibility_repairs_total", "mute") - before >= 2
    assert scene.muted_in_copy(muter) == {muted}
    assert scene.marks() == (0, mute_seq)
    scene.clock.advance(5.1)
    scene.tick(v)
    assert scene.marks() == (mute_seq, mute_seq)
    assert scene.entries("mute", muter, muted) == []


def test_a_suspension_and_an_unsuspend_whose_events_were_lost_are_repaired_before_release(scene: Scene):
    suspended, lifted = scene.users(2)
    # The pipeline applied a suspension of `lifted` but lost its unsuspend, and lost the
    # suspension of `suspended`: ONE 'account' entry per change, whatever the posts.
    for _ in range(3):
        scene.post(suspended, datetime.now(timezone.utc) - timedelta(minutes=1))
    scene.pg.execute("INSERT INTO account_states (user_id, state) VALUES (%s, 'suspended')", (lifted,))
    scene.run(scene.account_copy.write(lifted, "suspended", None, scene.lsn()))
    scene.pg.execute("DELETE FROM account_states WHERE user_id = %s", (lifted,))
    scene.pg.execute("INSERT INTO account_states (user_id, state) VALUES (%s, 'suspended')", (suspended,))
    [account_seq] = scene.entries("account", suspended, 0)
    assert len(scene.entries("account", lifted, 0)) == 2
    before = counter("feed_visibility_repairs_total", "account")
    v = scene.verifier(repair_after_s=0.3, settle_s=5.0)
    time.sleep(0.4)

    scene.tick(v)
    assert counter("feed_visibility_repairs_total", "account") - before >= 2
    assert scene.run(scene.account_copy.state(suspended)) == "suspended"
    assert scene.run(scene.account_copy.state(lifted)) is None
    assert scene.marks() == (0, account_seq)
    scene.clock.advance(5.1)
    scene.tick(v)
    assert scene.marks() == (account_seq, account_seq)
    assert scene.entries("account", suspended, 0) == []


def test_a_log_that_went_back_brings_the_marks_down_and_its_new_entries_are_walked(scene: Scene):
    x, y, reader, author = scene.users(4)
    for blocker, blocked in ((x, y), (y, x)):
        scene.pg.execute("INSERT INTO blocks (blocker_id, blocked_id) VALUES (%s, %s)", (blocker, blocked))
        scene.run(scene.copies.add_block(blocker, blocked, scene.lsn()))
    v = scene.verifier(repair_after_s=0.3, settle_s=60)
    scene.tick(v)
    checked = scene.marks()[1]
    assert checked >= 2
    # A restore to before those entries, or a sequence reset; the marks' row left as it was.
    scene.pg.execute("TRUNCATE visibility_changes")
    scene.pg.execute("ALTER SEQUENCE visibility_changes_seq RESTART")
    since = datetime.now(timezone.utc) - timedelta(days=1)
    stale = scene.lsn()
    scene.pg.execute("INSERT INTO follows VALUES (%s, %s, %s)", (reader, author, since))
    scene.run(scene.copies.apply_follow(reader, author, since, stale))
    scene.pg.execute("DELETE FROM follows WHERE follower_id = %s AND followed_id = %s", (reader, author))
    assert scene.entries("follow", reader, author) == [1]     # below the old marks
    repairs = counter("feed_visibility_repairs_total", "follow")
    time.sleep(0.4)

    scene.tick(v)
    assert scene.marks() == (0, 1)
    assert counter("feed_visibility_repairs_total", "follow") == repairs + 1
    assert scene.following(reader, author) == (None, None)


def test_a_wrong_entry_younger_than_repair_after_holds_checked_and_is_not_counted(scene: Scene):
    reader, author, x, y = scene.users(4)
    stale = scene.lsn()
    # First an entry whose copies are right: a block the pipeline applied.
    scene.pg.execute("INSERT INTO blocks (blocker_id, blocked_id) VALUES (%s, %s)", (x, y))
    scene.run(scene.copies.add_block(x, y, scene.lsn()))
    [right] = scene.entries("block", x, y)
    # Then an unfollow the copies have not taken (yet).
    since = datetime.now(timezone.utc) - timedelta(days=1)
    scene.pg.execute("INSERT INTO follows VALUES (%s, %s, %s)", (reader, author, since))
    scene.run(scene.copies.apply_follow(reader, author, since, stale))
    scene.pg.execute("DELETE FROM follows WHERE follower_id = %s AND followed_id = %s", (reader, author))
    [wrong] = scene.entries("follow", reader, author)
    repairs = counter("feed_visibility_repairs_total", "follow")
    v = scene.verifier(repair_after_s=3600)

    scene.tick(v)
    scene.clock.advance(3600)
    scene.tick(v)
    assert scene.marks() == (right, right)                # stopped before the young entry
    assert right < wrong
    assert counter("feed_visibility_repairs_total", "follow") == repairs
    assert scene.following(reader, author)[0] is not None  # left to the pipeline
    assert scene.entries("follow", reader, author) == [wrong]


def test_copies_already_right_are_verified_without_repairs(scene: Scene):
    reader, author, other = scene.users(3)
    since = datetime.now(timezone.utc) - timedelta(days=1)
    created = datetime.now(timezone.utc) - timedelta(hours=2)
    post_id = scene.post(author, created)
    scene.pg.execute("INSERT INTO follows VALUES (%s, %s, %s)", (reader, author, since))
    scene.run(scene.copies.apply_follow(reader, author, since, scene.lsn()))
    scene.count_edge(reader, author, True)
    # Each change applied by the pipeline: the copies written after the commit.
    scene.pg.execute("DELETE FROM follows WHERE follower_id = %s AND followed_id = %s", (reader, author))
    scene.run(scene.copies.apply_follow(reader, author, None, scene.lsn()))
    scene.count_edge(reader, author, False)
    scene.pg.execute("UPDATE posts SET visibility = 0 WHERE post_id = %s", (post_id,))
    scene.run(scene.copies.write_post(PostFields(post_id, author, created, "hi", [], 0, False), scene.lsn()))
    scene.pg.execute("INSERT INTO blocks (blocker_id, blocked_id) VALUES (%s, %s)", (other, reader))
    scene.run(scene.copies.add_block(other, reader, scene.lsn()))
    seqs = [*scene.entries("follow", reader, author), *scene.entries("post", post_id, author),
            *scene.entries("block", other, reader)]
    assert len(seqs) == 3
    kinds = ("post", "follow", "block")
    repairs = {k: counter("feed_visibility_repairs_total", k) for k in kinds}
    verified = {k: counter("feed_visibility_verified_total", k) for k in kinds}
    v = scene.verifier(repair_after_s=3600)

    scene.tick(v)
    assert scene.marks() == (0, max(seqs))   # three entries, batches of two: walked through
    assert {k: counter("feed_visibility_repairs_total", k) for k in kinds} == repairs
    assert {k: counter("feed_visibility_verified_total", k) - verified[k] for k in kinds} == \
        {"post": 1, "follow": 1, "block": 1}
    assert REGISTRY.get_sample_value("feed_visibility_unverified_entries") == 0
    assert REGISTRY.get_sample_value("feed_visibility_oldest_unverified_seconds") == 0
    scene.clock.advance(60)
    scene.tick(v)
    assert scene.marks() == (max(seqs), max(seqs))
    assert scene.pg.execute("SELECT count(*) FROM visibility_changes").fetchone() == (0,)


def test_a_repair_waits_for_a_transaction_writing_when_it_looked_and_keeps_its_change(
        scene: Scene, db: Settings):
    reader, author = scene.users(2)
    since = datetime.now(timezone.utc) - timedelta(days=1)
    stale = scene.lsn()
    scene.pg.execute("INSERT INTO follows VALUES (%s, %s, %s)", (reader, author, since))
    scene.run(scene.copies.apply_follow(reader, author, since, stale))
    scene.count_edge(reader, author, True)
    scene.pg.execute("DELETE FROM follows WHERE follower_id = %s AND followed_id = %s", (reader, author))
    v = scene.verifier(repair_after_s=0.3)
    time.sleep(0.4)
    # The reader follows again while the verifier looks: written (WAL below the position
    # a repair would be written at), committed only after the verifier read the position.
    again = datetime.now(timezone.utc)
    writer = pg.connect(db)
    writer.execute("INSERT INTO follows VALUES (%s, %s, %s)", (reader, author, again))
    commit = threading.Timer(0.5, writer.commit)
    commit.start()
    try:
        scene.tick(v)
    finally:
        commit.join()
        writer.close()
    # The repair waited for it and wrote what it committed: a tombstone written at that
    # position would have shadowed the follow's own event, which carries a lower LSN.
    in_cassandra = again.replace(microsecond=again.microsecond // 1000 * 1000)
    assert scene.following(reader, author) == (in_cassandra, in_cassandra)


def test_a_repair_that_does_not_take_holds_the_walk_and_is_not_counted(scene: Scene):
    [author] = scene.users(1)
    created = datetime.now(timezone.utc) - timedelta(hours=1)
    post_id = scene.post(author, created)
    # A copy written above any WAL position (a Postgres rebuilt from scratch would do it).
    scene.post_copy(post_id, author, created, 1 << 60)
    scene.pg.execute("UPDATE posts SET deleted_at = now() WHERE post_id = %s", (post_id,))
    repairs = counter("feed_visibility_repairs_total", "post")
    v = scene.verifier(repair_after_s=0.3)
    time.sleep(0.4)

    scene.tick(v)
    assert scene.marks() == (0, 0)
    assert counter("feed_visibility_repairs_total", "post") == repairs
    assert scene.run(scene.copies.read_post(post_id)).alive


def test_only_one_verifier_holds_the_lock_and_another_takes_over_when_it_goes(scene: Scene):
    first, second = scene.verifier(repair_after_s=3600), scene.verifier(repair_after_s=3600)
    scene.tick(first)
    scene.tick(second)
    assert first.active and not second.active
    scene.tick(second)
    assert not second.active
    scene.run(first.close())   # the process ends: its connection, and the lock, go

    def taken() -> bool:
        scene.tick(second)
        return second.active
    wait_until(taken, timeout=10, message="the second verifier to take the lock")


def test_a_verifier_that_cannot_read_postgres_backs_off_without_raising(scene: Scene, db: Settings):
    s = Settings(pg_database="no_such_database_here", cassandra_keyspace=db.cassandra_keyspace,
                 topic_prefix=db.topic_prefix)
    v = Verifier(s, scene.audit, clock=scene.clock)
    scene.verifiers.append(v)
    scene.run(v.tick())
    assert v.failures == 1 and not v.active
    scene.run(v.tick())          # within the back-off: not tried again
    assert v.failures == 1
    scene.clock.advance(60)
    scene.run(v.tick())
    assert v.failures == 2


def test_the_repair_command_fixes_a_reader_and_an_author_and_a_dry_run_writes_nothing(
        scene: Scene, db: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path) -> None:
    reader, author, gone, blocked, muted = scene.users(5)
    now = datetime.now(timezone.utc)
    since = now - timedelta(days=2)
    stale = scene.lsn()
    # The reader follows the author (copies right); the copies still say they follow
    # `gone` (an unfollow lost), and lack their block of `blocked` (an event lost).
    scene.pg.execute("INSERT INTO follows VALUES (%s, %s, %s)", (reader, author, since))
    scene.run(scene.copies.apply_follow(reader, author, since, stale))
    scene.count_edge(reader, author, True)
    scene.run(scene.copies.apply_follow(reader, gone, since, stale))
    scene.count_edge(reader, gone, True)
    scene.pg.execute("INSERT INTO blocks (blocker_id, blocked_id) VALUES (%s, %s)", (reader, blocked))
    scene.pg.execute("INSERT INTO mutes (muter_id, muted_id) VALUES (%s, %s)", (reader, muted))
    # The author's posts: `kept` is right but not in the reader's inbox; `untimed` lacks
    # its timeline row (and its inbox row); `deleted` is deleted in Postgres only.
    created = now - timedelta(hours=1)
    kept, untimed, deleted = (scene.post(author, created), scene.post(author, created),
                              scene.post(author, created, deleted=True))
    scene.post_copy(kept, author, created, stale, fanned_out=True, timeline=True)
    scene.post_copy(untimed, author, created, stale, fanned_out=True)
    scene.post_copy(deleted, author, created, stale, fanned_out=True, timeline=True)
    monkeypatch.setattr(repair_job, "load", lambda _cls: db)
    metrics = tmp_path / "repair.prom"

    rc = repair_job.main(["--reader", str(reader), "--author", str(author), "--dry-run", "--json",
                          "--fail-on-difference", "--metrics-file", str(metrics)])
    assert rc == 1
    dry = json.loads(capsys.readouterr().out)
    assert dry["dry_run"] is True
    assert {k: t["differing"] for k, t in dry["kinds"].items()} == {
        "post": 1, "timeline": 1, "following": 1, "followers": 1, "follow_count": 1, "block": 1,
        "mute": 1,
        # From the copies as they are: `kept`, and `deleted` (its copy still visible);
        # `untimed` has no timeline row to be found by.
        "inbox": 2}
    assert all(t["repaired"] == 0 for t in dry["kinds"].values())
    assert dry["kinds"]["post"]["checked"] == 3 and dry["kinds"]["following"]["checked"] == 2
    assert 'feed_copy_audit_differing{kind="post"} 1.0' in metrics.read_text()
    # Nothing written.
    assert scene.following(reader, gone)[0] is not None
    assert scene.block_rows(reader, blocked) == set()
    assert scene.muted_in_copy(reader) == set()
    assert scene.run(scene.copies.read_post(deleted)).alive
    assert untimed not in scene.timeline(author)
    assert scene.inbox_rows(reader) == set()
    assert scene.counted(gone, reader) == []

    report = asyncio.run(repair_job.run(db, [reader], [author]))
    got = {k: (t.differing, t.repaired) for k, t in report.kinds.items()}
    assert got == {"post": (1, 1), "timeline": (1, 1), "following": (1, 1), "followers": (1, 1),
                   "follow_count": (1, 1), "block": (1, 1), "mute": (1, 1), "inbox": (2, 2)}
    assert scene.following(reader, gone) == (None, None)
    assert scene.following(reader, author)[0] is not None
    assert scene.block_rows(reader, blocked) == {(reader, blocked, "out"), (blocked, reader, "in")}
    assert scene.muted_in_copy(reader) == {muted}
    assert scene.run(scene.copies.read_post(deleted)).deleted is True
    assert untimed in scene.timeline(author)
    assert scene.inbox_rows(reader) == {kept, untimed}
    [record] = scene.counted(gone, reader)
    assert record.active is False and record.lsn > stale

    # The count's owner applies that record; then nothing differs any more.
    scene.count_edge(reader, gone, False)
    again = asyncio.run(repair_job.run(db, [reader], [author], dry_run=True))
    assert not again.differed, again.differences

